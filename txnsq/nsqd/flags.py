# -*- test-case-name: tests.test_options -*-
"""
nsqd's command line: the flag table, in Go nsqd v1.3's order with Go's
names and help texts, and the parsers that fill
:class:`NSQDOptions <txnsq.nsqd.options.NSQDOptions>` from it.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence

from txnsq import cli
from txnsq.cli import (
    BOOL,
    BOOL_VALUE,
    DURATION,
    FLOAT_LIST,
    INT,
    STRING,
    STRING_LIST,
    VALUE,
    Flag,
    FlagValueError,
    log_flags,
)
from txnsq.nsqd.options import (
    TLS_NOT_REQUIRED,
    TLS_REQUIRED,
    TLS_REQUIRED_EXCEPT_HTTP,
    TLS_VERSIONS,
    NSQDOptions,
)

__all__ = ["nsqd_flags", "parse_nsqd_args", "parse_nsqd_args_or_exit"]

def _parse_tls_required(text: str) -> int:
    """tlsRequiredOption.Set: ``tcp-https`` or a Go boolean, in any case."""
    lowered = text.lower()
    if lowered == "tcp-https":
        return TLS_REQUIRED_EXCEPT_HTTP
    try:
        required = cli.parse_go_bool(lowered)
    except FlagValueError:
        # Go returns strconv's error itself here, not flag's "parse error".
        raise FlagValueError('strconv.ParseBool: parsing "%s": invalid syntax' % (lowered,))
    return TLS_REQUIRED if required else TLS_NOT_REQUIRED


def _tls_min_version_parser(default: str) -> Any:
    def parse(text: str) -> str:
        """tlsMinVersionOption.Set: a version name; empty keeps the default."""
        lowered = text.lower()
        if lowered == "":
            return default
        if lowered not in TLS_VERSIONS:
            raise FlagValueError('unknown tlsVersionOption "%s"' % (lowered,))
        return lowered

    return parse


def _storage_help() -> str:
    """The ``--storage`` help, naming the backends that are installed."""
    try:
        from txnsq.storage.plugins import storage_backends

        names = sorted(storage_backends())
    except Exception:  # a broken third-party plugin must not break --help
        names = ["disk", "ephemeral", "memory"]
    return (
        "storage backend for topic and channel queues (txnsq; one of: %s; "
        "third-party backends are Twisted plugins)" % (", ".join(names),)
    )


def nsqd_flags(defaults: Optional[NSQDOptions] = None) -> List[Flag]:
    """
    nsqd's flag table, in Go's declaration order, with defaults taken from
    ``defaults`` (a fresh :class:`NSQDOptions` when omitted).
    """
    o = defaults if defaults is not None else NSQDOptions()
    return [
        # basic options
        Flag("version", BOOL, False, "print version string"),
        Flag("config", STRING, "", "path to config file"),
        *log_flags(o.log_level, o.log_prefix),
        Flag(
            "node-id",
            INT,
            o.node_id,
            "unique part for message IDs, (int) in range [0,1024) "
            "(default is hash of hostname)",
        ),
        Flag("worker-id", BOOL, False, "[deprecated] use --node-id", ignored=True),
        Flag(
            "https-address",
            STRING,
            o.https_address,
            "<addr>:<port> to listen on for HTTPS clients",
        ),
        Flag(
            "http-address",
            STRING,
            o.http_address,
            "<addr>:<port> to listen on for HTTP clients",
        ),
        Flag(
            "tcp-address",
            STRING,
            o.tcp_address,
            "<addr>:<port> to listen on for TCP clients",
        ),
        Flag(
            "auth-http-address",
            STRING_LIST,
            list(o.auth_http_address),
            "<addr>:<port> or a full url to query auth server "
            "(may be given multiple times)",
        ),
        Flag(
            "auth-http-request-method",
            STRING,
            o.auth_http_request_method,
            "HTTP method to use for auth server requests",
        ),
        Flag(
            "broadcast-address",
            STRING,
            o.broadcast_address,
            "address that will be registered with lookupd "
            "(defaults to the OS hostname)",
        ),
        Flag(
            "broadcast-tcp-port",
            INT,
            o.broadcast_tcp_port,
            "TCP port that will be registered with lookupd "
            "(defaults to the TCP port that this nsqd is listening on)",
        ),
        Flag(
            "broadcast-http-port",
            INT,
            o.broadcast_http_port,
            "HTTP port that will be registered with lookupd "
            "(defaults to the HTTP port that this nsqd is listening on)",
        ),
        Flag(
            "lookupd-tcp-address",
            STRING_LIST,
            list(o.lookupd_tcp_address),
            "lookupd TCP address (may be given multiple times)",
        ),
        Flag(
            "http-client-connect-timeout",
            DURATION,
            o.http_client_connect_timeout,
            "timeout for HTTP connect",
        ),
        Flag(
            "http-client-request-timeout",
            DURATION,
            o.http_client_request_timeout,
            "timeout for HTTP request",
        ),
        # diskqueue options
        Flag("data-path", STRING, o.data_path, "path to store disk-backed messages"),
        Flag(
            "mem-queue-size",
            INT,
            o.mem_queue_size,
            "number of messages to keep in memory (per topic/channel)",
        ),
        Flag(
            "max-bytes-per-file",
            INT,
            o.max_bytes_per_file,
            "number of bytes per diskqueue file before rolling",
        ),
        Flag(
            "sync-every",
            INT,
            o.sync_every,
            "number of messages per diskqueue fsync",
        ),
        Flag(
            "sync-timeout",
            DURATION,
            o.sync_timeout,
            "duration of time per diskqueue fsync",
        ),
        Flag(
            "queue-scan-worker-pool-max",
            INT,
            o.queue_scan_worker_pool_max,
            "max concurrency for checking in-flight and deferred message timeouts",
        ),
        Flag(
            "queue-scan-selection-count",
            INT,
            o.queue_scan_selection_count,
            "number of channels to check per cycle (every 100ms) for in-flight "
            "and deferred timeouts",
        ),
        # msg and command options
        Flag(
            "msg-timeout",
            DURATION,
            o.msg_timeout,
            "default duration to wait before auto-requeing a message",
        ),
        Flag(
            "max-msg-timeout",
            DURATION,
            o.max_msg_timeout,
            "maximum duration before a message will timeout",
        ),
        Flag(
            "max-msg-size",
            INT,
            o.max_msg_size,
            "maximum size of a single message in bytes",
        ),
        Flag(
            "max-req-timeout",
            DURATION,
            o.max_req_timeout,
            "maximum requeuing timeout for a message",
        ),
        Flag(
            "max-body-size",
            INT,
            o.max_body_size,
            "maximum size of a single command body",
        ),
        # client overridable configuration options
        Flag(
            "max-heartbeat-interval",
            DURATION,
            o.max_heartbeat_interval,
            "maximum client configurable duration of time between client heartbeats",
        ),
        Flag("max-rdy-count", INT, o.max_rdy_count, "maximum RDY count for a client"),
        Flag(
            "max-output-buffer-size",
            INT,
            o.max_output_buffer_size,
            "maximum client configurable size (in bytes) for a client output buffer",
        ),
        Flag(
            "max-output-buffer-timeout",
            DURATION,
            o.max_output_buffer_timeout,
            "maximum client configurable duration of time between flushing to a client",
        ),
        Flag(
            "min-output-buffer-timeout",
            DURATION,
            o.min_output_buffer_timeout,
            "minimum client configurable duration of time between flushing to a client",
        ),
        Flag(
            "output-buffer-timeout",
            DURATION,
            o.output_buffer_timeout,
            "default duration of time between flushing data to clients",
        ),
        Flag(
            "max-channel-consumers",
            INT,
            o.max_channel_consumers,
            "maximum channel consumer connection count per nsqd instance "
            "(default 0, i.e., unlimited)",
        ),
        # statsd integration options
        Flag(
            "statsd-address",
            STRING,
            o.statsd_address,
            "UDP <addr>:<port> of a statsd daemon for pushing stats",
        ),
        Flag(
            "statsd-interval",
            DURATION,
            o.statsd_interval,
            "duration between pushing to statsd",
        ),
        Flag(
            "statsd-mem-stats",
            BOOL,
            o.statsd_mem_stats,
            "toggle sending memory and GC stats to statsd",
        ),
        Flag(
            "statsd-prefix",
            STRING,
            o.statsd_prefix,
            "prefix used for keys sent to statsd (%s for host replacement)",
        ),
        Flag(
            "statsd-udp-packet-size",
            INT,
            o.statsd_udp_packet_size,
            "the size in bytes of statsd UDP packets",
        ),
        Flag(
            "statsd-exclude-ephemeral",
            BOOL,
            o.statsd_exclude_ephemeral,
            "Skip ephemeral topics and channels when sending stats to statsd",
        ),
        # end to end percentile flags
        Flag(
            "e2e-processing-latency-percentile",
            FLOAT_LIST,
            list(o.e2e_processing_latency_percentile),
            "message processing time percentiles (as float (0, 1.0]) to track "
            "(can be specified multiple times or comma separated "
            "'1.0,0.99,0.95', default none)",
        ),
        Flag(
            "e2e-processing-latency-window-time",
            DURATION,
            o.e2e_processing_latency_window_time,
            "calculate end to end latency quantiles for this duration of time "
            "(ie: 60s would only show quantile calculations from the past 60 seconds)",
        ),
        # TLS config
        Flag("tls-cert", STRING, o.tls_cert, "path to certificate file"),
        Flag("tls-key", STRING, o.tls_key, "path to key file"),
        Flag(
            "tls-client-auth-policy",
            STRING,
            o.tls_client_auth_policy,
            "client certificate auth policy ('require' or 'require-verify')",
        ),
        Flag(
            "tls-root-ca-file",
            STRING,
            o.tls_root_ca_file,
            "path to certificate authority file",
        ),
        Flag(
            "tls-required",
            BOOL_VALUE,
            o.tls_required,
            "require TLS for client connections (true, false, tcp-https)",
            parse=_parse_tls_required,
            # Go shows no default when it is its zero, TLSNotRequired.
            default_text=None if o.tls_required == 0 else str(o.tls_required),
        ),
        Flag(
            "tls-min-version",
            VALUE,
            o.tls_min_version,
            "minimum SSL/TLS version acceptable ('ssl3.0', 'tls1.0', 'tls1.1', "
            "'tls1.2' or 'tls1.3')",
            parse=_tls_min_version_parser(o.tls_min_version),
            default_text=o.tls_min_version or None,
        ),
        # compression
        Flag(
            "deflate",
            BOOL,
            o.deflate,
            "enable deflate feature negotiation (client compression)",
        ),
        Flag(
            "max-deflate-level",
            INT,
            o.max_deflate_level,
            "max deflate compression level a client can negotiate "
            "(> values == > nsqd CPU usage)",
        ),
        Flag(
            "snappy",
            BOOL,
            o.snappy,
            "enable snappy feature negotiation (client compression)",
        ),
        # txnsq's own
        Flag("storage", STRING, o.storage, _storage_help),
        Flag(
            "metaq-address",
            STRING,
            o.metaq_address,
            "<addr>:<port> to listen on for MetaQ clients (retained topics; "
            "empty: no MetaQ listener)",
        ),
        Flag(
            "retention-bytes",
            INT,
            o.retention_bytes,
            "bytes of retained log kept per retained topic, at least (txnsq; "
            "the default for topics that turn retention on)",
        ),
        Flag(
            "retention-age",
            DURATION,
            o.retention_age,
            "age after which retained records are deleted, 0 for none (txnsq; "
            "the default for topics that turn retention on)",
        ),
        Flag(
            "retain-topics",
            STRING,
            o.retain_topics,
            "regular expression: topics whose names match are retained when "
            "created (txnsq)",
        ),
        Flag(
            "log-partitions",
            INT,
            o.log_partitions,
            "partitions of a retained topic's log (txnsq)",
        ),
    ] + _cluster_flags(o)


def _cluster_flags(o: NSQDOptions) -> List[Flag]:
    from txnsq.cluster.flags import cluster_flags

    return cluster_flags(o)


def parse_nsqd_args(
    argv: Sequence[str], defaults: Optional[NSQDOptions] = None
) -> NSQDOptions:
    """
    nsqd's command line (without the program name) as
    :func:`txnsq.cli.parse_settings` reads it; not validated
    (:meth:`NSQDOptions.validate`).
    """
    return cli.parse_settings(nsqd_flags, NSQDOptions, argv, defaults)


def parse_nsqd_args_or_exit(
    argv: Sequence[str], defaults: Optional[NSQDOptions] = None
) -> NSQDOptions:
    """
    :func:`parse_nsqd_args` for the console script: Go's exits on errors
    and ``-h`` (:func:`txnsq.cli.parse_settings_or_exit`).
    """
    return cli.parse_settings_or_exit(
        nsqd_flags, NSQDOptions, argv, "nsqd", defaults
    )
