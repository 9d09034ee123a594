# -*- test-case-name: tests.test_cli -*-
"""
Go's value syntax, as its ``flag``, ``strconv`` and ``time`` packages read
and print values: booleans (``t``, ``FALSE``), integers (``0x1f``,
``1_000``), floats (``1e3``, ``0x1p-2``, ``inf``), durations (``1m30s``,
``100ms``, ``1.5h``, ``1µs``; txnsq holds durations as float seconds) and
the ``%q`` quoting of Go's error messages.

Pure functions, no I/O: the command line (:mod:`txnsq.cli`), nsqd's
``/config`` and stats and nsqadmin all read and write values this way.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal

__all__ = [
    "GoValueError",
    "format_duration",
    "format_duration_ns",
    "format_go_float",
    "go_quote",
    "parse_duration",
    "parse_duration_ns",
    "parse_go_bool",
    "parse_go_float",
    "parse_go_int",
]

_PARSE_ERROR = "parse error"
_RANGE_ERROR = "value out of range"


class GoValueError(ValueError):
    """
    A value could not be parsed; ``str()`` is Go's reason text (``parse
    error``, ``value out of range``, or a flag's own words).
    """


def go_quote(text: str) -> str:
    """Approximately Go's ``%q``: a double-quoted string with escapes."""
    out = ['"']
    for char in text:
        code = ord(char)
        if char == '"':
            out.append('\\"')
        elif char == "\\":
            out.append("\\\\")
        elif char == "\n":
            out.append("\\n")
        elif char == "\t":
            out.append("\\t")
        elif char == "\r":
            out.append("\\r")
        elif code < 0x20 or code == 0x7F:
            out.append("\\x%02x" % (code,))
        elif not char.isprintable():
            out.append("\\u%04x" % (code,) if code <= 0xFFFF else "\\U%08x" % (code,))
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


_GO_BOOLS = {
    "1": True,
    "t": True,
    "T": True,
    "TRUE": True,
    "true": True,
    "True": True,
    "0": False,
    "f": False,
    "F": False,
    "FALSE": False,
    "false": False,
    "False": False,
}


def parse_go_bool(text: str) -> bool:
    """
    ``strconv.ParseBool``: exactly 1 t T TRUE true True 0 f F FALSE false False.

    :raises GoValueError: ``parse error`` for anything else.
    """
    try:
        return _GO_BOOLS[text]
    except KeyError:
        raise GoValueError(_PARSE_ERROR)


def _underscores_ok(text: str) -> bool:
    """Go's underscoreOK: ``_`` only between digits or after a base prefix."""
    saw = "^"
    i = 0
    if text[:1] in ("+", "-"):
        text = text[1:]
    hexadecimal = False
    if len(text) >= 2 and text[0] == "0" and text[1] in "bBoOxX":
        i = 2
        saw = "0"
        hexadecimal = text[1] in "xX"
    while i < len(text):
        char = text[i]
        if char.isdigit() or (hexadecimal and char in "abcdefABCDEF"):
            saw = "0"
        elif char == "_":
            if saw != "0":
                return False
            saw = "_"
        else:
            if saw == "_":
                return False
            saw = "!"
        i += 1
    return saw != "_"


_INT_BASES = {"x": 16, "X": 16, "b": 2, "B": 2, "o": 8, "O": 8}
_DIGITS = {
    2: "01",
    8: "01234567",
    10: "0123456789",
    16: "0123456789abcdefABCDEF",
}


def parse_go_int(text: str, bits: int = 64) -> int:
    """
    ``strconv.ParseInt(text, 0, bits)``, as Go's int flags use it: an
    optional sign, then decimal, ``0x`` hex, ``0b`` binary, ``0o`` or a
    leading ``0`` octal, with ``_`` separators.

    :raises GoValueError: ``parse error`` or ``value out of range``.
    """
    body = text
    negative = False
    if body[:1] in ("+", "-"):
        negative = body[0] == "-"
        body = body[1:]
    base = 10
    if len(body) >= 2 and body[0] == "0" and body[1] in _INT_BASES:
        base = _INT_BASES[body[1]]
        body = body[2:]
    elif len(body) >= 2 and body[0] == "0":
        base = 8
        body = body[1:]
    if "_" in text and not _underscores_ok(text):
        raise GoValueError(_PARSE_ERROR)
    digits = body.replace("_", "")
    if not digits or any(char not in _DIGITS[base] for char in digits):
        raise GoValueError(_PARSE_ERROR)
    value = int(digits, base)
    if negative:
        value = -value
    if not -(1 << (bits - 1)) <= value <= (1 << (bits - 1)) - 1:
        raise GoValueError(_RANGE_ERROR)
    return value


