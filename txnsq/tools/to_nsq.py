# -*- test-case-name: tests.test_tools_to_nsq -*-
"""
``to_nsq``: publishes standard input, cut at ``--delimiter`` (a newline by
default), to ``--topic`` on every ``--nsqd-tcp-address`` (each message goes
to each nsqd, as Go ``to_nsq`` does), at most ``--rate`` messages a second
if given, and exits once input has ended and every message was
acknowledged.  A failed publish is fatal (exit 1).

Unlike Go's ``to_nsq``, whose last record loses its final byte when input
does not end with the delimiter, the unterminated last record is published
whole.
"""

from __future__ import annotations

import os
from collections import deque
from typing import IO, Any, Callable, Deque, List, Optional, Sequence

from twisted.internet.defer import Deferred, DeferredList, inlineCallbacks
from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from txnsq.cli import INT, STRING, Flag
from txnsq.tools.common import (
    connection_config_or_exit,
    fatal,
    nsqd_tcp_address_flag,
    parse_command_line,
    producer_opt_flag,
    run_reactor,
)
from txnsq.tools.splitter import DelimitedSplitter
from txnsq.tools.throttle import Throttle

__all__ = ["PublishPump", "StdinReader", "main", "to_nsq_flags", "validate"]

PROGRAM = "to_nsq"

_log = Logger(namespace="txnsq.tools.to_nsq")

#: Messages published and not yet acknowledged, at most.
WINDOW = 64


def to_nsq_flags() -> List[Flag]:
    """to_nsq's flag table, with Go's names, defaults and help."""
    return [
        Flag("topic", STRING, "", "NSQ topic to publish to"),
        Flag("delimiter", STRING, "\n", "character to split input from stdin"),
        nsqd_tcp_address_flag("destination nsqd TCP address (may be given multiple times)"),
        producer_opt_flag(),
        Flag("rate", INT, 0, "Throttle messages to n/second. 0 to disable"),
    ]


def validate(values: Any) -> Optional[str]:
    """Go to_nsq's checks, in its order: the fatal message, or None."""
    if not values["topic"]:
        return "--topic required"
    if len(os.fsencode(values["delimiter"])) != 1:
        return "--delimiter must be a single byte"
    if not values["nsqd_tcp_address"]:
        return "--nsqd-tcp-address required"
    return None


Publish = Callable[[bytes], "Deferred[Any]"]


class PublishPump:
    """
    Publishes records in order, each to every destination, keeping at most
    ``window`` of them unacknowledged and pausing input while many wait.

    :param destinations: one ``publish(body)`` per nsqd.
    :param throttle: paces the messages (``--rate``), or None.
    :param pause: stop reading input; :param resume: read again.
    :ivar done: fires with the number of messages published once input
        ended and all are acknowledged; fails with the first failure.
    """

    def __init__(
        self,
        destinations: Sequence[Publish],
        throttle: Optional[Throttle] = None,
        pause: Callable[[], None] = lambda: None,
        resume: Callable[[], None] = lambda: None,
        window: int = WINDOW,
    ) -> None:
        self.destinations = list(destinations)
        self.throttle = throttle
        self.window = window
        self._pause = pause
        self._resume = resume
        self._paused = False
        self._queue: Deque[bytes] = deque()
        self._ended = False
        self._outstanding = 0
        self._failure: Optional[Failure] = None
        self._wakeup: Optional[Deferred[None]] = None
        self.published = 0
        self.done: Deferred[int] = self._run()

    def records(self, records: Sequence[bytes]) -> None:
        """Queue records read from input."""
        if not records:
            return
        self._queue.extend(records)
        if not self._paused and len(self._queue) >= self.window:
            self._paused = True
            self._pause()
        self._wake()

    def end(self) -> None:
        """Input has ended."""
        self._ended = True
        self._wake()

    def _wake(self) -> None:
        wakeup, self._wakeup = self._wakeup, None
        if wakeup is not None:
            wakeup.callback(None)

    def _sleep(self) -> "Deferred[None]":
        self._wakeup = Deferred()
        return self._wakeup

    def _published(self, results: List[Any]) -> None:
        self._outstanding -= 1
        succeeded = True
        for ok, value in results:
            if not ok:
                succeeded = False
                if self._failure is None:
                    self._failure = value
        if succeeded:
            self.published += 1
        self._wake()

    @inlineCallbacks
    def _run(self) -> Any:
        while self._failure is None:
            if not self._queue:
                if self._ended:
                    break
                if self._paused:
                    self._paused = False
                    self._resume()
                yield self._sleep()
                continue
            while self._outstanding >= self.window and self._failure is None:
                yield self._sleep()
            if self._failure is not None:
                break
            if self.throttle is not None:
                yield self.throttle.take()
            body = self._queue.popleft()
            if self._paused and len(self._queue) < self.window // 2:
                self._paused = False
                self._resume()
            self._outstanding += 1
            DeferredList(
                [publish(body) for publish in self.destinations], consumeErrors=True
            ).addCallback(self._published)
        while self._outstanding > 0:
            yield self._sleep()
        if self._failure is not None:
            self._failure.raiseException()
        return self.published


class StdinReader(Protocol):
    """Standard input into a :class:`PublishPump`, cut by a :class:`DelimitedSplitter`."""

    def __init__(self, splitter: DelimitedSplitter) -> None:
        self.splitter = splitter
        self.pump: Optional[PublishPump] = None

    def dataReceived(self, data: bytes) -> None:
        assert self.pump is not None
        self.pump.records(self.splitter.feed(data))

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        assert self.pump is not None
        self.pump.records(self.splitter.finish())
        self.pump.end()


def main(argv: Optional[Sequence[str]] = None, stdin: Optional[IO[bytes]] = None) -> None:
    """The ``to_nsq`` console script."""
    values, (client_options,) = parse_command_line(PROGRAM, to_nsq_flags(), argv, ["producer-opt"])
    problem = validate(values)
    if problem:
        fatal(problem)

    def start(reactor: Any) -> "Deferred[Any]":
        from twisted.internet.stdio import StandardIO

        from txnsq.client.producer import Producer
        from txnsq.logging import start_console_logging

        start_console_logging(PROGRAM, "info", "")
        config = connection_config_or_exit(client_options, PROGRAM, "failed to create nsq.Producer - %s")
        topic = values["topic"]
        producers = [
            Producer(address, config=config, reactor=reactor)
            for address in dict.fromkeys(values["nsqd_tcp_address"])
        ]
        throttle = None
        if values["rate"] >= 1:
            throttle = Throttle(values["rate"], reactor)
            _log.info("Throttling messages rate to max:{rate}/second", rate=values["rate"])
        reader = StdinReader(DelimitedSplitter(os.fsencode(values["delimiter"])))
        stdio = StandardIO(reader, reactor=reactor)
        def publisher(producer: Any) -> Publish:
            def publish(body: bytes) -> "Deferred[Any]":
                return producer.publish(topic, body)

            return publish

        pump = PublishPump(
            [publisher(producer) for producer in producers],
            throttle,
            pause=stdio.pauseProducing,
            resume=stdio.resumeProducing,
        )
        reader.pump = pump

        def close_all() -> "Deferred[Any]":
            return DeferredList([producer.close() for producer in producers])

        reactor.addSystemEventTrigger("before", "shutdown", close_all)

        def failed(failure: Failure) -> None:
            error = failure.value
            fatal(str(error) or type(error).__name__)

        def succeeded(published: int) -> int:
            return 0

        return pump.done.addCallbacks(succeeded, failed)

    run_reactor(start)


if __name__ == "__main__":
    main()
