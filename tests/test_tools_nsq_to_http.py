"""
Tests for txnsq.tools.nsq_to_http: flags and checks with Go's texts, GET
templates, headers, publishers, modes, sampling, the concurrency bound,
FIN/REQ through a real consumer on fake connections, the status lines.
Everything runs on a task.Clock with fake requests; no sockets.
"""

from __future__ import annotations

import io
import random
from typing import Any, Dict, List, Optional, Tuple

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.task import Clock
from twisted.logger import capturedLogs, formatEvent
from twisted.trial.unittest import SynchronousTestCase

from tests.client_fakes import FakeConnector
from txnsq import cli
from txnsq.client.consumer import Consumer
from txnsq.tools import nsq_to_http
from txnsq.tools.common import ToolExit
from txnsq.tools.hostpool import HostPool
from txnsq.tools.nsq_to_http import (
    MODE_ALL,
    MODE_HOST_POOL,
    MODE_ROUND_ROBIN,
    GetPublisher,
    PostPublisher,
    PublishError,
    PublishHandler,
    get_url,
    make_host_pool,
    nsq_to_http_flags,
    parse_custom_headers,
    select_mode,
    validate,
)
from txnsq.tools.timer_metrics import TimerMetrics, status_metrics

NSQD = "127.0.0.1:4150"


def parse(*argv: str) -> Any:
    return cli.parse_flags(nsq_to_http_flags(), argv)


class FlagsTests(SynchronousTestCase):
    """nsq_to_http's flags."""

    def test_usage_is_gos(self) -> None:
        """The usage shows Go v1.3's flags, defaults and help texts."""
        usage = cli.format_defaults(nsq_to_http_flags())
        for text in (
            '  -channel string\n    \tnsq channel (default "nsq_to_http")\n',
            '  -content-type string\n    \tthe Content-Type used for POST requests'
            ' (default "application/octet-stream")\n',
            "  -get value\n    \tHTTP address to make a GET request to. '%s' will be printf"
            " replaced with data (may be given multiple times)\n",
            "  -header value\n    \tCustom header for HTTP requests (may be given multiple times)\n",
            "  -http-client-connect-timeout duration\n    \ttimeout for HTTP connect (default 2s)\n",
            "  -http-client-request-timeout duration\n    \ttimeout for HTTP request (default 20s)\n",
            "  -max-in-flight int\n    \tmax number of messages to allow in flight (default 200)\n",
            "  -mode string\n    \tthe upstream request mode options: round-robin, hostpool"
            ' (default), epsilon-greedy (default "hostpool")\n',
            "  -n int\n    \tnumber of concurrent publishers (default 100)\n",
            "  -post value\n    \tHTTP address to make a POST request to.  data will be in the"
            " body (may be given multiple times)\n",
            "  -sample float\n    \t% of messages to publish (float b/w 0 -> 1) (default 1)\n",
            "  -status-every int\n    \tthe # of requests between logging status (per handler),"
            " 0 disables (default 250)\n",
            "  -topic string\n    \tnsq topic\n",
            "  -version\n    \tprint version string\n",
            "  -consumer-opt value\n    \toption to passthrough to nsq.Consumer (may be given"
            " multiple times, http://godoc.org/github.com/nsqio/go-nsq#Config)\n",
        ):
            self.assertIn(text, usage)

    def test_removed_flags_refused(self) -> None:
        """Flags Go removed in 1.0 (--round-robin, --http-timeout, ...) are unknown, as in v1.3."""
        for flag in ("--round-robin", "--throttle-fraction=0.5", "--http-timeout=1s"):
            self.assertRaises(cli.FlagError, parse, flag)

    def test_repeatable(self) -> None:
        """--get, --post and --header may be given several times."""
        values = parse("--post=http://a/", "--post", "http://b/", "--header=A: 1", "--header=B: 2")
        self.assertEqual(values["post"], ["http://a/", "http://b/"])
        self.assertEqual(values["header"], ["A: 1", "B: 2"])
        self.assertEqual(
            parse("--get=http://a/?%s", "--get=http://b/%s")["get"],
            ["http://a/?%s", "http://b/%s"],
        )

    def test_defaults(self) -> None:
        """Go's defaults; durations in seconds."""
        values = parse()
        self.assertEqual(values["channel"], "nsq_to_http")
        self.assertEqual(values["n"], 100)
        self.assertEqual(values["mode"], "hostpool")
        self.assertEqual(values["sample"], 1.0)
        self.assertEqual(values["status_every"], 250)
        self.assertEqual(values["http_client_connect_timeout"], 2.0)
        self.assertEqual(values["http_client_request_timeout"], 20.0)
        self.assertEqual(values["max_in_flight"], 200)


