"""Tests for txnsq.nsqadmin.options and txnsq.nsqadmin.tap: Go nsqadmin's flags, checks and twistd plugin."""

from __future__ import annotations

from typing import Any

from twisted.application.service import IServiceMaker
from twisted.plugin import getPlugins
from twisted.python import usage
from twisted.trial.unittest import SynchronousTestCase

from txnsq import cli
from txnsq.nsqadmin import tap
from txnsq.nsqadmin.options import (
    NSQAdminOptions,
    normalize_base_path,
    nsqadmin_flags,
    parse_cidr,
    parse_nsqadmin_args,
)


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

    def refused(self, **settings: Any) -> str:
        options = NSQAdminOptions(nsqd_http_addresses=["b:2"], **settings)
        with self.assertRaises(ValueError) as caught:
            options.validate()
        return str(caught.exception)

    def test_graphite_refused(self) -> None:
        """--graphite-url and --proxy-graphite are refused, saying where the charts come from."""
        for settings in ({"graphite_url": "http://g"}, {"proxy_graphite": True}):
            text = self.refused(**settings)
            self.assertIn("is not supported by txnsq's nsqadmin", text)
            self.assertIn("--sample-interval", text)

    def test_statsd_refused_unless_default(self) -> None:
        """A --statsd-* flag set to anything but Go's default is refused, naming why."""
        for name, value in (
            ("statsd_prefix", "nsq.x.%s"),
            ("statsd_counter_format", ""),
            ("statsd_gauge_format", "g.%s"),
            ("statsd_interval", 10.0),
        ):
            text = self.refused(**{name: value})
            self.assertTrue(text.startswith("--%s is not supported" % name.replace("_", "-")), text)
            self.assertIn("graphite", text)
        options = parse_nsqadmin_args(
            ["--nsqd-http-address=b:2", "--statsd-prefix=nsq.%s", "--statsd-interval=1m"]
        )
        options.validate()

    def test_config_refused(self) -> None:
        """--config is refused by name."""
        self.assertIn("--config is not supported", self.refused(config="nsqadmin.cfg"))

    def test_base_path_normalized(self) -> None:
        """--base-path is cleaned as Go's normalizeBasePath does."""
        for given, expected in (
            ("", "/"),
            ("/", "/"),
            ("nsq", "/nsq"),
            ("/nsq/", "/nsq"),
            ("//a/./b/../c/", "/a/c"),
        ):
            options = NSQAdminOptions(nsqd_http_addresses=["b:2"], base_path=given)
            options.validate()
            self.assertEqual(options.base_path, expected, given)
            self.assertEqual(normalize_base_path(given), expected)

    def test_tls_pair_required(self) -> None:
        """--http-client-tls-cert and --http-client-tls-key go together (Go's texts)."""
        self.assertEqual(
            self.refused(http_client_tls_cert="c.pem"),
            "--http-client-tls-key must be specified with --http-client-tls-cert",
        )
        self.assertEqual(
            self.refused(http_client_tls_key="k.pem"),
            "--http-client-tls-cert must be specified with --http-client-tls-key",
        )

    def test_tls_files_read(self) -> None:
        """An unreadable --http-client-tls-root-ca-file or a bad key pair is refused at once."""
        missing = self.mktemp()
        self.assertTrue(
            self.refused(http_client_tls_root_ca_file=missing).startswith(
                "failed to read TLS root CA file %s - " % (missing,)
            )
        )
        junk = self.mktemp()
        with open(junk, "wb") as f:
            f.write(b"not a certificate")
        self.assertEqual(
            self.refused(http_client_tls_root_ca_file=junk),
            "failed to AppendCertsFromPEM %s" % (junk,),
        )
        self.assertTrue(
            self.refused(http_client_tls_cert=junk, http_client_tls_key=junk).startswith(
                "failed to LoadX509KeyPair %s, %s - " % (junk, junk)
            )
        )

    def test_cidr_parsed(self) -> None:
        """--allow-config-from-cidr must be a CIDR (Go's text); empty allows every client."""
        for bad in ("127.0.0.1", "10.0.0.0/33", "10.0.0.0/255.0.0.0", "x/8"):
            self.assertEqual(
                self.refused(allow_config_from_cidr=bad),
                "failed to parse --allow-config-from-cidr (%s) - invalid CIDR address: %s"
                % (bad, bad),
            )
        for good in ("127.0.0.1/8", "::1/128", ""):
            NSQAdminOptions(nsqd_http_addresses=["b:2"], allow_config_from_cidr=good).validate()
        self.assertEqual(str(parse_cidr("127.0.0.1/8")), "127.0.0.0/8")

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
