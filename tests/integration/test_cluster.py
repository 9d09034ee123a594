"""
A cluster of real processes, as ``docs/cluster.md`` runs one: two
``nsqlookupd`` and two ``nsqd`` registered with both, every one spawned as
its console script on 127.0.0.1 and driven over its HTTP API with treq.

Shown here, on both lookupds: topics and channels are listed within one
PING interval of their creation on an nsqd and unlisted when an nsqd
deletes them; a delete sent to one lookupd deletes the topic on every nsqd;
a tombstone hides a producer for ``--tombstone-lifetime``; a frozen nsqd is
unlisted after ``--inactive-producer-timeout`` and a killed one at once;
a restarted lookupd gets every registration back.

Nothing sleeps for a fixed time: each check polls in short steps up to a
deadline drawn from a documented bound, and a failure shows what was last
seen.  Lifetimes and timeouts are shortened with the daemons' flags.
"""

from __future__ import annotations

import json
import os
import pprint
from typing import Any, Callable, Dict, Generator, Iterable, List, Optional, Sequence, Tuple

import treq
from twisted.internet.defer import Deferred, gatherResults, inlineCallbacks
from twisted.internet.task import deferLater
from twisted.python.failure import Failure
from twisted.trial.unittest import TestCase
from twisted.web.client import HTTPConnectionPool

from tests.integration.nsqd_process import ExitStatus, NSQDProcess, NSQLookupdProcess, free_port
from txnsq.version import NSQ_VERSION

#: Seconds between an nsqd's PINGs to each lookupd (Go's lookupLoop
#: ticker; ``docs/cluster.md``).  REGISTER and UNREGISTER are sent at once,
#: so a change shows on the lookupds well within it.
PING_INTERVAL = 15.0

#: Longest wait of an nsqd before reconnecting to a lookupd: a backoff
#: capped at 15 s, plus up to 1 s of jitter (Twisted's ``backoffPolicy``).
RECONNECT_BOUND = 15.0 + 1.0

#: What a check may take beyond the bound it is held to, for the bounds
#: that start at an event the test cannot time exactly (a PING, a process
#: resuming or dying): polling, HTTP round trips, a busy machine.
SLACK = 5.0

#: Seconds between two polls.
POLL_STEP = 0.05

#: ``--tombstone-lifetime`` of the first lookupd of :class:`TombstoneTests`.
TOMBSTONE_LIFETIME = 3.0

#: ``--inactive-producer-timeout`` of the first lookupd of :class:`InactivityTests`.
INACTIVE_TIMEOUT = 2.0

#: A lookupd's view of the cluster (see :meth:`ClusterTestCase.view`).
View = Dict[str, Any]


def node_name(nsqd: NSQDProcess) -> str:
    """How lookupds name an nsqd in ``/topic/tombstone?node=``: ``broadcast_address:http_port``."""
    return "127.0.0.1:%d" % (nsqd.http_port,)


def _producer_name(producer: Dict[str, Any]) -> str:
    """A producer of ``/lookup``, ``/nodes`` or ``/debug`` named as :func:`node_name`."""
    return "%s:%d" % (producer["broadcast_address"], producer["http_port"])


def _unwrap_first_error(failure: Failure) -> Failure:
    """The failure inside ``gatherResults``' ``FirstError``."""
    return getattr(failure.value, "subFailure", failure)


