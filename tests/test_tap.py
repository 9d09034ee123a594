"""Tests for txnsq.nsqd.tap: nsqd's options under twistd."""

from __future__ import annotations

import io
import sys
from typing import List

from twisted.application import service
from twisted.python import usage
from twisted.scripts import twistd
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer

from txnsq.nsqd.options import TLS_REQUIRED, NSQDOptions
from txnsq.nsqd.tap import Options


class OptionsTests(SynchronousTestCase):
    """tap.Options parses nsqd's flags exactly as the console script."""

    def test_go_spellings(self) -> None:
        """Go's flag spellings all work under twistd."""
        options = Options()
        options.parseOptions(
            [
                "--tcp-address=127.0.0.1:0",
                "--http-address",
                "127.0.0.1:0",
                "-mem-queue-size",
                "5",
                "-msg-timeout=30s",
                "--snappy=false",
                "--verbose",
                "--lookupd-tcp-address=a:4160",
                "--lookupd-tcp-address=b:4160",
            ]
        )
        settings = options.nsqd_options
        self.assertIsInstance(settings, NSQDOptions)
        self.assertEqual(settings.tcp_address, "127.0.0.1:0")
        self.assertEqual(settings.http_address, "127.0.0.1:0")
        self.assertEqual(settings.mem_queue_size, 5)
        self.assertEqual(settings.msg_timeout, 30.0)
        self.assertIs(settings.snappy, False)
        self.assertEqual(settings.lookupd_tcp_address, ["a:4160", "b:4160"])

    def test_mapping_mirrors_settings(self) -> None:
        """The Options mapping holds the settings by attribute name."""
        options = Options()
        options.parseOptions(["--mem-queue-size=5"])
        self.assertEqual(options["mem_queue_size"], 5)
        self.assertEqual(options["max_rdy_count"], 2500)

    def test_defaults(self) -> None:
        """No flags give Go's defaults."""
        options = Options()
        options.parseOptions([])
        self.assertEqual(options.nsqd_options.tcp_address, "0.0.0.0:4150")
        self.assertEqual(options.nsqd_options.max_msg_size, 1048576)

    def test_unknown_flag(self) -> None:
        """An unknown flag is a UsageError with Go's message."""
        options = Options()
        with self.assertRaises(usage.UsageError) as caught:
            options.parseOptions(["--foo"])
        self.assertEqual(str(caught.exception), "flag provided but not defined: -foo")

    def test_bad_value(self) -> None:
        """A bad value is a UsageError with Go's message."""
        options = Options()
        with self.assertRaises(usage.UsageError) as caught:
            options.parseOptions(["--mem-queue-size", "x"])
        self.assertEqual(
            str(caught.exception),
            'invalid value "x" for flag -mem-queue-size: parse error',
        )

    def test_invalid_settings(self) -> None:
        """Impossible settings are a UsageError naming the problem."""
        options = Options()
        with self.assertRaises(usage.UsageError) as caught:
            options.parseOptions(["--node-id=2000"])
        self.assertEqual(str(caught.exception), "--node-id must be [0,1024)")

    def test_validation_applies_implied_settings(self) -> None:
        """Validation runs, applying Go's implied settings."""
        options = Options()
        options.parseOptions(
            ["--tls-client-auth-policy=require", "--tls-cert=c", "--tls-key=k"]
        )
        self.assertEqual(options.nsqd_options.tls_required, TLS_REQUIRED)

    def test_version_skips_validation(self) -> None:
        """--version is parsed without validating the rest."""
        options = Options()
        options.parseOptions(["--version", "--node-id=2000"])
        self.assertIs(options.nsqd_options.version, True)

    def test_positional_arguments_kept(self) -> None:
        """Arguments after the flags end them and are kept, not refused."""
        options = Options()
        options.parseOptions(["--mem-queue-size=3", "extra", "--mem-queue-size=4"])
        self.assertEqual(options.nsqd_options.mem_queue_size, 3)
        self.assertEqual(options.positional, ["extra", "--mem-queue-size=4"])

    def test_help(self) -> None:
        """--help prints the flags and exits 0."""
        out = io.StringIO()
        self.patch(sys, "stdout", out)
        options = Options()
        with self.assertRaises(SystemExit) as caught:
            options.parseOptions(["--help"])
        self.assertEqual(caught.exception.code, 0)
        text = out.getvalue()
        self.assertIn("  -tcp-address string\n", text)
        self.assertIn(
            "  -mem-queue-size int\n"
            "    \tnumber of messages to keep in memory (per topic/channel) "
            "(default 10000)\n",
            text,
        )

    def test_usage_lists_flags(self) -> None:
        """getUsage lists every flag."""
        text = Options().getUsage()
        for name in ("-lookupd-tcp-address value", "-snappy\n", "-storage string"):
            self.assertIn(name, text)


@implementer(service.IServiceMaker)
class _FakeMaker:
    """An IServiceMaker like the plugin's, with our Options."""

    tapname = "nsqd"
    description = "NSQ daemon"
    options = Options

    def makeService(self, options: Options) -> service.Service:
        return service.Service()


class TwistdTests(SynchronousTestCase):
    """The Options class as twistd drives it."""

    def parse(self, argv: List[str]) -> Options:
        config = twistd.ServerOptions()
        self.patch(config, "_getPlugins", lambda interface: [_FakeMaker()])
        config.parseOptions(argv)
        self.assertEqual(config.subCommand, "nsqd")
        sub = config.subOptions
        assert isinstance(sub, Options)
        return sub

    def test_twistd_command_line(self) -> None:
        """``twistd -n nsqd --tcp-address=127.0.0.1:0 --mem-queue-size 5`` works."""
        sub = self.parse(
            ["-n", "nsqd", "--tcp-address=127.0.0.1:0", "--mem-queue-size", "5"]
        )
        self.assertEqual(sub.nsqd_options.tcp_address, "127.0.0.1:0")
        self.assertEqual(sub.nsqd_options.mem_queue_size, 5)

    def test_twistd_single_dash_flags(self) -> None:
        """Single-dash Go flags reach the sub-command untouched."""
        sub = self.parse(
            ["-n", "nsqd", "-tcp-address", "127.0.0.1:0", "-deflate=false"]
        )
        self.assertEqual(sub.nsqd_options.tcp_address, "127.0.0.1:0")
        self.assertIs(sub.nsqd_options.deflate, False)

    def test_twistd_error_usage(self) -> None:
        """On an error twistd's usage text is nsqd's flag list."""
        config = twistd.ServerOptions()
        self.patch(config, "_getPlugins", lambda interface: [_FakeMaker()])
        self.assertRaises(usage.UsageError, config.parseOptions, ["nsqd", "--foo"])
        self.assertIn("  -mem-queue-size int\n", str(config))
