"""Tests for txnsq.nsqd.options and txnsq.nsqd.flags: nsqd's flags, defaults and validation."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import socket
import zlib
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from txnsq import cli
from txnsq.cli import FlagError, HelpRequested
from txnsq.nsqd.flags import nsqd_flags, parse_nsqd_args, parse_nsqd_args_or_exit
from txnsq.nsqd.options import (
    TLS_NOT_REQUIRED,
    TLS_REQUIRED,
    TLS_REQUIRED_EXCEPT_HTTP,
    NSQDOptions,
    default_node_id,
)

# Go nsqd v1.3's flags (apps/nsqd/options.go), plus --auth-http-request-method
# from its main branch and txnsq's --storage and --metaq-address.
GO_FLAG_NAMES = [
    "version",
    "config",
    "log-level",
    "log-prefix",
    "verbose",
    "node-id",
    "worker-id",
    "https-address",
    "http-address",
    "tcp-address",
    "auth-http-address",
    "auth-http-request-method",
    "broadcast-address",
    "broadcast-tcp-port",
    "broadcast-http-port",
    "lookupd-tcp-address",
    "http-client-connect-timeout",
    "http-client-request-timeout",
    "data-path",
    "mem-queue-size",
    "max-bytes-per-file",
    "sync-every",
    "sync-timeout",
    "queue-scan-worker-pool-max",
    "queue-scan-selection-count",
    "msg-timeout",
    "max-msg-timeout",
    "max-msg-size",
    "max-req-timeout",
    "max-body-size",
    "max-heartbeat-interval",
    "max-rdy-count",
    "max-output-buffer-size",
    "max-output-buffer-timeout",
    "min-output-buffer-timeout",
    "output-buffer-timeout",
    "max-channel-consumers",
    "statsd-address",
    "statsd-interval",
    "statsd-mem-stats",
    "statsd-prefix",
    "statsd-udp-packet-size",
    "statsd-exclude-ephemeral",
    "e2e-processing-latency-percentile",
    "e2e-processing-latency-window-time",
    "tls-cert",
    "tls-key",
    "tls-client-auth-policy",
    "tls-root-ca-file",
    "tls-required",
    "tls-min-version",
    "deflate",
    "max-deflate-level",
    "snappy",
    "storage",
    "metaq-address",
    "retention-bytes",
    "retention-age",
    "retain-topics",
    "log-partitions",
    "cluster-address",
    "cluster-name",
    "routes",
    "cluster-advertise",
    "cluster-ping-interval",
    "cluster-tls-cert",
    "cluster-tls-key",
    "cluster-tls-ca",
    "nats-subject-prefix",
    "nats-account",
    "nats-topics",
    "mirror-topics",
    "mirror-ack",
    "mirror-failover-timeout",
    "mirror-min-standbys",
]


def valid(**changes: Any) -> NSQDOptions:
    """Default options with some attributes changed."""
    return dataclasses.replace(NSQDOptions(), **changes)


class DefaultsTests(SynchronousTestCase):
    """NSQDOptions' defaults are Go nsqd v1.3's."""

    def test_go_defaults(self) -> None:
        """Every default equals Go's, durations in seconds."""
        options = NSQDOptions()
        expected = {
            "version": False,
            "config": "",
            "log_level": "info",
            "log_prefix": "[nsqd] ",
            "https_address": "0.0.0.0:4152",
            "http_address": "0.0.0.0:4151",
            "tcp_address": "0.0.0.0:4150",
            "auth_http_address": [],
            "auth_http_request_method": "get",
            "broadcast_tcp_port": 0,
            "broadcast_http_port": 0,
            "lookupd_tcp_address": [],
            "http_client_connect_timeout": 2.0,
            "http_client_request_timeout": 5.0,
            "data_path": "",
            "mem_queue_size": 10000,
            "max_bytes_per_file": 104857600,
            "sync_every": 2500,
            "sync_timeout": 2.0,
            "queue_scan_worker_pool_max": 4,
            "queue_scan_selection_count": 20,
            "msg_timeout": 60.0,
            "max_msg_timeout": 900.0,
            "max_msg_size": 1048576,
            "max_req_timeout": 3600.0,
            "max_body_size": 5242880,
            "max_heartbeat_interval": 60.0,
            "max_rdy_count": 2500,
            "max_output_buffer_size": 65536,
            "max_output_buffer_timeout": 30.0,
            "min_output_buffer_timeout": 0.025,
            "output_buffer_timeout": 0.25,
            "max_channel_consumers": 0,
            "statsd_address": "",
            "statsd_interval": 60.0,
            "statsd_mem_stats": True,
            "statsd_prefix": "nsq.%s",
            "statsd_udp_packet_size": 508,
            "statsd_exclude_ephemeral": False,
            "e2e_processing_latency_percentile": [],
            "e2e_processing_latency_window_time": 600.0,
            "tls_cert": "",
            "tls_key": "",
            "tls_client_auth_policy": "",
            "tls_root_ca_file": "",
            "tls_required": TLS_NOT_REQUIRED,
            "tls_min_version": "tls1.0",
            "deflate": True,
            "max_deflate_level": 6,
            "snappy": True,
            "storage": "disk",
            "metaq_address": "",
            "retention_bytes": 1 << 30,
            "retention_age": 7 * 24 * 3600.0,
            "retain_topics": "",
            "log_partitions": 1,
            "cluster_address": "",
            "cluster_name": "",
            "routes": [],
            "cluster_advertise": "",
            "cluster_ping_interval": 30.0,
            "cluster_tls_cert": "",
            "cluster_tls_key": "",
            "cluster_tls_ca": "",
            "nats_subject_prefix": "nsq.",
            "nats_account": "$G",
            "nats_topics": "",
            "mirror_topics": "",
            "mirror_ack": "sync",
            "mirror_failover_timeout": 10.0,
            "mirror_min_standbys": 0,
            "client_timeout": 60.0,
            "queue_scan_interval": 0.1,
            "queue_scan_refresh_interval": 5.0,
            "queue_scan_dirty_percent": 0.25,
        }
        actual = dataclasses.asdict(options)
        del actual["node_id"], actual["broadcast_address"]
        self.assertEqual(actual, expected)

    def test_broadcast_address_is_hostname(self) -> None:
        """--broadcast-address defaults to the OS host name."""
        self.assertEqual(NSQDOptions().broadcast_address, socket.gethostname())

    def test_node_id_default(self) -> None:
        """--node-id defaults to crc32(md5(hostname)) % 1024, as Go."""
        hostname = socket.gethostname()
        expected = zlib.crc32(hashlib.md5(hostname.encode()).digest()) % 1024
        self.assertEqual(NSQDOptions().node_id, expected)
        self.assertEqual(default_node_id(), expected)

    def test_node_id_known_value(self) -> None:
        """The hash matches Go's for a fixed host name."""
        # crc32.ChecksumIEEE(md5("localhost")) % 1024, computed independently.
        digest = hashlib.md5(b"localhost").digest()
        self.assertEqual(default_node_id("localhost"), zlib.crc32(digest) % 1024)
        self.assertTrue(0 <= default_node_id("localhost") < 1024)

    def test_lists_not_shared(self) -> None:
        """Each instance has its own lists."""
        first = NSQDOptions()
        first.lookupd_tcp_address.append("x:4160")
        self.assertEqual(NSQDOptions().lookupd_tcp_address, [])

    def test_defaults_valid(self) -> None:
        """The defaults pass validation."""
        NSQDOptions().validate()