class ClusterTestCase(TestCase):
    """
    Starts two nsqlookupd and two nsqd registered with both, all on
    127.0.0.1, and waits until each lookupd knows both nsqd.

    :cvar lookupd_flags: extra flags of each lookupd.
    :ivar lookupds: the two lookupd processes.
    :ivar nsqds: the two nsqd processes.
    """

    timeout = 60
    lookupd_flags: Tuple[Sequence[str], ...] = ((), ())

    @inlineCallbacks
    def setUp(self) -> Any:  # type: ignore[override]
        from twisted.internet import reactor

        self.reactor = reactor
        # No kept connections: none may outlive a test.
        self.pool = HTTPConnectionPool(reactor, persistent=False)
        self.lookupds: List[NSQDProcess] = yield self.all(
            [
                self.start_lookupd(list(flags), *self.lookupd_ports(index))
                for index, flags in enumerate(self.lookupd_flags)
            ]
        )
        self.nsqds: List[NSQDProcess] = yield self.all([self.start_nsqd() for _ in range(2)])
        names = sorted(node_name(nsqd) for nsqd in self.nsqds)
        yield self.wait_for(
            "both lookupds know both nsqd",
            lambda: self.all([self.registered(lookupd) for lookupd in self.lookupds]),
            lambda seen: [registered.get("client::") for registered in seen] == [names, names],
            RECONNECT_BOUND,
        )

    # -- processes -----------------------------------------------------------

    def lookupd_ports(self, index: int) -> Tuple[int, int]:
        """The TCP and HTTP ports of the ``index``-th lookupd (0: any free one)."""
        return 0, 0

    def directory(self) -> str:
        """A new empty directory under the test's temporary one."""
        path = self.mktemp()
        os.makedirs(path)
        return path

    def all(self, waits: List["Deferred[Any]"]) -> "Deferred[List[Any]]":
        """Wait for all of ``waits``; fail with the first failure itself."""
        return gatherResults(waits, consumeErrors=True).addErrback(_unwrap_first_error)

    @inlineCallbacks
    def start_lookupd(
        self, flags: List[str], tcp_port: int = 0, http_port: int = 0
    ) -> Generator[Any, Any, NSQDProcess]:
        """Start an nsqlookupd broadcasting 127.0.0.1 (nsqd asks it for channels over HTTP)."""
        process = NSQLookupdProcess(
            [
                "--tcp-address=127.0.0.1:%d" % (tcp_port,),
                "--http-address=127.0.0.1:%d" % (http_port,),
                "--broadcast-address=127.0.0.1",
            ]
            + flags,
            self.reactor,
            cwd=self.directory(),
        )
        self.addCleanup(process.stop)
        yield process.start()
        return process

    @inlineCallbacks
    def start_nsqd(self, tcp_port: int = 0, http_port: int = 0) -> Generator[Any, Any, NSQDProcess]:
        """Start an nsqd in memory, broadcasting 127.0.0.1, registered with every lookupd."""
        data_path = self.directory()
        process = NSQDProcess(
            [
                "--tcp-address=127.0.0.1:%d" % (tcp_port,),
                "--http-address=127.0.0.1:%d" % (http_port,),
                "--broadcast-address=127.0.0.1",
                "--storage=memory",
                "--data-path=" + data_path,
            ]
            + ["--lookupd-tcp-address=127.0.0.1:%d" % (lookupd.tcp_port,) for lookupd in self.lookupds],
            self.reactor,
            cwd=data_path,
        )
        # Cleanups run last-in first-out: the nsqd stop before the lookupds.
        self.addCleanup(process.stop)
        yield process.start()
        return process

    # -- HTTP ----------------------------------------------------------------

    def url(self, process: NSQDProcess, path: str, query: Sequence[Tuple[str, str]] = ()) -> str:
        """The URL of ``path`` on a daemon's HTTP port (query values are plain names)."""
        url = "http://127.0.0.1:%d%s" % (process.http_port, path)
        if query:
            url += "?" + "&".join("%s=%s" % pair for pair in query)
        return url

    @inlineCallbacks
    def get_json(
        self, process: NSQDProcess, path: str, *query: Tuple[str, str]
    ) -> Generator[Any, Any, Tuple[int, Any]]:
        """GET a JSON document: ``(status, document)``."""
        url = self.url(process, path, query)
        response = yield treq.get(url, pool=self.pool)
        content = yield response.content()
        try:
            return response.code, json.loads(content)
        except ValueError:
            self.fail("GET %s: %d %r is not JSON" % (url, response.code, content))

    @inlineCallbacks
    def create(self, nsqd: NSQDProcess, topic: str, *channels: str) -> Generator[Any, Any, None]:
        """Create a topic and channels of it on ``nsqd`` (Go's ``/channel/create`` needs the topic)."""
        yield self.post(nsqd, "/topic/create", ("topic", topic))
        for channel in channels:
            yield self.post(nsqd, "/channel/create", ("topic", topic), ("channel", channel))

    @inlineCallbacks
    def post(
        self, process: NSQDProcess, path: str, *query: Tuple[str, str], body: bytes = b""
    ) -> Generator[Any, Any, None]:
        """POST, expecting 200."""
        url = self.url(process, path, query)
        response = yield treq.post(url, data=body, pool=self.pool)
        content = yield response.content()
        self.assertEqual(response.code, 200, "POST %s: %d %r" % (url, response.code, content))

    # -- what the daemons say ------------------------------------------------

    @inlineCallbacks
    def registered(
        self, lookupd: NSQDProcess, topics: Iterable[str] = ()
    ) -> Generator[Any, Any, Dict[str, List[str]]]:
        """
        The raw registrations of ``lookupd`` (``/debug``, not filtered by
        activity or tombstones): ``category:key:subkey`` to its producers'
        names; ``client::`` and the topics and channels of ``topics`` only.
        """
        code, document = yield self.get_json(lookupd, "/debug")
        wanted = {"topic:%s:" % (topic,) for topic in topics}
        prefixes = tuple("channel:%s:" % (topic,) for topic in topics)
        return {
            key: sorted(_producer_name(producer) for producer in producers)
            for key, producers in document.items()
            if key == "client::" or key in wanted or (prefixes and key.startswith(prefixes))
        }

    @inlineCallbacks
    def view(self, lookupd: NSQDProcess, topics: Iterable[str]) -> Generator[Any, Any, View]:
        """
        What ``lookupd`` lists: ``/topics``; for each of ``topics`` its
        ``/lookup`` (channels and producers, or the status if not 200) and
        ``/channels``; ``/nodes`` as ``{node: {topic: tombstoned}}``; and
        the raw registrations of ``topics`` (:meth:`registered`).
        """
        topics = sorted(topics)
        view: View = {"lookup": {}, "channels": {}}
        code, document = yield self.get_json(lookupd, "/topics")
        view["topics"] = sorted(document["topics"])
        for topic in topics:
            code, document = yield self.get_json(lookupd, "/lookup", ("topic", topic))
            if code == 200:
                view["lookup"][topic] = {
                    "channels": sorted(document["channels"]),
                    "producers": sorted(_producer_name(p) for p in document["producers"]),
                }
            else:
                view["lookup"][topic] = (code, document)
            code, document = yield self.get_json(lookupd, "/channels", ("topic", topic))
            view["channels"][topic] = sorted(document["channels"])
        code, document = yield self.get_json(lookupd, "/nodes")
        view["nodes"] = {
            _producer_name(p): dict(zip(p["topics"], p["tombstones"])) for p in document["producers"]
        }
        registered = yield self.registered(lookupd, topics)
        registered.pop("client::", None)
        view["registered"] = registered
        return view

    @inlineCallbacks
    def nsqd_topics(self, nsqd: NSQDProcess) -> Generator[Any, Any, Dict[str, List[str]]]:
        """An nsqd's topics and their channels, from ``/stats?format=json``."""
        code, document = yield self.get_json(nsqd, "/stats", ("format", "json"))
        return {
            topic["topic_name"]: sorted(channel["channel_name"] for channel in topic["channels"])
            for topic in document["topics"]
        }

    # -- waiting -------------------------------------------------------------

    @inlineCallbacks
    def wait_for(
        self,
        what: str,
        probe: Callable[[], "Deferred[Any]"],
        done: Callable[[Any], bool],
        within: float,
        since: Optional[float] = None,
    ) -> Generator[Any, Any, Any]:
        """
        Poll ``probe`` until ``done`` holds for its result, which is
        returned; fail if it does not by ``within`` seconds after
        ``since`` (now when omitted), showing the last result.
        """
        start = self.reactor.seconds() if since is None else since
        deadline = start + within
        while True:
            seen = yield probe()
            if done(seen):
                return seen
            if self.reactor.seconds() >= deadline:
                self.fail("%s: not within %.1f s; last seen:\n%s" % (what, within, _pretty(seen)))
            yield deferLater(self.reactor, POLL_STEP, lambda: None)

    def views(self, topics: Iterable[str]) -> "Deferred[List[View]]":
        """:meth:`view` of each lookupd."""
        topics = list(topics)
        return self.all([self.view(lookupd, topics) for lookupd in self.lookupds])

    def wait_for_views(
        self, what: str, expected: List[View], within: float, since: Optional[float] = None
    ) -> "Deferred[List[View]]":
        """
        Until the :meth:`views` of the lookupds, for the topics of
        ``expected[0]["lookup"]``, are ``expected``; as :meth:`wait_for`.
        """
        topics = set(expected[0]["lookup"])
        return self.wait_for(
            "%s; expected:\n%s\n" % (what, _pretty(expected)),
            lambda: self.views(topics),
            lambda seen: seen == expected,
            within,
            since,
        )


