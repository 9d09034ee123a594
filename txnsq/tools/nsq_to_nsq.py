# -*- test-case-name: tests.test_tools_nsq_to_nsq -*-
"""
``nsq_to_nsq``: consumes one or more topics on ``--channel`` and publishes
every message to ``--destination-nsqd-tcp-address`` nsqd, under
``--destination-topic`` (by default the topic it came from), with Go NSQ
v1.3 ``nsq_to_nsq``'s flags and behaviour.

Each message goes to one destination, chosen by ``--mode``:

- ``round-robin``: the destinations in turn;
- ``hostpool`` (the default): go-hostpool's standard pool, the
  destinations in turn but skipping one whose last publish failed, retried
  after 30 seconds (then 60, 120, ... up to 15 minutes); when all have
  failed, all are tried again;
- ``epsilon-greedy``: go-hostpool's epsilon-greedy pool, which sends more
  to the destinations that answer faster and explores the others (both
  pools are :mod:`txnsq.tools.hostpool`'s);
- any other word is round-robin, as Go's switch without a default makes it.

A message is finished (FIN) only once its destination answered OK; a
failed publish requeues it (REQ with the consumer's delay, backing off).

``--require-json-field``, ``--require-json-value`` and
``--whitelist-json-field`` read each body as a JSON object, as Go does: a
body that is not JSON, or lacks the field, or whose field has another
value, is finished without being published; but a body without the field
when a value is required is requeued (with backoff), as in Go.  With
``--whitelist-json-field`` only the named fields are published, re-encoded
the way Go's ``json.Marshal`` writes them (keys sorted, integral numbers
without a fraction).

Every ``--status-every`` publishes a status line is written to standard
error (:mod:`txnsq.tools.timer_metrics`), for all destinations
(``[aggregate]:``) and, when there are several, for each (``[host:port]:``).
SIGINT and SIGTERM close the consumers (each waits for its messages in
flight, so for their publishes to be answered), then the producers.
"""

from __future__ import annotations

import random
import sys
from typing import (
    IO,
    Any,
    Callable,
    Dict,
    List,
    Mapping,
    Optional,
    Protocol,
    Sequence,
)

