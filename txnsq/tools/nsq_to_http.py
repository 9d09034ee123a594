# -*- test-case-name: tests.test_tools_nsq_to_http -*-
"""
``nsq_to_http``: consumes a topic's channel and sends every message to
HTTP endpoints, with Go ``nsq_to_http``'s flags (NSQ v1.3).

``--post URL`` sends the body as a POST (``--content-type``, default
``application/octet-stream``); ``--get TEMPLATE`` sends a GET to the
template with its one ``%s`` replaced by the body, query-escaped (Go's
``url.QueryEscape``: ``+`` for a space).  ``--header 'Name: value'`` adds
a header to every request (it replaces ``User-Agent`` or ``Content-Type``
if so named).  Requests say ``User-Agent: nsq_to_http vX.Y.Z``.

A message is finished (FIN) when its request succeeded: any 2xx for a
POST, exactly 200 for a GET (as Go).  Any other status, 4xx and 5xx
alike, and a failed request requeue it (REQ, with go-nsq's delay growing
with its attempts, and backoff), after the line ``Handler returned error
(got status code 500) for msg ID``; after ``max_attempts`` deliveries (5
by default, ``--consumer-opt=max_attempts,N``) it is given up.

With several URLs, ``--mode`` picks one per message: ``hostpool`` (the
default: in turn, a failing URL rested for 30 s and more),
``epsilon-greedy`` (mostly the fastest URLs lately) or ``round-robin``.
Any other mode name sends each message to every URL in order, stopping at
the first failure, which is what Go v1.3 does with the old ``multicast``
mode that it no longer names.

``-n`` requests run at once at most (Go's concurrent handlers); further
messages wait, in flight.  ``--sample`` sends only that fraction of the
messages, chosen at random; the others are finished unsent.

Every ``--status-every`` successful messages Go's status line is written
to standard error, for all URLs (``[aggregate]:``) and, with several
URLs, for each (``[URL]:``)::

    2024/01/02 15:04:05 [aggregate]: finished 250 - 99th: 3.12ms - 95th: 1.40ms - avg: 0.52ms

SIGINT and SIGTERM close the consumer (requests under way and waiting
complete first, up to the consumer's close timeout) and exit 0.
"""

from __future__ import annotations

import random
import sys
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple
from urllib.parse import quote_plus

from twisted.internet.defer import Deferred, DeferredSemaphore, maybeDeferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from txnsq.version import NSQ_VERSION
from txnsq.cli import FLOAT, INT, STRING, STRING_LIST, Flag
from txnsq.http_client import describe_failure
from txnsq.protocol.go_values import go_quote
from txnsq.protocol.names import is_valid_channel_name, is_valid_topic_name
from txnsq.tools.common import (
    channel_flag,
    connection_config_or_exit,
    consumer_opt_flag,
    fatal,
    http_timeout_flags,
    lookupd_http_address_flag,
    max_in_flight_flag,
    nsqd_or_lookupd_problem,
    nsqd_tcp_address_flag,
    or_fatal,
    parse_command_line,
    run_reactor,
    tool_consumer,
    version_flag,
    version_requested,
)
from txnsq.tools.hostpool import EpsilonGreedyHostPool, HostPool
from txnsq.tools.timer_metrics import TimerMetrics, status_metrics

__all__ = [
    "GetPublisher",
    "MODE_ALL",
    "MODE_HOST_POOL",
    "MODE_ROUND_ROBIN",
    "PostPublisher",
    "PublishError",
    "PublishHandler",
    "get_url",
    "main",
    "make_host_pool",
    "nsq_to_http_flags",
    "parse_custom_headers",
    "select_mode",
    "validate",
]

PROGRAM = "nsq_to_http"

DEFAULT_CONTENT_TYPE = "application/octet-stream"

#: Go's request modes: every URL, one in turn, one from the host pool.
MODE_ALL = 0
MODE_ROUND_ROBIN = 1
MODE_HOST_POOL = 2

_log = Logger(namespace="txnsq.tools.nsq_to_http")

#: ``request(method, url, body, content_type=..., headers=...)`` as
#: :meth:`txnsq.http_client.GoHTTPClient.request`: ``(code, phrase, body)``.
Request = Callable[..., "Deferred[Tuple[int, bytes, bytes]]"]

#: ``publish(url, body)``: fires when the endpoint took the message.
Publish = Callable[[str, bytes], "Deferred[None]"]


