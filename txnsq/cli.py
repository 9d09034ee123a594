# -*- test-case-name: tests.test_cli -*-
"""
Command-line flags the way Go's ``flag`` package reads them.

Every txnsq console script takes the flags of the Go program it replaces,
and scripts written for the Go binaries must work unchanged, so parsing
follows Go's ``flag.FlagSet`` exactly:

- ``-name value``, ``--name value``, ``-name=value`` and ``--name=value``
  are all the same; one dash or two makes no difference;
- a boolean flag never takes the next argument: ``--snappy`` means true,
  ``--snappy=false`` (or ``0``, ``f``, ``F``, ``FALSE``, ``False``) false;
- ``--`` ends the flags, and so does the first argument that is not a
  flag (Go does not interleave); what follows is returned as positional
  arguments;
- errors use Go's words (``flag provided but not defined: -foo``,
  ``invalid value "x" for flag -mem-queue-size: parse error``) and are
  followed by the usage text; Go's programs then exit with status 2;
- ``-h``, ``-help``, ``--h`` and ``--help`` print the usage and exit 0.

A program declares its flags as a table of :class:`Flag` objects;
:func:`parse_flags` is the pure parser (it raises, never exits) and
:func:`run_or_exit` is the thin wrapper a ``main`` calls.

Go's duration syntax (``1m30s``, ``100ms``, ``1.5h``, ``1µs``) is parsed by
:func:`parse_duration` into float seconds, txnsq's unit for durations, and
:func:`format_duration` renders seconds back the way Go prints a
``time.Duration`` (``1m0s``, ``25ms``).
"""

from __future__ import annotations

import copy
import math
import re
import sys
from decimal import Decimal
from typing import (
    IO,
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    Optional,
    Sequence,
    Set,
    TypeVar,
    Union,
)

from txnsq.version import version_string

__all__ = [
    "version_string",
    "BOOL",
    "BOOL_VALUE",
    "DURATION",
    "FLOAT",
    "FLOAT_LIST",
    "INT",
    "STRING",
    "STRING_LIST",
    "VALUE",
    "Flag",
    "FlagError",
    "FlagValueError",
    "HelpRequested",
    "ParsedFlags",
    "format_defaults",
    "format_duration",
    "format_duration_ns",
    "format_go_float",
    "format_usage",
    "parse_duration",
    "parse_duration_ns",
    "parse_flags",
    "parse_go_bool",
    "parse_go_float",
    "parse_go_int",
    "parse_settings",
    "parse_settings_or_exit",
    "run_or_exit",
    "settings_from",
]

# Flag kinds.  Each mirrors a Go flag type; the comment names it.
STRING = "string"  # flag.String
INT = "int"  # flag.Int / flag.Int64 (64-bit)
FLOAT = "float"  # flag.Float64
BOOL = "bool"  # flag.Bool
DURATION = "duration"  # flag.Duration, held as float seconds
STRING_LIST = "string-list"  # a repeatable flag.Var (nsq's app.StringArray)
FLOAT_LIST = "float-list"  # nsq's app.FloatArray: repeatable, comma separated
VALUE = "value"  # a flag.Var with its own parser, taking an argument
BOOL_VALUE = "bool-value"  # a flag.Var with IsBoolFlag(): no argument needed

_KINDS = frozenset(
    [STRING, INT, FLOAT, BOOL, DURATION, STRING_LIST, FLOAT_LIST, VALUE, BOOL_VALUE]
)
_BOOLEAN_KINDS = frozenset([BOOL, BOOL_VALUE])

# The type word Go's PrintDefaults shows after the flag name.
_TYPE_NAMES = {
    STRING: "string",
    INT: "int",
    FLOAT: "float",
    BOOL: "",
    DURATION: "duration",
    STRING_LIST: "value",
    FLOAT_LIST: "value",
    VALUE: "value",
    BOOL_VALUE: "",
}

# Go's flag package reduces strconv errors to these two texts.
_PARSE_ERROR = "parse error"
_RANGE_ERROR = "value out of range"

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


class FlagValueError(ValueError):
    """
    A flag value could not be parsed; ``str()`` is Go's reason text
    (``parse error``, ``value out of range`` or the flag's own words).
    """


class FlagError(Exception):
    """
    The command line is wrong.

    :ivar message: Go's message, e.g. ``flag provided but not defined: -foo``.
    :ivar exit_code: the status Go's ``flag.ExitOnError`` exits with (2).
    """

    exit_code = 2

    def __init__(self, message: str) -> None:
        Exception.__init__(self, message)
        self.message = message


class HelpRequested(Exception):
    """``-h`` or ``-help`` was given: print the usage and exit 0, as Go does."""

    exit_code = 0