def _pretty(value: Any) -> str:
    """A view, or what else was seen, for a failure message."""
    return pprint.pformat(value, width=120)


class RegistrationTests(ClusterTestCase):
    """Topics and channels created on an nsqd are listed by every lookupd."""

    @inlineCallbacks
    def test_created_topics_and_channels_listed(self) -> Generator[Any, Any, None]:
        """
        A topic and a channel created over nsqd's HTTP API, and a topic
        created by a publish, show in /lookup, /topics, /channels and
        /nodes of both lookupds within one PING interval.
        """
        first, second = self.nsqds
        created = self.reactor.seconds()
        yield self.create(first, "made", "archive")
        yield self.post(second, "/pub", ("topic", "published"), body=b"hello")
        one, two = node_name(first), node_name(second)
        expected = {
            "topics": ["made", "published"],
            "lookup": {
                "made": {"channels": ["archive"], "producers": [one]},
                "published": {"channels": [], "producers": [two]},
            },
            "channels": {"made": ["archive"], "published": []},
            "nodes": {one: {"made": False}, two: {"published": False}},
            "registered": {
                "channel:made:archive": [one],
                "topic:made:": [one],
                "topic:published:": [two],
            },
        }
        yield self.wait_for_views("created topics listed", [expected, expected], PING_INTERVAL, created)
        # Consumers connect to what /lookup says: the nsqd's own TCP port.
        for lookupd in self.lookupds:
            code, document = yield self.get_json(lookupd, "/lookup", ("topic", "made"))
            producers = [
                (p["broadcast_address"], p["tcp_port"], p["http_port"], p["version"])
                for p in document["producers"]
            ]
            self.assertEqual(producers, [("127.0.0.1", first.tcp_port, first.http_port, NSQ_VERSION)])

    @inlineCallbacks
    def test_publish_creates_channels_known_elsewhere(self) -> Generator[Any, Any, None]:
        """
        A topic created on one nsqd by a publish gets the channels the
        lookupds list for it from the other nsqd, before its first message.
        """
        first, second = self.nsqds
        created = self.reactor.seconds()
        yield self.create(first, "shared", "archive")
        one, two = node_name(first), node_name(second)
        both = sorted([one, two])
        yield self.wait_for(
            "channel listed by both lookupds",
            lambda: self.views(["shared"]),
            lambda views: all(
                v["lookup"]["shared"] == {"channels": ["archive"], "producers": [one]} for v in views
            ),
            PING_INTERVAL,
            created,
        )
        published = self.reactor.seconds()
        yield self.post(second, "/pub", ("topic", "shared"), body=b"first")
        stats = yield self.wait_for(
            "the message in the channel pre-created on the second nsqd",
            lambda: self.get_json(second, "/stats", ("format", "json"), ("topic", "shared")),
            lambda seen: [
                (channel["channel_name"], channel["depth"])
                for topic in seen[1]["topics"]
                for channel in topic["channels"]
            ]
            == [("archive", 1)],
            PING_INTERVAL,
        )
        self.assertEqual(stats[1]["topics"][0]["message_count"], 1)
        expected = {
            "topics": ["shared"],
            "lookup": {"shared": {"channels": ["archive"], "producers": both}},
            "channels": {"shared": ["archive"]},
            "nodes": {one: {"shared": False}, two: {"shared": False}},
            "registered": {"channel:shared:archive": both, "topic:shared:": both},
        }
        yield self.wait_for_views(
            "both nsqd listed for the topic", [expected, expected], PING_INTERVAL, published
        )


