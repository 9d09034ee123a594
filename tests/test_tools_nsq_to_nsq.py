"""Tests for txnsq.tools.nsq_to_nsq, with fakes and a Clock: no sockets."""

from __future__ import annotations

import io
import json
import random
import sys
from typing import Any, Dict, List, Optional, Tuple

from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from tests.client_fakes import FakeConnector
from txnsq import cli
from txnsq.client.consumer import Consumer
from txnsq.client.message import Message
from txnsq.tools.common import ToolExit
from txnsq.tools.config_opts import ClientOptions
from txnsq.tools.hostpool import EpsilonGreedyHostPool, HostPool
from txnsq.tools.json_filter import BACKOFF, PUBLISH, SKIP, JSONFilter
from txnsq.tools.nsq_to_nsq import (
    Republisher,
    RoundRobin,
    main,
    make_selector,
    nsq_to_nsq_flags,
    start_bridge,
    validate,
)
from txnsq.tools.timer_metrics import TimerMetrics, status_metrics

A = "127.0.0.1:4150"
B = "127.0.0.1:4250"
C = "127.0.0.1:4350"


def parse(*argv: str) -> Any:
    return cli.parse_flags(nsq_to_nsq_flags(), argv)


VALID = ("--topic=t", "--nsqd-tcp-address=" + A, "--destination-nsqd-tcp-address=" + B)


class FlagsTests(SynchronousTestCase):
    """nsq_to_nsq's flags and checks."""

    def test_usage_is_gos(self) -> None:
        """The usage shows Go's flags, defaults and help texts."""
        usage = cli.format_defaults(nsq_to_nsq_flags())
        for text in (
            '  -channel string\n    \tnsq channel (default "nsq_to_nsq")\n',
            "  -destination-topic string\n    \tuse this destination topic for all consumed"
            " topics (default is consumed topic name)\n",
            "  -mode string\n    \tthe upstream request mode options: round-robin, hostpool"
            ' (default), epsilon-greedy (default "hostpool")\n',
            "  -status-every int\n    \tthe # of requests between logging status (per"
            " destination), 0 disables (default 250)\n",
            "  -destination-nsqd-tcp-address value\n    \tdestination nsqd TCP address (may be"
            " given multiple times)\n",
            "  -whitelist-json-field value\n    \tfor JSON messages: pass this field (may be"
            " given multiple times)\n",
            "  -require-json-value string\n    \tfor JSON messages: only pass messages in which"
            " the required field has this value\n",
            "  -producer-opt value\n    \toption to passthrough to nsq.Producer (may be given"
            " multiple times, see http://godoc.org/github.com/nsqio/go-nsq#Config)\n",
            "  -topic value\n    \tnsq topic (may be given multiple times)\n",
            "  -max-in-flight int\n    \tmax number of messages to allow in flight (default 200)\n",
        ):
            self.assertIn(text, usage)

    def test_defaults(self) -> None:
        """Go's defaults."""
        values = parse()
        self.assertEqual(
            (values["channel"], values["mode"], values["status_every"], values["max_in_flight"]),
            ("nsq_to_nsq", "hostpool", 250, 200),
        )
        self.assertEqual(values["destination_topic"], "")

    def test_repeatable(self) -> None:
        """--topic, --destination-nsqd-tcp-address and --whitelist-json-field repeat."""
        values = parse(
            "--topic=a", "--topic", "b",
            "--destination-nsqd-tcp-address=" + A, "--destination-nsqd-tcp-address=" + B,
            "--whitelist-json-field=x", "--whitelist-json-field=y",
        )
        self.assertEqual(values["topic"], ["a", "b"])
        self.assertEqual(values["destination_nsqd_tcp_address"], [A, B])
        self.assertEqual(values["whitelist_json_field"], ["x", "y"])

    def test_checks_in_gos_order(self) -> None:
        """Go's fatal texts, in Go's order."""
        cases = [
            ((), "--topic and --channel are required"),
            (("--topic=t", "--channel="), "--topic and --channel are required"),
            (("--topic=t", "--topic=b@d"), "--topic is invalid"),
            (("--topic=t", "--destination-topic=no way"), "--destination-topic is invalid"),
            (("--topic=t", "--channel=c!"), "--channel is invalid"),
            (("--topic=t",), "--nsqd-tcp-address or --lookupd-http-address required"),
            (
                ("--topic=t", "--nsqd-tcp-address=" + A, "--lookupd-http-address=l:4161"),
                "use --nsqd-tcp-address or --lookupd-http-address not both",
            ),
            (("--topic=t", "--nsqd-tcp-address=" + A), "--destination-nsqd-tcp-address required"),
        ]
        for argv, message in cases:
            self.assertEqual(validate(parse(*argv)), message, argv)
        self.assertIsNone(validate(parse(*VALID)))
        self.assertIsNone(validate(parse("--channel=c#ephemeral", *VALID)))