class ValidateTests(SynchronousTestCase):
    """Go's checks, texts and order."""

    def check(self, *argv: str) -> Optional[str]:
        return validate(parse(*argv))

    def test_order(self) -> None:
        """Each check in Go's order, with Go's text."""
        base = ["--topic=t", "--nsqd-tcp-address=" + NSQD]
        self.assertEqual(self.check("--header=x"), "--header value format should be 'key=value'")
        self.assertEqual(self.check(), "--topic and --channel are required")
        self.assertEqual(self.check("--topic=t", "--channel="), "--topic and --channel are required")
        self.assertEqual(
            self.check("--topic=t", "--content-type=text/plain", "--get=http://a/%s"),
            "--content-type only used with --post",
        )
        self.assertEqual(
            self.check("--topic=t", "--content-type=", "--post=http://a/"),
            "--content-type requires a value when used",
        )
        self.assertEqual(
            self.check("--topic=t", "--post=http://a/"),
            "--nsqd-tcp-address or --lookupd-http-address required",
        )
        self.assertEqual(
            self.check(*base, "--lookupd-http-address=127.0.0.1:4161"),
            "use --nsqd-tcp-address or --lookupd-http-address not both",
        )
        self.assertEqual(self.check(*base), "--get or --post required")
        self.assertEqual(
            self.check(*base, "--get=http://a/%s", "--post=http://b/"), "use --get or --post not both"
        )
        self.assertEqual(
            self.check(*base, "--get=http://a/"), "invalid GET address - must be a printf string"
        )
        self.assertEqual(
            self.check(*base, "--get=http://a/%s/%s"), "invalid GET address - must be a printf string"
        )
        self.assertEqual(
            self.check(*base, "--post=http://a/", "--sample=1.5"),
            "ERROR: --sample must be between 0.0 and 1.0",
        )
        self.assertEqual(
            self.check(*base, "--post=http://a/", "--sample=-0.1"),
            "ERROR: --sample must be between 0.0 and 1.0",
        )
        self.assertIsNone(self.check(*base, "--post=http://a/", "--sample=0", "--header=A: b"))

    def test_default_content_type_given(self) -> None:
        """Go compares --content-type with its default, so giving the default with --get is fine."""
        self.assertIsNone(
            self.check(
                "--topic=t",
                "--nsqd-tcp-address=" + NSQD,
                "--get=http://a/%s",
                "--content-type=application/octet-stream",
            )
        )

    def test_main_fatal(self) -> None:
        """main() writes Go's log.Fatal line and exits 1; -n 0 is go-nsq's "no handlers"."""
        stderr = io.StringIO()
        self.patch(nsq_to_http.sys, "stderr", stderr)
        error = self.assertRaises(ToolExit, nsq_to_http.main, ["--topic=t"])
        self.assertEqual(error.code, 1)
        self.assertTrue(
            stderr.getvalue().endswith(" --nsqd-tcp-address or --lookupd-http-address required\n")
        )
        stderr.truncate(0)
        stderr.seek(0)
        self.assertRaises(
            ToolExit,
            nsq_to_http.main,
            ["--topic=t", "--nsqd-tcp-address=" + NSQD, "--post=http://a/", "-n", "0"],
        )
        self.assertTrue(stderr.getvalue().endswith(" no handlers\n"))
        stderr.truncate(0)
        stderr.seek(0)
        self.assertRaises(
            ToolExit,
            nsq_to_http.main,
            ["--topic=bad topic", "--nsqd-tcp-address=" + NSQD, "--post=http://a/"],
        )
        self.assertTrue(stderr.getvalue().endswith(" invalid topic name\n"))


