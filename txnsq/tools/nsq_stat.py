# -*- test-case-name: tests.test_tools_nsq_stat -*-
"""
``nsq_stat``: polls ``/stats`` of every nsqd carrying a topic and prints
one channel's aggregate statistics every ``--interval``, with Go
``nsq_stat``'s flags and table::

    ------rate------+----------------depth----------------+--------------metadata---------------
    ingress  egress |   total     mem    disk inflt   def |     req     t-o         msgs clients
         12      12 |       0       0       0     0     0 |       0       0          240       1

The nsqds come from ``--lookupd-http-address`` (``/lookup``) or are the
``--nsqd-http-address`` ones that have the topic.  ``--count N`` stops
after N rows.  Any failure to ask is fatal, as in Go.
"""

from __future__ import annotations

import sys
from typing import IO, Any, List, Optional, Sequence

from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import deferLater

from txnsq.cli import DURATION, STRING, STRING_LIST, VALUE, Flag, FlagValueError
from txnsq.tools.cluster_http import ClusterError, ClusterHTTP
from txnsq.tools.common import (
    check_http_addresses,
    fatal,
    http_timeout_flags,
    lookupd_http_address_flag,
    nsqd_or_lookupd_problem,
    parse_command_line,
    run_reactor,
    user_agent,
    version_flag,
    version_requested,
)
from txnsq.tools.stat_table import StatTable, channel_stats

__all__ = ["StatError", "StatLoop", "main", "nsq_stat_flags", "validate"]

PROGRAM = "nsq_stat"


class StatError(Exception):
    """A poll failed; ``str()`` is Go's fatal message."""


def _parse_count(text: str) -> int:
    # Go: strconv.ParseInt(s, 10, 32), error returned as is.
    body = text[1:] if text[:1] in "+-" else text
    if not body.isdigit() or not body.isascii():
        raise FlagValueError('strconv.ParseInt: parsing "%s": invalid syntax' % (text,))
    value = int(text, 10)
    if not -(1 << 31) <= value < (1 << 31):
        raise FlagValueError('strconv.ParseInt: parsing "%s": value out of range' % (text,))
    return value


def nsq_stat_flags() -> List[Flag]:
    """nsq_stat's flag table, with Go's names, defaults and help."""
    return [
        version_flag("print version"),
        Flag("topic", STRING, "", "NSQ topic"),
        Flag("channel", STRING, "", "NSQ channel"),
        Flag("interval", DURATION, 2.0, "duration of time between polling/printing output"),
        *http_timeout_flags(),
        # Go's numValue: unset means forever.
        Flag("count", VALUE, None, "number of reports", parse=_parse_count),
        Flag(
            "nsqd-http-address",
            STRING_LIST,
            [],
            "nsqd HTTP address (may be given multiple times)",
        ),
        lookupd_http_address_flag(),
    ]


def validate(values: Any) -> Optional[str]:
    """Go nsq_stat's checks, in its order: the fatal message, or None."""
    if not values["topic"] or not values["channel"]:
        return "--topic and --channel are required"
    if values["interval"] <= 0:
        return "--interval should be positive"
    if values["http_client_connect_timeout"] <= 0:
        return "--http-client-connect-timeout should be positive"
    if values["http_client_request_timeout"] <= 0:
        return "--http-client-request-timeout should be positive"
    if values["count"] is not None and values["count"] <= 0:
        return "--count should be positive"
    problem = nsqd_or_lookupd_problem(values, "nsqd-http-address")
    if problem:
        return problem
    problem = check_http_addresses(values["nsqd_http_address"])
    if problem:
        return "--nsqd-http-address error - %s" % (problem,)
    problem = check_http_addresses(values["lookupd_http_address"])
    if problem:
        return "--lookupd-http-address error - %s" % (problem,)
    return None


class StatLoop:
    """
    Go's ``statLoop``: poll, print, wait ``interval``; ``count`` rows then
    stop (``count + 1`` polls, the first only a baseline), or forever.
    """

    def __init__(
        self,
        cluster: ClusterHTTP,
        table: StatTable,
        clock: IReactorTime,
        topic: str,
        channel: str,
        nsqd_http_addresses: Sequence[str] = (),
        lookupd_http_addresses: Sequence[str] = (),
        count: Optional[int] = None,
    ) -> None:
        self.cluster = cluster
        self.table = table
        self.clock = clock
        self.topic = topic
        self.channel = channel
        self.nsqd_http_addresses = list(nsqd_http_addresses)
        self.lookupd_http_addresses = list(lookupd_http_addresses)
        self.count = count

    @inlineCallbacks
    def poll(self) -> Any:
        """One poll: the channel's summed statistics, or :class:`StatError`."""
        try:
            if self.lookupd_http_addresses:
                producers = yield self.cluster.lookupd_topic_producers(
                    self.topic, self.lookupd_http_addresses
                )
            else:
                producers = yield self.cluster.nsqd_topic_producers(
                    self.topic, self.nsqd_http_addresses
                )
        except ClusterError as error:
            raise StatError("ERROR: failed to get topic producers - %s" % (error,))
        try:
            replies = yield self.cluster.nsqd_stats(producers, self.topic, self.channel)
        except ClusterError as error:
            raise StatError("ERROR: failed to get nsqd stats - %s" % (error,))
        stats = channel_stats(replies, self.topic, self.channel)
        if stats is None:
            raise StatError(
                "ERROR: failed to find channel(%s) in stats metadata for topic(%s)"
                % (self.channel, self.topic)
            )
        return stats

    @inlineCallbacks
    def run(self) -> Any:
        """Poll and print until ``count`` rows are out; fails with :class:`StatError`."""
        i = 0
        while self.count is None or self.count >= i:
            stats = yield self.poll()
            self.table.poll(stats)
            yield deferLater(self.clock, self.table.interval, lambda: None)
            i += 1
        return 0


def main(argv: Optional[Sequence[str]] = None, stdout: Optional[IO[str]] = None) -> None:
    """The ``nsq_stat`` console script."""
    values, _ = parse_command_line(PROGRAM, nsq_stat_flags(), argv)
    out = stdout if stdout is not None else sys.stdout
    if version_requested(values, PROGRAM, out):
        return
    problem = validate(values)
    if problem:
        fatal(problem)

    def start(reactor: Any) -> "Deferred[Any]":
        from txnsq.http_client import GoHTTPClient

        client = GoHTTPClient(
            reactor,
            values["http_client_connect_timeout"],
            values["http_client_request_timeout"],
            user_agent=user_agent(PROGRAM).encode("ascii"),
        )
        loop = StatLoop(
            ClusterHTTP(client.request),
            StatTable(out, values["interval"]),
            reactor,
            values["topic"],
            values["channel"],
            values["nsqd_http_address"],
            values["lookupd_http_address"],
            values["count"],
        )

        def failed(failure: Any) -> None:
            failure.trap(StatError)
            fatal(str(failure.value))

        return loop.run().addErrback(failed)

    run_reactor(start)


if __name__ == "__main__":
    main()