class MainTests(SynchronousTestCase):
    """The console script's exits before it runs."""

    def test_version(self) -> None:
        """--version prints Go's version line and returns."""
        out = io.StringIO()
        main(["--version"], stdout=out)
        self.assertRegex(out.getvalue(), r"^nsq_to_nsq v\d+\.\d+\.\d+\n$")

    def test_fatal(self) -> None:
        """A failed check is Go's log.Fatal: a timestamped line and status 1."""
        err = io.StringIO()
        with self.assertRaises(ToolExit) as raised:
            main(["--topic=t", "--nsqd-tcp-address=" + A], stderr=err)
        self.assertEqual(raised.exception.code, 1)
        self.assertRegex(
            err.getvalue(),
            r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d --destination-nsqd-tcp-address required\n$",
        )

    def test_bad_producer_opt(self) -> None:
        """A bad --producer-opt is a flag error: Go's text, the usage, status 2."""
        err = io.StringIO()
        with self.assertRaises(SystemExit) as raised:
            main(list(VALID) + ["--producer-opt=nope,1"], stderr=err)
        self.assertEqual(raised.exception.code, 2)
        self.assertTrue(
            err.getvalue().startswith(
                'invalid value "nope,1" for flag -producer-opt: invalid option nope\n'
                "Usage of nsq_to_nsq:\n"
            )
        )


class JSONFilterTests(SynchronousTestCase):
    """The JSON filters, as Go's shouldPassMessage and filterMessage."""

    def test_inactive_passes_anything(self) -> None:
        """Without JSON flags every body is published as it is, JSON or not."""
        json_filter = JSONFilter()
        self.assertFalse(json_filter.active)
        self.assertEqual(json_filter.apply(b"not json"), (PUBLISH, b"not json"))

    def test_not_json_is_skipped(self) -> None:
        """A body that is not a JSON object is finished without publishing."""
        json_filter = JSONFilter(require_field="a")
        deep = b"[" * 100000 + b"]" * 100000
        for body in (b"not json", b"[1, 2]", b'"text"', b"12", b"", b"NaN", b'{"a": 1e400}', deep):
            self.assertEqual(json_filter.apply(body)[0], SKIP, body)

    def test_required_field(self) -> None:
        """--require-json-field alone: the field's presence decides."""
        json_filter = JSONFilter(require_field="a")
        self.assertEqual(json_filter.apply(b'{"a": null}'), (PUBLISH, b'{"a": null}'))
        self.assertEqual(json_filter.apply(b'{"b": 1}')[0], SKIP)
        self.assertEqual(json_filter.apply(b"null")[0], SKIP)

    def test_missing_field_with_value_backs_off(self) -> None:
        """A missing field when a value is required is requeued with backoff, as in Go."""
        json_filter = JSONFilter(require_field="a", require_value="x")
        self.assertEqual(json_filter.apply(b'{"b": "x"}')[0], BACKOFF)

    def test_string_value(self) -> None:
        """A string field must equal the value exactly."""
        json_filter = JSONFilter(require_field="kind", require_value="click")
        self.assertEqual(json_filter.apply(b'{"kind": "click"}')[0], PUBLISH)
        self.assertEqual(json_filter.apply(b'{"kind": "Click"}')[0], SKIP)
        self.assertEqual(json_filter.apply(b'{"kind": ["click"]}')[0], SKIP)

    def test_number_value(self) -> None:
        """A value that parses as a float matches equal numbers, however written."""
        json_filter = JSONFilter(require_field="n", require_value="5")
        for body in (b'{"n": 5}', b'{"n": 5.0}', b'{"n": 5e0}', b'{"n": "5"}'):
            self.assertEqual(json_filter.apply(body)[0], PUBLISH, body)
        for body in (b'{"n": 6}', b'{"n": true}', b'{"n": "5.0"}', b'{"n": null}'):
            self.assertEqual(json_filter.apply(body)[0], SKIP, body)

    def test_non_number_value_against_number(self) -> None:
        """A value that is no number never matches a non-string field."""
        json_filter = JSONFilter(require_field="b", require_value="true")
        self.assertEqual(json_filter.apply(b'{"b": true}')[0], SKIP)
        self.assertEqual(json_filter.apply(b'{"b": "true"}')[0], PUBLISH)

    def test_whitelist(self) -> None:
        """Only whitelisted fields are published, as Go's json.Marshal writes them."""
        json_filter = JSONFilter(whitelist=["z", "a", "f", "s", "nested", "absent"])
        outcome, body = json_filter.apply(
            b'{"a": 1, "z": 12345678901, "f": 1.5, "s": "<b>&", "nested": {"y": 2.0, "x": 1e-7},'
            b' "dropped": 1}'
        )
        self.assertEqual(outcome, PUBLISH)
        self.assertEqual(
            body,
            b'{"a":1,"f":1.5,"nested":{"x":1e-7,"y":2},"s":"\\u003cb\\u003e\\u0026",'
            b'"z":12345678901}',
        )

    def test_whitelist_with_requirement(self) -> None:
        """The requirement is checked first, then the whitelist applied."""
        json_filter = JSONFilter("kind", "a", ["id"])
        self.assertEqual(json_filter.apply(b'{"kind": "a", "id": 7, "x": 1}'), (PUBLISH, b'{"id":7}'))
        self.assertEqual(json_filter.apply(b'{"kind": "b", "id": 7}')[0], SKIP)

    def test_whitelist_of_null(self) -> None:
        """JSON null passes the whitelist as an empty object (Go's nil map)."""
        self.assertEqual(JSONFilter(whitelist=["a"]).apply(b"null"), (PUBLISH, b"{}"))

    def test_large_integers_are_float64(self) -> None:
        """Numbers are float64 as in Go: past 2**63 they stay floats, written in full."""
        body = JSONFilter(whitelist=["n"]).apply(b'{"n": 12345678901234567890}')[1]
        self.assertEqual(body, b'{"n":12345678901234567000}')
        self.assertEqual(json.loads(body)["n"], 12345678901234567000)


