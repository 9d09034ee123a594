"""Tests for txnsq.protocol.go_values: Go's number and duration syntax."""

from __future__ import annotations

import math

from twisted.trial.unittest import SynchronousTestCase

from txnsq.protocol.go_values import (
    GoValueError,
    format_duration,
    format_duration_ns,
    format_go_float,
    go_quote,
    parse_duration,
    parse_duration_ns,
    parse_go_bool,
    parse_go_float,
    parse_go_int,
)

FlagValueError = GoValueError


class GoQuoteTests(SynchronousTestCase):
    """Go's %q."""

    def test_quotes(self) -> None:
        """Quotes and backslashes are escaped, control characters too."""
        self.assertEqual(go_quote('a"b\\c'), '"a\\"b\\\\c"')
        self.assertEqual(go_quote("tab\there"), '"tab\\there"')

    def test_bools(self) -> None:
        """strconv.ParseBool's spellings, and nothing else."""
        self.assertTrue(parse_go_bool("T"))
        self.assertFalse(parse_go_bool("FALSE"))
        self.assertRaises(GoValueError, parse_go_bool, "yes")


class GoNumberTests(SynchronousTestCase):
    """strconv-compatible number parsing."""

    def test_int_bases(self) -> None:
        """Integers take Go's base prefixes, signs and separators."""
        cases = {
            "0": 0,
            "42": 42,
            "+42": 42,
            "-42": -42,
            "0x1F": 31,
            "0X1f": 31,
            "0b101": 5,
            "0o17": 15,
            "017": 15,
            "1_000": 1000,
            "0x_1F": 31,
            "-9223372036854775808": -(1 << 63),
            "9223372036854775807": (1 << 63) - 1,
        }
        for text, value in cases.items():
            self.assertEqual(parse_go_int(text), value, text)

    def test_int_refused(self) -> None:
        """Malformed integers are parse errors."""
        for text in ("", "-", "1.0", "08", "0x", "1__0", "_1", "1_", " 1", "1e3", "abc"):
            with self.assertRaises(FlagValueError) as caught:
                parse_go_int(text)
            self.assertEqual(str(caught.exception), "parse error", text)

    def test_int_range(self) -> None:
        """Integers past int64 are out of range."""
        with self.assertRaises(FlagValueError) as caught:
            parse_go_int("-9223372036854775809")
        self.assertEqual(str(caught.exception), "value out of range")

    def test_float_forms(self) -> None:
        """Floats take Go's decimal, exponent, hex and special forms."""
        cases = {
            "1": 1.0,
            "-1.5": -1.5,
            ".5": 0.5,
            "5.": 5.0,
            "1e3": 1000.0,
            "1E-2": 0.01,
            "1_000.5": 1000.5,
            "0x1p-2": 0.25,
            "0x1.8P1": 3.0,
            "Inf": math.inf,
            "-infinity": -math.inf,
        }
        for text, value in cases.items():
            self.assertEqual(parse_go_float(text), value, text)
        self.assertTrue(math.isnan(parse_go_float("NaN")))

    def test_float_refused(self) -> None:
        """Malformed floats are parse errors; huge ones out of range."""
        for text in ("", ".", "1.5 ", "0x1", "1__0", "e3", "1e", "one"):
            with self.assertRaises(FlagValueError) as caught:
                parse_go_float(text)
            self.assertEqual(str(caught.exception), "parse error", text)
        with self.assertRaises(FlagValueError) as caught:
            parse_go_float("1e400")
        self.assertEqual(str(caught.exception), "value out of range")

    def test_format_go_float(self) -> None:
        """Floats print as strconv.FormatFloat(f, 'g', -1, 64)."""
        cases = {
            0.25: "0.25",
            3.0: "3",
            100000.0: "100000",
            1e6: "1e+06",
            123456789.0: "1.23456789e+08",
            0.0001: "0.0001",
            0.00001: "1e-05",
            -2.5: "-2.5",
            0.0: "0",
            1e21: "1e+21",
        }
        for value, text in cases.items():
            self.assertEqual(format_go_float(value), text, value)
        self.assertEqual(format_go_float(math.inf), "+Inf")
        self.assertEqual(format_go_float(math.nan), "NaN")