class DeletionTests(ClusterTestCase):
    """Topics and channels deleted on an nsqd, or through a lookupd, are unlisted."""

    @inlineCallbacks
    def test_deleted_on_nsqd_unlisted(self) -> Generator[Any, Any, None]:
        """
        A channel, then a topic, deleted on one nsqd lose that nsqd as
        producer on both lookupds within one PING interval; the names stay
        listed (as in Go) and the other nsqd stays registered for them.
        """
        first, second = self.nsqds
        one, two = node_name(first), node_name(second)
        both = sorted([one, two])
        created = self.reactor.seconds()
        yield self.create(second, "gone", "c1")
        yield self.wait_for(
            "channel listed by both lookupds",
            lambda: self.views(["gone"]),
            lambda views: all(v["registered"].get("channel:gone:c1") == [two] for v in views),
            PING_INTERVAL,
            created,
        )
        # The first nsqd's new topic gets c1 from the lookupds; c2 is its own.
        created = self.reactor.seconds()
        yield self.create(first, "gone", "c2")
        listed = {
            "topics": ["gone"],
            "lookup": {"gone": {"channels": ["c1", "c2"], "producers": both}},
            "channels": {"gone": ["c1", "c2"]},
            "nodes": {one: {"gone": False}, two: {"gone": False}},
            "registered": {
                "channel:gone:c1": both,
                "channel:gone:c2": [one],
                "topic:gone:": both,
            },
        }
        yield self.wait_for_views("listed", [listed, listed], PING_INTERVAL, created)

        deleted = self.reactor.seconds()
        yield self.post(first, "/channel/delete", ("topic", "gone"), ("channel", "c2"))
        # A channel registration stays with no producer (docs/nsqlookupd.md,
        # as Go): /channels and /lookup still name it, /debug shows no producer.
        without_channel = dict(listed, registered={"channel:gone:c1": both, "topic:gone:": both})
        yield self.wait_for_views(
            "channel unregistered", [without_channel, without_channel], PING_INTERVAL, deleted
        )

        deleted = self.reactor.seconds()
        yield self.post(first, "/topic/delete", ("topic", "gone"))
        without_topic = {
            "topics": ["gone"],
            "lookup": {"gone": {"channels": ["c1", "c2"], "producers": [two]}},
            "channels": {"gone": ["c1", "c2"]},
            "nodes": {one: {}, two: {"gone": False}},
            "registered": {"channel:gone:c1": [two], "topic:gone:": [two]},
        }
        yield self.wait_for_views(
            "topic unregistered", [without_topic, without_topic], PING_INTERVAL, deleted
        )

    @inlineCallbacks
    def test_delete_through_lookupd(self) -> Generator[Any, Any, None]:
        """
        ``POST /topic/delete`` on one lookupd deletes the topic on both
        nsqd, which unregister it from both lookupds; the lookupd asked
        forgets the topic, the other keeps only its name (as Go).
        """
        first, second = self.nsqds
        one, two = node_name(first), node_name(second)
        both = sorted([one, two])
        created = self.reactor.seconds()
        for nsqd in self.nsqds:
            yield self.create(nsqd, "doomed", "ch")
            yield self.post(nsqd, "/topic/create", ("topic", "kept"))
        listed = {
            "topics": ["doomed", "kept"],
            "lookup": {
                "doomed": {"channels": ["ch"], "producers": both},
                "kept": {"channels": [], "producers": both},
            },
            "channels": {"doomed": ["ch"], "kept": []},
            "nodes": {one: {"doomed": False, "kept": False}, two: {"doomed": False, "kept": False}},
            "registered": {
                "channel:doomed:ch": both,
                "topic:doomed:": both,
                "topic:kept:": both,
            },
        }
        yield self.wait_for_views("listed", [listed, listed], PING_INTERVAL, created)

        deleted = self.reactor.seconds()
        yield self.post(self.lookupds[0], "/topic/delete", ("topic", "doomed"))
        yield self.wait_for(
            "topic deleted on both nsqd",
            lambda: self.all([self.nsqd_topics(nsqd) for nsqd in self.nsqds]),
            lambda seen: seen == [{"kept": []}, {"kept": []}],
            PING_INTERVAL,
            deleted,
        )
        unregistered = {
            "nodes": {one: {"kept": False}, two: {"kept": False}},
            "registered": {"topic:kept:": both},
        }
        asked = dict(
            unregistered,
            topics=["kept"],
            lookup={
                "doomed": (404, {"message": "TOPIC_NOT_FOUND"}),
                "kept": {"channels": [], "producers": both},
            },
            channels={"doomed": [], "kept": []},
        )
        # The other lookupd only saw the nsqd UNREGISTER: a registration
        # stays with no producer (docs/nsqlookupd.md, as Go).
        other = dict(
            unregistered,
            topics=["doomed", "kept"],
            lookup={
                "doomed": {"channels": ["ch"], "producers": []},
                "kept": {"channels": [], "producers": both},
            },
            channels={"doomed": ["ch"], "kept": []},
        )
        yield self.wait_for_views("topic unlisted", [asked, other], PING_INTERVAL, deleted)


