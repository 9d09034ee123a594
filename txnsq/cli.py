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
import sys
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

from txnsq.protocol.go_values import GoValueError as FlagValueError
from txnsq.protocol.go_values import (
    format_duration,
    format_duration_ns,
    format_go_float,
    go_quote as _go_quote,
    parse_duration,
    parse_duration_ns,
    parse_go_bool,
    parse_go_float,
    parse_go_int,
)
from txnsq.logging import LOG_LEVEL_LABELS, parse_log_level_flag
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
    "log_flags",
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
    """Go's UnquoteUsage: a word in back quotes in the help names the value."""
    text = flag.help
    start = text.find("`")
    if start >= 0:
        end = text.find("`", start + 1)
        if end >= 0:
            name = text[start + 1 : end]
            return name, text[:start] + name + text[end + 1 :]
    return _TYPE_NAMES[flag.kind], text


def log_flags(level: str, prefix: str) -> List[Flag]:
    """
    The logging flags every Go NSQ daemon declares, in Go's order:
    ``--log-level`` (default ``level``), ``--log-prefix`` (default
    ``prefix``) and the deprecated, ignored ``--verbose``.
    """
    return [
        Flag(
            "log-level",
            VALUE,
            level,
            "set log verbosity: debug, info, warn, error, or fatal",
            parse=parse_log_level_flag,
            # Go prints its LogLevel type: INFO, WARNING ...
            default_text=LOG_LEVEL_LABELS.get(level.lower(), level),
        ),
        Flag("log-prefix", STRING, prefix, "log message prefix"),
        Flag(
            "verbose",
            BOOL,
            False,
            "[deprecated] has no effect, use --log-level",
            ignored=True,
        ),
    ]


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
