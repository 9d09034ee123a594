"""Tests for txnsq.cli: Go ``flag``-package parsing."""

from __future__ import annotations

import io

from twisted.trial.unittest import SynchronousTestCase

from txnsq import cli
from txnsq.cli import (
    BOOL,
    BOOL_VALUE,
    DURATION,
    FLOAT,
    FLOAT_LIST,
    INT,
    STRING,
    STRING_LIST,
    VALUE,
    Flag,
    FlagError,
    FlagValueError,
    HelpRequested,
    parse_flags,
    parse_go_bool,
)


def _mode(text: str) -> str:
    if text not in ("a", "b"):
        raise FlagValueError("unknown mode %r" % (text,))
    return text


def _toggle(text: str) -> str:
    if text == "both":
        return "both"
    return "on" if parse_go_bool(text) else "off"


def sample_flags() -> list:
    """A small table with one flag of every kind."""
    return [
        Flag("name", STRING, "anon", "the name"),
        Flag("mem-queue-size", INT, 10000, "queue size"),
        Flag("ratio", FLOAT, 0.0, "a ratio"),
        Flag("snappy", BOOL, True, "enable snappy"),
        Flag("debug", BOOL, False, "debug"),
        Flag("timeout", DURATION, 60.0, "a timeout"),
        Flag("address", STRING_LIST, [], "an address (may be given multiple times)"),
        Flag("percentile", FLOAT_LIST, [], "percentiles"),
        Flag("mode", VALUE, "a", "a mode", parse=_mode, default_text="a"),
        Flag("toggle", BOOL_VALUE, "off", "a toggle", parse=_toggle),
        Flag("verbose", BOOL, False, "[deprecated] no effect", ignored=True),
        Flag("x", BOOL, False, "one letter"),
    ]


def parse(*argv: str) -> cli.ParsedFlags:
    return parse_flags(sample_flags(), list(argv))


def parse_error(*argv: str) -> str:
    return parse_flags_error(sample_flags(), list(argv))


def parse_flags_error(flags: list, argv: list) -> str:
    try:
        parse_flags(flags, argv)
    except FlagError as error:
        return error.message
    raise AssertionError("no FlagError for %r" % (argv,))


class SpellingTests(SynchronousTestCase):
    """Every Go spelling of a flag and its value."""

    def test_single_dash_separate_value(self) -> None:
        """``-flag value`` sets the flag."""
        self.assertEqual(parse("-mem-queue-size", "5")["mem_queue_size"], 5)

    def test_double_dash_separate_value(self) -> None:
        """``--flag value`` sets the flag."""
        self.assertEqual(parse("--mem-queue-size", "5")["mem_queue_size"], 5)

    def test_single_dash_equals(self) -> None:
        """``-flag=value`` sets the flag."""
        self.assertEqual(parse("-mem-queue-size=5")["mem_queue_size"], 5)

    def test_double_dash_equals(self) -> None:
        """``--flag=value`` sets the flag."""
        self.assertEqual(parse("--mem-queue-size=5")["mem_queue_size"], 5)

    def test_value_may_contain_equals(self) -> None:
        """Only the first ``=`` splits name from value."""
        self.assertEqual(parse("--name=a=b")["name"], "a=b")

    def test_empty_value_after_equals(self) -> None:
        """``--name=`` sets an empty string."""
        self.assertEqual(parse("--name=")["name"], "")

    def test_value_may_start_with_dash(self) -> None:
        """The argument after a value flag is its value even if it looks like a flag."""
        self.assertEqual(parse("--name", "-x")["name"], "-x")
        self.assertEqual(parse("--mem-queue-size", "-5")["mem_queue_size"], -5)

    def test_defaults(self) -> None:
        """Flags not given keep their defaults; ignored flags have no value."""
        parsed = parse()
        self.assertEqual(
            parsed.values,
            {
                "name": "anon",
                "mem_queue_size": 10000,
                "ratio": 0.0,
                "snappy": True,
                "debug": False,
                "timeout": 60.0,
                "address": [],
                "percentile": [],
                "mode": "a",
                "toggle": "off",
                "x": False,
            },
        )
        self.assertEqual(parsed.given, set())
        self.assertEqual(parsed.args, [])

    def test_given_records_flags_set(self) -> None:
        """``given`` names the attributes set on the command line."""
        parsed = parse("--name", "n", "-debug", "--verbose")
        self.assertEqual(parsed.given, {"name", "debug"})

    def test_last_value_wins(self) -> None:
        """A scalar flag given twice keeps the last value, as Go."""
        self.assertEqual(parse("--name=a", "--name=b")["name"], "b")

    def test_default_lists_not_shared(self) -> None:
        """Each parse returns fresh list defaults."""
        first = parse()
        first["address"].append("x")
        self.assertEqual(parse()["address"], [])


