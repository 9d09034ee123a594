"""Tests for txnsq.nsqadmin.options and txnsq.nsqadmin.tap: Go nsqadmin's flags, checks and twistd plugin."""

from __future__ import annotations

from twisted.application.service import IServiceMaker
from twisted.plugin import getPlugins
from twisted.python import usage
from twisted.trial.unittest import SynchronousTestCase

from txnsq import cli
from txnsq.nsqadmin import tap
from txnsq.nsqadmin.options import NSQAdminOptions, nsqadmin_flags, parse_nsqadmin_args


class OptionsTests(SynchronousTestCase):
    """Tests for NSQAdminOptions and parse_nsqadmin_args."""

    def test_defaults(self) -> None:
        """The defaults are Go nsqadmin v1.3's."""
        options = NSQAdminOptions()
        self.assertEqual(options.http_address, "0.0.0.0:4171")
        self.assertEqual(options.acl_http_header, "X-Forwarded-User")
        self.assertEqual(options.http_client_connect_timeout, 2.0)
        self.assertEqual(options.http_client_request_timeout, 5.0)
        self.assertEqual(options.log_prefix, "[nsqadmin] ")

    def test_repeatable_flags(self) -> None:
        """--lookupd-http-address and --admin-user may be given several times."""
        options = parse_nsqadmin_args(
            [
                "--lookupd-http-address=127.0.0.1:4161",
                "-lookupd-http-address",
                "127.0.0.1:4261",
                "--admin-user=alice",
                "--admin-user=bob",
                "--acl-http-header=X-User",
                "--http-client-request-timeout=500ms",
                "--notification-http-endpoint=http://127.0.0.1:4151/pub?topic=admin_actions",
            ]
        )
        self.assertEqual(options.nsqlookupd_http_addresses, ["127.0.0.1:4161", "127.0.0.1:4261"])
        self.assertEqual(options.admin_users, ["alice", "bob"])
        self.assertEqual(options.acl_http_header, "X-User")
        self.assertEqual(options.http_client_request_timeout, 0.5)
        options.validate()

    def test_every_go_flag(self) -> None:
        """Every flag Go nsqadmin v1.3 documents is accepted."""
        names = {flag.name for flag in nsqadmin_flags()}
        for name in (
            "acl-http-header",
            "admin-user",
            "allow-config-from-cidr",
            "base-path",
            "config",
            "graphite-url",
            "http-address",
            "http-client-connect-timeout",
            "http-client-request-timeout",
            "http-client-tls-cert",
            "http-client-tls-insecure-skip-verify",
            "http-client-tls-key",
            "http-client-tls-root-ca-file",
            "log-level",
            "log-prefix",
            "lookupd-http-address",
            "notification-http-endpoint",
            "nsqd-http-address",
            "proxy-graphite",
            "statsd-counter-format",
            "statsd-gauge-format",
            "statsd-interval",
            "statsd-prefix",
            "verbose",
            "version",
        ):
            self.assertIn(name, names)

    def test_addresses_required(self) -> None:
        """Without nsqd or lookupd addresses the settings are refused with Go's text."""
        with self.assertRaises(ValueError) as caught:
            NSQAdminOptions().validate()
        self.assertEqual(
            str(caught.exception), "--nsqd-http-address or --lookupd-http-address required"
        )

    def test_not_both(self) -> None:
        """nsqd and lookupd addresses together are refused with Go's text."""
        options = NSQAdminOptions(nsqlookupd_http_addresses=["a:1"], nsqd_http_addresses=["b:2"])
        with self.assertRaises(ValueError) as caught:
            options.validate()
        self.assertEqual(
            str(caught.exception), "use --nsqd-http-address or --lookupd-http-address not both"
        )

    def test_unsupported_refused(self) -> None:
        """Flags not supported yet are refused by name rather than ignored."""
        for settings in (
            {"base_path": "/admin"},
            {"graphite_url": "http://g"},
            {"http_client_tls_cert": "c"},
        ):
            options = NSQAdminOptions(nsqd_http_addresses=["b:2"], **settings)  # type: ignore[arg-type]
            with self.assertRaises(ValueError) as caught:
                options.validate()
            self.assertIn("is not supported yet", str(caught.exception))

    def test_bad_flag(self) -> None:
        """An unknown flag is Go's error."""
        with self.assertRaises(cli.FlagError):
            parse_nsqadmin_args(["--nope"])


class TapTests(SynchronousTestCase):
    """Tests for txnsq.nsqadmin.tap and the twistd plugin."""

    def test_plugin(self) -> None:
        """twistd finds an nsqadmin plugin whose options are tap.Options."""
        import twisted.plugins

        makers = {m.tapname: m for m in getPlugins(IServiceMaker, twisted.plugins)}
        self.assertIn("nsqadmin", makers)
        self.assertIs(makers["nsqadmin"].options, tap.Options)

    def test_options(self) -> None:
        """tap.Options reads Go's flags and validates them."""
        options = tap.Options()
        options.parseOptions(["--http-address=127.0.0.1:0", "--nsqd-http-address=127.0.0.1:4151"])
        self.assertEqual(options.admin_options.nsqd_http_addresses, ["127.0.0.1:4151"])
        with self.assertRaises(usage.UsageError):
            tap.Options().parseOptions(["--http-address=127.0.0.1:0"])

    def test_make_service(self) -> None:
        """makeService builds an NSQAdminService listening where asked."""
        from twisted.internet.testing import MemoryReactorClock

        from txnsq.nsqadmin.service import NSQAdminService

        options = tap.Options()
        options.parseOptions(
            ["--http-address=127.0.0.1:0", "--lookupd-http-address=127.0.0.1:4161"]
        )
        made = tap.makeService(options)
        self.assertIsInstance(made, NSQAdminService)
        embedded = NSQAdminService(options.admin_options, MemoryReactorClock())
        self.assertEqual(embedded.bound_port(), 0)