class CustomHeadersTests(SynchronousTestCase):
    """--header parsing (Go's TestParseCustomHeaders table)."""

    def test_valid(self) -> None:
        """``Name: value`` and ``Name:value``, spaces trimmed."""
        self.assertEqual(
            parse_custom_headers(["header1: value1", "header2:value2", " header3 : value3 "]),
            {"header1": "value1", "header2": "value2", "header3": "value3"},
        )

    def test_value_may_hold_colons(self) -> None:
        """Only the first colon separates."""
        self.assertEqual(
            parse_custom_headers(["Authorization: Basic a:b"]), {"Authorization": "Basic a:b"}
        )

    def test_invalid(self) -> None:
        """No value, no name, no colon: refused with Go's text."""
        for bad in ("header1:", ": value2", ":", "no-colon"):
            error = self.assertRaises(ValueError, parse_custom_headers, ["a: b", bad])
            self.assertEqual(str(error), "Invalid headers: %s" % (cli._go_quote(bad),))


class GetURLTests(SynchronousTestCase):
    """GET templates."""

    def test_query_escaped(self) -> None:
        """The body replaces %s, escaped as Go's url.QueryEscape (space as +)."""
        self.assertEqual(
            get_url("http://h/p?m=%s&x=1", b"a b&c=d/e?f+g~h_i.j-k"),
            "http://h/p?m=a+b%26c%3Dd%2Fe%3Ff%2Bg~h_i.j-k&x=1",
        )

    def test_bytes(self) -> None:
        """Non-ASCII and binary bytes are percent-escaped, upper-case hex."""
        self.assertEqual(
            get_url("http://h/%s", "é".encode("utf-8") + b"\x00\xff"), "http://h/%C3%A9%00%FF"
        )

    def test_percent_signs(self) -> None:
        """%% is a percent sign; other % sequences are left as they are."""
        self.assertEqual(get_url("http://h/?a=b%20c&p=100%%&m=%s", b"x"), "http://h/?a=b%20c&p=100%&m=x")
        self.assertEqual(get_url("http://h/%s%", b"x"), "http://h/x%")


class FakeRequest:
    """``GoHTTPClient.request`` that records each call and answers from :attr:`replies`."""

    def __init__(self) -> None:
        self.calls: List[Tuple[Any, ...]] = []
        self.replies: List[Any] = []

    def __call__(
        self,
        method: str,
        url: str,
        body: Optional[bytes] = None,
        content_type: bytes = b"application/json",
        headers: Optional[Dict[bytes, bytes]] = None,
    ) -> "Deferred[Tuple[int, bytes, bytes]]":
        self.calls.append((method, url, body, content_type, headers))
        reply = self.replies.pop(0) if self.replies else 200
        if isinstance(reply, Exception):
            return fail(reply)
        return succeed((reply, b"", b""))


class PublisherTests(SynchronousTestCase):
    """Go's PostPublisher and GetPublisher."""

    def setUp(self) -> None:
        self.request = FakeRequest()

    def outcome(self, sent: "Deferred[None]") -> Optional[str]:
        """None for success, else the failure's text."""
        result: List[Any] = []
        sent.addBoth(result.append)
        if result[0] is None:
            return None
        return str(result[0].value)

    def test_post(self) -> None:
        """A POST carries the body, the content type and the custom headers."""
        publisher = PostPublisher(self.request, "application/json", {"X-Key": "k", "User-Agent": "mine"})
        self.assertIsNone(self.outcome(publisher.publish("http://h/in", b'{"a":1}')))
        self.assertEqual(
            self.request.calls,
            [
                (
                    "POST",
                    "http://h/in",
                    b'{"a":1}',
                    b"application/json",
                    {b"X-Key": b"k", b"User-Agent": b"mine"},
                )
            ],
        )

    def test_post_statuses(self) -> None:
        """A POST succeeds on any 2xx; 1xx, 3xx, 4xx and 5xx fail with Go's text."""
        publisher = PostPublisher(self.request)
        self.request.replies = [200, 201, 204, 299, 199, 302, 404, 500]
        results = [self.outcome(publisher.publish("http://h/", b"m")) for _ in range(8)]
        self.assertEqual(
            results,
            [None, None, None, None]
            + ["got status code %d" % (code,) for code in (199, 302, 404, 500)],
        )

    def test_get(self) -> None:
        """A GET fills the template, has no body, and succeeds only on 200."""
        publisher = GetPublisher(self.request, {"X-Key": "k"})
        self.request.replies = [200, 201, 204]
        results = [self.outcome(publisher.publish("http://h/?m=%s", b"a b")) for _ in range(3)]
        self.assertEqual(results, [None, "got status code 201", "got status code 204"])
        self.assertEqual(
            self.request.calls[0],
            ("GET", "http://h/?m=a+b", None, b"application/json", {b"X-Key": b"k"}),
        )

    def test_request_error(self) -> None:
        """A failed request fails the publish with its own error."""
        self.request.replies = [ConnectionRefusedError()]
        failures: List[Any] = []
        PostPublisher(self.request).publish("http://h/", b"m").addErrback(failures.append)
        self.assertTrue(failures[0].check(ConnectionRefusedError))

    def test_request_raises(self) -> None:
        """A request that raises (a URL that is not ASCII) is a failed publish."""

        def raising(*args: Any, **kwargs: Any) -> Any:
            raise UnicodeEncodeError("ascii", "é", 0, 1, "no")

        failures: List[Any] = []
        GetPublisher(raising).publish("http://é/%s", b"m").addErrback(failures.append)
        self.assertTrue(failures[0].check(UnicodeEncodeError))