class DurationTests(SynchronousTestCase):
    """Go's time.ParseDuration and Duration.String."""

    def test_parse(self) -> None:
        """Go's examples parse to the same nanoseconds."""
        cases = {
            "0": 0,
            "-0": 0,
            "+0": 0,
            "60s": 60 * 10**9,
            "1m30s": 90 * 10**9,
            "100ms": 100 * 10**6,
            "1.5h": 5400 * 10**9,
            "-1.5h": -5400 * 10**9,
            "2h45m": 9900 * 10**9,
            "300us": 300 * 10**3,
            "1\u00b5s": 1000,
            "1\u03bcs": 1000,
            "5ns": 5,
            ".5s": 5 * 10**8,
            "5.s": 5 * 10**9,
            "1h1m1s1ms1us1ns": 3661001001001,
            "1.0000000000000000001s": 10**9,
            "9223372036854775807ns": (1 << 63) - 1,
            "-9223372036854775808ns": -(1 << 63),
            "2562047h47m16.854775807s": (1 << 63) - 1,
        }
        for text, value in cases.items():
            self.assertEqual(parse_duration_ns(text), value, text)

    def test_seconds(self) -> None:
        """parse_duration returns float seconds."""
        self.assertEqual(parse_duration("25ms"), 0.025)
        self.assertEqual(parse_duration("1m"), 60.0)
        self.assertEqual(parse_duration("0"), 0.0)

    def test_errors(self) -> None:
        """Bad durations get time's messages."""
        cases = {
            "": 'time: invalid duration ""',
            "1": 'time: missing unit in duration "1"',
            "60": 'time: missing unit in duration "60"',
            "1x": 'time: unknown unit "x" in duration "1x"',
            "1sec": 'time: unknown unit "sec" in duration "1sec"',
            ".s": 'time: invalid duration ".s"',
            "s": 'time: invalid duration "s"',
            "-": 'time: invalid duration "-"',
            "1s ": 'time: unknown unit "s " in duration "1s "',
            "9223372036854775808ns": 'time: invalid duration "9223372036854775808ns"',
            "2562047h47m16.854775808s": (
                'time: invalid duration "2562047h47m16.854775808s"'
            ),
            "99999999999999999999s": 'time: invalid duration "99999999999999999999s"',
        }
        for text, message in cases.items():
            with self.assertRaises(ValueError) as caught:
                parse_duration_ns(text)
            self.assertEqual(str(caught.exception), message, text)

    def test_format(self) -> None:
        """Durations print as Go's Duration.String."""
        cases = {
            0: "0s",
            1: "1ns",
            1100: "1.1\u00b5s",
            2200 * 10**3: "2.2ms",
            25 * 10**6: "25ms",
            250 * 10**6: "250ms",
            10**9: "1s",
            int(1.5 * 10**9): "1.5s",
            60 * 10**9: "1m0s",
            90 * 10**9: "1m30s",
            3600 * 10**9: "1h0m0s",
            4 * 3600 * 10**9 + 5 * 60 * 10**9 + 6 * 10**9 + 5 * 10**8: "4h5m6.5s",
            -(60 * 10**9): "-1m0s",
            -1: "-1ns",
            (1 << 63) - 1: "2562047h47m16.854775807s",
            -(1 << 63): "-2562047h47m16.854775808s",
        }
        for value, text in cases.items():
            self.assertEqual(format_duration_ns(value), text, value)

    def test_format_seconds(self) -> None:
        """format_duration renders float seconds."""
        self.assertEqual(format_duration(0.025), "25ms")
        self.assertEqual(format_duration(60.0), "1m0s")
        self.assertEqual(format_duration(900.0), "15m0s")
        self.assertEqual(format_duration(0.25), "250ms")

    def test_round_trip(self) -> None:
        """Formatting then parsing gives back the same nanoseconds."""
        for value in (0, 1, 999, 1000, 1500, 10**6, 123456789, 61 * 10**9, 7 * 3600 * 10**9 + 3):
            self.assertEqual(parse_duration_ns(format_duration_ns(value)), value)
            self.assertEqual(parse_duration_ns(format_duration_ns(-value)), -value)