def nsq_to_http_flags() -> List[Flag]:
    """nsq_to_http's flag table, with Go's names, defaults and help."""
    return [
        version_flag(),
        Flag("topic", STRING, "", "nsq topic"),
        channel_flag("nsq_to_http", "nsq channel"),
        max_in_flight_flag(),
        Flag("n", INT, 100, "number of concurrent publishers"),
        Flag(
            "mode",
            STRING,
            "hostpool",
            "the upstream request mode options: round-robin, hostpool (default), epsilon-greedy",
        ),
        Flag("sample", FLOAT, 1.0, "% of messages to publish (float b/w 0 -> 1)"),
        *http_timeout_flags(request_timeout=20.0),
        Flag(
            "status-every",
            INT,
            250,
            "the # of requests between logging status (per handler), 0 disables",
        ),
        Flag(
            "content-type",
            STRING,
            DEFAULT_CONTENT_TYPE,
            "the Content-Type used for POST requests",
        ),
        Flag(
            "post",
            STRING_LIST,
            [],
            "HTTP address to make a POST request to.  data will be in the body"
            " (may be given multiple times)",
        ),
        Flag(
            "header",
            STRING_LIST,
            [],
            "Custom header for HTTP requests (may be given multiple times)",
        ),
        Flag(
            "get",
            STRING_LIST,
            [],
            "HTTP address to make a GET request to. '%s' will be printf replaced with data"
            " (may be given multiple times)",
        ),
        nsqd_tcp_address_flag(),
        lookupd_http_address_flag(),
        consumer_opt_flag(),
    ]


def parse_custom_headers(values: Sequence[str]) -> Dict[str, str]:
    """
    ``--header`` values, ``Name: value`` (spaces around either part are
    dropped), as a dict; a later name wins.

    :raises ValueError: a value without ``:``, or with an empty name or
        value: Go's ``Invalid headers: "text"``.
    """
    headers: Dict[str, str] = {}
    for text in values:
        name, colon, value = text.partition(":")
        name, value = name.strip(), value.strip()
        if not colon or not name or not value:
            raise ValueError("Invalid headers: %s" % (go_quote(text),))
        headers[name] = value
    return headers


def validate(values: Any) -> Optional[str]:
    """Go nsq_to_http's checks, in its order: the fatal message, or None."""
    if values["header"]:
        try:
            parse_custom_headers(values["header"])
        except ValueError:
            return "--header value format should be 'key=value'"
    if not values["topic"] or not values["channel"]:
        return "--topic and --channel are required"
    if values["content_type"] != DEFAULT_CONTENT_TYPE:
        if not values["post"]:
            return "--content-type only used with --post"
        if not values["content_type"]:
            return "--content-type requires a value when used"
    problem = nsqd_or_lookupd_problem(values)
    if problem:
        return problem
    if not values["get"] and not values["post"]:
        return "--get or --post required"
    if values["get"] and values["post"]:
        return "use --get or --post not both"
    for template in values["get"]:
        if template.count("%s") != 1:
            return "invalid GET address - must be a printf string"
    # NaN passes, as in Go (and then every message is sent).
    if values["sample"] > 1.0 or values["sample"] < 0.0:
        return "ERROR: --sample must be between 0.0 and 1.0"
    return None


def select_mode(name: str) -> int:
    """
    ``--mode``: round-robin, hostpool or epsilon-greedy (both host pools);
    any other name means every URL, as Go v1.3's leftover default does.
    """
    if name == "round-robin":
        return MODE_ROUND_ROBIN
    if name in ("hostpool", "epsilon-greedy"):
        return MODE_HOST_POOL
    return MODE_ALL


def make_host_pool(
    mode: str, addresses: Sequence[str], clock: IReactorTime, rng: Optional[random.Random] = None
) -> HostPool:
    """The host pool of ``--mode``: epsilon-greedy, or go-hostpool's standard one."""
    if mode == "epsilon-greedy":
        return EpsilonGreedyHostPool(addresses, clock, rng=rng)
    return HostPool(addresses, clock)


def get_url(template: str, body: bytes) -> str:
    """
    A ``--get`` template with its ``%s`` replaced by ``body``
    query-escaped; ``%%`` is ``%``.  Other ``%`` sequences stay as they
    are (Go's ``fmt.Sprintf`` would garble them).
    """
    escaped = quote_plus(body, safe="")
    parts: List[str] = []
    start = 0
    filled = False
    while True:
        percent = template.find("%", start)
        if percent < 0 or percent + 1 >= len(template):
            parts.append(template[start:])
            return "".join(parts)
        parts.append(template[start:percent])
        verb = template[percent + 1]
        if verb == "%":
            parts.append("%")
            start = percent + 2
        elif verb == "s" and not filled:
            parts.append(escaped)
            filled = True
            start = percent + 2
        else:
            parts.append("%")
            start = percent + 1


