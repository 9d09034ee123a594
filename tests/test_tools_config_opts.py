"""Tests for txnsq.tools.config_opts and txnsq.tools.common."""

from __future__ import annotations

import io
import random
import sys

from twisted.trial.unittest import SynchronousTestCase

from txnsq import cli
from txnsq.tools.common import (
    check_http_addresses,
    client_options_or_exit,
    connection_config,
    connection_config_or_exit,
    ephemeral_tail_channel,
    fatal,
    print_version,
    user_agent,
)
from txnsq.tools.config_opts import ConfigOptionError, parse_config_options
from txnsq.tools.nsq_tail import nsq_tail_flags
from txnsq.tools.tls import ToolClientTLS


class ParseConfigOptionsTests(SynchronousTestCase):
    """go-nsq's Config options passed through --consumer-opt."""

    def test_mapped_onto_client_settings(self) -> None:
        """Options land on ConnectionConfig fields, Consumer arguments or TLS settings."""
        options = parse_config_options(
            [
                "snappy,true",
                "heartbeat_interval,10s",
                "deflate_level=3",
                "max-attempts,7",
                "backoff_multiplier,2s",
                "tls_v1",
                "tls_insecure_skip_verify,true",
                "auth_secret,a,b",
            ]
        )
        self.assertEqual(
            options.connection,
            {
                "snappy": True,
                "heartbeat_interval": 10.0,
                "deflate_level": 3,
                "tls_v1": True,
                "auth_secret": "a,b",
            },
        )
        self.assertEqual(options.consumer, {"max_attempts": 7, "backoff_multiplier": 2.0})
        self.assertTrue(options.tls.insecure_skip_verify)

    def test_ignored_options(self) -> None:
        """Options txnsq has no use for are accepted and listed once."""
        options = parse_config_options(["local_addr,1.2.3.4", "low_rdy_timeout,2s", "local_addr,x"])
        self.assertEqual(options.ignored, ["local_addr", "low_rdy_timeout"])

    def test_errors_are_go_nsqs(self) -> None:
        """Unknown names, bad values and values out of bounds give go-nsq's texts."""
        cases = [
            ("foo,1", "invalid option foo"),
            ("read_timeout,50ms", "invalid read_timeout ! 50ms < 100ms"),
            ("sample_rate,100", "invalid sample_rate ! 100 > 99"),
            ("snappy,maybe", 'failed to coerce option snappy (maybe) - strconv.ParseBool: parsing "maybe": invalid syntax'),
            ("max_attempts,x", 'failed to coerce option max_attempts (x) - strconv.ParseInt: parsing "x": invalid syntax'),
            ("read_timeout,1", 'failed to coerce option read_timeout (1) - time: missing unit in duration "1"'),
            ("read_timeout", "failed to coerce option read_timeout (true) - invalid value type"),
            ("tls_min_version,tls9", "unknown tls_min_version tls9"),
        ]
        for text, message in cases:
            error = self.assertRaises(ConfigOptionError, parse_config_options, [text])
            self.assertEqual(str(error), message)
            self.assertEqual(getattr(error, "flag_value"), text)

    def test_flag_error_like_go(self) -> None:
        """A bad --consumer-opt is reported as Go's flag package reports a bad flag value."""
        stderr = io.StringIO()
        error = self.assertRaises(
            SystemExit,
            client_options_or_exit,
            "consumer-opt",
            ["nope,1"],
            lambda: cli.format_usage(nsq_tail_flags(), "nsq_tail"),
            stderr,
        )
        self.assertEqual(error.code, 2)
        self.assertTrue(
            stderr.getvalue().startswith(
                'invalid value "nope,1" for flag -consumer-opt: invalid option nope\nUsage of nsq_tail:\n'
            )
        )


class CommonTests(SynchronousTestCase):
    """Go's process manners shared by the tools."""

    def test_fatal(self) -> None:
        """fatal writes Go's log.Fatal line and exits 1."""
        stderr = io.StringIO()
        error = self.assertRaises(SystemExit, fatal, "--topic required", stderr)
        self.assertEqual(error.code, 1)
        self.assertRegex(stderr.getvalue(), r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d --topic required\n$")

    def test_version_and_user_agent(self) -> None:
        """The version line and user agent name the tool and txnsq's version."""
        out = io.StringIO()
        print_version("nsq_tail", out)
        self.assertRegex(out.getvalue(), r"^nsq_tail v\d+\.\d+\.\d+\n$")
        self.assertRegex(user_agent("to_nsq"), r"^to_nsq/\S+ txnsq/\S+$")

    def test_ephemeral_channel(self) -> None:
        """nsq_tail's default channel is tail, six digits, #ephemeral."""
        self.assertRegex(ephemeral_tail_channel(random.Random(1)), r"^tail\d{6}#ephemeral$")

    def test_check_http_addresses(self) -> None:
        """An HTTP address with a scheme is refused with Go's text."""
        self.assertEqual(
            check_http_addresses(["127.0.0.1:1", "http://x:1"]), "address should not contain scheme"
        )
        self.assertIsNone(check_http_addresses(["127.0.0.1:1"]))

    def test_connection_config(self) -> None:
        """The tool's user agent, then the options, make the ConnectionConfig; TLS options add a creator."""
        options = parse_config_options(["snappy", "tls_insecure_skip_verify,true", "user_agent,me"])
        config = connection_config(options, "nsq_tail", client_id="c")
        self.assertTrue(config.snappy)
        self.assertEqual(config.user_agent, "me")
        self.assertEqual(config.client_id, "c")
        self.assertIsInstance(config.tls_options, ToolClientTLS)
        plain = connection_config(parse_config_options([]), "nsq_tail")
        self.assertEqual(plain.user_agent, user_agent("nsq_tail"))
        self.assertIsNone(plain.tls_options)

    def test_connection_config_or_exit(self) -> None:
        """An unreadable TLS file is Go's fatal exit with the tool's wording of the error."""
        missing = self.mktemp()
        options = parse_config_options(["tls_root_ca_file," + missing])
        stderr = io.StringIO()
        self.patch(sys, "stderr", stderr)
        with self.assertRaises(SystemExit) as raised:
            connection_config_or_exit(options, "to_nsq", "failed to create nsq.Producer - %s")
        self.assertEqual(raised.exception.code, 1)
        self.assertIn("failed to create nsq.Producer - ", stderr.getvalue())
        self.assertIn(missing, stderr.getvalue())
        self.assertEqual(connection_config_or_exit(parse_config_options([]), "to_nsq").user_agent, user_agent("to_nsq"))