class FlagTableTests(SynchronousTestCase):
    """nsqd_flags() is Go nsqd's flag set."""

    def test_flag_names(self) -> None:
        """The table has exactly Go's flags (and txnsq's --storage and --metaq-address), in Go's order."""
        self.assertEqual([flag.name for flag in nsqd_flags()], GO_FLAG_NAMES)

    def test_every_flag_has_an_attribute(self) -> None:
        """Every flag but the deprecated ones maps to an NSQDOptions field."""
        fields = {f.name for f in dataclasses.fields(NSQDOptions)}
        for flag in nsqd_flags():
            if flag.name in ("verbose", "worker-id"):
                self.assertIsNone(flag.attr)
                continue
            self.assertEqual(flag.attr, flag.name.replace("-", "_"))
            self.assertIn(flag.attr, fields)

    def test_flag_defaults_follow_options(self) -> None:
        """Flag defaults are taken from the given defaults object."""
        defaults = valid(mem_queue_size=7, msg_timeout=1.5)
        table = {flag.name: flag for flag in nsqd_flags(defaults)}
        self.assertEqual(table["mem-queue-size"].default, 7)
        self.assertEqual(table["msg-timeout"].default, 1.5)

    def test_usage_matches_go(self) -> None:
        """The usage shows Go's help texts and defaults."""
        usage = cli.format_usage(nsqd_flags(valid(node_id=248)), "nsqd")
        self.assertTrue(usage.startswith("Usage of nsqd:\n  -auth-http-address value\n"))
        for expected in [
            "  -mem-queue-size int\n"
            "    \tnumber of messages to keep in memory (per topic/channel) "
            "(default 10000)\n",
            "  -msg-timeout duration\n"
            "    \tdefault duration to wait before auto-requeing a message "
            "(default 1m0s)\n",
            "  -log-level value\n"
            "    \tset log verbosity: debug, info, warn, error, or fatal "
            "(default INFO)\n",
            "  -log-prefix string\n    \tlog message prefix (default \"[nsqd] \")\n",
            "  -node-id int\n"
            "    \tunique part for message IDs, (int) in range [0,1024) "
            "(default is hash of hostname) (default 248)\n",
            "  -tls-min-version value\n"
            "    \tminimum SSL/TLS version acceptable ('ssl3.0', 'tls1.0', "
            "'tls1.1', 'tls1.2' or 'tls1.3') (default tls1.0)\n",
            "  -tls-required\n"
            "    \trequire TLS for client connections (true, false, tcp-https)\n",
            "  -snappy\n    \tenable snappy feature negotiation (client compression) "
            "(default true)\n",
            "  -verbose\n    \t[deprecated] has no effect, use --log-level\n",
            "  -min-output-buffer-timeout duration\n"
            "    \tminimum client configurable duration of time between flushing "
            "to a client (default 25ms)\n",
            "  -max-req-timeout duration\n"
            "    \tmaximum requeuing timeout for a message (default 1h0m0s)\n",
        ]:
            self.assertIn(expected, usage)

    def test_storage_help_lists_backends(self) -> None:
        """--storage's help names the backends."""
        table = {flag.name: flag for flag in nsqd_flags()}
        self.assertIn("memory", table["storage"].help)