class PublishError(Exception):
    """The endpoint answered with a status taken as failure: Go's ``got status code 500``."""


def _header_bytes(headers: Mapping[str, str]) -> Dict[bytes, bytes]:
    return {name.encode("utf-8"): value.encode("utf-8") for name, value in headers.items()}


class PostPublisher:
    """
    Go's ``PostPublisher``: POSTs the body to the URL; a 2xx is success.

    :param request: sends requests (``GoHTTPClient.request``).
    :param content_type: ``--content-type``.
    :param headers: ``--header`` values.
    """

    def __init__(
        self,
        request: Request,
        content_type: str = DEFAULT_CONTENT_TYPE,
        headers: Optional[Mapping[str, str]] = None,
    ) -> None:
        self._request = request
        self._content_type = content_type.encode("utf-8")
        self._headers = _header_bytes(headers or {})

    def publish(self, address: str, body: bytes) -> "Deferred[None]":
        """POST ``body`` to ``address``; fails with :class:`PublishError` or the request's error."""
        sent = maybeDeferred(
            self._request,
            "POST",
            address,
            body,
            content_type=self._content_type,
            headers=self._headers,
        )
        return sent.addCallback(_check_status, 200, 300)


class GetPublisher:
    """
    Go's ``GetPublisher``: GETs the template filled with the body
    (:func:`get_url`); only 200 is success.

    :param request: sends requests (``GoHTTPClient.request``).
    :param headers: ``--header`` values.
    """

    def __init__(self, request: Request, headers: Optional[Mapping[str, str]] = None) -> None:
        self._request = request
        self._headers = _header_bytes(headers or {})

    def publish(self, address: str, body: bytes) -> "Deferred[None]":
        """
        GET ``address`` filled with ``body``; fails with :class:`PublishError`
        or the request's error.
        """
        sent = maybeDeferred(
            self._request, "GET", get_url(address, body), None, headers=self._headers
        )
        return sent.addCallback(_check_status, 200, 201)


def _check_status(reply: Tuple[int, bytes, bytes], low: int, high: int) -> None:
    code = reply[0]
    if not low <= code < high:
        raise PublishError("got status code %d" % (code,))


def _error_text(failure: Failure) -> str:
    if isinstance(failure.value, PublishError):
        return str(failure.value)
    return describe_failure(failure.value)