class TombstoneTests(ClusterTestCase):
    """A tombstoned producer is hidden from /lookup for the tombstone lifetime."""

    lookupd_flags = (("--tombstone-lifetime=%ds" % (TOMBSTONE_LIFETIME,),), ())

    @inlineCallbacks
    def test_tombstone_hides_producer_for_lifetime(self) -> Generator[Any, Any, None]:
        """
        A producer tombstoned for a topic is left out of that lookupd's
        /lookup of the topic, and marked in its /nodes, until the lifetime
        is over; then it is listed again, having stayed registered.  Other
        topics and the other lookupd are not affected.
        """
        first, second = self.nsqds
        one, two = node_name(first), node_name(second)
        both = sorted([one, two])
        created = self.reactor.seconds()
        for nsqd in self.nsqds:
            yield self.post(nsqd, "/topic/create", ("topic", "tomb"))
        yield self.post(first, "/topic/create", ("topic", "other"))
        listed = {
            "topics": ["other", "tomb"],
            "lookup": {
                "other": {"channels": [], "producers": [one]},
                "tomb": {"channels": [], "producers": both},
            },
            "channels": {"other": [], "tomb": []},
            "nodes": {one: {"other": False, "tomb": False}, two: {"tomb": False}},
            "registered": {"topic:other:": [one], "topic:tomb:": both},
        }
        yield self.wait_for_views("listed", [listed, listed], PING_INTERVAL, created)

        tombstoned = self.reactor.seconds()
        yield self.post(self.lookupds[0], "/topic/tombstone", ("topic", "tomb"), ("node", one))
        answered = self.reactor.seconds()
        hidden = dict(
            listed,
            lookup={
                "other": {"channels": [], "producers": [one]},
                "tomb": {"channels": [], "producers": [two]},
            },
            nodes={one: {"other": False, "tomb": True}, two: {"tomb": False}},
        )
        # The tombstone was set after ``tombstoned``: a view that arrived
        # before ``tombstoned + lifetime`` was taken while it held.
        checked = 0
        while True:
            views = yield self.views(["other", "tomb"])
            if self.reactor.seconds() >= tombstoned + TOMBSTONE_LIFETIME:
                break
            self.assertEqual(views, [hidden, listed], "while tombstoned")
            checked += 1
            yield deferLater(self.reactor, POLL_STEP * 4, lambda: None)
        self.assertNotEqual(checked, 0, "no view came back within the tombstone lifetime")
        yield self.wait_for_views(
            "listed again after the lifetime", [listed, listed], TOMBSTONE_LIFETIME + SLACK, answered
        )