class FakeClockTime(Clock):
    """A Clock at a realistic time."""

    def __init__(self) -> None:
        Clock.__init__(self)
        self.advance(1700000000)


class SelectorTests(SynchronousTestCase):
    """Choosing the destination of each message (the pools' own tests are in test_tools_hostpool)."""

    def setUp(self) -> None:
        self.clock = FakeClockTime()

    def picks(self, selector: Any, count: int) -> List[str]:
        return [selector.get().address for _ in range(count)]

    def test_modes(self) -> None:
        """round-robin, hostpool and epsilon-greedy; any other word is round-robin, as in Go."""
        self.assertIsInstance(make_selector("round-robin", [A], self.clock), RoundRobin)
        pool = make_selector("hostpool", [A], self.clock)
        self.assertIsInstance(pool, HostPool)
        self.assertNotIsInstance(pool, EpsilonGreedyHostPool)
        self.assertIsInstance(make_selector("epsilon-greedy", [A], self.clock), EpsilonGreedyHostPool)
        self.assertIsInstance(make_selector("random", [A], self.clock), RoundRobin)

    def test_round_robin_starts_at_second(self) -> None:
        """Round-robin rotates over the destinations, starting with the second as Go does."""
        self.assertEqual(self.picks(RoundRobin([A, B, C]), 4), [B, C, A, B])

    def test_round_robin_ignores_failures(self) -> None:
        """Round-robin keeps rotating whatever the outcomes."""
        selector = RoundRobin([A, B])
        selector.get().mark(False)
        self.assertEqual(self.picks(selector, 3), [A, B, A])

    def test_round_robin_needs_an_address(self) -> None:
        """Round-robin over nothing is refused."""
        self.assertRaises(ValueError, RoundRobin, [])


class FakeProducer:
    """Publishes answered by the test: :attr:`pending` holds (topic, body, Deferred)."""

    def __init__(self, address: str, config: Any = None, reactor: Any = None) -> None:
        self.address = address
        self.config = config
        self.pending: List[Tuple[str, bytes, "Deferred[None]"]] = []
        self.closed = False
        self.events: Optional[List[str]] = None

    def publish(self, topic: str, body: bytes) -> "Deferred[None]":
        d: Deferred[None] = Deferred()
        self.pending.append((topic, body, d))
        return d

    def answer(self, ok: bool = True) -> None:
        _, _, d = self.pending.pop(0)
        if ok:
            d.callback(None)
        else:
            d.errback(ConnectionRefusedError("nsqd went away"))

    def close(self) -> "Deferred[None]":
        self.closed = True
        if self.events is not None:
            self.events.append("producer closed " + self.address)
        return succeed(None)