class BoolTests(SynchronousTestCase):
    """Boolean flags: bare, or with ``=`` and a Go boolean."""

    def test_bare_is_true(self) -> None:
        """A bare boolean flag is true."""
        self.assertIs(parse("--debug")["debug"], True)
        self.assertIs(parse("-debug")["debug"], True)

    def test_true_forms(self) -> None:
        """Every strconv.ParseBool spelling of true is accepted."""
        for text in ("1", "t", "T", "TRUE", "true", "True"):
            self.assertIs(parse("--debug=" + text)["debug"], True, text)

    def test_false_forms(self) -> None:
        """Every strconv.ParseBool spelling of false is accepted."""
        for text in ("0", "f", "F", "FALSE", "false", "False"):
            self.assertIs(parse("--snappy=" + text)["snappy"], False, text)

    def test_bad_boolean(self) -> None:
        """Other spellings are refused with Go's message."""
        self.assertEqual(
            parse_error("--snappy=yes"),
            'invalid boolean value "yes" for -snappy: parse error',
        )
        self.assertEqual(
            parse_error("--snappy=tRuE"),
            'invalid boolean value "tRuE" for -snappy: parse error',
        )

    def test_never_consumes_next_argument(self) -> None:
        """``--snappy false`` sets true and ``false`` ends the flags."""
        parsed = parse("--snappy", "false", "--debug")
        self.assertIs(parsed["snappy"], True)
        self.assertIs(parsed["debug"], False)
        self.assertEqual(parsed.args, ["false", "--debug"])

    def test_bool_value_bare(self) -> None:
        """A bool-like Var given bare is parsed as ``true``."""
        self.assertEqual(parse("--toggle")["toggle"], "on")

    def test_bool_value_with_text(self) -> None:
        """A bool-like Var takes its own words after ``=``."""
        self.assertEqual(parse("--toggle=both")["toggle"], "both")
        self.assertEqual(parse("--toggle=false")["toggle"], "off")

    def test_bool_value_error(self) -> None:
        """A bool-like Var's refusal is reported as a boolean value error."""
        self.assertEqual(
            parse_error("--toggle=maybe"),
            'invalid boolean value "maybe" for -toggle: parse error',
        )

    def test_bool_value_bare_refused(self) -> None:
        """A bool-like Var that refuses ``true`` gives Go's bare-flag message."""

        def refuse(text: str) -> str:
            raise FlagValueError("no")

        flags = [Flag("odd", BOOL_VALUE, "", "odd", parse=refuse)]
        self.assertEqual(
            parse_flags_error(flags, ["--odd"]), "invalid boolean flag odd: no"
        )

    def test_deprecated_flag_accepted(self) -> None:
        """An ignored flag is accepted bare or with a value and then forgotten."""
        self.assertNotIn("verbose", parse("--verbose").values)
        self.assertNotIn("verbose", parse("-verbose=false").values)
        self.assertEqual(
            parse_error("--verbose=loud"),
            'invalid boolean value "loud" for -verbose: parse error',
        )