class InactivityTests(ClusterTestCase):
    """
    Lookupds stop listing an nsqd that stopped talking: after
    ``--inactive-producer-timeout`` if its connection stays open, at once
    if it closes.

    With a timeout shorter than the PING interval, as here, even a healthy
    nsqd is unlisted between two PINGs by the first lookupd (hence Go's
    default of 5 minutes); the second keeps its default.
    """

    timeout = 90
    lookupd_flags = (("--inactive-producer-timeout=%ds" % (INACTIVE_TIMEOUT,),), ())

    @inlineCallbacks
    def test_frozen_nsqd_unlisted_after_timeout(self) -> Generator[Any, Any, None]:
        """
        A SIGSTOPped nsqd (connection open, no PING) is left out of
        /lookup and /nodes of the lookupd with a short inactivity timeout
        once it is over, while still registered there and listed by the
        other lookupd; after SIGCONT it PINGs and is listed again.
        """
        first, second = self.nsqds
        one, two = node_name(first), node_name(second)
        both = sorted([one, two])
        short, default = self.lookupds
        created = self.reactor.seconds()
        for nsqd in self.nsqds:
            yield self.post(nsqd, "/topic/create", ("topic", "alive"))

        def lookup(lookupd: NSQDProcess) -> "Deferred[Any]":
            return self.get_json(lookupd, "/lookup", ("topic", "alive"))

        def nodes(lookupd: NSQDProcess) -> "Deferred[Any]":
            return self.get_json(lookupd, "/nodes")

        def listed(seen: Tuple[int, Any], name: str = one) -> bool:
            return name in [_producer_name(p) for p in seen[1]["producers"]]

        yield self.wait_for(
            "registered with both lookupds",
            lambda: self.all([self.registered(lookupd, ["alive"]) for lookupd in self.lookupds]),
            lambda seen: all(r.get("topic:alive:") == both for r in seen),
            PING_INTERVAL,
            created,
        )
        # Listed on the short lookupd at IDENTIFY and after each PING.
        yield self.wait_for(
            "listed by the short lookupd", lambda: lookup(short), listed, PING_INTERVAL + SLACK
        )

        first.signal("STOP")
        frozen = self.reactor.seconds()
        # Its last PING came before the freeze: unlisted once the timeout is over.
        yield self.wait_for(
            "frozen nsqd unlisted by /lookup",
            lambda: lookup(short),
            lambda seen: not listed(seen),
            INACTIVE_TIMEOUT + SLACK,
            frozen,
        )
        code, document = yield nodes(short)
        self.assertNotIn(one, [_producer_name(p) for p in document["producers"]], "/nodes")
        # Still registered (the connection is open), only filtered out...
        registered = yield self.registered(short, ["alive"])
        self.assertEqual(registered["topic:alive:"], both, "/debug of the short lookupd")
        # ... and the other lookupd, with its 5 minutes, still lists it.
        seen = yield lookup(default)
        self.assertTrue(listed(seen), seen)
        seen = yield nodes(default)
        self.assertTrue(listed(seen), seen)

        first.signal("CONT")
        resumed = self.reactor.seconds()
        yield self.wait_for(
            "resumed nsqd listed again by /lookup",
            lambda: lookup(short),
            listed,
            PING_INTERVAL + SLACK,
            resumed,
        )

    @inlineCallbacks
    def test_killed_nsqd_unlisted_at_once(self) -> Generator[Any, Any, None]:
        """
        A SIGKILLed nsqd is unregistered by both lookupds as soon as its
        connections close, long before any inactivity timeout.
        """
        first, second = self.nsqds
        one, two = node_name(first), node_name(second)
        both = sorted([one, two])
        created = self.reactor.seconds()
        for nsqd in self.nsqds:
            yield self.post(nsqd, "/topic/create", ("topic", "doomed"))
        yield self.wait_for(
            "registered with both lookupds",
            lambda: self.all([self.registered(lookupd, ["doomed"]) for lookupd in self.lookupds]),
            lambda seen: seen == [{"client::": both, "topic:doomed:": both}] * 2,
            PING_INTERVAL,
            created,
        )
        second.kill()
        status = yield second.ended
        self.assertEqual(status, ExitStatus(None, 9))
        killed = self.reactor.seconds()
        yield self.wait_for(
            "killed nsqd unregistered by both lookupds",
            lambda: self.all([self.registered(lookupd, ["doomed"]) for lookupd in self.lookupds]),
            lambda seen: seen == [{"client::": [one], "topic:doomed:": [one]}] * 2,
            SLACK,
            killed,
        )
        # The lookupd with the default 5-minute timeout lists only the survivor.
        code, document = yield self.get_json(self.lookupds[1], "/lookup", ("topic", "doomed"))
        self.assertEqual([_producer_name(p) for p in document["producers"]], [one])
        code, document = yield self.get_json(self.lookupds[1], "/nodes")
        self.assertEqual([_producer_name(p) for p in document["producers"]], [one])