class RecordingDelegate:
    """A message's connection, recording FIN and REQ."""

    def __init__(self) -> None:
        self.answers: List[Tuple[Any, ...]] = []

    def on_finish(self, message: Message) -> None:
        self.answers.append(("FIN", message.id))

    def on_requeue(self, message: Message, delay: Optional[float], backoff: bool) -> None:
        self.answers.append(("REQ", message.id, delay, backoff))

    def on_touch(self, message: Message) -> None:
        self.answers.append(("TOUCH", message.id))


class RepublisherTests(SynchronousTestCase):
    """Publishing each message and answering it when the publish is answered."""

    def setUp(self) -> None:
        self.clock = FakeClockTime()
        self.out = io.StringIO()
        self.delegate = RecordingDelegate()
        self.producers = {A: FakeProducer(A), B: FakeProducer(B)}
        self.count = 0

    def republisher(
        self, selector: Any = None, json_filter: Optional[JSONFilter] = None, status_every: int = 0
    ) -> Republisher:
        addresses = list(self.producers)
        metrics, per_address = status_metrics(addresses, status_every, self.out, self.clock)
        return Republisher(
            {address: producer.publish for address, producer in self.producers.items()},
            selector if selector is not None else RoundRobin(addresses),
            json_filter if json_filter is not None else JSONFilter(),
            metrics,
            per_address,
            self.clock,
        )

    def message(self, body: bytes = b"body") -> Message:
        self.count += 1
        return Message(b"%016d" % (self.count,), body, 0, 1, A, self.delegate)

    def test_finish_only_after_publish_ok(self) -> None:
        """The message is taken over (async) and finished only once nsqd said OK."""
        republisher = self.republisher()
        message = self.message(b"hello")
        self.assertIsNone(republisher.handle(message, "dest"))
        self.assertTrue(message.is_async())
        self.assertEqual(self.delegate.answers, [])
        self.assertEqual([(t, b) for t, b, _ in self.producers[B].pending], [("dest", b"hello")])
        self.assertEqual(republisher.outstanding, 1)
        self.producers[B].answer()
        self.assertEqual(self.delegate.answers, [("FIN", message.id)])
        self.assertEqual(republisher.outstanding, 0)

    def test_failed_publish_requeues(self) -> None:
        """A failed publish requeues the message with the default delay and backoff."""
        republisher = self.republisher()
        message = self.message()
        republisher.handle(message, "dest")
        self.producers[B].answer(ok=False)
        self.assertEqual(self.delegate.answers, [("REQ", message.id, None, True)])

    def test_publish_raising_requeues(self) -> None:
        """A publish that raises at once is a failed publish."""

        def broken(topic: str, body: bytes) -> "Deferred[None]":
            raise RuntimeError("closed")

        republisher = self.republisher()
        republisher.publishers[B] = broken
        message = self.message()
        self.assertIsNone(republisher.handle(message, "dest"))
        self.assertEqual(self.delegate.answers, [("REQ", message.id, None, True)])

    def test_filtered_out_finishes_without_publishing(self) -> None:
        """A message the filter skips is finished (True) and not published."""
        republisher = self.republisher(json_filter=JSONFilter(require_field="a"))
        self.assertTrue(republisher.handle(self.message(b'{"b": 1}'), "dest"))
        self.assertTrue(republisher.handle(self.message(b"not json"), "dest"))
        self.assertEqual(self.producers[A].pending + self.producers[B].pending, [])

    def test_backoff_requeues_without_publishing(self) -> None:
        """A missing field with a required value gives False: requeue with backoff."""
        republisher = self.republisher(json_filter=JSONFilter("a", "x"))
        self.assertFalse(republisher.handle(self.message(b'{"b": 1}'), "dest"))
        self.assertEqual(self.producers[A].pending + self.producers[B].pending, [])

    def test_whitelisted_body_published(self) -> None:
        """The whitelisted body is what gets published."""
        republisher = self.republisher(json_filter=JSONFilter(whitelist=["id"]))
        republisher.handle(self.message(b'{"id": 3, "secret": "x"}'), "dest")
        self.assertEqual(self.producers[B].pending[0][1], b'{"id":3}')

    def test_hostpool_fails_over(self) -> None:
        """With the host pool, after a failed publish the next messages go to the other destination."""
        republisher = self.republisher(selector=HostPool([A, B], self.clock))
        first = self.message()
        republisher.handle(first, "dest")
        self.producers[A].answer(ok=False)
        for _ in range(3):
            republisher.handle(self.message(), "dest")
        self.assertEqual(len(self.producers[B].pending), 3)
        self.assertEqual(self.producers[A].pending, [])
        self.assertEqual(self.delegate.answers, [("REQ", first.id, None, True)])

    def test_status_lines(self) -> None:
        """Every status_every publishes an aggregate line and one per destination."""
        republisher = self.republisher(status_every=2)
        self.out.truncate(0)
        self.out.seek(0)
        for _ in range(5):
            republisher.handle(self.message(), "dest")
            self.clock.advance(0.002)
            for producer in self.producers.values():
                while producer.pending:
                    producer.answer()
        texts = [line.split(" ", 2)[2] for line in self.out.getvalue().splitlines()]
        self.assertIn("[aggregate]: finished 2 - 99th: 2.00ms - 95th: 2.00ms - avg: 2.00ms", texts)
        self.assertEqual(texts.count("[aggregate]: finished 2 - 99th: 2.00ms - 95th: 2.00ms - avg: 2.00ms"), 2)
        self.assertIn("[%s]: finished 2 - 99th: 2.00ms - 95th: 2.00ms - avg: 2.00ms" % (B,), texts)

    def test_single_destination_has_no_own_line(self) -> None:
        """With one destination only the aggregate line is written, as in Go."""
        metrics, per_address = status_metrics([A], 250, self.out, self.clock)
        self.assertEqual(metrics.prefix, "[aggregate]:")
        self.assertEqual(per_address[A].status_every, 0)
        _, several = status_metrics([A, B], 250, self.out, self.clock)
        self.assertEqual(several[B].prefix, "[%s]:" % (B,))