class ParseTests(SynchronousTestCase):
    """parse_nsqd_args turns Go-style command lines into NSQDOptions."""

    def test_no_arguments(self) -> None:
        """No arguments give the defaults."""
        options = parse_nsqd_args([])
        self.assertEqual(dataclasses.asdict(options), dataclasses.asdict(NSQDOptions()))

    def test_every_spelling(self) -> None:
        """One dash or two, ``=`` or a separate argument, all work."""
        for argv in (
            ["-tcp-address", "127.0.0.1:0"],
            ["--tcp-address", "127.0.0.1:0"],
            ["-tcp-address=127.0.0.1:0"],
            ["--tcp-address=127.0.0.1:0"],
        ):
            self.assertEqual(parse_nsqd_args(argv).tcp_address, "127.0.0.1:0", argv)

    def test_harness_command_line(self) -> None:
        """A typical harness command line sets every flag it names."""
        options = parse_nsqd_args(
            [
                "--tcp-address=127.0.0.1:0",
                "--http-address",
                "127.0.0.1:0",
                "-mem-queue-size",
                "5",
                "--msg-timeout=1m30s",
                "--max-msg-size=100",
                "--snappy=false",
                "--deflate=0",
                "--verbose",
                "--lookupd-tcp-address=127.0.0.1:4160",
                "--lookupd-tcp-address",
                "127.0.0.1:5160",
                "--e2e-processing-latency-percentile=0.5,0.99",
                "--log-level=DEBUG",
                "--data-path=./data",
                "--node-id=7",
                "--storage",
                "ephemeral",
            ]
        )
        self.assertEqual(options.tcp_address, "127.0.0.1:0")
        self.assertEqual(options.http_address, "127.0.0.1:0")
        self.assertEqual(options.mem_queue_size, 5)
        self.assertEqual(options.msg_timeout, 90.0)
        self.assertEqual(options.max_msg_size, 100)
        self.assertIs(options.snappy, False)
        self.assertIs(options.deflate, False)
        self.assertEqual(
            options.lookupd_tcp_address, ["127.0.0.1:4160", "127.0.0.1:5160"]
        )
        self.assertEqual(options.e2e_processing_latency_percentile, [0.99, 0.5])
        self.assertEqual(options.log_level, "debug")
        self.assertEqual(options.data_path, "./data")
        self.assertEqual(options.node_id, 7)
        self.assertEqual(options.storage, "ephemeral")
        options.validate()

    def test_durations_in_seconds(self) -> None:
        """Duration flags take Go durations and store float seconds."""
        options = parse_nsqd_args(
            ["--output-buffer-timeout=100ms", "--max-req-timeout", "1.5h"]
        )
        self.assertEqual(options.output_buffer_timeout, 0.1)
        self.assertEqual(options.max_req_timeout, 5400.0)

    def test_plain_integer_duration_refused(self) -> None:
        """A duration without a unit is refused, as since Go nsqd 1.1."""
        with self.assertRaises(FlagError) as caught:
            parse_nsqd_args(["--msg-timeout=60"])
        self.assertEqual(
            caught.exception.message,
            'invalid value "60" for flag -msg-timeout: parse error',
        )

    def test_unknown_flag(self) -> None:
        """An unknown flag is refused with Go's message."""
        with self.assertRaises(FlagError) as caught:
            parse_nsqd_args(["--foo"])
        self.assertEqual(caught.exception.message, "flag provided but not defined: -foo")

    def test_bad_int(self) -> None:
        """A bad size gets Go's parse error message."""
        with self.assertRaises(FlagError) as caught:
            parse_nsqd_args(["--mem-queue-size", "x"])
        self.assertEqual(
            caught.exception.message,
            'invalid value "x" for flag -mem-queue-size: parse error',
        )

    def test_help(self) -> None:
        """--help asks for the usage."""
        self.assertRaises(HelpRequested, parse_nsqd_args, ["--help"])

    def test_version(self) -> None:
        """--version is a boolean."""
        self.assertIs(parse_nsqd_args(["--version"]).version, True)

    def test_deprecated_flags(self) -> None:
        """--verbose and --worker-id are accepted and have no effect."""
        options = parse_nsqd_args(["--verbose", "-worker-id", "--verbose=false"])
        self.assertEqual(dataclasses.asdict(options), dataclasses.asdict(NSQDOptions()))

    def test_worker_id_is_boolean(self) -> None:
        """--worker-id is Go's deprecated boolean: a number is refused."""
        with self.assertRaises(FlagError) as caught:
            parse_nsqd_args(["--worker-id=5"])
        self.assertEqual(
            caught.exception.message,
            'invalid boolean value "5" for -worker-id: parse error',
        )

    def test_log_level(self) -> None:
        """--log-level takes Go's names in any case and refuses others."""
        self.assertEqual(parse_nsqd_args(["--log-level=WARN"]).log_level, "warn")
        with self.assertRaises(FlagError) as caught:
            parse_nsqd_args(["--log-level=warning"])
        self.assertEqual(
            caught.exception.message,
            'invalid value "warning" for flag -log-level: '
            "invalid log level 'warning' (debug, info, warn, error, fatal)",
        )

    def test_tls_required(self) -> None:
        """--tls-required is bool-like, with tcp-https as a third value."""
        self.assertEqual(parse_nsqd_args(["--tls-required"]).tls_required, TLS_REQUIRED)
        self.assertEqual(
            parse_nsqd_args(["--tls-required=true"]).tls_required, TLS_REQUIRED
        )
        self.assertEqual(
            parse_nsqd_args(["--tls-required=TRUE"]).tls_required, TLS_REQUIRED
        )
        self.assertEqual(
            parse_nsqd_args(["--tls-required=false"]).tls_required, TLS_NOT_REQUIRED
        )
        self.assertEqual(
            parse_nsqd_args(["--tls-required=TCP-HTTPS"]).tls_required,
            TLS_REQUIRED_EXCEPT_HTTP,
        )

    def test_tls_required_never_takes_next_argument(self) -> None:
        """``--tls-required tcp-https`` means true and ends the flags, as in Go."""
        options = parse_nsqd_args(["--tls-required", "tcp-https", "--snappy=false"])
        self.assertEqual(options.tls_required, TLS_REQUIRED)
        self.assertIs(options.snappy, True)

    def test_tls_required_bad(self) -> None:
        """A bad --tls-required gets strconv's message, as Go reports it."""
        with self.assertRaises(FlagError) as caught:
            parse_nsqd_args(["--tls-required=Yes"])
        self.assertEqual(
            caught.exception.message,
            'invalid boolean value "Yes" for -tls-required: '
            'strconv.ParseBool: parsing "yes": invalid syntax',
        )

    def test_tls_min_version(self) -> None:
        """--tls-min-version takes Go's names in any case; empty keeps the default."""
        for name in ("ssl3.0", "tls1.0", "tls1.1", "tls1.2", "tls1.3"):
            self.assertEqual(
                parse_nsqd_args(["--tls-min-version=" + name.upper()]).tls_min_version,
                name,
            )
        self.assertEqual(parse_nsqd_args(["--tls-min-version="]).tls_min_version, "tls1.0")
        with self.assertRaises(FlagError) as caught:
            parse_nsqd_args(["--tls-min-version=TLS1.4"])
        self.assertEqual(
            caught.exception.message,
            'invalid value "TLS1.4" for flag -tls-min-version: '
            'unknown tlsVersionOption "tls1.4"',
        )

    def test_auth_http_address_repeatable(self) -> None:
        """--auth-http-address accumulates."""
        options = parse_nsqd_args(
            ["--auth-http-address=a:1", "--auth-http-address", "http://b/auth"]
        )
        self.assertEqual(options.auth_http_address, ["a:1", "http://b/auth"])

    def test_positional_arguments_ignored(self) -> None:
        """Arguments after the flags are ignored, and end the flags, as in Go."""
        options = parse_nsqd_args(["--mem-queue-size=3", "extra", "--mem-queue-size=4"])
        self.assertEqual(options.mem_queue_size, 3)

    def test_defaults_argument(self) -> None:
        """Flags not given keep the values of the defaults object."""
        defaults = valid(max_rdy_count=10)
        options = parse_nsqd_args(["--mem-queue-size=1"], defaults)
        self.assertEqual(options.max_rdy_count, 10)
        self.assertEqual(options.mem_queue_size, 1)
        self.assertEqual(defaults.mem_queue_size, 10000)