_DECIMAL_DIGITS = r"[0-9](?:_?[0-9])*"
_HEX_DIGITS = r"[0-9a-fA-F](?:_?[0-9a-fA-F])*"
_DECIMAL_FLOAT = re.compile(
    r"[+-]?(?:{d}(?:\.(?:{d})?)?|\.{d})(?:[eE][+-]?{d})?\Z".format(d=_DECIMAL_DIGITS)
)
_HEX_FLOAT = re.compile(
    r"[+-]?0[xX]_?(?:{h}(?:\.(?:{h})?)?|\.{h})[pP][+-]?{d}\Z".format(
        h=_HEX_DIGITS, d=_DECIMAL_DIGITS
    )
)
_SPECIAL_FLOATS = {
    "inf": math.inf,
    "+inf": math.inf,
    "-inf": -math.inf,
    "infinity": math.inf,
    "+infinity": math.inf,
    "-infinity": -math.inf,
    "nan": math.nan,
}


def parse_go_float(text: str) -> float:
    """
    ``strconv.ParseFloat(text, 64)``: Go's decimal and hexadecimal float
    syntax, ``inf``/``infinity``/``nan`` in any case; no spaces.

    :raises GoValueError: ``parse error`` or ``value out of range``.
    """
    special = _SPECIAL_FLOATS.get(text.lower())
    if special is not None:
        return special
    if _DECIMAL_FLOAT.match(text):
        value = float(text.replace("_", ""))
    elif _HEX_FLOAT.match(text):
        value = float.fromhex(text.replace("_", ""))
    else:
        raise GoValueError(_PARSE_ERROR)
    if math.isinf(value):
        raise GoValueError(_RANGE_ERROR)
    return value


def format_go_float(value: float) -> str:
    """``strconv.FormatFloat(value, 'g', -1, 64)``: how Go prints a float flag."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    if value == 0:
        return sign + "0"
    # repr() gives the shortest digits that round-trip, as Go's precision -1.
    parts = Decimal(repr(abs(value))).as_tuple()
    digits = "".join(str(digit) for digit in parts.digits).rstrip("0")
    exponent = int(parts.exponent)  # type: ignore[arg-type]
    # Where the decimal point falls, counted from the first digit.
    point = len(parts.digits) + exponent
    first = point - 1
    # Shortest 'g' switches to an exponent below 1e-4 and from 1e6 up.
    if first < -4 or first >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return "%s%se%s%02d" % (sign, mantissa, "-" if first < 0 else "+", abs(first))
    if point <= 0:
        return "%s0.%s%s" % (sign, "0" * -point, digits)
    if point >= len(digits):
        return sign + digits + "0" * (point - len(digits))
    return "%s%s.%s" % (sign, digits[:point], digits[point:])


# --- Go durations ----------------------------------------------------------

_NANOSECOND = 1
_MICROSECOND = 1000 * _NANOSECOND
_MILLISECOND = 1000 * _MICROSECOND
_SECOND = 1000 * _MILLISECOND
_MINUTE = 60 * _SECOND
_HOUR = 60 * _MINUTE

_UNITS = {
    "ns": _NANOSECOND,
    "us": _MICROSECOND,
    "\u00b5s": _MICROSECOND,  # U+00B5 micro sign
    "\u03bcs": _MICROSECOND,  # U+03BC Greek small letter mu
    "ms": _MILLISECOND,
    "s": _SECOND,
    "m": _MINUTE,
    "h": _HOUR,
}

_UINT63 = 1 << 63


def _leading_int(text: str) -> "tuple[int, str]":
    """Go's leadingInt: consume digits; overflow past 1<<63 is an error."""
    i = 0
    value = 0
    while i < len(text) and "0" <= text[i] <= "9":
        if value > (_UINT63 - 1) // 10:
            raise OverflowError()
        value = value * 10 + ord(text[i]) - 48
        if value > _UINT63:
            raise OverflowError()
        i += 1
    return value, text[i:]


def _leading_fraction(text: str) -> "tuple[int, int, str]":
    """Go's leadingFraction: digits after the point; extra precision dropped."""
    i = 0
    value = 0
    scale = 1
    overflow = False
    while i < len(text) and "0" <= text[i] <= "9":
        if not overflow:
            if value > (_UINT63 - 1) // 10:
                overflow = True
            else:
                candidate = value * 10 + ord(text[i]) - 48
                if candidate > _UINT63:
                    overflow = True
                else:
                    value = candidate
                    scale *= 10
        i += 1
    return value, scale, text[i:]