class PublishHandler:
    """
    The consumer's handler: sends each message to the URL (or URLs)
    ``mode`` picks, at most ``concurrency`` at once, and answers True
    (FIN) when that succeeded, False (REQ with backoff) when not.

    :param publish: sends one body to one URL (a publisher's ``publish``).
    :param addresses: the URLs (or GET templates).
    :param mode: :data:`MODE_ALL`, :data:`MODE_ROUND_ROBIN` or
        :data:`MODE_HOST_POOL`.
    :param host_pool: picks the URL in :data:`MODE_HOST_POOL`.
    :param per_address: each URL's status line; :param aggregate: the
        ``[aggregate]:`` one (see :func:`txnsq.tools.timer_metrics.status_metrics`).
    :param clock: times the requests for the status lines.
    :param sample: the fraction of messages sent; the rest are finished.
    :param concurrency: requests under way at once, at most (``-n``).
    :param name: ``topic/channel``, for the log.
    :param rng: draws the sample.
    :raises ValueError: ``concurrency`` below 1, or no ``host_pool`` in
        :data:`MODE_HOST_POOL`.
    """

    def __init__(
        self,
        publish: Publish,
        addresses: Sequence[str],
        mode: int,
        host_pool: Optional[HostPool],
        per_address: Mapping[str, TimerMetrics],
        aggregate: TimerMetrics,
        clock: IReactorTime,
        sample: float = 1.0,
        concurrency: int = 100,
        name: str = "",
        rng: Optional[random.Random] = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if mode == MODE_HOST_POOL and host_pool is None:
            raise ValueError("host pool mode needs a host pool")
        self._publish = publish
        self.addresses = list(addresses)
        self.mode = mode
        self._host_pool = host_pool
        self._per_address = per_address
        self._aggregate = aggregate
        self._clock = clock
        self.sample = sample
        self._slots = DeferredSemaphore(concurrency)
        self._name = name
        self._rng = rng if rng is not None else random.Random()
        self._counter = 0
        #: Requests under way now.
        self.running = 0

    @property
    def waiting(self) -> int:
        """Messages waiting for one of the ``concurrency`` slots."""
        return len(self._slots.waiting)

    def __call__(self, message: Any) -> Any:
        """Handle one message: True (finish) or a Deferred of True or False (requeue)."""
        if self.sample < 1.0 and self._rng.random() > self.sample:
            return True
        return self._slots.run(self._handle, message)

    def _handle(self, message: Any) -> "Deferred[bool]":
        self.running += 1
        started = self._clock.seconds()
        if self.mode == MODE_ALL:
            sent = self._send_all(message.body, 0)
        elif self.mode == MODE_ROUND_ROBIN:
            sent = self._send_round_robin(message.body, started)
        else:
            sent = self._send_host_pool(message.body, started)

        def succeeded(_: Any) -> bool:
            self.running -= 1
            self._aggregate.status(started)
            return True

        def failed(failure: Failure) -> bool:
            self.running -= 1
            _log.error(
                "[{name}] Handler returned error ({error}) for msg {id}",
                name=self._name,
                error=_error_text(failure),
                id=message.id.decode("ascii", "replace"),
            )
            return False

        return sent.addCallbacks(succeeded, failed)

    def _send_all(self, body: bytes, index: int) -> "Deferred[None]":
        # One URL after the other; the first failure ends the message's turn.
        address = self.addresses[index]
        started = self._clock.seconds()

        def sent(_: Any) -> Any:
            self._per_address[address].status(started)
            if index + 1 < len(self.addresses):
                return self._send_all(body, index + 1)
            return None

        return self._publish(address, body).addCallback(sent)

    def _send_round_robin(self, body: bytes, started: float) -> "Deferred[None]":
        self._counter += 1
        address = self.addresses[self._counter % len(self.addresses)]

        def sent(_: Any) -> None:
            self._per_address[address].status(started)

        return self._publish(address, body).addCallback(sent)

    def _send_host_pool(self, body: bytes, started: float) -> "Deferred[None]":
        assert self._host_pool is not None
        response = self._host_pool.get()
        address = response.address

        def sent(_: Any) -> None:
            response.mark(True)
            self._per_address[address].status(started)

        def failed(failure: Failure) -> Failure:
            response.mark(False)
            return failure

        return self._publish(address, body).addCallbacks(sent, failed)


def main(argv: Optional[Sequence[str]] = None) -> None:
    """The ``nsq_to_http`` console script."""
    values, (client_options,) = parse_command_line(
        PROGRAM, nsq_to_http_flags(), argv, ["consumer-opt"]
    )
    if version_requested(values, PROGRAM):
        return
    problem = validate(values)
    if problem:
        fatal(problem)
    topic, channel = values["topic"], values["channel"]
    # go-nsq's NewConsumer checks, with its texts.
    if not is_valid_topic_name(topic):
        fatal("invalid topic name")
    if not is_valid_channel_name(channel):
        fatal("invalid channel name")
    if values["n"] < 1:
        # go-nsq refuses to connect a consumer without handlers.
        fatal("no handlers")
    headers = parse_custom_headers(values["header"])
    addresses: List[str] = values["post"] or values["get"]

    def start(reactor: Any) -> "Deferred[Any]":
        from txnsq.http_client import GoHTTPClient
        from txnsq.logging import start_console_logging

        start_console_logging(PROGRAM, "info", "")
        config = connection_config_or_exit(client_options, PROGRAM)
        client = GoHTTPClient(
            reactor,
            values["http_client_connect_timeout"],
            values["http_client_request_timeout"],
            user_agent=("%s v%s" % (PROGRAM, NSQ_VERSION)).encode("ascii"),
            accept=None,
            persistent=True,
            follow_redirects=True,
        )
        publisher: Any
        if values["post"]:
            publisher = PostPublisher(client.request, values["content_type"], headers)
        else:
            publisher = GetPublisher(client.request, headers)
        aggregate, per_address = status_metrics(
            addresses, values["status_every"], sys.stderr, reactor
        )
        handler = PublishHandler(
            publisher.publish,
            addresses,
            select_mode(values["mode"]),
            make_host_pool(values["mode"], addresses, reactor),
            per_address,
            aggregate,
            reactor,
            sample=values["sample"],
            concurrency=values["n"],
            name="%s/%s" % (topic, channel),
        )
        consumer = or_fatal(
            lambda: tool_consumer(topic, channel, handler, values, client_options, config, reactor)
        )
        consumer.start()

        def close() -> "Deferred[Any]":
            # The consumer waits for the requests under way and waiting.
            return consumer.close().addBoth(lambda _: client.close())

        reactor.addSystemEventTrigger("before", "shutdown", close)
        # Runs until SIGINT or SIGTERM stops the reactor.
        running: Deferred[int] = Deferred()
        return running

    run_reactor(start)


if __name__ == "__main__":
    main()
