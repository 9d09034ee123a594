"""
Tests for txnsq.nsqlookupd.options: nsqlookupd's settings and Go-style flags.
"""

from __future__ import annotations

import dataclasses
import io
import socket
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from txnsq import cli
from txnsq.nsqlookupd.options import (
    NSQLookupdOptions,
    nsqlookupd_flags,
    parse_nsqlookupd_args,
    parse_nsqlookupd_args_or_exit,
)

#: Go nsqlookupd v1.3's ``-h`` output, with this host's name as the
#: broadcast address default.
GO_USAGE = """\
  -broadcast-address string
    \taddress of this lookupd node, (default to the OS hostname) (default "%s")
  -config string
    \tpath to config file
  -http-address string
    \t<addr>:<port> to listen on for HTTP clients (default "0.0.0.0:4161")
  -inactive-producer-timeout duration
    \tduration of time a producer will remain in the active list since its last ping (default 5m0s)
  -log-level value
    \tset log verbosity: debug, info, warn, error, or fatal (default INFO)
  -log-prefix string
    \tlog message prefix (default "[nsqlookupd] ")
  -tcp-address string
    \t<addr>:<port> to listen on for TCP clients (default "0.0.0.0:4160")
  -tombstone-lifetime duration
    \tduration of time a producer will remain tombstoned if registration remains (default 45s)
  -verbose
    \t[deprecated] has no effect, use --log-level
  -version
    \tprint version string
"""


class DefaultsTests(SynchronousTestCase):
    """NSQLookupdOptions holds Go nsqlookupd's defaults."""

    def test_go_defaults(self) -> None:
        """Every default is Go's."""
        options = NSQLookupdOptions()
        self.assertEqual(
            dataclasses.asdict(options),
            {
                "version": False,
                "config": "",
                "log_level": "info",
                "log_prefix": "[nsqlookupd] ",
                "tcp_address": "0.0.0.0:4160",
                "http_address": "0.0.0.0:4161",
                "broadcast_address": socket.gethostname(),
                "inactive_producer_timeout": 300.0,
                "tombstone_lifetime": 45.0,
            },
        )

    def test_defaults_valid(self) -> None:
        """The defaults pass validation."""
        NSQLookupdOptions().validate()

    def test_every_flag_has_an_attribute(self) -> None:
        """Each flag but the deprecated --verbose sets an attribute of the same name."""
        attributes = {f.name for f in dataclasses.fields(NSQLookupdOptions)}
        flags = {flag.attr for flag in nsqlookupd_flags() if flag.attr is not None}
        self.assertEqual(flags, attributes)

    def test_usage_matches_go(self) -> None:
        """The usage text is Go nsqlookupd's, flag for flag."""
        self.assertEqual(
            cli.format_defaults(nsqlookupd_flags()), GO_USAGE % (socket.gethostname(),)
        )

    def test_flag_defaults_follow_options(self) -> None:
        """Defaults given to the table appear in it (and in the usage)."""
        defaults = NSQLookupdOptions(tombstone_lifetime=1.5, log_level="warn")
        text = cli.format_defaults(nsqlookupd_flags(defaults))
        self.assertIn("(default 1.5s)", text)
        self.assertIn("(default WARNING)", text)


