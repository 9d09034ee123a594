"""Tests for txnsq.nsqlookupd.tap: nsqlookupd's options under twistd, and its plugin."""

from __future__ import annotations

import io
import sys
from typing import List

from twisted.application import service
from twisted.plugin import getPlugins
from twisted.python import usage
from twisted.scripts import twistd
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer

from txnsq.nsqlookupd import tap
from txnsq.nsqlookupd.options import NSQLookupdOptions
from txnsq.nsqlookupd.tap import Options


class OptionsTests(SynchronousTestCase):
    """tap.Options parses nsqlookupd's flags exactly as the console script."""

    def test_go_spellings(self) -> None:
        """Go's flag spellings all work under twistd."""
        options = Options()
        options.parseOptions(
            [
                "--tcp-address=127.0.0.1:0",
                "--http-address",
                "127.0.0.1:0",
                "-tombstone-lifetime",
                "10s",
                "-inactive-producer-timeout=1m",
                "--verbose",
            ]
        )
        settings = options.lookupd_options
        self.assertIsInstance(settings, NSQLookupdOptions)
        self.assertEqual(settings.tcp_address, "127.0.0.1:0")
        self.assertEqual(settings.http_address, "127.0.0.1:0")
        self.assertEqual(settings.tombstone_lifetime, 10.0)
        self.assertEqual(settings.inactive_producer_timeout, 60.0)

    def test_mapping_mirrors_settings(self) -> None:
        """The Options mapping holds the settings by attribute name."""
        options = Options()
        options.parseOptions(["--tombstone-lifetime=5s"])
        self.assertEqual(options["tombstone_lifetime"], 5.0)
        self.assertEqual(options["tcp_address"], "0.0.0.0:4160")

    def test_unknown_flag(self) -> None:
        """An unknown flag is a UsageError with Go's message."""
        with self.assertRaises(usage.UsageError) as caught:
            Options().parseOptions(["--foo"])
        self.assertEqual(str(caught.exception), "flag provided but not defined: -foo")

    def test_invalid_settings(self) -> None:
        """Impossible settings are a UsageError naming the problem."""
        with self.assertRaises(usage.UsageError) as caught:
            Options().parseOptions(["--tcp-address="])
        self.assertEqual(str(caught.exception), "--tcp-address must not be empty")

    def test_version_skips_validation(self) -> None:
        """--version is parsed without validating the rest."""
        options = Options()
        options.parseOptions(["--version", "--tcp-address="])
        self.assertIs(options.lookupd_options.version, True)

    def test_version_prints(self) -> None:
        """makeService with --version prints the version and exits 0."""
        out = io.StringIO()
        self.patch(sys, "stdout", out)
        options = Options()
        options.parseOptions(["--version"])
        with self.assertRaises(SystemExit) as caught:
            tap.makeService(options)
        self.assertEqual(caught.exception.code, 0)
        self.assertTrue(out.getvalue().startswith("nsqlookupd v"))

    def test_positional_arguments_kept(self) -> None:
        """Arguments after the flags end them and are kept, not refused."""
        options = Options()
        options.parseOptions(["--tombstone-lifetime=3s", "extra"])
        self.assertEqual(options.positional, ["extra"])

    def test_help(self) -> None:
        """--help prints Go's flag list and exits 0."""
        out = io.StringIO()
        self.patch(sys, "stdout", out)
        with self.assertRaises(SystemExit) as caught:
            Options().parseOptions(["--help"])
        self.assertEqual(caught.exception.code, 0)
        self.assertIn(
            "  -tombstone-lifetime duration\n"
            "    \tduration of time a producer will remain tombstoned if registration "
            "remains (default 45s)\n",
            out.getvalue(),
        )


@implementer(service.IServiceMaker)
class _FakeMaker:
    """An IServiceMaker like the plugin's, with our Options."""

    tapname = "nsqlookupd"
    description = "NSQ lookup daemon"
    options = Options

    def makeService(self, options: Options) -> service.Service:
        return service.Service()


class TwistdTests(SynchronousTestCase):
    """The plugin and its Options as twistd drives them."""

    def test_plugin_registered(self) -> None:
        """twistd finds an nsqlookupd service maker using this tap module."""
        makers = {maker.tapname: maker for maker in getPlugins(service.IServiceMaker)}
        self.assertIn("nsqlookupd", makers)
        self.assertIs(makers["nsqlookupd"].options, Options)

    def parse(self, argv: List[str]) -> Options:
        config = twistd.ServerOptions()
        self.patch(config, "_getPlugins", lambda interface: [_FakeMaker()])
        config.parseOptions(argv)
        self.assertEqual(config.subCommand, "nsqlookupd")
        sub = config.subOptions
        assert isinstance(sub, Options)
        return sub

    def test_twistd_command_line(self) -> None:
        """``twistd -n nsqlookupd --tcp-address=127.0.0.1:0 --http-address=127.0.0.1:0`` parses."""
        sub = self.parse(
            ["-n", "nsqlookupd", "--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0"]
        )
        self.assertEqual(sub.lookupd_options.tcp_address, "127.0.0.1:0")
        self.assertEqual(sub.lookupd_options.http_address, "127.0.0.1:0")

    def test_twistd_single_dash_flags(self) -> None:
        """Single-dash Go flags reach the sub-command untouched."""
        sub = self.parse(["-n", "nsqlookupd", "-tcp-address", "127.0.0.1:0", "-verbose=true"])
        self.assertEqual(sub.lookupd_options.tcp_address, "127.0.0.1:0")

    def test_twistd_error_usage(self) -> None:
        """On an error twistd's usage text is nsqlookupd's flag list."""
        config = twistd.ServerOptions()
        self.patch(config, "_getPlugins", lambda interface: [_FakeMaker()])
        self.assertRaises(usage.UsageError, config.parseOptions, ["nsqlookupd", "--foo"])
        self.assertIn("  -inactive-producer-timeout duration\n", str(config))