class ConsumerWiringTests(SynchronousTestCase):
    """The republisher as a real Consumer's handler, over fake connections."""

    def setUp(self) -> None:
        self.clock = FakeClockTime()
        self.connector = FakeConnector(self.clock)
        self.producer = FakeProducer(B)
        republisher = Republisher(
            {B: self.producer.publish},
            RoundRobin([B]),
            JSONFilter(),
            TimerMetrics("[aggregate]:", 0, io.StringIO(), self.clock),
            {},
            self.clock,
        )
        self.consumer = Consumer(
            "source",
            "nsq_to_nsq",
            republisher.handler("destination"),
            nsqd_tcp_addresses=[A],
            max_in_flight=10,
            reactor=self.clock,
            connect=self.connector,
            rng=random.Random(0),
        )
        self.consumer.start()
        self.conn = self.connector.current(A)

    def test_fin_after_publish(self) -> None:
        """The consumer sends no FIN until the destination answered OK."""
        message = self.conn.deliver(b"payload")
        self.assertEqual(self.conn.answers, [])
        self.assertEqual([(t, b) for t, b, _ in self.producer.pending], [("destination", b"payload")])
        self.producer.answer()
        self.assertEqual(self.conn.answers, [("FIN", message.id)])

    def test_req_after_failed_publish(self) -> None:
        """A failed publish sends REQ with backoff."""
        message = self.conn.deliver(b"payload")
        self.producer.answer(ok=False)
        self.assertEqual([a[0] for a in self.conn.answers], ["REQ"])
        self.assertEqual(self.conn.answers[0][1], message.id)
        self.assertTrue(self.conn.answers[0][3])

    def test_close_waits_for_publishes(self) -> None:
        """Closing the consumer waits for the message whose publish is outstanding."""
        message = self.conn.deliver(b"payload")
        closed: List[None] = []
        self.consumer.close().addCallback(closed.append)
        self.assertEqual(closed, [])
        self.producer.answer()
        self.assertEqual(self.conn.answers, [("FIN", message.id)])
        self.assertEqual(closed, [None])


class FakeConsumer:
    """What start_bridge makes per topic."""

    def __init__(self, topic: str, channel: str, handler: Any, **kwargs: Any) -> None:
        self.topic = topic
        self.channel = channel
        self.handler = handler
        self.kwargs = kwargs
        self.started = False
        self.events: List[str] = []
        self.closing: Deferred[None] = Deferred()

    def start(self) -> None:
        self.started = True

    def close(self) -> "Deferred[None]":
        self.events.append("consumer closing " + self.topic)
        return self.closing