class Flag:
    """
    One command-line flag.

    :param name: the Go name, without dashes (``mem-queue-size``).
    :param kind: one of the kind constants (:data:`STRING`, :data:`INT`, ...).
    :param default: the value when the flag is not given (durations in
        float seconds, lists as lists).
    :param help: the usage text, exactly Go's; or a callable returning it,
        evaluated only when usage is printed (for texts that need a lookup).
    :param attr: the attribute name the value is stored under; by default
        the name with ``-`` replaced by ``_``.
    :param ignored: a deprecated flag that is accepted, parsed and then
        forgotten (Go nsqd's ``--verbose``); it has no attribute.
    :param parse: for :data:`VALUE` and :data:`BOOL_VALUE`, turns the text
        into the stored value or raises :class:`FlagValueError` with Go's
        reason.  A :data:`BOOL_VALUE` flag given bare is parsed as ``true``.
    :param default_text: for :data:`VALUE` and :data:`BOOL_VALUE`, what the
        usage shows as ``(default ...)``; None shows nothing (Go shows
        nothing when the default is the type's zero value).
    """

    __slots__ = (
        "name",
        "kind",
        "default",
        "_help",
        "attr",
        "ignored",
        "parse",
        "default_text",
    )

    def __init__(
        self,
        name: str,
        kind: str,
        default: Any,
        help: Union[str, Callable[[], str]],
        attr: Optional[str] = None,
        ignored: bool = False,
        parse: Optional[Callable[[str], Any]] = None,
        default_text: Optional[str] = None,
    ) -> None:
        if kind not in _KINDS:
            raise ValueError("unknown flag kind %r" % (kind,))
        if not name or name.startswith("-") or "=" in name:
            raise ValueError("bad flag name %r" % (name,))
        if kind in (VALUE, BOOL_VALUE) and parse is None:
            raise ValueError("flag %s of kind %s needs a parse function" % (name, kind))
        self.name = name
        self.kind = kind
        self.default = default
        self._help = help
        self.attr = None if ignored else (attr or name.replace("-", "_"))
        self.ignored = ignored
        self.parse = parse
        self.default_text = default_text

    @property
    def help(self) -> str:
        """The usage text."""
        if callable(self._help):
            return self._help()
        return self._help

    @property
    def is_bool(self) -> bool:
        """True when the flag takes no argument (Go's ``IsBoolFlag``)."""
        return self.kind in _BOOLEAN_KINDS

    def convert(self, text: str) -> Any:
        """
        Parse one argument for this flag.

        :raises FlagValueError: with Go's reason text.
        """
        kind = self.kind
        if kind == STRING or kind == STRING_LIST:
            return text
        if kind == INT:
            return parse_go_int(text)
        if kind == FLOAT:
            return parse_go_float(text)
        if kind == BOOL:
            return parse_go_bool(text)
        if kind == DURATION:
            try:
                return parse_duration(text)
            except ValueError:
                raise FlagValueError(_PARSE_ERROR)
        if kind == FLOAT_LIST:
            values = []
            for part in text.split(","):
                try:
                    values.append(parse_go_float(part))
                except FlagValueError:
                    # nsq's FloatArray says this (and exits) on a bad item.
                    raise FlagValueError("Could not parse: %s" % (part,))
            return values
        assert self.parse is not None
        return self.parse(text)

    def initial(self) -> Any:
        """A fresh copy of the default (lists are never shared)."""
        if isinstance(self.default, list):
            return list(self.default)
        return self.default

    def usage_default(self) -> Optional[str]:
        """The ``(default ...)`` text of Go's PrintDefaults, or None."""
        kind = self.kind
        default = self.default
        if kind in (VALUE, BOOL_VALUE):
            return self.default_text
        if kind == STRING:
            return None if default == "" else _go_quote(default)
        if kind == BOOL:
            return "true" if default else None
        if kind == INT:
            return None if default == 0 else str(int(default))
        if kind == FLOAT:
            return None if default == 0 else format_go_float(float(default))
        if kind == DURATION:
            return None if default == 0 else format_duration(default)
        if kind == STRING_LIST:
            return ",".join(default) if default else None
        if kind == FLOAT_LIST:
            return ",".join("%f" % (value,) for value in default) if default else None
        return None  # pragma: no cover - kinds are checked in __init__

    def __repr__(self) -> str:
        return "Flag(%r, %r, %r)" % (self.name, self.kind, self.default)


