# -*- test-case-name: tests.test_tools_nsq_tail -*-
"""
``nsq_tail``: consumes one or more topics and writes each message's body,
newline-terminated, to standard output (in the spirit of ``tail(1)``),
with Go ``nsq_tail``'s flags.

``--channel`` defaults to a fresh ephemeral channel (``tail123456#ephemeral``),
so tailing takes nothing from the topic's other channels.  ``-n N`` exits
after N messages (counted over all topics; ``--max-in-flight`` is lowered
to N so no more are asked for); ``--print-topic`` prefixes each line with
``"TOPIC | "``.  SIGINT and SIGTERM close the consumers and exit.
"""

from __future__ import annotations

import sys
from typing import IO, Any, Callable, List, Optional, Sequence

from twisted.internet.defer import Deferred, DeferredList
from twisted.logger import Logger

from txnsq.cli import BOOL, INT, STRING_LIST, Flag
from txnsq.tools.common import (
    channel_flag,
    connection_config_or_exit,
    consumer_opt_flag,
    ephemeral_tail_channel,
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

__all__ = ["TailPrinter", "main", "nsq_tail_flags", "validate"]

PROGRAM = "nsq_tail"

_log = Logger(namespace="txnsq.tools.nsq_tail")


def nsq_tail_flags() -> List[Flag]:
    """nsq_tail's flag table, with Go's names, defaults and help."""
    return [
        version_flag(),
        channel_flag(),
        max_in_flight_flag(),
        Flag("n", INT, 0, "total messages to show (will wait if starved)"),
        Flag("print-topic", BOOL, False, "print topic name where message was received"),
        nsqd_tcp_address_flag(),
        lookupd_http_address_flag(),
        Flag("topic", STRING_LIST, [], "NSQ topic (may be given multiple times)"),
        consumer_opt_flag(),
    ]


def validate(values: Any) -> Optional[str]:
    """Go nsq_tail's checks, in its order: the fatal message, or None."""
    problem = nsqd_or_lookupd_problem(values)
    if problem:
        return problem
    if not values["topic"]:
        return "--topic required"
    return None


def effective_max_in_flight(total: int, max_in_flight: int) -> int:
    """Don't ask for more messages than wanted: ``-n`` caps ``--max-in-flight``."""
    if 0 < total < max_in_flight:
        return total
    return max_in_flight


class TailPrinter:
    """
    Writes message bodies to a byte stream.

    :param out: standard output's bytes.
    :param total: stop after this many messages (0: never).
    :param print_topic: prefix each line with ``"TOPIC | "``.
    :param done: called once, when ``total`` messages are out.
    """

    def __init__(
        self,
        out: IO[bytes],
        total: int = 0,
        print_topic: bool = False,
        done: Callable[[], None] = lambda: None,
    ) -> None:
        self.out = out
        self.total = total
        self.print_topic = print_topic
        self.shown = 0
        self._done = done

    @property
    def finished(self) -> bool:
        """Whether ``total`` messages have been shown."""
        return self.total > 0 and self.shown >= self.total

    def handler(self, topic: str) -> Callable[[Any], bool]:
        """The consumer handler for ``topic``."""
        prefix = topic.encode("utf-8") + b" | "

        def handle(message: Any) -> bool:
            if self.finished:
                # Extra deliveries after -n go back to the channel.
                return False
            self.shown += 1
            if self.print_topic:
                self.out.write(prefix + message.body + b"\n")
            else:
                self.out.write(message.body + b"\n")
            self.out.flush()
            if self.finished:
                self._done()
            return True

        return handle


def main(argv: Optional[Sequence[str]] = None, stdout: Optional[IO[bytes]] = None) -> None:
    """The ``nsq_tail`` console script."""
    values, (client_options,) = parse_command_line(
        PROGRAM, nsq_tail_flags(), argv, ["consumer-opt"]
    )
    if version_requested(values, PROGRAM):
        return
    channel = values["channel"] or ephemeral_tail_channel()
    problem = validate(values)
    if problem:
        fatal(problem)
    out = stdout if stdout is not None else sys.stdout.buffer
    max_in_flight = effective_max_in_flight(values["n"], values["max_in_flight"])

    def start(reactor: Any) -> "Deferred[Any]":
        from txnsq.logging import start_console_logging

        start_console_logging(PROGRAM, "info", "")
        config = connection_config_or_exit(client_options, PROGRAM)
        finished: Deferred[int] = Deferred()
        consumers: List[Any] = []

        def exit_now() -> None:
            if not finished.called:
                finished.callback(0)

        def done() -> None:
            # Let the FIN of the last message go out first.
            reactor.callLater(0, exit_now)

        printer = TailPrinter(out, values["n"], values["print_topic"], done)
        for topic in values["topic"]:
            _log.info("Adding consumer for topic: {topic}", topic=topic)
            handler = printer.handler(topic)
            consumer = or_fatal(
                lambda: tool_consumer(
                    topic,
                    channel,
                    handler,
                    values,
                    client_options,
                    config,
                    reactor,
                    max_in_flight=max_in_flight,
                )
            )
            consumers.append(consumer)
            consumer.start()

        def close_all() -> "Deferred[Any]":
            return DeferredList([consumer.close() for consumer in consumers])

        reactor.addSystemEventTrigger("before", "shutdown", close_all)
        return finished

    run_reactor(start)


if __name__ == "__main__":
    main()
