"""Tests for txnsq.logging: Go-style console lines, level names, Twisted's chatter kept off."""

from __future__ import annotations

import io
from typing import Any, Dict

from twisted.logger import LogLevel, LogLevelFilterPredicate, PredicateResult
from twisted.trial.unittest import SynchronousTestCase

from txnsq.cli import FlagValueError
from txnsq.logging import (
    FrameworkChatterFilter,
    GoStyleLogObserver,
    parse_log_level,
    parse_log_level_flag,
)


def event(namespace: str, level: LogLevel, text: str = "x") -> Dict[str, Any]:
    return {"log_namespace": namespace, "log_level": level, "log_format": text, "log_time": 0.0}


class ChatterTests(SynchronousTestCase):
    def filtered(self, level: str) -> FrameworkChatterFilter:
        return FrameworkChatterFilter(LogLevelFilterPredicate(defaultLogLevel=parse_log_level(level)))

    def test_twisted_info_dropped(self) -> None:
        """Twisted's info lines (new-style and legacy) do not reach the console at info."""
        chatter = self.filtered("info")
        self.assertEqual(chatter(event("twisted.internet.protocol.Factory", LogLevel.info)), PredicateResult.no)
        self.assertEqual(chatter(event("log_legacy", LogLevel.info)), PredicateResult.no)

    def test_twisted_warnings_kept(self) -> None:
        """Twisted's warnings and errors always pass."""
        chatter = self.filtered("info")
        self.assertEqual(chatter(event("twisted.internet.tcp", LogLevel.warn)), PredicateResult.maybe)
        self.assertEqual(chatter(event("log_legacy", LogLevel.critical)), PredicateResult.maybe)

    def test_own_lines_kept(self) -> None:
        """txnsq's own lines are left to the level filter."""
        chatter = self.filtered("info")
        self.assertEqual(chatter(event("txnsq.nsqd.tcp.NSQDProtocol", LogLevel.info)), PredicateResult.maybe)

    def test_debug_shows_everything(self) -> None:
        """At --log-level=debug Twisted's chatter is shown too."""
        chatter = self.filtered("debug")
        self.assertEqual(chatter(event("log_legacy", LogLevel.info)), PredicateResult.maybe)


class LineTests(SynchronousTestCase):
    def test_go_line(self) -> None:
        """prefix, date, time with microseconds, level label, text."""
        out = io.StringIO()
        GoStyleLogObserver("[nsqd] ", out)(event("txnsq", LogLevel.warn, "hello"))
        self.assertRegex(out.getvalue(), r"^\[nsqd\] \d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6} WARNING: hello\n$")

    def test_level_flag(self) -> None:
        """Go's names in any case; others refused with Go's text."""
        self.assertEqual(parse_log_level_flag("WARN"), "warn")
        error = self.assertRaises(FlagValueError, parse_log_level_flag, "loud")
        self.assertEqual(str(error), "invalid log level 'loud' (debug, info, warn, error, fatal)")