from twisted.internet.defer import Deferred, DeferredList, fail
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from txnsq.cli import INT, STRING, STRING_LIST, Flag
from txnsq.protocol.names import is_valid_channel_name, is_valid_topic_name
from txnsq.tools.common import (
    GODOC_CONFIG,
    connection_config_or_exit,
    fatal,
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
from txnsq.tools.config_opts import ClientOptions
from txnsq.tools.hostpool import EpsilonGreedyHostPool, HostPool
from txnsq.tools.json_filter import BACKOFF, SKIP, JSONFilter
from txnsq.tools.timer_metrics import TimerMetrics, status_metrics

__all__ = [
    "Bridge",
    "Pick",
    "Republisher",
    "RoundRobin",
    "Selector",
    "main",
    "make_selector",
    "nsq_to_nsq_flags",
    "start_bridge",
    "validate",
]

PROGRAM = "nsq_to_nsq"

_log = Logger(namespace="txnsq.tools.nsq_to_nsq")


# --- flags ------------------------------------------------------------------


def nsq_to_nsq_flags() -> List[Flag]:
    """nsq_to_nsq's flag table, with Go's names, defaults and help."""
    return [
        version_flag(),
        Flag("channel", STRING, "nsq_to_nsq", "nsq channel"),
        Flag(
            "destination-topic",
            STRING,
            "",
            "use this destination topic for all consumed topics"
            " (default is consumed topic name)",
        ),
        max_in_flight_flag(),
        Flag(
            "status-every",
            INT,
            250,
            "the # of requests between logging status (per destination), 0 disables",
        ),
        Flag(
            "mode",
            STRING,
            "hostpool",
            "the upstream request mode options: round-robin, hostpool (default), epsilon-greedy",
        ),
        nsqd_tcp_address_flag(),
        Flag(
            "destination-nsqd-tcp-address",
            STRING_LIST,
            [],
            "destination nsqd TCP address (may be given multiple times)",
        ),
        lookupd_http_address_flag(),
        Flag("topic", STRING_LIST, [], "nsq topic (may be given multiple times)"),
        Flag(
            "whitelist-json-field",
            STRING_LIST,
            [],
            "for JSON messages: pass this field (may be given multiple times)",
        ),
        Flag(
            "require-json-field",
            STRING,
            "",
            "for JSON messages: only pass messages that contain this field",
        ),
        Flag(
            "require-json-value",
            STRING,
            "",
            "for JSON messages: only pass messages in which the required field has this value",
        ),
        # nsq_to_nsq's texts say "see" where the other tools' do not.
        Flag(
            "consumer-opt",
            STRING_LIST,
            [],
            "option to passthrough to nsq.Consumer (may be given multiple times, see %s)"
            % (GODOC_CONFIG,),
        ),
        Flag(
            "producer-opt",
            STRING_LIST,
            [],
            "option to passthrough to nsq.Producer (may be given multiple times, see %s)"
            % (GODOC_CONFIG,),
        ),
    ]


def validate(values: Any) -> Optional[str]:
    """Go nsq_to_nsq's checks after ``--version``, in its order: the fatal message, or None."""
    if not values["topic"] or not values["channel"]:
        return "--topic and --channel are required"
    for topic in values["topic"]:
        if not is_valid_topic_name(topic):
            return "--topic is invalid"
    if values["destination_topic"] and not is_valid_topic_name(values["destination_topic"]):
        return "--destination-topic is invalid"
    if not is_valid_channel_name(values["channel"]):
        return "--channel is invalid"
    problem = nsqd_or_lookupd_problem(values)
    if problem:
        return problem
    if not values["destination_nsqd_tcp_address"]:
        return "--destination-nsqd-tcp-address required"
    return None


# --- choosing a destination ---------------------------------------------------


class Pick(Protocol):
    """The destination chosen for one message; :meth:`mark` reports the publish."""

    address: str

    def mark(self, ok: bool) -> None:
        """The publish to :attr:`address` succeeded (``ok``) or failed."""


class Selector(Protocol):
    """Chooses each message's destination (``--mode``)."""

    def get(self) -> Pick:
        """The destination of the next message."""

    def stop(self) -> None:
        """Release any timer."""


class _Turn:
    """A round-robin pick: the outcome changes nothing."""

    __slots__ = ("address",)

    def __init__(self, address: str) -> None:
        self.address = address

    def mark(self, ok: bool) -> None:
        """Nothing to report."""


class RoundRobin:
    """
    ``--mode=round-robin``: the destinations in turn, whatever the
    outcomes.  As in Go the counter is advanced before it is used, so the
    first message goes to the second destination.

    :raises ValueError: no address.
    """

    def __init__(self, addresses: Sequence[str]) -> None:
        if not addresses:
            raise ValueError("no destination address")
        self.addresses = list(addresses)
        self._counter = 0

    def get(self) -> Pick:
        """The next destination."""
        self._counter += 1
        return _Turn(self.addresses[self._counter % len(self.addresses)])

    def stop(self) -> None:
        """Nothing to stop."""


def make_selector(
    mode: str,
    addresses: Sequence[str],
    clock: IReactorTime,
    rng: Optional[random.Random] = None,
) -> Selector:
    """
    The chooser of destinations for ``--mode``: go-hostpool's standard
    pool (``hostpool``) or epsilon-greedy pool (``epsilon-greedy``), from
    :mod:`txnsq.tools.hostpool`, or :class:`RoundRobin`; an unknown mode
    is round-robin, as in Go.
    """
    if mode == "hostpool":
        return HostPool(addresses, clock)
    if mode == "epsilon-greedy":
        return EpsilonGreedyHostPool(addresses, clock, rng=rng)
    return RoundRobin(addresses)


# --- republishing -------------------------------------------------------------

#: ``publish(topic, body)`` to one destination; fires once nsqd said OK.
Publish = Callable[[str, bytes], "Deferred[Any]"]


class Republisher:
    """
    The consumers' handler: filters each message, publishes it to the
    destination the selector picks, and answers it when the publish is
    answered (FIN on OK, REQ with backoff on failure), then records the
    publish's latency.

    :param publishers: a ``publish(topic, body)`` per destination address.
    :param selector: picks each message's destination.
    :param json_filter: the JSON filters (inactive when not configured).
    :param metrics: the ``[aggregate]:`` status line.
    :param address_metrics: a status line per destination address.
    :param clock: times the publishes.
    """

    def __init__(
        self,
        publishers: Mapping[str, Publish],
        selector: Selector,
        json_filter: JSONFilter,
        metrics: TimerMetrics,
        address_metrics: Mapping[str, TimerMetrics],
        clock: IReactorTime,
    ) -> None:
        self.publishers = dict(publishers)
        self.selector = selector
        self.json_filter = json_filter
        self.metrics = metrics
        self.address_metrics = dict(address_metrics)
        self.clock = clock
        self.outstanding = 0

    def handler(self, destination_topic: str) -> Callable[[Any], Optional[bool]]:
        """The consumer handler publishing to ``destination_topic``."""

        def handle(message: Any) -> Optional[bool]:
            return self.handle(message, destination_topic)

        return handle

    def handle(self, message: Any, destination_topic: str) -> Optional[bool]:
        """
        Handle one message: True to finish it now (filtered out), False to
        requeue it now (backoff), None once its publish is under way (the
        message is answered when the publish is).
        """
        body = message.body
        if self.json_filter.active:
            outcome, body = self.json_filter.apply(body)
            if outcome == SKIP:
                return True
            if outcome == BACKOFF:
                return False
        started = self.clock.seconds()
        choice = self.selector.get()
        message.enable_async()
        self.outstanding += 1
        publish = self.publishers[choice.address]
        try:
            published = publish(destination_topic, body)
        except Exception:
            published = fail()
        published.addBoth(self._answered, message, choice, started)
        return None

    def _answered(self, result: Any, message: Any, choice: Pick, started: float) -> None:
        self.outstanding -= 1
        ok = not isinstance(result, Failure)
        choice.mark(ok)
        if ok:
            message.finish()
        else:
            _log.warn(
                "publish to {address} failed, requeueing message {id}: {error}",
                address=choice.address,
                id=message.id.decode("ascii", "replace"),
                error=result.getErrorMessage(),
            )
            # go-nsq's Requeue(-1): the delay grows with the attempts; back off.
            message.requeue(None, True)
        metrics = self.address_metrics.get(choice.address)
        if metrics is not None:
            metrics.status(started)
        self.metrics.status(started)


# --- running ------------------------------------------------------------------


class Bridge:
    """
    The running tool: a consumer per topic feeding a :class:`Republisher`,
    a producer per destination.

    :ivar consumers: the consumers, one per ``--topic``.
    :ivar producers: the producers, by destination address.
    :ivar republisher: the handler.
    """

    def __init__(
        self, consumers: Sequence[Any], producers: Mapping[str, Any], republisher: Republisher
    ) -> None:
        self.consumers = list(consumers)
        self.producers = dict(producers)
        self.republisher = republisher

    def start(self) -> None:
        """Start consuming."""
        for consumer in self.consumers:
            consumer.start()

    def stop(self) -> "Deferred[Any]":
        """
        Close the consumers, whose messages in flight are answered once
        their publishes are; then close the producers.
        """
        self.republisher.selector.stop()

        def close_producers(_: Any) -> "Deferred[Any]":
            return DeferredList([producer.close() for producer in self.producers.values()])

        closing = DeferredList([consumer.close() for consumer in self.consumers])
        return closing.addCallback(close_producers)


def start_bridge(
    reactor: Any,
    values: Any,
    consumer_options: ClientOptions,
    producer_options: ClientOptions,
    out: IO[str],
    make_consumer: Optional[Callable[..., Any]] = None,
    make_producer: Optional[Callable[..., Any]] = None,
) -> Bridge:
    """
    Make and start the :class:`Bridge` for checked flag ``values``.

    :param out: where status lines go (standard error).
    :param make_consumer: :class:`txnsq.client.Consumer` unless given.
    :param make_producer: :class:`txnsq.client.Producer` unless given.
    :raises txnsq.tools.common.ToolExit: as Go's ``log.Fatal`` (a TLS file
        cannot be read, a consumer cannot be made).
    """
    if make_producer is None:
        from txnsq.client.producer import Producer

        make_producer = Producer
    consumer_config = connection_config_or_exit(consumer_options, PROGRAM)
    producer_config = connection_config_or_exit(producer_options, PROGRAM, "failed creating producer %s")
    addresses = list(dict.fromkeys(values["destination_nsqd_tcp_address"]))
    producers: Dict[str, Any] = {}
    new_producer = make_producer
    for address in addresses:
        producers[address] = or_fatal(
            lambda: new_producer(address, config=producer_config, reactor=reactor),
            "failed creating producer %s",
        )

    def publisher(producer: Any) -> Publish:
        def publish(topic: str, body: bytes) -> "Deferred[Any]":
            return producer.publish(topic, body)  # type: ignore[no-any-return]

        return publish

    metrics, address_metrics = status_metrics(addresses, values["status_every"], out, reactor)
    republisher = Republisher(
        {address: publisher(producer) for address, producer in producers.items()},
        make_selector(values["mode"], addresses, reactor),
        JSONFilter(
            values["require_json_field"],
            values["require_json_value"],
            values["whitelist_json_field"],
        ),
        metrics,
        address_metrics,
        reactor,
    )
    consumers: List[Any] = []
    for topic in values["topic"]:
        destination = values["destination_topic"] or topic
        handler = republisher.handler(destination)
        consumer = or_fatal(
            lambda: tool_consumer(
                topic,
                values["channel"],
                handler,
                values,
                consumer_options,
                consumer_config,
                reactor,
                make_consumer,
            )
        )
        consumers.append(consumer)
    bridge = Bridge(consumers, producers, republisher)
    bridge.start()
    return bridge


def main(
    argv: Optional[Sequence[str]] = None,
    stdout: Optional[IO[str]] = None,
    stderr: Optional[IO[str]] = None,
) -> None:
    """The ``nsq_to_nsq`` console script."""
    values, (consumer_options, producer_options) = parse_command_line(
        PROGRAM, nsq_to_nsq_flags(), argv, ["consumer-opt", "producer-opt"], stderr
    )
    if version_requested(values, PROGRAM, stdout):
        return
    problem = validate(values)
    if problem:
        fatal(problem, stderr)
    err = stderr if stderr is not None else sys.stderr

    def start(reactor: Any) -> "Deferred[Any]":
        from txnsq.logging import start_console_logging

        start_console_logging(PROGRAM, "info", "")
        bridge = start_bridge(reactor, values, consumer_options, producer_options, err)
        reactor.addSystemEventTrigger("before", "shutdown", bridge.stop)
        # Runs until SIGINT or SIGTERM.
        return Deferred()

    run_reactor(start)


if __name__ == "__main__":
    main()