class ParsedFlags:
    """
    The outcome of :func:`parse_flags`.

    :ivar values: every non-ignored flag's value by attribute name (the
        default when the flag was not given).
    :ivar given: the attribute names of the flags given on the command line
        (Go's ``FlagSet.Visit``), for "flag beats config file" decisions.
    :ivar args: the positional arguments left after the flags.
    """

    def __init__(self, values: Dict[str, Any], given: Set[str], args: List[str]) -> None:
        self.values = values
        self.given = given
        self.args = args

    def __getitem__(self, attr: str) -> Any:
        return self.values[attr]

    def __repr__(self) -> str:
        return "ParsedFlags(values=%r, given=%r, args=%r)" % (
            self.values,
            sorted(self.given),
            self.args,
        )


_Settings = TypeVar("_Settings")


def settings_from(
    parsed: ParsedFlags, defaults: Optional[_Settings], new: Callable[[], _Settings]
) -> _Settings:
    """
    A daemon's settings from its parsed flags: a copy of ``defaults`` (a
    fresh ``new()`` when ``None``) with each flag's value set on the
    attribute of its name; ``defaults`` is left as it was.
    """
    settings = copy.copy(defaults) if defaults is not None else new()
    for attr, value in parsed.values.items():
        setattr(settings, attr, value)
    return settings


def _flag_table(flags: Iterable[Flag]) -> Dict[str, Flag]:
    table: Dict[str, Flag] = {}
    for flag in flags:
        if flag.name in table:
            # Go panics: "flag redefined: name".
            raise ValueError("flag redefined: %s" % (flag.name,))
        table[flag.name] = flag
    return table


def parse_flags(flags: Iterable[Flag], argv: Sequence[str]) -> ParsedFlags:
    """
    Parse ``argv`` (without the program name) against a flag table.

    :raises FlagError: for an unknown flag, a missing or bad value, or bad
        flag syntax; ``.message`` is Go's text.
    :raises HelpRequested: for ``-h``/``-help`` when no such flag is defined.
    """
    table = _flag_table(flags)
    values: Dict[str, Any] = {}
    for flag in table.values():
        if flag.attr is not None:
            values[flag.attr] = flag.initial()
    given: Set[str] = set()
    # Lists restart from empty when first given rather than appending to
    # the default; Go's nsq daemons only have empty list defaults.
    started_lists: Set[str] = set()
    args = list(argv)
    while args:
        arg = args[0]
        if len(arg) < 2 or arg[0] != "-":
            break
        dashes = 1
        if arg[1] == "-":
            dashes = 2
            if len(arg) == 2:
                del args[0]
                break
        name = arg[dashes:]
        if not name or name[0] in "-=":
            raise FlagError("bad flag syntax: %s" % (arg,))
        del args[0]
        value: Optional[str] = None
        # "=" cannot be the first character of the name, as in Go.
        equals = name.find("=", 1)
        if equals >= 0:
            name, value = name[:equals], name[equals + 1 :]
        if name not in table:
            if name in ("help", "h"):
                raise HelpRequested()
            raise FlagError("flag provided but not defined: -%s" % (name,))
        flag = table[name]
        if flag.is_bool:
            if value is None:
                try:
                    converted = flag.convert("true")
                except FlagValueError as error:
                    raise FlagError("invalid boolean flag %s: %s" % (name, error))
            else:
                try:
                    converted = flag.convert(value)
                except FlagValueError as error:
                    raise FlagError(
                        "invalid boolean value %s for -%s: %s"
                        % (_go_quote(value), name, error)
                    )
        else:
            if value is None:
                if not args:
                    raise FlagError("flag needs an argument: -%s" % (name,))
                value = args.pop(0)
            try:
                converted = flag.convert(value)
            except FlagValueError as error:
                raise FlagError(
                    "invalid value %s for flag -%s: %s" % (_go_quote(value), name, error)
                )
        if flag.attr is None:
            continue
        if flag.kind in (STRING_LIST, FLOAT_LIST):
            if flag.attr not in started_lists:
                started_lists.add(flag.attr)
                values[flag.attr] = []
            if flag.kind == STRING_LIST:
                values[flag.attr].append(converted)
            else:
                values[flag.attr].extend(converted)
                # nsq's FloatArray keeps itself sorted, largest first.
                values[flag.attr].sort(reverse=True)
        else:
            values[flag.attr] = converted
        given.add(flag.attr)
    return ParsedFlags(values, given, args)


def format_defaults(flags: Iterable[Flag]) -> str:
    """
    Go's ``FlagSet.PrintDefaults``: every flag in name order, as
    ``  -name type`` then the help and ``(default ...)`` on a tabbed line.
    """
    lines = []
    for flag in sorted(_flag_table(flags).values(), key=lambda f: f.name):
        type_name, text = _unquote_usage(flag)
        line = "  -" + flag.name
        if type_name:
            line += " " + type_name
        # One-letter boolean flags keep their help on the same line.
        if len(line) <= 4:
            line += "\t"
        else:
            line += "\n    \t"
        line += text.replace("\n", "\n    \t")
        default = flag.usage_default()
        if default is not None:
            line += " (default %s)" % (default,)
        lines.append(line + "\n")
    return "".join(lines)