def parse_duration_ns(text: str) -> int:
    """
    Go's ``time.ParseDuration``, in integer nanoseconds.

    A possibly signed sequence of decimal numbers, each with an optional
    fraction and a unit: ``300ms``, ``-1.5h``, ``2h45m``; units ``ns``,
    ``us`` (or ``µs``), ``ms``, ``s``, ``m``, ``h``.  ``0`` alone needs no
    unit.

    :raises ValueError: with Go's message, e.g.
        ``time: missing unit in duration "1"``.
    """
    original = text
    quoted = go_quote(original)
    total = 0
    negative = False
    if text and text[0] in "+-":
        negative = text[0] == "-"
        text = text[1:]
    if text == "0":
        return 0
    if not text:
        raise ValueError("time: invalid duration " + quoted)
    while text:
        if not (text[0] == "." or "0" <= text[0] <= "9"):
            raise ValueError("time: invalid duration " + quoted)
        before = len(text)
        try:
            whole, text = _leading_int(text)
        except OverflowError:
            raise ValueError("time: invalid duration " + quoted)
        consumed_whole = before != len(text)
        fraction, scale, consumed_fraction = 0, 1, False
        if text and text[0] == ".":
            text = text[1:]
            before = len(text)
            fraction, scale, text = _leading_fraction(text)
            consumed_fraction = before != len(text)
        if not consumed_whole and not consumed_fraction:
            raise ValueError("time: invalid duration " + quoted)
        i = 0
        while i < len(text) and not (text[i] == "." or "0" <= text[i] <= "9"):
            i += 1
        if i == 0:
            raise ValueError("time: missing unit in duration " + quoted)
        unit_name, text = text[:i], text[i:]
        unit = _UNITS.get(unit_name)
        if unit is None:
            raise ValueError(
                "time: unknown unit %s in duration %s" % (go_quote(unit_name), quoted)
            )
        if whole > _UINT63 // unit:
            raise ValueError("time: invalid duration " + quoted)
        whole *= unit
        if fraction > 0:
            # Go computes the fraction in float64 and truncates.
            whole += int(float(fraction) * (float(unit) / scale))
            if whole > _UINT63:
                raise ValueError("time: invalid duration " + quoted)
        total += whole
        if total > _UINT63:
            raise ValueError("time: invalid duration " + quoted)
    if negative:
        return -total
    if total > _UINT63 - 1:
        raise ValueError("time: invalid duration " + quoted)
    return total


def parse_duration(text: str) -> float:
    """
    Go's ``time.ParseDuration``, in float seconds (txnsq's duration unit).

    :raises ValueError: with Go's message.
    """
    return parse_duration_ns(text) / _SECOND


def _format_fraction(value: int, precision: int) -> "tuple[str, int]":
    """Go's fmtFrac: ``.123`` of value/10**precision, trailing zeros dropped."""
    digits = []
    printed = False
    for _ in range(precision):
        digit = value % 10
        printed = printed or digit != 0
        if printed:
            digits.append(str(digit))
        value //= 10
    text = ""
    if printed:
        text = "." + "".join(reversed(digits))
    return text, value


def format_duration_ns(nanoseconds: int) -> str:
    """Go's ``time.Duration.String()``: ``1h2m3.5s``, ``1m0s``, ``25ms``, ``0s``."""
    negative = nanoseconds < 0
    value = -nanoseconds if negative else nanoseconds
    if value < _SECOND:
        if value == 0:
            return "0s"
        if value < _MICROSECOND:
            precision, unit = 0, "ns"
        elif value < _MILLISECOND:
            precision, unit = 3, "\u00b5s"
        else:
            precision, unit = 6, "ms"
        fraction, value = _format_fraction(value, precision)
        text = "%d%s%s" % (value, fraction, unit)
    else:
        fraction, value = _format_fraction(value, 9)
        text = "%d%ss" % (value % 60, fraction)
        value //= 60
        if value > 0:
            text = "%dm%s" % (value % 60, text)
            value //= 60
            if value > 0:
                text = "%dh%s" % (value, text)
    return "-" + text if negative else text


def format_duration(seconds: float) -> str:
    """Render float seconds as Go prints a ``time.Duration`` (``90.0`` -> ``1m30s``)."""
    return format_duration_ns(int(round(seconds * _SECOND)))