class ParseTests(SynchronousTestCase):
    """parse_nsqlookupd_args reads Go's command lines."""

    def test_no_arguments(self) -> None:
        """No flags give the defaults."""
        self.assertEqual(parse_nsqlookupd_args([]), NSQLookupdOptions())

    def test_every_spelling(self) -> None:
        """-flag value, --flag value, -flag=value and --flag=value are all one."""
        for argv in (
            ["-tcp-address", "127.0.0.1:0"],
            ["--tcp-address", "127.0.0.1:0"],
            ["-tcp-address=127.0.0.1:0"],
            ["--tcp-address=127.0.0.1:0"],
        ):
            self.assertEqual(parse_nsqlookupd_args(argv).tcp_address, "127.0.0.1:0")

    def test_all_flags(self) -> None:
        """Every flag is read into its attribute."""
        options = parse_nsqlookupd_args(
            [
                "--tcp-address=127.0.0.1:1",
                "--http-address=127.0.0.1:2",
                "--broadcast-address=lookup.example",
                "--inactive-producer-timeout=1m30s",
                "--tombstone-lifetime=500ms",
                "--log-level=WARN",
                "--log-prefix=",
                "--config=/etc/nsqlookupd.cfg",
                "--version",
            ]
        )
        self.assertEqual(
            (options.tcp_address, options.http_address, options.broadcast_address),
            ("127.0.0.1:1", "127.0.0.1:2", "lookup.example"),
        )
        self.assertEqual((options.inactive_producer_timeout, options.tombstone_lifetime), (90.0, 0.5))
        self.assertEqual((options.log_level, options.log_prefix), ("warn", ""))
        self.assertEqual(options.config, "/etc/nsqlookupd.cfg")
        self.assertIs(options.version, True)

    def test_durations_need_units(self) -> None:
        """A duration without a unit is a Go parse error."""
        with self.assertRaises(cli.FlagError) as caught:
            parse_nsqlookupd_args(["--tombstone-lifetime=45"])
        self.assertEqual(
            caught.exception.message, 'invalid value "45" for flag -tombstone-lifetime: parse error'
        )

    def test_unknown_flag(self) -> None:
        """An unknown flag is Go's error (an nsqd flag is unknown here)."""
        with self.assertRaises(cli.FlagError) as caught:
            parse_nsqlookupd_args(["--mem-queue-size=1"])
        self.assertEqual(caught.exception.message, "flag provided but not defined: -mem-queue-size")

    def test_bad_log_level(self) -> None:
        """An unknown log level is refused with Go's words."""
        with self.assertRaises(cli.FlagError) as caught:
            parse_nsqlookupd_args(["--log-level=loud"])
        self.assertEqual(
            caught.exception.message,
            "invalid value \"loud\" for flag -log-level: "
            "invalid log level 'loud' (debug, info, warn, error, fatal)",
        )

    def test_missing_value(self) -> None:
        """A flag at the end without its value is Go's error."""
        with self.assertRaises(cli.FlagError) as caught:
            parse_nsqlookupd_args(["--http-address"])
        self.assertEqual(caught.exception.message, "flag needs an argument: -http-address")

    def test_verbose_accepted(self) -> None:
        """The deprecated --verbose is accepted and has no effect."""
        self.assertEqual(parse_nsqlookupd_args(["--verbose"]), NSQLookupdOptions())
        self.assertEqual(parse_nsqlookupd_args(["-verbose=false"]), NSQLookupdOptions())

    def test_help(self) -> None:
        """-h and --help ask for the usage."""
        for flag in ("-h", "--help"):
            self.assertRaises(cli.HelpRequested, parse_nsqlookupd_args, [flag])

    def test_positional_arguments_ignored(self) -> None:
        """Arguments after the flags end them, as in Go."""
        options = parse_nsqlookupd_args(["--tcp-address=a:1", "extra", "--tcp-address=b:2"])
        self.assertEqual(options.tcp_address, "a:1")

    def test_last_flag_wins(self) -> None:
        """A flag given twice takes its last value."""
        options = parse_nsqlookupd_args(["--tcp-address=a:1", "--tcp-address=b:2"])
        self.assertEqual(options.tcp_address, "b:2")

    def test_defaults_argument(self) -> None:
        """Flags not given keep the supplied defaults, which are not modified."""
        defaults = NSQLookupdOptions(tombstone_lifetime=1.0)
        options = parse_nsqlookupd_args(["--tcp-address=a:1"], defaults)
        self.assertEqual((options.tombstone_lifetime, options.tcp_address), (1.0, "a:1"))
        self.assertEqual(defaults.tcp_address, "0.0.0.0:4160")