def format_usage(flags: Iterable[Flag], program: Optional[str]) -> str:
    """
    The usage text Go's default ``FlagSet.Usage`` prints: ``Usage of
    PROGRAM:`` and then :func:`format_defaults`.
    """
    header = "Usage of %s:\n" % (program,) if program else "Usage:\n"
    return header + format_defaults(flags)


def _unquote_usage(flag: Flag) -> "tuple[str, str]":
    """Go's UnquoteUsage: a `back-quoted` word in the help names the value."""
    text = flag.help
    start = text.find("`")
    if start >= 0:
        end = text.find("`", start + 1)
        if end >= 0:
            name = text[start + 1 : end]
            return name, text[:start] + name + text[end + 1 :]
    return _TYPE_NAMES[flag.kind], text


def run_or_exit(
    flags: Sequence[Flag],
    argv: Sequence[str],
    program: Optional[str],
    stderr: Optional[IO[str]] = None,
) -> ParsedFlags:
    """
    Parse like :func:`parse_flags`, but on error print Go's message and the
    usage to standard error and exit 2; on ``-h`` print the usage and exit 0.
    """
    if stderr is None:
        stderr = sys.stderr
    try:
        return parse_flags(flags, argv)
    except HelpRequested:
        stderr.write(format_usage(flags, program))
        stderr.flush()
        sys.exit(HelpRequested.exit_code)
    except FlagError as error:
        stderr.write(error.message + "\n")
        stderr.write(format_usage(flags, program))
        stderr.flush()
        sys.exit(error.exit_code)


def parse_settings(
    flags: Callable[[Optional[_Settings]], List[Flag]],
    new: Callable[[], _Settings],
    argv: Sequence[str],
    defaults: Optional[_Settings] = None,
) -> _Settings:
    """
    Parse a daemon's command line (without the program name) with its flag
    table ``flags(defaults)`` into its settings (:func:`settings_from`).

    Arguments after the flags are ignored, as Go's daemons ignore them.
    The settings are not validated.

    :param defaults: the values of flags not given; Go's defaults
        (``new()``) if omitted.
    :raises FlagError: for a bad command line (Go's message).
    :raises HelpRequested: for ``-h``/``--help``.
    """
    return settings_from(parse_flags(flags(defaults), argv), defaults, new)


def parse_settings_or_exit(
    flags: Callable[[Optional[_Settings]], List[Flag]],
    new: Callable[[], _Settings],
    argv: Sequence[str],
    program: str,
    defaults: Optional[_Settings] = None,
) -> _Settings:
    """
    :func:`parse_settings` for a daemon's console script: on a bad command
    line print Go's message and the usage to standard error and exit 2; on
    ``-h`` print the usage and exit 0 (:func:`run_or_exit`).
    """
    return settings_from(run_or_exit(flags(defaults), argv, program), defaults, new)


# --- Go value syntax -------------------------------------------------------


def _go_quote(text: str) -> str:
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

    :raises FlagValueError: ``parse error`` for anything else.
    """
    try:
        return _GO_BOOLS[text]
    except KeyError:
        raise FlagValueError(_PARSE_ERROR)


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

    :raises FlagValueError: ``parse error`` or ``value out of range``.
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
        raise FlagValueError(_PARSE_ERROR)
    digits = body.replace("_", "")
    if not digits or any(char not in _DIGITS[base] for char in digits):
        raise FlagValueError(_PARSE_ERROR)
    value = int(digits, base)
    if negative:
        value = -value
    if not -(1 << (bits - 1)) <= value <= (1 << (bits - 1)) - 1:
        raise FlagValueError(_RANGE_ERROR)
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

    :raises FlagValueError: ``parse error`` or ``value out of range``.
    """
    special = _SPECIAL_FLOATS.get(text.lower())
    if special is not None:
        return special
    if _DECIMAL_FLOAT.match(text):
        value = float(text.replace("_", ""))
    elif _HEX_FLOAT.match(text):
        value = float.fromhex(text.replace("_", ""))
    else:
        raise FlagValueError(_PARSE_ERROR)
    if math.isinf(value):
        raise FlagValueError(_RANGE_ERROR)
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
    quoted = _go_quote(original)
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
                "time: unknown unit %s in duration %s" % (_go_quote(unit_name), quoted)
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