class RestartTests(ClusterTestCase):
    """A restarted lookupd gets every registration of every nsqd back."""

    timeout = 90

    def lookupd_ports(self, index: int) -> Tuple[int, int]:
        """
        The first lookupd has fixed ports, to come back on after a restart.

        Racy: free_port() only knows the port was free a moment ago;
        another process could bind it before the lookupd does (or during
        the restart).  Rare on a test machine; every other listener uses
        port 0.
        """
        if index != 0:
            return 0, 0
        tcp_port = free_port()
        http_port = free_port()
        while http_port == tcp_port:
            http_port = free_port()
        return tcp_port, http_port

    @inlineCallbacks
    def test_restart_reregisters_everything(self) -> Generator[Any, Any, None]:
        """
        After SIGTERM and a start on the same ports, the lookupd lists every
        topic and channel of both nsqd again, including one created while it
        was down, within an nsqd's longest reconnection backoff.
        """
        first, second = self.nsqds
        one, two = node_name(first), node_name(second)
        both = sorted([one, two])
        created = self.reactor.seconds()
        yield self.create(first, "r1", "a", "b")
        yield self.post(first, "/topic/create", ("topic", "r2"))
        yield self.wait_for(
            "channels listed by both lookupds",
            lambda: self.views(["r1"]),
            lambda views: all(
                v["lookup"]["r1"] == {"channels": ["a", "b"], "producers": [one]} for v in views
            ),
            PING_INTERVAL,
            created,
        )
        # The second nsqd's new topic gets a and b from the lookupds.
        created = self.reactor.seconds()
        yield self.create(second, "r1", "c")
        yield self.post(second, "/pub", ("topic", "r3"), body=b"x")
        before: View = {
            "topics": ["r1", "r2", "r3"],
            "lookup": {
                "late": (404, {"message": "TOPIC_NOT_FOUND"}),
                "r1": {"channels": ["a", "b", "c"], "producers": both},
                "r2": {"channels": [], "producers": [one]},
                "r3": {"channels": [], "producers": [two]},
            },
            "channels": {"late": [], "r1": ["a", "b", "c"], "r2": [], "r3": []},
            "nodes": {one: {"r1": False, "r2": False}, two: {"r1": False, "r3": False}},
            "registered": {
                "channel:r1:a": both,
                "channel:r1:b": both,
                "channel:r1:c": [two],
                "topic:r1:": both,
                "topic:r2:": [one],
                "topic:r3:": [two],
            },
        }
        yield self.wait_for_views("listed", [before, before], PING_INTERVAL, created)

        lookupd = self.lookupds[0]
        status = yield lookupd.stop("TERM")
        self.assertEqual(status, ExitStatus(0, None), lookupd.output())
        yield self.post(second, "/topic/create", ("topic", "late"))
        lookupd = yield self.start_lookupd([], lookupd.tcp_port, lookupd.http_port)
        self.lookupds[0] = lookupd
        restarted = self.reactor.seconds()

        after = dict(
            before,
            topics=["late", "r1", "r2", "r3"],
            lookup=dict(before["lookup"], late={"channels": [], "producers": [two]}),
            nodes={one: {"r1": False, "r2": False}, two: {"late": False, "r1": False, "r3": False}},
            registered=dict(before["registered"], **{"topic:late:": [two]}),
        )
        yield self.wait_for_views(
            "everything registered again", [after, after], RECONNECT_BOUND + SLACK, restarted
        )