class FakePublish:
    """``publish(address, body)`` whose answers the test gives by hand."""

    def __init__(self) -> None:
        self.pending: List[Tuple[str, bytes, "Deferred[None]"]] = []
        self.sent: List[Tuple[str, bytes]] = []

    def __call__(self, address: str, body: bytes) -> "Deferred[None]":
        d: Deferred[None] = Deferred()
        self.pending.append((address, body, d))
        self.sent.append((address, body))
        return d

    def answer(self, ok: bool = True, index: int = 0) -> None:
        _, _, d = self.pending.pop(index)
        if ok:
            d.callback(None)
        else:
            d.errback(PublishError("got status code 500"))


class Body:
    """A message as the handler sees it."""

    def __init__(self, body: bytes, id: bytes = b"0123456789abcdef") -> None:
        self.body = body
        self.id = id


class Draws:
    """A ``random.Random`` stand-in giving ``random()`` values from a list."""

    def __init__(self, values: List[float]) -> None:
        self.values = list(values)

    def random(self) -> float:
        return self.values.pop(0)


class PublishHandlerTests(SynchronousTestCase):
    """The handler: modes, sampling, concurrency, answers, status lines."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.publish = FakePublish()
        self.out = io.StringIO()

    def handler(
        self, addresses: List[str], mode: int = MODE_ROUND_ROBIN, **kwargs: Any
    ) -> PublishHandler:
        status_every = kwargs.pop("status_every", 0)
        aggregate, per_address = status_metrics(addresses, status_every, self.out, self.clock)
        kwargs.setdefault("host_pool", HostPool(addresses, self.clock))
        return PublishHandler(
            self.publish, addresses, mode, per_address=per_address, aggregate=aggregate,
            clock=self.clock, name="t/c", **kwargs
        )

    def result(self, value: Any) -> Any:
        if isinstance(value, Deferred):
            return self.successResultOf(value)
        return value

    def test_finish_on_success(self) -> None:
        """The handler's answer is True (FIN) once the request succeeded."""
        handled = self.handler(["http://a/"])(Body(b"m"))
        self.assertNoResult(handled)
        self.publish.answer(True)
        self.assertIs(self.successResultOf(handled), True)

    def test_requeue_on_failure(self) -> None:
        """A failed request answers False (REQ) and logs Go's handler error line."""
        with capturedLogs() as events:
            handled = self.handler(["http://a/"])(Body(b"m", b"00000000000000aa"))
            self.publish.answer(False)
        self.assertIs(self.successResultOf(handled), False)
        self.assertEqual(
            [formatEvent(event) for event in events],
            ["[t/c] Handler returned error (got status code 500) for msg 00000000000000aa"],
        )

    def test_round_robin(self) -> None:
        """Round robin starts with the second URL, as Go's counter is incremented first."""
        handler = self.handler(["a", "b", "c"], MODE_ROUND_ROBIN)
        for i in range(4):
            handler(Body(b"%d" % (i,)))
            self.publish.answer(True)
        self.assertEqual([address for address, _ in self.publish.sent], ["b", "c", "a", "b"])

    def test_host_pool_rests_failing_url(self) -> None:
        """In host pool mode a failing URL is skipped until its retry time."""
        handler = self.handler(["a", "b"], MODE_HOST_POOL)
        handler(Body(b"1"))
        self.publish.answer(False)  # a fails
        for i in range(3):
            handler(Body(b"%d" % (i,)))
            self.publish.answer(True)
        self.assertEqual([address for address, _ in self.publish.sent], ["a", "b", "b", "b"])
        self.clock.advance(31)
        handler(Body(b"x"))
        self.assertEqual(self.publish.sent[-1][0], "a")

    def test_epsilon_greedy_pool(self) -> None:
        """--mode=epsilon-greedy uses the epsilon-greedy host pool; hostpool the standard one."""
        from txnsq.tools.hostpool import EpsilonGreedyHostPool

        self.assertIsInstance(make_host_pool("epsilon-greedy", ["a"], self.clock), EpsilonGreedyHostPool)
        pool = make_host_pool("hostpool", ["a"], self.clock)
        self.assertNotIsInstance(pool, EpsilonGreedyHostPool)

    def test_select_mode(self) -> None:
        """Mode names as Go v1.3 reads them; an unknown name means every URL."""
        self.assertEqual(select_mode("round-robin"), MODE_ROUND_ROBIN)
        self.assertEqual(select_mode("hostpool"), MODE_HOST_POOL)
        self.assertEqual(select_mode("epsilon-greedy"), MODE_HOST_POOL)
        self.assertEqual(select_mode("multicast"), MODE_ALL)
        self.assertEqual(select_mode("nonsense"), MODE_ALL)

    def test_every_url_in_order(self) -> None:
        """MODE_ALL sends to each URL one after the other; the first failure requeues."""
        handler = self.handler(["a", "b", "c"], MODE_ALL)
        handled = handler(Body(b"m"))
        self.assertEqual(self.publish.sent, [("a", b"m")])
        self.publish.answer(True)
        self.assertEqual(self.publish.sent[-1], ("b", b"m"))
        self.publish.answer(True)
        self.publish.answer(True)
        self.assertIs(self.successResultOf(handled), True)
        handled = handler(Body(b"n"))
        self.publish.answer(True)
        self.publish.answer(False)
        self.assertIs(self.successResultOf(handled), False)
        self.assertEqual([address for address, _ in self.publish.sent], ["a", "b", "c", "a", "b"])

    def test_sample(self) -> None:
        """With --sample, a draw above the fraction finishes the message unsent."""
        handler = self.handler(["a"], sample=0.5, rng=Draws([0.2, 0.7, 0.5]))
        first = handler(Body(b"1"))
        self.assertIs(handler(Body(b"2")), True)
        third = handler(Body(b"3"))
        self.assertEqual([body for _, body in self.publish.sent], [b"1", b"3"])
        self.publish.answer(True)
        self.publish.answer(True)
        self.assertIs(self.result(first), True)
        self.assertIs(self.result(third), True)

    def test_sample_zero_and_one(self) -> None:
        """--sample=0 sends nothing; the default 1 sends all without a draw."""
        handler = self.handler(["a"], sample=0.0, rng=random.Random(1))
        self.assertEqual([handler(Body(b"m")) for _ in range(20)], [True] * 20)
        self.assertEqual(self.publish.sent, [])
        handler = self.handler(["a"], rng=Draws([]))
        handler(Body(b"m"))
        self.assertEqual(len(self.publish.sent), 1)

    def test_concurrency_bound(self) -> None:
        """At most -n requests run at once; the others wait for a slot, in order."""
        handler = self.handler(["a"], concurrency=2)
        handled = [handler(Body(b"%d" % (i,))) for i in range(5)]
        self.assertEqual((handler.running, handler.waiting), (2, 3))
        self.assertEqual([body for _, body in self.publish.sent], [b"0", b"1"])
        self.publish.answer(True, index=1)
        self.assertEqual([body for _, body in self.publish.sent], [b"0", b"1", b"2"])
        self.assertEqual((handler.running, handler.waiting), (2, 2))
        while self.publish.pending:
            self.publish.answer(False)
        self.assertEqual((handler.running, handler.waiting), (0, 0))
        self.assertEqual([self.successResultOf(d) for d in handled], [False, True, False, False, False])

    def test_concurrency_at_least_one(self) -> None:
        """A handler with no slots is refused."""
        self.assertRaises(ValueError, self.handler, ["a"], concurrency=0)

    def test_aggregate_status_line(self) -> None:
        """Go's [aggregate] line goes out after --status-every successes; none per URL for one URL."""
        handler = self.handler(["a"], status_every=100)
        for _ in range(101):
            handled = handler(Body(b"m"))
            self.clock.advance(0.004)
            self.publish.answer(True)
            self.successResultOf(handled)
        lines = self.out.getvalue().splitlines()
        self.assertEqual(len(lines), 1)
        self.assertTrue(
            lines[0].endswith(" [aggregate]: finished 100 - 99th: 4.00ms - 95th: 4.00ms - avg: 4.00ms"),
            lines[0],
        )

    def test_failures_not_timed(self) -> None:
        """Failed messages do not count towards the status lines."""
        handler = self.handler(["a"], status_every=100)
        for _ in range(150):
            handler(Body(b"m"))
            self.publish.answer(False)
        self.assertEqual(self.out.getvalue(), "")

    def test_per_url_status_lines(self) -> None:
        """With several URLs each has its [URL]: line as well."""
        handler = self.handler(["a", "b"], MODE_ROUND_ROBIN, status_every=100)
        for _ in range(202):
            handler(Body(b"m"))
            self.clock.advance(0.002)
            self.publish.answer(True)
        lines = self.out.getvalue().splitlines()
        prefixes = sorted(line.split(" ", 2)[2].split(" ")[0] for line in lines)
        # 202 messages: two aggregate lines, and 101 for each URL: one line each.
        self.assertEqual(prefixes, ["[a]:", "[aggregate]:", "[aggregate]:", "[b]:"])
        self.assertTrue(all(" finished 100 - 99th: 2.00ms" in line for line in lines))

    def test_metrics_disabled(self) -> None:
        """--status-every 0 writes nothing."""
        aggregate, per_address = status_metrics(["a", "b"], 0, self.out, self.clock)
        self.assertEqual((aggregate.status_every, per_address["a"].status_every), (0, 0))
        _, single = status_metrics(["a"], 250, self.out, self.clock)
        self.assertIsInstance(single["a"], TimerMetrics)
        self.assertEqual((single["a"].status_every, single["a"].prefix), (0, ""))