class TerminationTests(SynchronousTestCase):
    """Where flag parsing stops."""

    def test_double_dash_ends_flags(self) -> None:
        """``--`` is dropped and everything after it is positional."""
        parsed = parse("--debug", "--", "--name=x", "y")
        self.assertIs(parsed["debug"], True)
        self.assertEqual(parsed["name"], "anon")
        self.assertEqual(parsed.args, ["--name=x", "y"])

    def test_first_non_flag_ends_flags(self) -> None:
        """The first non-flag argument ends the flags, as in Go."""
        parsed = parse("--name", "n", "file", "--debug")
        self.assertEqual(parsed["name"], "n")
        self.assertIs(parsed["debug"], False)
        self.assertEqual(parsed.args, ["file", "--debug"])

    def test_single_dash_is_positional(self) -> None:
        """A lone ``-`` is a positional argument."""
        self.assertEqual(parse("-", "--debug").args, ["-", "--debug"])

    def test_empty_string_is_positional(self) -> None:
        """An empty argument ends the flags."""
        self.assertEqual(parse("", "--debug").args, ["", "--debug"])


class ErrorTests(SynchronousTestCase):
    """Go's error messages."""

    def test_unknown_flag(self) -> None:
        """An unknown flag is named with one dash, whatever was typed."""
        self.assertEqual(parse_error("--foo"), "flag provided but not defined: -foo")
        self.assertEqual(parse_error("-foo=1"), "flag provided but not defined: -foo")

    def test_exit_code(self) -> None:
        """Flag errors carry Go's exit status 2."""
        self.assertEqual(FlagError("x").exit_code, 2)

    def test_missing_argument(self) -> None:
        """A value flag at the end of the line needs an argument."""
        self.assertEqual(parse_error("--name"), "flag needs an argument: -name")

    def test_bad_int(self) -> None:
        """A bad integer is a parse error."""
        self.assertEqual(
            parse_error("--mem-queue-size", "x"),
            'invalid value "x" for flag -mem-queue-size: parse error',
        )

    def test_int_out_of_range(self) -> None:
        """An integer beyond int64 is out of range."""
        self.assertEqual(
            parse_error("--mem-queue-size=9223372036854775808"),
            'invalid value "9223372036854775808" for flag -mem-queue-size: '
            "value out of range",
        )

    def test_bad_duration(self) -> None:
        """A bad duration is a parse error (flag hides time's message)."""
        self.assertEqual(
            parse_error("--timeout=60"),
            'invalid value "60" for flag -timeout: parse error',
        )

    def test_bad_float(self) -> None:
        """A bad float is a parse error."""
        self.assertEqual(
            parse_error("--ratio=1,5"),
            'invalid value "1,5" for flag -ratio: parse error',
        )

    def test_value_parser_message(self) -> None:
        """A custom value's own reason follows the colon."""
        self.assertEqual(
            parse_error("--mode=c"),
            "invalid value \"c\" for flag -mode: unknown mode 'c'",
        )

    def test_bad_float_list_item(self) -> None:
        """A bad item of a float list names the item."""
        self.assertEqual(
            parse_error("--percentile=0.9,x"),
            'invalid value "0.9,x" for flag -percentile: Could not parse: x',
        )

    def test_bad_syntax(self) -> None:
        """Three dashes or a leading ``=`` is bad flag syntax."""
        self.assertEqual(parse_error("---x"), "bad flag syntax: ---x")
        self.assertEqual(parse_error("-=x"), "bad flag syntax: -=x")
        self.assertEqual(parse_error("--=x"), "bad flag syntax: --=x")

    def test_quoting_in_messages(self) -> None:
        """Values are quoted as Go's %q does."""
        self.assertEqual(
            parse_error('--mem-queue-size=a"b\n'),
            'invalid value "a\\"b\\n" for flag -mem-queue-size: parse error',
        )

    def test_redefined_flag(self) -> None:
        """A table naming a flag twice is a programming error."""
        flags = [Flag("a", BOOL, False, ""), Flag("a", BOOL, False, "")]
        self.assertRaises(ValueError, parse_flags, flags, [])