class ParseOrExitTests(SynchronousTestCase):
    """parse_nsqlookupd_args_or_exit exits as Go nsqlookupd does."""

    def setUp(self) -> None:
        self.stderr = io.StringIO()
        self.patch(cli.sys, "stderr", self.stderr)

    def test_unknown_flag(self) -> None:
        """An unknown flag prints Go's message and usage and exits 2."""
        with self.assertRaises(SystemExit) as caught:
            parse_nsqlookupd_args_or_exit(["--foo"])
        self.assertEqual(caught.exception.code, 2)
        self.assertTrue(
            self.stderr.getvalue().startswith(
                "flag provided but not defined: -foo\nUsage of nsqlookupd:\n"
            )
        )

    def test_help(self) -> None:
        """-h prints the usage and exits 0."""
        with self.assertRaises(SystemExit) as caught:
            parse_nsqlookupd_args_or_exit(["-h"])
        self.assertEqual(caught.exception.code, 0)
        self.assertTrue(self.stderr.getvalue().startswith("Usage of nsqlookupd:\n"))

    def test_success(self) -> None:
        """Good flags are returned as options, silently."""
        self.assertEqual(parse_nsqlookupd_args_or_exit(["--tombstone-lifetime=1s"]).tombstone_lifetime, 1.0)
        self.assertEqual(self.stderr.getvalue(), "")


class ValidateTests(SynchronousTestCase):
    """NSQLookupdOptions.validate refuses impossible settings with readable errors."""

    def assertInvalid(self, message: str, **changes: Any) -> None:
        with self.assertRaises(ValueError) as caught:
            NSQLookupdOptions(**changes).validate()
        self.assertEqual(str(caught.exception), message)

    def test_log_level(self) -> None:
        """Unknown levels are refused; known ones are lower-cased."""
        self.assertInvalid(
            "invalid log level 'loud' (debug, info, warn, error, fatal)", log_level="loud"
        )
        options = NSQLookupdOptions(log_level="DEBUG")
        options.validate()
        self.assertEqual(options.log_level, "debug")

    def test_negative_durations(self) -> None:
        """Durations must not be negative."""
        self.assertInvalid(
            "--tombstone-lifetime must not be negative (-1s)", tombstone_lifetime=-1.0
        )
        self.assertInvalid(
            "--inactive-producer-timeout must not be negative (-1m0s)",
            inactive_producer_timeout=-60.0,
        )
        NSQLookupdOptions(tombstone_lifetime=0.0, inactive_producer_timeout=0.0).validate()

    def test_empty_addresses(self) -> None:
        """Both listen addresses are required."""
        self.assertInvalid("--tcp-address must not be empty", tcp_address="")
        self.assertInvalid("--http-address must not be empty", http_address="")

    def test_bad_addresses(self) -> None:
        """A listen address that is neither host:port nor an endpoint names its flag."""
        with self.assertRaises(ValueError) as caught:
            NSQLookupdOptions(tcp_address="nonsense").validate()
        self.assertTrue(str(caught.exception).startswith("--tcp-address: invalid listen address"))
        with self.assertRaises(ValueError) as caught:
            NSQLookupdOptions(http_address="127.0.0.1:99999").validate()
        self.assertTrue(str(caught.exception).startswith("--http-address: invalid port"))

    def test_endpoint_descriptions(self) -> None:
        """Twisted endpoint descriptions and socket paths are accepted."""
        NSQLookupdOptions(
            tcp_address="tcp:4160:interface=127.0.0.1", http_address="unix:/tmp/lookupd.sock"
        ).validate()
        NSQLookupdOptions(tcp_address="[::1]:0", http_address=":4161").validate()

    def test_config_unsupported(self) -> None:
        """--config is refused with an explanation."""
        self.assertInvalid(
            "--config is not supported yet (config file 'x.cfg'): give the settings as flags",
            config="x.cfg",
        )