class ParseOrExitTests(SynchronousTestCase):
    """parse_nsqd_args_or_exit exits as Go nsqd does."""

    def setUp(self) -> None:
        self.stderr = io.StringIO()
        self.patch(cli.sys, "stderr", self.stderr)

    def test_unknown_flag(self) -> None:
        """An unknown flag prints the message and usage and exits 2."""
        with self.assertRaises(SystemExit) as caught:
            parse_nsqd_args_or_exit(["--foo"])
        self.assertEqual(caught.exception.code, 2)
        output = self.stderr.getvalue()
        self.assertTrue(
            output.startswith("flag provided but not defined: -foo\nUsage of nsqd:\n")
        )
        self.assertIn("  -tcp-address string\n", output)

    def test_help(self) -> None:
        """-h prints the usage and exits 0."""
        with self.assertRaises(SystemExit) as caught:
            parse_nsqd_args_or_exit(["-h"])
        self.assertEqual(caught.exception.code, 0)
        self.assertTrue(self.stderr.getvalue().startswith("Usage of nsqd:\n"))

    def test_success(self) -> None:
        """Good flags are returned as options."""
        self.assertEqual(parse_nsqd_args_or_exit(["--sync-every=1"]).sync_every, 1)
        self.assertEqual(self.stderr.getvalue(), "")