class HelpTests(SynchronousTestCase):
    """``-h`` and ``-help``."""

    def test_help_spellings(self) -> None:
        """-h, -help, --h and --help request help."""
        for arg in ("-h", "-help", "--h", "--help", "--help=1"):
            self.assertRaises(HelpRequested, parse, arg)

    def test_help_exit_code(self) -> None:
        """Help exits 0, as Go's ExitOnError does for ErrHelp."""
        self.assertEqual(HelpRequested.exit_code, 0)

    def test_defined_help_flag_wins(self) -> None:
        """A program that defines -h gets it as an ordinary flag."""
        flags = [Flag("h", BOOL, False, "hosts")]
        self.assertIs(parse_flags(flags, ["-h"])["h"], True)

    def test_usage_layout(self) -> None:
        """The usage lists flags by name in Go's PrintDefaults layout."""
        text = cli.format_usage(sample_flags(), "prog")
        self.assertEqual(
            text,
            "Usage of prog:\n"
            "  -address value\n"
            "    \tan address (may be given multiple times)\n"
            "  -debug\n"
            "    \tdebug\n"
            "  -mem-queue-size int\n"
            "    \tqueue size (default 10000)\n"
            "  -mode value\n"
            "    \ta mode (default a)\n"
            "  -name string\n"
            '    \tthe name (default "anon")\n'
            "  -percentile value\n"
            "    \tpercentiles\n"
            "  -ratio float\n"
            "    \ta ratio\n"
            "  -snappy\n"
            "    \tenable snappy (default true)\n"
            "  -timeout duration\n"
            "    \ta timeout (default 1m0s)\n"
            "  -toggle\n"
            "    \ta toggle\n"
            "  -verbose\n"
            "    \t[deprecated] no effect\n"
            "  -x\tone letter\n",
        )

    def test_usage_without_program(self) -> None:
        """Without a program name the header is ``Usage:``."""
        self.assertTrue(cli.format_usage([], None).startswith("Usage:\n"))

    def test_backquoted_value_name(self) -> None:
        """A `back-quoted` word in the help names the value, as UnquoteUsage."""
        flags = [Flag("dir", STRING, "", "the `directory` to use")]
        self.assertEqual(
            cli.format_defaults(flags),
            "  -dir directory\n    \tthe directory to use\n",
        )

    def test_callable_help(self) -> None:
        """A callable help is evaluated when the usage is rendered."""
        flags = [Flag("s", STRING, "", lambda: "computed")]
        self.assertIn("computed", cli.format_defaults(flags))


class RepeatableTests(SynchronousTestCase):
    """Flags that may be given many times."""

    def test_string_list_accumulates(self) -> None:
        """Each occurrence is appended, in order, whatever the spelling."""
        parsed = parse("--address=a:1", "-address", "b:2", "--address", "c:3")
        self.assertEqual(parsed["address"], ["a:1", "b:2", "c:3"])

    def test_list_replaces_default(self) -> None:
        """A list given on the command line starts from empty."""
        flags = [Flag("a", STRING_LIST, ["d"], "")]
        self.assertEqual(parse_flags(flags, ["--a=x"])["a"], ["x"])
        self.assertEqual(parse_flags(flags, [])["a"], ["d"])

    def test_float_list_comma_and_repeat(self) -> None:
        """Float lists take commas and repeats and stay sorted largest first."""
        parsed = parse("--percentile=0.5,0.99", "--percentile", "0.95")
        self.assertEqual(parsed["percentile"], [0.99, 0.95, 0.5])


