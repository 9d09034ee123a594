"""
Tests for txnsq.nsqlookupd.http, driven in-process through ``treq.testing``
(no sockets) with time from a ``task.Clock``: every route and error, JSON
byte for byte against the static bodies of the Go recordings in
``lookupd_http.json``, tombstones and inactive producers, and the deletes
sent to producers (recorded by a fake client).  The last class sends a real
delete to a real in-process nsqd over loopback sockets; the replay of the
recordings against the running daemon is tests.integration.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from treq.testing import StubTreq
from twisted.internet.defer import Deferred, fail, gatherResults, inlineCallbacks, succeed
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock
from twisted.logger import Logger, LogLevel, formatEvent
from twisted.trial.unittest import SynchronousTestCase, TestCase
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.server import Site
from zope.interface import implementer
from zope.interface.verify import verifyObject

from tests.core_fakes import START
from tests.test_http import JSON, NSQ, TEXT, Reply
from txnsq.version import NSQ_VERSION, TXNSQ_VERSION
from txnsq.nsqlookupd.core import NSQLookupd
from txnsq.nsqlookupd.http import (
    GO_ZERO_TIME_UNIX_NANO,
    LOOKUPD_ROUTES,
    NSQLookupdHTTPAPI,
    http_resource,
)
from txnsq.nsqlookupd.options import NSQLookupdOptions
from txnsq.nsqlookupd.producer_client import (
    AgentProducerClient,
    IProducerHTTPClient,
    ProducerRequestError,
    producer_http_address,
)
from txnsq.nsqlookupd.registration_db import CHANNEL, CLIENT, TOPIC, Registration
from txnsq.protocol.lookup_v1 import PeerInfo
from txnsq.testing import start_nsqd

#: The producer of the Go recordings (its IDENTIFY body).
PRODUCER = {
    "remote_address": "127.0.0.1:40001",
    "hostname": "producer-host",
    "broadcast_address": "127.0.0.1",
    "tcp_port": 14150,
    "http_port": 14151,
    "version": "1.3.0",
}


@implementer(IProducerHTTPClient)
class RecordingClient:
    """Records the URLs posted; each answers with the next of ``results`` (None: success)."""

    def __init__(self, wrapped: Optional[IProducerHTTPClient] = None) -> None:
        self.urls: List[str] = []
        self.sent: List["Deferred[None]"] = []
        self.results: List[Any] = []
        self._wrapped = wrapped

    def post(self, url: str) -> "Deferred[None]":
        self.urls.append(url)
        if self._wrapped is not None:
            sending = self._wrapped.post(url)
        elif self.results:
            result = self.results.pop(0)
            if isinstance(result, Deferred):
                sending = result
            elif isinstance(result, Exception):
                sending = fail(result)
            else:
                sending = succeed(None)
        else:
            sending = succeed(None)
        self.sent.append(sending)
        return sending


def make_peer(
    remote_address: str = "127.0.0.1:40001",
    broadcast_address: str = "127.0.0.1",
    http_port: int = 14151,
    last_update: float = START,
) -> PeerInfo:
    """A producer as IDENTIFY describes it (the recordings' by default)."""
    return PeerInfo(
        remote_address,
        remote_address=remote_address,
        hostname="producer-host",
        broadcast_address=broadcast_address,
        tcp_port=14150,
        http_port=http_port,
        version="1.3.0",
        last_update=last_update,
    )


class LookupdHTTPTestCase(SynchronousTestCase):
    """An nsqlookupd on a Clock, its API, a recording producer client and a stub HTTP client."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(START)
        self.lookupd = NSQLookupd(NSQLookupdOptions(broadcast_address="lookupd-host"), self.clock)
        self.db = self.lookupd.db
        self.producers = RecordingClient()
        self.api = NSQLookupdHTTPAPI(self.lookupd, self.producers)
        self.events: List[Dict[str, Any]] = []
        self.api.deletions._log = Logger(observer=self.events.append)
        self.client = StubTreq(self.api.app.resource())

    def register(self, peer: PeerInfo, topic: str, channel: str = "") -> None:
        """What the TCP side does for IDENTIFY then ``REGISTER topic [channel]``."""
        self.db.add_producer(Registration(CLIENT, "", ""), peer)
        self.db.add_producer(Registration(TOPIC, topic, ""), peer)
        if channel:
            self.db.add_producer(Registration(CHANNEL, topic, channel), peer)

    def errors(self) -> List[str]:
        """The error lines the producer deletes logged."""
        return [
            formatEvent(event) for event in self.events if event["log_level"] == LogLevel.error
        ]

    def request(self, method: str, path: str) -> Reply:
        """One request, answered synchronously."""
        answered = self.client.request(
            method, "http://lookupd" + path, data=b"" if method == "POST" else None,
            allow_redirects=False,
        )
        self.client.flush()
        response = self.successResultOf(answered)
        content = self.successResultOf(response.content())
        found = {
            name.decode("latin-1").lower(): [value.decode("latin-1") for value in values]
            for name, values in response.headers.getAllRawHeaders()
        }
        return Reply(response.code, found, content)

    def get(self, path: str) -> Reply:
        return self.request("GET", path)

    def post(self, path: str) -> Reply:
        return self.request("POST", path)

    def assertJSON(self, reply: Reply, body: bytes) -> None:
        """A 200 V1 JSON reply with exactly ``body``."""
        self.assertEqual((reply.code, reply.body), (200, body), reply)
        self.assertEqual(reply.header("Content-Type"), JSON)
        self.assertEqual(reply.header("X-NSQ-Content-Type"), NSQ)

    def assertEmpty(self, reply: Reply) -> None:
        """The V1 empty 200 of the create, delete and tombstone actions: no Content-Type."""
        self.assertEqual((reply.code, reply.body), (200, b""), reply)
        self.assertIsNone(reply.header("Content-Type"))
        self.assertEqual(reply.header("X-NSQ-Content-Type"), NSQ)

    def assertError(self, reply: Reply, code: int, message: str) -> None:
        """A V1 error: the status and Go's ``{"message":...}``."""
        self.assertEqual(
            (reply.code, reply.body), (code, b'{"message":"%s"}' % (message.encode(),)), reply
        )
        self.assertEqual(reply.header("Content-Type"), JSON)
        self.assertEqual(reply.header("X-NSQ-Content-Type"), NSQ)


class StatusTests(LookupdHTTPTestCase):
    """GET /ping and GET /info."""

    def test_ping(self) -> None:
        """/ping is plain text OK without X-NSQ-Content-Type, as Go's."""
        reply = self.get("/ping")
        self.assertEqual((reply.code, reply.body), (200, b"OK"))
        self.assertEqual(reply.header("Content-Type"), TEXT)
        self.assertIsNone(reply.header("X-NSQ-Content-Type"))
        self.assertIsNone(reply.header("Server"))

    def test_info(self) -> None:
        """/info gives the version only."""
        self.assertJSON(
            self.get("/info"),
            b'{"version":"1.3.0","txnsq_version":"%s"}' % (TXNSQ_VERSION.encode(),),
        )


class LookupTests(LookupdHTTPTestCase):
    """GET /lookup?topic=."""

    def test_unknown(self) -> None:
        """An unknown topic is 404 TOPIC_NOT_FOUND; no topic argument 400 MISSING_ARG_TOPIC."""
        self.assertError(self.get("/lookup?topic=nope"), 404, "TOPIC_NOT_FOUND")
        self.assertError(self.get("/lookup"), 400, "MISSING_ARG_TOPIC")

    def test_bad_query(self) -> None:
        """A query Go cannot parse is 400 INVALID_REQUEST."""
        self.assertError(self.get("/lookup?topic=t;x"), 400, "INVALID_REQUEST")
        self.assertError(self.get("/lookup?topic=%zz"), 400, "INVALID_REQUEST")

    def test_known(self) -> None:
        """Channels and producers, the producers in Go's PeerInfo field order."""
        self.register(make_peer(), "t", "c1")
        self.register(make_peer(), "t", "c2")
        reply = self.get("/lookup?topic=t")
        self.assertJSON(
            reply,
            b'{"channels":["c1","c2"],"producers":[{"remote_address":"127.0.0.1:40001",'
            b'"hostname":"producer-host","broadcast_address":"127.0.0.1","tcp_port":14150,'
            b'"http_port":14151,"version":"1.3.0"}]}',
        )
        self.assertEqual(list(reply.json()["producers"][0]), list(PRODUCER))

    def test_created_topic(self) -> None:
        """A topic created over HTTP has no channels and no producers (Go's recorded body)."""
        self.post("/topic/create?topic=t")
        self.assertJSON(self.get("/lookup?topic=t"), b'{"channels":[],"producers":[]}')

    def test_topic_wildcard(self) -> None:
        """topic=* matches every topic, as Go's FindRegistrations does."""
        self.register(make_peer(), "t1", "a")
        self.register(make_peer("127.0.0.1:40002"), "t2", "b")
        found = self.get("/lookup?topic=*").json()
        self.assertEqual(found["channels"], ["a", "b"])
        self.assertEqual(len(found["producers"]), 2)

    def test_inactive_producers(self) -> None:
        """A producer silent for more than --inactive-producer-timeout is not listed."""
        quiet = make_peer()
        lively = make_peer("127.0.0.1:40002")
        self.register(quiet, "t")
        self.register(lively, "t")
        self.clock.advance(300)
        lively.last_update = self.clock.seconds()
        self.assertEqual(len(self.get("/lookup?topic=t").json()["producers"]), 2)
        self.clock.advance(1)
        producers = self.get("/lookup?topic=t").json()["producers"]
        self.assertEqual([p["remote_address"] for p in producers], ["127.0.0.1:40002"])

    def test_tombstone_expiry(self) -> None:
        """A tombstoned producer is hidden for --tombstone-lifetime, then listed again."""
        self.register(make_peer(), "t")
        self.post("/topic/tombstone?topic=t&node=127.0.0.1:14151")
        self.assertJSON(self.get("/lookup?topic=t"), b'{"channels":[],"producers":[]}')
        self.clock.advance(44)
        self.assertEqual(self.get("/lookup?topic=t").json()["producers"], [])
        self.clock.advance(1)
        self.assertEqual(self.get("/lookup?topic=t").json()["producers"], [PRODUCER])


class TopicsAndChannelsTests(LookupdHTTPTestCase):
    """GET /topics and GET /channels?topic=."""

    def test_topics(self) -> None:
        """Every topic registration, by a producer or over HTTP."""
        self.assertJSON(self.get("/topics"), b'{"topics":[]}')
        self.register(make_peer(), "t1")
        self.register(make_peer(), "t2", "c")
        self.post("/topic/create?topic=t3")
        self.assertJSON(self.get("/topics"), b'{"topics":["t1","t2","t3"]}')

    def test_channels(self) -> None:
        """An unknown topic has no channels (200); a known one lists them."""
        self.assertJSON(self.get("/channels?topic=nope"), b'{"channels":[]}')
        self.register(make_peer(), "t", "c1")
        self.register(make_peer(), "t", "c2")
        self.assertJSON(self.get("/channels?topic=t"), b'{"channels":["c1","c2"]}')

    def test_channels_missing_topic(self) -> None:
        """No topic argument is 400 MISSING_ARG_TOPIC."""
        self.assertError(self.get("/channels"), 400, "MISSING_ARG_TOPIC")


class NodesTests(LookupdHTTPTestCase):
    """GET /nodes."""

    def test_empty(self) -> None:
        """No producer: Go's recorded body."""
        self.assertJSON(self.get("/nodes"), b'{"producers":[]}')

    def test_full_key_tree(self) -> None:
        """A producer with its topics and a tombstone flag per topic, after the PeerInfo fields."""
        self.register(make_peer(), "t1")
        self.register(make_peer(), "t2", "c")
        self.assertJSON(
            self.get("/nodes"),
            b'{"producers":[{"remote_address":"127.0.0.1:40001","hostname":"producer-host",'
            b'"broadcast_address":"127.0.0.1","tcp_port":14150,"http_port":14151,'
            b'"version":"1.3.0","tombstones":[false,false],"topics":["t1","t2"]}]}',
        )

    def test_identified_without_topics(self) -> None:
        """A producer that only IDENTIFYed is listed with no topics."""
        self.db.add_producer(Registration(CLIENT, "", ""), make_peer())
        node = self.get("/nodes").json()["producers"][0]
        self.assertEqual((node["topics"], node["tombstones"]), ([], []))

    def test_tombstones(self) -> None:
        """A tombstoned producer stays listed, flagged for that topic till its tombstone expires."""
        self.register(make_peer(), "t1")
        self.register(make_peer(), "t2")
        self.post("/topic/tombstone?topic=t2&node=127.0.0.1:14151")
        node = self.get("/nodes").json()["producers"][0]
        self.assertEqual((node["topics"], node["tombstones"]), (["t1", "t2"], [False, True]))
        self.clock.advance(45)
        node = self.get("/nodes").json()["producers"][0]
        self.assertEqual(node["tombstones"], [False, False])

    def test_inactive(self) -> None:
        """A producer silent for more than --inactive-producer-timeout is not listed."""
        self.register(make_peer(), "t")
        self.clock.advance(300.5)
        self.assertJSON(self.get("/nodes"), b'{"producers":[]}')


class CreateTests(LookupdHTTPTestCase):
    """POST /topic/create and POST /channel/create."""

    def test_topic_create(self) -> None:
        """A valid topic is registered with no producer; nothing is sent to producers."""
        self.assertEmpty(self.post("/topic/create?topic=t"))
        self.assertEqual(self.db.registrations(), {Registration(TOPIC, "t", ""): []})
        self.assertEqual(self.producers.urls, [])

    def test_topic_create_errors(self) -> None:
        """Go's errors: INVALID_ARG_TOPIC, MISSING_ARG_TOPIC, INVALID_REQUEST."""
        self.assertError(self.post("/topic/create?topic=bad!"), 400, "INVALID_ARG_TOPIC")
        self.assertError(self.post("/topic/create"), 400, "MISSING_ARG_TOPIC")
        self.assertError(self.post("/topic/create?topic=t;"), 400, "INVALID_REQUEST")
        self.assertEqual(self.db.registrations(), {})

    def test_channel_create(self) -> None:
        """The channel and its topic are registered."""
        self.assertEmpty(self.post("/channel/create?topic=t&channel=c"))
        self.assertJSON(self.get("/lookup?topic=t"), b'{"channels":["c"],"producers":[]}')

    def test_channel_create_errors(self) -> None:
        """Go's GetTopicChannelArgs errors, topic first."""
        self.assertError(self.post("/channel/create?topic=t"), 400, "MISSING_ARG_CHANNEL")
        for query, message in [
            ("topic=t&channel=bad!", "INVALID_ARG_CHANNEL"),
            ("topic=bad!&channel=c", "INVALID_ARG_TOPIC"),
        ]:
            self.assertError(self.post("/channel/create?" + query), 400, message)
        self.assertError(self.post("/channel/create?channel=c"), 400, "MISSING_ARG_TOPIC")
        self.assertEqual(self.db.registrations(), {})


class TopicDeleteTests(LookupdHTTPTestCase):
    """POST /topic/delete forgets the topic and deletes it on its producers."""

    def test_recorded_sequence(self) -> None:
        """Go's recording: the topic and its channels go; an unknown topic is 200 too."""
        self.post("/channel/create?topic=t&channel=c")
        self.assertEmpty(self.post("/topic/delete?topic=t"))
        self.assertError(self.get("/lookup?topic=t"), 404, "TOPIC_NOT_FOUND")
        self.assertJSON(self.get("/channels?topic=t"), b'{"channels":[]}')
        self.assertEmpty(self.post("/topic/delete?topic=nope"))
        self.assertError(self.post("/topic/delete"), 400, "MISSING_ARG_TOPIC")
        self.assertEqual(self.producers.urls, [])

    def test_fan_out(self) -> None:
        """Each producer of the topic gets POST /topic/delete?topic=T at its broadcast address."""
        self.register(make_peer(), "t", "c")
        self.register(make_peer("127.0.0.1:40002", "10.0.0.2", 4151), "t")
        self.register(make_peer("127.0.0.1:40003", "10.0.0.3", 4151), "other")
        self.assertEmpty(self.post("/topic/delete?topic=t"))
        self.assertEqual(
            self.producers.urls,
            [
                "http://127.0.0.1:14151/topic/delete?topic=t",
                "http://10.0.0.2:4151/topic/delete?topic=t",
            ],
        )
        self.assertEqual(self.db.find_registrations(CHANNEL, "t", "*"), [])
        self.assertEqual(self.db.find_registrations(TOPIC, "t", ""), [])
        self.assertEqual(
            self.db.find_registrations(TOPIC, "other", ""), [Registration(TOPIC, "other", "")]
        )

    def test_reply_does_not_wait(self) -> None:
        """The reply is sent while the producers have not answered."""
        self.register(make_peer(), "t")
        pending: "Deferred[None]" = Deferred()
        self.producers.results.append(pending)
        self.assertEmpty(self.post("/topic/delete?topic=t"))
        self.assertNoResult(self.producers.sent[0])
        pending.callback(None)
        self.assertEqual(self.errors(), [])

    def test_failures_logged(self) -> None:
        """A producer's failure is one error line; the others are still asked."""
        self.register(make_peer(), "t")
        self.register(make_peer("127.0.0.1:40002", "10.0.0.2", 4151), "t")
        self.producers.results.append(ProducerRequestError("got response 404 Not Found \"x\""))
        self.assertEmpty(self.post("/topic/delete?topic=t"))
        self.assertEqual(len(self.producers.urls), 2)
        self.assertEqual(
            self.errors(),
            ['failed to delete topic(t) on nsqd 127.0.0.1:14151 - got response 404 Not Found "x"'],
        )

    def test_client_raises(self) -> None:
        """A client that raises instead of failing its Deferred is logged too, not raised."""
        self.register(make_peer(), "t")

        def broken(url: str) -> "Deferred[None]":
            raise ValueError("boom")

        self.producers.post = broken  # type: ignore[method-assign]
        self.assertEmpty(self.post("/topic/delete?topic=t"))
        self.assertEqual(
            self.errors(), ["failed to delete topic(t) on nsqd 127.0.0.1:14151 - ValueError: boom"]
        )

    def test_one_request_per_nsqd(self) -> None:
        """An nsqd registered under two connections is asked once."""
        self.register(make_peer("127.0.0.1:40001"), "t")
        self.register(make_peer("127.0.0.1:40002"), "t")
        self.post("/topic/delete?topic=t")
        self.assertEqual(self.producers.urls, ["http://127.0.0.1:14151/topic/delete?topic=t"])

    def test_tombstoned_and_inactive_producers(self) -> None:
        """Every registered producer is asked, tombstoned or silent ones too."""
        self.register(make_peer(), "t")
        self.register(make_peer("127.0.0.1:40002", "10.0.0.2", 4151), "t")
        self.post("/topic/tombstone?topic=t&node=127.0.0.1:14151")
        self.clock.advance(1000)
        self.post("/topic/delete?topic=t")
        self.assertEqual(len(self.producers.urls), 2)

    def test_names_escaped(self) -> None:
        """An ephemeral topic's # is escaped; an IPv6 broadcast address is bracketed."""
        self.register(make_peer(broadcast_address="::1"), "t#ephemeral")
        self.post("/topic/delete?topic=t%23ephemeral")
        self.assertEqual(
            self.producers.urls, ["http://[::1]:14151/topic/delete?topic=t%23ephemeral"]
        )

    def test_wildcard_not_sent(self) -> None:
        """topic=* forgets every topic, as Go's does, but asks no nsqd to delete '*'."""
        self.register(make_peer(), "t1", "c")
        self.register(make_peer(), "t2")
        self.assertEmpty(self.post("/topic/delete?topic=*"))
        self.assertJSON(self.get("/topics"), b'{"topics":[]}')
        self.assertEqual(self.producers.urls, [])


class ChannelDeleteTests(LookupdHTTPTestCase):
    """POST /channel/delete forgets the channel and deletes it on its producers."""

    def test_recorded_sequence(self) -> None:
        """Go's recording: 200, then 404 CHANNEL_NOT_FOUND; the topic stays."""
        self.post("/channel/create?topic=t&channel=c")
        self.assertEmpty(self.post("/channel/delete?topic=t&channel=c"))
        self.assertError(self.post("/channel/delete?topic=t&channel=c"), 404, "CHANNEL_NOT_FOUND")
        self.assertJSON(self.get("/lookup?topic=t"), b'{"channels":[],"producers":[]}')

    def test_errors(self) -> None:
        """Argument errors come before the lookup."""
        self.assertError(self.post("/channel/delete?topic=t"), 400, "MISSING_ARG_CHANNEL")
        self.assertError(self.post("/channel/delete?topic=t&channel=*"), 400, "INVALID_ARG_CHANNEL")
        self.assertError(self.post("/channel/delete?topic=*&channel=c"), 400, "INVALID_ARG_TOPIC")
        self.assertError(self.post("/channel/delete"), 400, "MISSING_ARG_TOPIC")

    def test_fan_out(self) -> None:
        """Only the channel's producers get POST /channel/delete?topic=T&channel=C."""
        self.register(make_peer(), "t", "c")
        self.register(make_peer("127.0.0.1:40002", "10.0.0.2", 4151), "t", "other")
        self.assertEmpty(self.post("/channel/delete?topic=t&channel=c"))
        self.assertEqual(
            self.producers.urls, ["http://127.0.0.1:14151/channel/delete?topic=t&channel=c"]
        )
        self.assertEqual(self.get("/channels?topic=t").json(), {"channels": ["other"]})

    def test_unknown_not_sent(self) -> None:
        """A channel lookupd does not know is asked of no producer."""
        self.register(make_peer(), "t")
        self.post("/channel/delete?topic=t&channel=c")
        self.assertEqual(self.producers.urls, [])


class TombstoneTests(LookupdHTTPTestCase):
    """POST /topic/tombstone?topic=&node=."""

    def test_recorded_sequence(self) -> None:
        """Go's recording: hidden from /lookup, flagged in /nodes; a node matching none is 200."""
        self.register(make_peer(), "t")
        self.assertEqual(self.get("/lookup?topic=t").json()["producers"], [PRODUCER])
        self.assertEmpty(self.post("/topic/tombstone?topic=t&node=127.0.0.1:14151"))
        self.assertJSON(self.get("/lookup?topic=t"), b'{"channels":[],"producers":[]}')
        self.assertEqual(self.get("/nodes").json()["producers"][0]["tombstones"], [True])
        self.assertError(self.post("/topic/tombstone?topic=t"), 400, "MISSING_ARG_NODE")
        self.assertError(
            self.post("/topic/tombstone?node=127.0.0.1:14151"), 400, "MISSING_ARG_TOPIC"
        )
        self.assertEmpty(self.post("/topic/tombstone?topic=t&node=127.0.0.1:1"))

    def test_only_that_topic(self) -> None:
        """The producer stays listed for its other topics."""
        self.register(make_peer(), "t")
        self.register(make_peer(), "u")
        self.post("/topic/tombstone?topic=t&node=127.0.0.1:14151")
        self.assertEqual(self.get("/lookup?topic=u").json()["producers"], [PRODUCER])

    def test_matches_broadcast_address_and_http_port(self) -> None:
        """The node is broadcast_address:http_port (not the remote address, not the TCP port)."""
        self.register(make_peer(), "t")
        for node in ("127.0.0.1:40001", "127.0.0.1:14150", "producer-host:14151"):
            self.post("/topic/tombstone?topic=t&node=" + node)
        self.assertEqual(len(self.get("/lookup?topic=t").json()["producers"]), 1)


class DebugTests(LookupdHTTPTestCase):
    """GET /debug: the raw registration database."""

    def test_empty(self) -> None:
        """No registrations: an empty object; registrations without producers are not listed."""
        self.assertJSON(self.get("/debug"), b"{}")
        self.post("/topic/create?topic=t")
        self.assertJSON(self.get("/debug"), b"{}")

    def test_shape(self) -> None:
        """Keys category:key:subkey sorted, each producer as Go's map (keys sorted), times in ns."""
        self.clock.advance(0.25)
        self.register(make_peer(last_update=self.clock.seconds()), "t", "c")
        producer = (
            '{"broadcast_address":"127.0.0.1","hostname":"producer-host","http_port":14151,'
            '"id":"127.0.0.1:40001","last_update":1700000000250000000,"tcp_port":14150,'
            '"tombstoned":false,"tombstoned_at":%d,"version":"1.3.0"}' % (GO_ZERO_TIME_UNIX_NANO,)
        )
        expected = '{"channel:t:c":[%s],"client::":[%s],"topic:t:":[%s]}' % ((producer,) * 3)
        self.assertJSON(self.get("/debug"), expected.encode())

    def test_tombstoned(self) -> None:
        """A tombstoned entry shows its flag and time (ns); the others keep Go's zero time."""
        self.register(make_peer(), "t")
        self.clock.advance(2)
        self.post("/topic/tombstone?topic=t&node=127.0.0.1:14151")
        found = self.get("/debug").json()
        self.assertEqual(
            (found["topic:t:"][0]["tombstoned"], found["topic:t:"][0]["tombstoned_at"]),
            (True, 1700000002000000000),
        )
        self.assertEqual(found["client::"][0]["tombstoned_at"], GO_ZERO_TIME_UNIX_NANO)


class RoutingTests(LookupdHTTPTestCase):
    """Go nsqlookupd v1.3's routes and httprouter's answers to a miss."""

    def test_routes(self) -> None:
        """Exactly Go's route table."""
        self.assertEqual(
            [(route.method, route.pattern) for route in LOOKUPD_ROUTES],
            [
                ("GET", "/ping"),
                ("GET", "/info"),
                ("GET", "/debug"),
                ("GET", "/lookup"),
                ("GET", "/topics"),
                ("GET", "/channels"),
                ("GET", "/nodes"),
                ("POST", "/topic/create"),
                ("POST", "/topic/delete"),
                ("POST", "/channel/create"),
                ("POST", "/channel/delete"),
                ("POST", "/topic/tombstone"),
                ("GET", "/debug/pprof"),
                ("GET", "/debug/pprof/cmdline"),
                ("GET", "/debug/pprof/symbol"),
                ("POST", "/debug/pprof/symbol"),
                ("GET", "/debug/pprof/profile"),
                ("GET", "/debug/pprof/heap"),
                ("GET", "/debug/pprof/goroutine"),
                ("GET", "/debug/pprof/block"),
                ("GET", "/debug/pprof/threadcreate"),
            ],
        )

    def test_not_found(self) -> None:
        """An unknown path is 404 NOT_FOUND; nsqd's routes are not nsqlookupd's."""
        self.assertError(self.get("/nope"), 404, "NOT_FOUND")
        self.assertError(self.get("/stats"), 404, "NOT_FOUND")
        self.assertError(self.post("/pub?topic=t"), 404, "NOT_FOUND")

    def test_method_not_allowed(self) -> None:
        """GET on a POST route is 405 with Go's Allow list."""
        reply = self.get("/topic/create?topic=t")
        self.assertError(reply, 405, "METHOD_NOT_ALLOWED")
        self.assertEqual(reply.header("Allow"), "OPTIONS, POST")
        self.assertEqual(self.db.registrations(), {})
        head = self.request("HEAD", "/ping")
        self.assertEqual((head.code, head.header("Allow")), (405, "GET, OPTIONS"))

    def test_options(self) -> None:
        """OPTIONS answers an empty 200 with the Allow list."""
        reply = self.request("OPTIONS", "/debug/pprof/symbol")
        self.assertEqual(
            (reply.code, reply.body, reply.header("Allow")), (200, b"", "GET, OPTIONS, POST")
        )

    def test_redirects(self) -> None:
        """Trailing slashes and case are fixed by a redirect; the pprof index has no slash."""
        for path, location in [
            ("/lookup/?topic=t", "/lookup?topic=t"),
            ("/NODES", "/nodes"),
            ("/debug/pprof/", "/debug/pprof"),
        ]:
            reply = self.get(path)
            self.assertEqual((reply.code, reply.header("Location")), (301, location), path)
        reply = self.post("/Topic/Create?topic=t")
        self.assertEqual((reply.code, reply.header("Location")), (307, "/topic/create?topic=t"))

    def test_pprof(self) -> None:
        """The pprof index and a profile answer as nsqd's."""
        index = self.get("/debug/pprof")
        self.assertEqual(index.header("Content-Type"), "text/html; charset=utf-8")
        self.assertIn(b">goroutine</a>", index.body)
        self.assertEqual(self.get("/debug/pprof/symbol").body, b"num_symbols: 0\n")

    def test_http_resource(self) -> None:
        """http_resource serves the same API."""
        client = StubTreq(http_resource(self.lookupd, self.producers))
        answered = client.get("http://lookupd/ping")
        client.flush()
        self.assertEqual(self.successResultOf(self.successResultOf(answered).content()), b"OK")


class AgentProducerClientTests(SynchronousTestCase):
    """The Agent-based client: timeouts, without sockets."""

    def test_interface(self) -> None:
        """It provides IProducerHTTPClient."""
        verifyObject(IProducerHTTPClient, AgentProducerClient(MemoryReactorClock()))

    def test_request_timeout(self) -> None:
        """A request not answered within request_timeout fails with Go's timeout text."""
        reactor = MemoryReactorClock()
        client = AgentProducerClient(reactor, connect_timeout=2, request_timeout=5)
        sent = client.post("http://127.0.0.1:4151/topic/delete?topic=t")
        host, port, _, timeout, _ = reactor.tcpClients[0]
        self.assertEqual((host, port, timeout), ("127.0.0.1", 4151, 2))
        reactor.advance(4.9)
        self.assertNoResult(sent)
        reactor.advance(0.1)
        error = self.failureResultOf(sent, ProducerRequestError).value
        self.assertEqual(str(error), "request timed out (Client.Timeout 5s exceeded)")
        self.assertEqual(reactor.getDelayedCalls(), [])

    def test_http_address(self) -> None:
        """broadcast_address:http_port, IPv6 bracketed as Go's JoinHostPort."""
        self.assertEqual(producer_http_address(make_peer()), "127.0.0.1:14151")
        self.assertEqual(producer_http_address(make_peer(broadcast_address="::1")), "[::1]:14151")


class RealNSQDDeleteTests(TestCase):
    """A real nsqd on loopback receives the deletes sent by nsqlookupd's HTTP handlers."""

    @inlineCallbacks
    def setUp(self) -> Any:
        from twisted.internet import reactor

        self.reactor = reactor
        self.nsqd = yield start_nsqd()
        self.addCleanup(self.nsqd.stop)
        self.lookupd = NSQLookupd(NSQLookupdOptions(broadcast_address="127.0.0.1"), reactor)
        self.producers = RecordingClient(AgentProducerClient(reactor))
        self.port = reactor.listenTCP(
            0, Site(http_resource(self.lookupd, self.producers)), interface="127.0.0.1"
        )
        self.addCleanup(self.port.stopListening)
        self.peer = make_peer(http_port=self.nsqd.http_port, last_update=reactor.seconds())

    def register(self, topic: str, channel: str = "") -> None:
        db = self.lookupd.db
        db.add_producer(Registration(CLIENT, "", ""), self.peer)
        db.add_producer(Registration(TOPIC, topic, ""), self.peer)
        if channel:
            db.add_producer(Registration(CHANNEL, topic, channel), self.peer)

    @inlineCallbacks
    def lookupd_post(self, path: str) -> Any:
        """POST to the lookupd over its socket; the status and the body."""
        from treq.client import HTTPClient

        # No persistent connection: nothing is left open after the test.
        pool = HTTPConnectionPool(self.reactor, persistent=False)
        http = HTTPClient(Agent(self.reactor, pool=pool))
        response = yield http.post("http://127.0.0.1:%d%s" % (self.port.getHost().port, path))
        body = yield response.content()
        return response.code, body

    @inlineCallbacks
    def test_topic_delete(self) -> Any:
        """POST /topic/delete to nsqlookupd deletes the topic on the nsqd."""
        self.nsqd.broker.get_topic("t").get_channel("c")
        self.register("t", "c")
        answer = yield self.lookupd_post("/topic/delete?topic=t")
        self.assertEqual(answer, (200, b""))
        yield gatherResults(self.producers.sent)
        self.assertEqual(
            self.producers.urls,
            ["http://127.0.0.1:%d/topic/delete?topic=t" % (self.nsqd.http_port,)],
        )
        self.assertIsNone(self.nsqd.broker.find_topic("t"))

    @inlineCallbacks
    def test_channel_delete(self) -> Any:
        """POST /channel/delete to nsqlookupd deletes the channel on the nsqd; the topic stays."""
        topic = self.nsqd.broker.get_topic("t")
        topic.get_channel("c")
        self.register("t", "c")
        answer = yield self.lookupd_post("/channel/delete?topic=t&channel=c")
        self.assertEqual(answer, (200, b""))
        yield gatherResults(self.producers.sent)
        self.assertIsNone(topic.find_channel("c"))
        self.assertIs(self.nsqd.broker.find_topic("t"), topic)

    @inlineCallbacks
    def test_nsqd_refuses(self) -> Any:
        """An nsqd without the topic answers 404, which the client reports in Go's words."""
        client = AgentProducerClient(self.reactor)
        sent = client.post("http://127.0.0.1:%d/topic/delete?topic=nope" % (self.nsqd.http_port,))
        error = yield self.assertFailure(sent, ProducerRequestError)
        self.assertEqual(
            str(error), 'got response 404 Not Found "{\\"message\\":\\"TOPIC_NOT_FOUND\\"}"'
        )