class ValidateTests(SynchronousTestCase):
    """NSQDOptions.validate refuses impossible settings."""

    def assertInvalid(self, message: str, **changes: Any) -> None:
        with self.assertRaises(ValueError) as caught:
            valid(**changes).validate()
        self.assertEqual(str(caught.exception), message)

    def test_node_id(self) -> None:
        """--node-id must be in [0,1024)."""
        self.assertInvalid("--node-id must be [0,1024)", node_id=1024)
        self.assertInvalid("--node-id must be [0,1024)", node_id=-1)
        valid(node_id=0).validate()
        valid(node_id=1023).validate()

    def test_negative_sizes(self) -> None:
        """Sizes and counts must not be negative."""
        self.assertInvalid("--mem-queue-size must not be negative (-1)", mem_queue_size=-1)
        self.assertInvalid("--max-msg-size must not be negative (-5)", max_msg_size=-5)
        valid(mem_queue_size=0).validate()

    def test_negative_durations(self) -> None:
        """Durations must not be negative; the message shows Go's form."""
        self.assertInvalid("--msg-timeout must not be negative (-1s)", msg_timeout=-1.0)
        self.assertInvalid(
            "--output-buffer-timeout must not be negative (-250ms)",
            output_buffer_timeout=-0.25,
        )

    def test_broadcast_ports(self) -> None:
        """Broadcast ports must be valid port numbers."""
        self.assertInvalid(
            "--broadcast-tcp-port must be [0,65535] (70000)", broadcast_tcp_port=70000
        )

    def test_max_deflate_level(self) -> None:
        """--max-deflate-level must be in [1,9], as Go."""
        self.assertInvalid("--max-deflate-level must be [1,9]", max_deflate_level=0)
        self.assertInvalid("--max-deflate-level must be [1,9]", max_deflate_level=10)

    def test_percentiles(self) -> None:
        """Percentiles must be in (0, 1]."""
        self.assertInvalid(
            "invalid E2E processing latency percentile: 1.5",
            e2e_processing_latency_percentile=[1.5],
        )
        self.assertInvalid(
            "invalid E2E processing latency percentile: 0",
            e2e_processing_latency_percentile=[0.0],
        )
        valid(e2e_processing_latency_percentile=[1.0, 0.99]).validate()

    def test_log_level(self) -> None:
        """The log level must be one of Go's; it is lower-cased."""
        self.assertInvalid(
            "invalid log level 'loud' (debug, info, warn, error, fatal)",
            log_level="loud",
        )
        options = valid(log_level="ERROR")
        options.validate()
        self.assertEqual(options.log_level, "error")

    def test_tls_min_version(self) -> None:
        """The TLS version must be one Go names."""
        self.assertInvalid(
            "--tls-min-version must be one of ssl3.0, tls1.0, tls1.1, tls1.2, tls1.3 "
            "('tls9')",
            tls_min_version="tls9",
        )
        options = valid(tls_min_version="TLS1.3")
        options.validate()
        self.assertEqual(options.tls_min_version, "tls1.3")

    def test_tls_required_without_certificate(self) -> None:
        """Requiring TLS needs a certificate and key, as Go says."""
        self.assertInvalid(
            "cannot require TLS client connections without TLS key and cert",
            tls_required=TLS_REQUIRED,
        )
        self.assertInvalid(
            "cannot require TLS client connections without TLS key and cert",
            tls_required=TLS_REQUIRED_EXCEPT_HTTP,
        )
        valid(tls_required=TLS_REQUIRED, tls_cert="c.pem", tls_key="k.pem").validate()

    def test_tls_required_value(self) -> None:
        """tls_required must be one of the three constants."""
        self.assertInvalid("--tls-required must be true, false or tcp-https", tls_required=5)

    def test_cert_and_key_together(self) -> None:
        """--tls-cert and --tls-key go together."""
        self.assertInvalid(
            "--tls-cert and --tls-key must be given together", tls_cert="c.pem"
        )
        self.assertInvalid("--tls-cert and --tls-key must be given together", tls_key="k")

    def test_client_auth_policy_implies_required(self) -> None:
        """A client auth policy turns on tls-required, as Go's nsqd.New does."""
        options = valid(
            tls_client_auth_policy="require-verify", tls_cert="c.pem", tls_key="k.pem"
        )
        options.validate()
        self.assertEqual(options.tls_required, TLS_REQUIRED)
        self.assertInvalid(
            "cannot require TLS client connections without TLS key and cert",
            tls_client_auth_policy="require",
        )

    def test_client_auth_policy_value(self) -> None:
        """Unknown client auth policies are refused."""
        self.assertInvalid(
            "--tls-client-auth-policy must be 'require' or 'require-verify' ('maybe')",
            tls_client_auth_policy="maybe",
        )

    def test_auth_http_request_method(self) -> None:
        """The auth request method is get or post."""
        self.assertInvalid(
            "--auth-http-request-method must be post or get",
            auth_http_request_method="put",
        )
        valid(auth_http_request_method="post").validate()

    def test_listen_addresses(self) -> None:
        """Listen addresses must be convertible; empty HTTP(S) disables them."""
        self.assertInvalid(
            "--tcp-address: invalid port 'x' in listen address '127.0.0.1:x'",
            tcp_address="127.0.0.1:x",
        )
        self.assertInvalid("--tcp-address must not be empty", tcp_address="")
        valid(http_address="", https_address="").validate()

    def test_metaq_address(self) -> None:
        """--metaq-address is off when empty and checked like the other listen addresses when given."""
        self.assertEqual(parse_nsqd_args([]).metaq_address, "")
        self.assertEqual(parse_nsqd_args(["--metaq-address=127.0.0.1:8123"]).metaq_address, "127.0.0.1:8123")
        valid(metaq_address="").validate()
        valid(metaq_address="127.0.0.1:8123").validate()
        self.assertInvalid(
            "--metaq-address: invalid port 'x' in listen address '127.0.0.1:x'",
            metaq_address="127.0.0.1:x",
        )

    def test_storage(self) -> None:
        """A storage backend must be named."""
        self.assertInvalid("--storage must name a storage backend", storage="")

    def test_config_file(self) -> None:
        """--config is refused clearly until config files are supported."""
        self.assertInvalid(
            "--config is not supported yet (config file 'nsqd.cfg'): give the "
            "settings as flags",
            config="nsqd.cfg",
        )