class RunOrExitTests(SynchronousTestCase):
    """The wrapper a console script's main calls."""

    def test_success(self) -> None:
        """Good arguments are returned parsed and nothing is printed."""
        err = io.StringIO()
        parsed = cli.run_or_exit(sample_flags(), ["--debug"], "prog", stderr=err)
        self.assertIs(parsed["debug"], True)
        self.assertEqual(err.getvalue(), "")

    def test_unknown_flag_exits_2(self) -> None:
        """An unknown flag prints Go's message then the usage, and exits 2."""
        err = io.StringIO()
        with self.assertRaises(SystemExit) as caught:
            cli.run_or_exit(sample_flags(), ["--foo"], "prog", stderr=err)
        self.assertEqual(caught.exception.code, 2)
        self.assertEqual(
            err.getvalue(),
            "flag provided but not defined: -foo\n"
            + cli.format_usage(sample_flags(), "prog"),
        )

    def test_help_exits_0(self) -> None:
        """-h prints the usage to standard error and exits 0."""
        err = io.StringIO()
        with self.assertRaises(SystemExit) as caught:
            cli.run_or_exit(sample_flags(), ["-h"], "prog", stderr=err)
        self.assertEqual(caught.exception.code, 0)
        self.assertEqual(err.getvalue(), cli.format_usage(sample_flags(), "prog"))


class SettingsFromTests(SynchronousTestCase):
    """settings_from applies parsed flags to a daemon's settings object."""

    class Settings:
        def __init__(self) -> None:
            self.size = 1
            self.name = "x"

    def test_fresh(self) -> None:
        """Without defaults a new settings object gets every flag's value."""
        parsed = parse_flags([Flag("size", INT, 5, "")], ["--size=3"])
        settings = cli.settings_from(parsed, None, self.Settings)
        self.assertEqual((settings.size, settings.name), (3, "x"))

    def test_defaults_copied(self) -> None:
        """With defaults a copy is changed; the defaults stay as they were."""
        defaults = self.Settings()
        defaults.name = "kept"
        parsed = parse_flags([Flag("size", INT, 5, "")], [])
        settings = cli.settings_from(parsed, defaults, self.Settings)
        self.assertIsNot(settings, defaults)
        self.assertEqual((settings.size, settings.name), (5, "kept"))
        self.assertEqual(defaults.size, 1)


class ParseSettingsTests(SynchronousTestCase):
    """parse_settings and parse_settings_or_exit read a daemon's command line into its settings."""

    class Settings:
        def __init__(self) -> None:
            self.size = 1

    @staticmethod
    def flags(defaults: "ParseSettingsTests.Settings | None") -> "list[Flag]":
        return [Flag("size", INT, defaults.size if defaults is not None else 5, "")]

    def test_defaults_from_table(self) -> None:
        """The flag table is made from the defaults given; a given flag wins."""
        defaults = self.Settings()
        defaults.size = 9
        self.assertEqual(cli.parse_settings(self.flags, self.Settings, [], defaults).size, 9)
        self.assertEqual(cli.parse_settings(self.flags, self.Settings, []).size, 5)
        self.assertEqual(cli.parse_settings(self.flags, self.Settings, ["-size=2"]).size, 2)

    def test_errors_raise(self) -> None:
        """A bad command line raises FlagError."""
        self.assertRaises(FlagError, cli.parse_settings, self.flags, self.Settings, ["--x"])

    def test_or_exit(self) -> None:
        """The console-script variant exits 2 with Go's message and the program's usage."""
        err = io.StringIO()
        self.patch(cli.sys, "stderr", err)
        with self.assertRaises(SystemExit) as caught:
            cli.parse_settings_or_exit(self.flags, self.Settings, ["--x"], "toyd")
        self.assertEqual(caught.exception.code, 2)
        self.assertIn("flag provided but not defined: -x\nUsage of toyd:", err.getvalue())
        settings = cli.parse_settings_or_exit(self.flags, self.Settings, ["-size", "4"], "toyd")
        self.assertEqual(settings.size, 4)


class LogFlagsTests(SynchronousTestCase):
    """log_flags: the logging flags every daemon declares."""

    def test_log_flags(self) -> None:
        """The daemons' logging flags: level (Go's label as default), prefix, ignored verbose."""
        level, prefix, verbose = cli.log_flags("warn", "[x] ")
        self.assertEqual((level.name, level.default, level.usage_default()), ("log-level", "warn", "WARNING"))
        self.assertEqual(level.convert("ERROR"), "error")
        self.assertEqual((prefix.name, prefix.default), ("log-prefix", "[x] "))
        self.assertEqual(verbose.name, "verbose")
        self.assertTrue(verbose.ignored)