class BridgeTests(SynchronousTestCase):
    """Making, starting and stopping the consumers and producers."""

    def setUp(self) -> None:
        self.clock = FakeClockTime()
        self.consumers: List[FakeConsumer] = []
        self.producers: Dict[str, FakeProducer] = {}
        self.events: List[str] = []

    def make_consumer(self, *args: Any, **kwargs: Any) -> FakeConsumer:
        consumer = FakeConsumer(*args, **kwargs)
        consumer.events = self.events
        self.consumers.append(consumer)
        return consumer

    def make_producer(self, address: str, config: Any = None, reactor: Any = None) -> FakeProducer:
        producer = FakeProducer(address, config, reactor)
        producer.events = self.events
        self.producers[address] = producer
        return producer

    def bridge(self, *argv: str) -> Any:
        values = parse(*argv)
        self.assertIsNone(validate(values))
        return start_bridge(
            self.clock,
            values,
            ClientOptions(consumer={"max_attempts": 9, "max_in_flight": 3}),
            ClientOptions(),
            io.StringIO(),
            make_consumer=self.make_consumer,
            make_producer=self.make_producer,
        )

    def test_consumers_and_producers(self) -> None:
        """A started consumer per topic on --channel; a producer per distinct destination."""
        self.bridge(
            "--topic=a", "--topic=b", "--channel=c", "--max-in-flight=50",
            "--nsqd-tcp-address=" + A,
            "--destination-nsqd-tcp-address=" + B,
            "--destination-nsqd-tcp-address=" + C,
            "--destination-nsqd-tcp-address=" + B,
        )
        self.assertEqual([(c.topic, c.channel, c.started) for c in self.consumers],
                         [("a", "c", True), ("b", "c", True)])
        kwargs = self.consumers[0].kwargs
        self.assertEqual(kwargs["nsqd_tcp_addresses"], [A])
        self.assertEqual(kwargs["max_in_flight"], 50)
        self.assertEqual(kwargs["max_attempts"], 9)
        self.assertIn("nsq_to_nsq/", kwargs["config"].user_agent)
        self.assertEqual(sorted(self.producers), [B, C])
        self.assertIn("nsq_to_nsq/", self.producers[B].config.user_agent)

    def test_destination_topic(self) -> None:
        """Each topic goes to the topic of the same name, or to --destination-topic for all."""
        self.bridge("--topic=a", "--topic=b", *VALID[1:])
        self.consumers[1].handler(Message(b"0" * 16, b"x", 0, 1, A, RecordingDelegate()))
        self.assertEqual(self.producers[B].pending[0][0], "b")
        self.consumers.clear()
        self.bridge("--topic=a", "--topic=b", "--destination-topic=all", *VALID[1:])
        self.consumers[0].handler(Message(b"1" * 16, b"x", 0, 1, A, RecordingDelegate()))
        self.assertEqual(self.producers[B].pending[0][0], "all")

    def test_mode(self) -> None:
        """--mode picks the selector (hostpool by default)."""
        self.assertIsInstance(self.bridge(*VALID).republisher.selector, HostPool)
        rr = self.bridge("--mode=round-robin", *VALID)
        self.assertIsInstance(rr.republisher.selector, RoundRobin)

    def test_stop_closes_consumers_then_producers(self) -> None:
        """Stopping closes the consumers and, once they are closed, the producers."""
        bridge = self.bridge("--topic=a", "--topic=b", *VALID[1:])
        stopped: List[Any] = []
        bridge.stop().addCallback(stopped.append)
        self.assertEqual(self.events, ["consumer closing a", "consumer closing b"])
        self.assertFalse(self.producers[B].closed)
        for consumer in self.consumers:
            consumer.closing.callback(None)
        self.assertEqual(self.events[-1], "producer closed " + B)
        self.assertEqual(len(stopped), 1)

    def test_unreadable_tls_file_is_fatal(self) -> None:
        """A --producer-opt TLS file that cannot be read is Go's 'failed creating producer'."""
        values = parse(*VALID)
        options = ClientOptions()
        options.tls.root_ca_file = self.mktemp()
        err = io.StringIO()
        self.patch(sys, "stderr", err)
        with self.assertRaises(ToolExit):
            start_bridge(
                self.clock, values, ClientOptions(), options, io.StringIO(),
                make_consumer=self.make_consumer, make_producer=self.make_producer,
            )
        self.assertIn("failed creating producer", err.getvalue())