class MayUseTLSTests(SynchronousTestCase):
    """NSQDOptions.may_use_tls says whether an nsqd may ever speak TLS."""

    def test_plain(self) -> None:
        """Go's defaults, host:port, UNIX sockets and tcp endpoints need no TLS."""
        self.assertFalse(valid().may_use_tls())
        self.assertFalse(valid(tcp_address="127.0.0.1:0", http_address="[::1]:0").may_use_tls())
        self.assertFalse(
            valid(tcp_address="/tmp/nsqd.sock", http_address="tcp6:0:interface=\\:\\:1").may_use_tls()
        )
        self.assertFalse(valid(http_address="").may_use_tls())

    def test_certificate(self) -> None:
        """A certificate (V2 upgrade, HTTPS listener) may use TLS."""
        self.assertTrue(valid(tls_cert="c.pem", tls_key="k.pem").may_use_tls())

    def test_auth_server(self) -> None:
        """An auth server may be, or redirect to, https."""
        self.assertTrue(valid(auth_http_address=["127.0.0.1:4181"]).may_use_tls())

    def test_ssl_endpoint(self) -> None:
        """A listener on an ssl: endpoint uses TLS."""
        self.assertTrue(valid(http_address="ssl:0:privateKey=k.pem").may_use_tls())

    def test_unusable_address(self) -> None:
        """An address that cannot be read assumes TLS may be needed."""
        self.assertTrue(valid(tcp_address="nonsense").may_use_tls())
