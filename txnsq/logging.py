# -*- test-case-name: tests.test_logging -*-
"""
Log lines in the shape Go NSQ's daemons print them.

``[nsqd] 2026/11/22 12:00:00.000001 INFO: TCP: listening on 127.0.0.1:4150``
on standard error, filtered by ``--log-level``; scripts that read nsqd's
output (for the bound port, say) find the same text as with Go.
"""

from __future__ import annotations

import sys
import time
from typing import IO, Any, Dict, Optional, Tuple

from twisted.logger import (
    FilteringLogObserver,
    ILogFilterPredicate,
    ILogObserver,
    LogLevel,
    LogLevelFilterPredicate,
    PredicateResult,
    formatEvent,
    globalLogBeginner,
)
from zope.interface import implementer

from txnsq.protocol.go_values import GoValueError

_LEVEL_NAMES: Dict[str, LogLevel] = {
    "debug": LogLevel.debug,
    "info": LogLevel.info,
    "warn": LogLevel.warn,
    "warning": LogLevel.warn,
    "error": LogLevel.error,
    "fatal": LogLevel.critical,
}

_LEVEL_LABELS: Dict[LogLevel, str] = {
    LogLevel.debug: "DEBUG",
    LogLevel.info: "INFO",
    LogLevel.warn: "WARNING",
    LogLevel.error: "ERROR",
    LogLevel.critical: "FATAL",
}


#: Go NSQ's ``--log-level`` names (any case), lowest first.
LOG_LEVELS: Tuple[str, ...] = ("debug", "info", "warn", "error", "fatal")

#: How Go's usage text shows a default level (``(default INFO)``).
LOG_LEVEL_LABELS: Dict[str, str] = {
    "debug": "DEBUG",
    "info": "INFO",
    "warn": "WARNING",
    "error": "ERROR",
    "fatal": "FATAL",
}


def parse_log_level_flag(text: str) -> str:
    """
    The ``--log-level`` flag's value as Go's ``lg.LogLevel.Set`` reads it:
    a level name in any case, kept lower-case.

    :raises txnsq.protocol.go_values.GoValueError: for another name (Go's message).
    """
    level = text.lower()
    if level not in LOG_LEVELS:
        raise GoValueError(
            "invalid log level '%s' (debug, info, warn, error, fatal)" % (text,)
        )
    return level


def parse_log_level(name: str) -> LogLevel:
    """Map Go NSQ's ``--log-level`` names to Twisted's levels."""
    try:
        return _LEVEL_NAMES[name.lower()]
    except KeyError:
        raise ValueError(
            "invalid log level %r (use debug, info, warn, error or fatal)" % (name,)
        )


@implementer(ILogObserver)
class GoStyleLogObserver:
    """Write each event as one Go-style line: prefix, timestamp, level, text."""

    def __init__(self, prefix: str, stream: Optional[IO[str]] = None) -> None:
        self.prefix = prefix
        self.stream = stream if stream is not None else sys.stderr

    def __call__(self, event: Dict[str, Any]) -> None:
        text = formatEvent(event)
        failure = event.get("log_failure")
        if failure is not None:
            text = "%s\n%s" % (text, failure.getTraceback())
        when = event.get("log_time", time.time())
        stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(when))
        micros = int((when % 1) * 1000000)
        level = _LEVEL_LABELS.get(event.get("log_level", LogLevel.info), "INFO")
        self.stream.write(
            "%s%s.%06d %s: %s\n" % (self.prefix, stamp, micros, level, text)
        )
        self.stream.flush()


@implementer(ILogFilterPredicate)
class FrameworkChatterFilter:
    """
    Keeps Twisted's own informational lines ("Factory starting on 4150",
    "Starting factory ...", "Scheduling retry ...", "Main loop
    terminated.") off the console unless the level is ``debug``: Go's
    daemons print none of them, and scripts that read the logs expect
    Go's lines only.  Warnings and errors always pass.
    """

    def __init__(self, levels: LogLevelFilterPredicate) -> None:
        self._levels = levels

    def __call__(self, event: Dict[str, Any]) -> PredicateResult:
        namespace = event.get("log_namespace") or ""
        if not (namespace == "log_legacy" or namespace.startswith("twisted.")):
            return PredicateResult.maybe
        level = event.get("log_level", LogLevel.info)
        if level >= LogLevel.warn:
            return PredicateResult.maybe
        if self._levels.logLevelForNamespace("") <= LogLevel.debug:
            return PredicateResult.maybe
        return PredicateResult.no


#: The level filter of the console logging started by this module, if any.
_console_predicate: Optional[LogLevelFilterPredicate] = None


def set_log_level(level: str) -> None:
    """
    Change the level of the console logging :func:`start_console_logging`
    started (``PUT /config/log_level``); nothing if it was not started here
    (under twistd, twistd owns logging).

    :raises ValueError: ``level`` is not one of Go's level names.
    """
    parsed = parse_log_level(level)
    if _console_predicate is not None:
        _console_predicate.setLogLevelForNamespace("", parsed)


def start_console_logging(program: str, level: str, prefix: Optional[str]) -> None:
    """Send all Twisted logging to standard error in Go's format."""
    if prefix is None:
        prefix = "[%s] " % (program,)
    global _console_predicate
    _console_predicate = LogLevelFilterPredicate(defaultLogLevel=parse_log_level(level))
    observer = FilteringLogObserver(
        GoStyleLogObserver(prefix),
        [_console_predicate, FrameworkChatterFilter(_console_predicate)],
    )
    globalLogBeginner.beginLoggingTo([observer], redirectStandardIO=False)