class ConsumerAnswersTests(SynchronousTestCase):
    """The handler under a real Consumer, on fake nsqd connections."""

    def test_fin_on_2xx_req_otherwise(self) -> None:
        """2xx: FIN; non-2xx or a failed request: REQ with go-nsq's delay and backoff."""
        clock = Clock()
        connector = FakeConnector(clock)
        request = FakeRequest()
        request.replies = [200, 500, 404, ConnectionRefusedError()]
        aggregate, per_address = status_metrics(["http://a/"], 0, io.StringIO(), clock)
        handler = PublishHandler(
            PostPublisher(request).publish,
            ["http://a/"],
            MODE_HOST_POOL,
            HostPool(["http://a/"], clock),
            per_address,
            aggregate,
            clock,
        )
        consumer = Consumer(
            "t", "c", handler, nsqd_tcp_addresses=[NSQD], max_in_flight=10,
            reactor=clock, connect=connector, rng=random.Random(0),
            max_backoff_duration=0,
        )
        consumer.start()
        conn = connector.current(NSQD)
        with capturedLogs():
            for _ in range(4):
                conn.deliver(b"m")
        verbs = [answer[0] for answer in conn.answers]
        self.assertEqual(verbs, ["FIN", "REQ", "REQ", "REQ"])
        self.assertEqual([answer[3] for answer in conn.answers[1:]], [True, True, True])
        self.assertEqual((consumer.messages_finished, consumer.messages_requeued), (1, 3))
