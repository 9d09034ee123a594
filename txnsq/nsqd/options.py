# -*- test-case-name: tests.test_options -*-
"""
nsqd's settings: every flag of Go nsqd v1.3 with Go's names, defaults and
help texts, plus txnsq's own ``--storage``.

:class:`NSQDOptions` holds them as snake_case attributes (``--mem-queue-size``
is ``mem_queue_size``); durations are float seconds, sizes ints.  It is what
the broker, the adapters and the service read, whether the settings came
from the command line (:func:`parse_nsqd_args`), twistd
(:mod:`txnsq.nsqd.tap`) or code embedding nsqd.

Listen addresses stay strings: Go's ``host:port`` or any Twisted server
endpoint description; :func:`listen_endpoint_description` turns them into
the latter.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
import socket
import zlib
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Dict, FrozenSet, List, Optional, Sequence, Tuple

from txnsq import cli
from txnsq.logging import LOG_LEVELS, log_flags, parse_log_level_flag
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
)

__all__ = [
    "LOG_LEVELS",
    "TLS_NOT_REQUIRED",
    "TLS_REQUIRED",
    "TLS_REQUIRED_EXCEPT_HTTP",
    "TLS_VERSIONS",
    "NSQDOptions",
    "check_listen_address",
    "default_node_id",
    "listen_endpoint_description",
    "nsqd_flags",
    "parse_nsqd_args",
    "parse_nsqd_args_or_exit",
]

# --tls-required values, numbered as Go's nsqd.TLSNotRequired & co.
TLS_NOT_REQUIRED = 0
TLS_REQUIRED_EXCEPT_HTTP = 1
TLS_REQUIRED = 2

# --tls-min-version names and the TLS protocol numbers Go maps them to.
TLS_VERSIONS: Dict[str, int] = {
    "ssl3.0": 0x0300,
    "tls1.0": 0x0301,
    "tls1.1": 0x0302,
    "tls1.2": 0x0303,
    "tls1.3": 0x0304,
}

_TLS_CLIENT_AUTH_POLICIES: FrozenSet[str] = frozenset(["", "require", "require-verify"])
_AUTH_HTTP_REQUEST_METHODS: FrozenSet[str] = frozenset(["get", "post"])


def default_node_id(hostname: Optional[str] = None) -> int:
    """
    Go's default ``--node-id``: CRC-32 (IEEE) of the MD5 digest of the host
    name, modulo 1024.
    """
    if hostname is None:
        hostname = socket.gethostname()
    digest = hashlib.md5(hostname.encode("utf-8")).digest()
    return zlib.crc32(digest) % 1024


@dataclass
class NSQDOptions:
    """
    Every nsqd setting, with Go nsqd v1.3's defaults.

    Attribute names are the flag names in snake_case.  Durations are float
    seconds; sizes and counts are ints.  The host name dependent defaults
    (``node_id``, ``broadcast_address``) are computed when an instance is
    made.  Settings Go has without a flag (``client_timeout``,
    ``queue_scan_interval`` ...) are attributes too.
    """

    # basic options
    version: bool = False
    config: str = ""
    log_level: str = "info"
    log_prefix: str = "[nsqd] "
    node_id: int = field(default_factory=default_node_id)
    https_address: str = "0.0.0.0:4152"
    http_address: str = "0.0.0.0:4151"
    tcp_address: str = "0.0.0.0:4150"
    auth_http_address: List[str] = field(default_factory=list)
    auth_http_request_method: str = "get"
    broadcast_address: str = field(default_factory=socket.gethostname)
    broadcast_tcp_port: int = 0
    broadcast_http_port: int = 0
    lookupd_tcp_address: List[str] = field(default_factory=list)
    http_client_connect_timeout: float = 2.0
    http_client_request_timeout: float = 5.0

    # diskqueue options
    data_path: str = ""
    mem_queue_size: int = 10000
    max_bytes_per_file: int = 104857600
    sync_every: int = 2500
    sync_timeout: float = 2.0

    queue_scan_worker_pool_max: int = 4
    queue_scan_selection_count: int = 20

    # msg and command options
    msg_timeout: float = 60.0
    max_msg_timeout: float = 900.0
    max_msg_size: int = 1048576
    max_req_timeout: float = 3600.0
    max_body_size: int = 5242880

    # client overridable configuration options
    max_heartbeat_interval: float = 60.0
    max_rdy_count: int = 2500
    max_output_buffer_size: int = 65536
    max_output_buffer_timeout: float = 30.0
    min_output_buffer_timeout: float = 0.025
    output_buffer_timeout: float = 0.25
    max_channel_consumers: int = 0

    # statsd integration options
    statsd_address: str = ""
    statsd_interval: float = 60.0
    statsd_mem_stats: bool = True
    statsd_prefix: str = "nsq.%s"
    statsd_udp_packet_size: int = 508
    statsd_exclude_ephemeral: bool = False

    # end to end percentiles, largest first (Go keeps them sorted so)
    e2e_processing_latency_percentile: List[float] = field(default_factory=list)
    e2e_processing_latency_window_time: float = 600.0

    # TLS
    tls_cert: str = ""
    tls_key: str = ""
    tls_client_auth_policy: str = ""
    tls_root_ca_file: str = ""
    tls_required: int = TLS_NOT_REQUIRED
    tls_min_version: str = "tls1.0"

    # compression
    deflate: bool = True
    max_deflate_level: int = 6
    snappy: bool = True

    # txnsq's own
    storage: str = "disk"
    #: The MetaQ listener's address (``--metaq-address``); empty: off.
    metaq_address: str = ""
    # retained topics (docs/retention.md)
    retention_bytes: int = 1 << 30
    retention_age: float = 7 * 24 * 3600.0
    retain_topics: str = ""
    log_partitions: int = 1
    # NATS cluster routes and the NSQ/NATS bridge (txnsq/cluster, docs/nats.md)
    cluster_address: str = ""
    cluster_name: str = ""
    routes: List[str] = field(default_factory=list)
    cluster_advertise: str = ""
    cluster_ping_interval: float = 30.0
    cluster_tls_cert: str = ""
    cluster_tls_key: str = ""
    cluster_tls_ca: str = ""
    nats_subject_prefix: str = "nsq."
    nats_account: str = "$G"
    nats_topics: str = ""
    # mirrored topics (txnsq/cluster/mirror.py, docs/mirroring.md)
    mirror_topics: str = ""
    mirror_ack: str = "sync"
    mirror_failover_timeout: float = 10.0

    # Go options without a flag (a config file could set them)
    client_timeout: float = 60.0
    queue_scan_interval: float = 0.1
    queue_scan_refresh_interval: float = 5.0
    queue_scan_dirty_percent: float = 0.25

    def validate(self) -> None:
        """
        Refuse impossible settings, and apply the one setting Go implies:
        a ``--tls-client-auth-policy`` turns on ``--tls-required``.  Level
        and TLS version names are lower-cased.

        :raises ValueError: naming the flag and what is wrong with it.
        """
        if not 0 <= self.node_id < 1024:
            raise ValueError("--node-id must be [0,1024)")
        # Checked and lower-cased as the flag is (FlagValueError is a ValueError).
        self.log_level = parse_log_level_flag(self.log_level)
        for name in (
            "mem_queue_size",
            "max_bytes_per_file",
            "sync_every",
            "max_msg_size",
            "max_body_size",
            "max_rdy_count",
            "max_output_buffer_size",
            "max_channel_consumers",
            "statsd_udp_packet_size",
            "queue_scan_worker_pool_max",
            "queue_scan_selection_count",
        ):
            if getattr(self, name) < 0:
                raise ValueError(
                    "--%s must not be negative (%d)"
                    % (_flag_name(name), getattr(self, name))
                )
        for name in (
            "http_client_connect_timeout",
            "http_client_request_timeout",
            "sync_timeout",
            "msg_timeout",
            "max_msg_timeout",
            "max_req_timeout",
            "max_heartbeat_interval",
            "max_output_buffer_timeout",
            "min_output_buffer_timeout",
            "output_buffer_timeout",
            "statsd_interval",
            "e2e_processing_latency_window_time",
            "client_timeout",
            "queue_scan_interval",
            "queue_scan_refresh_interval",
        ):
            if getattr(self, name) < 0:
                raise ValueError(
                    "--%s must not be negative (%s)"
                    % (_flag_name(name), cli.format_duration(getattr(self, name)))
                )
        for name in ("broadcast_tcp_port", "broadcast_http_port"):
            if not 0 <= getattr(self, name) <= 65535:
                raise ValueError(
                    "--%s must be [0,65535] (%d)" % (_flag_name(name), getattr(self, name))
                )
        if not 1 <= self.max_deflate_level <= 9:
            raise ValueError("--max-deflate-level must be [1,9]")
        for value in self.e2e_processing_latency_percentile:
            if not 0 < value <= 1:
                raise ValueError(
                    "invalid E2E processing latency percentile: %s"
                    % (cli.format_go_float(value),)
                )
        if self.auth_http_request_method not in _AUTH_HTTP_REQUEST_METHODS:
            raise ValueError("--auth-http-request-method must be post or get")
        if self.tls_min_version.lower() not in TLS_VERSIONS:
            raise ValueError(
                "--tls-min-version must be one of %s (%r)"
                % (", ".join(TLS_VERSIONS), self.tls_min_version)
            )
        self.tls_min_version = self.tls_min_version.lower()
        if self.tls_client_auth_policy not in _TLS_CLIENT_AUTH_POLICIES:
            raise ValueError(
                "--tls-client-auth-policy must be 'require' or 'require-verify' (%r)"
                % (self.tls_client_auth_policy,)
            )
        if self.tls_required not in (
            TLS_NOT_REQUIRED,
            TLS_REQUIRED_EXCEPT_HTTP,
            TLS_REQUIRED,
        ):
            raise ValueError("--tls-required must be true, false or tcp-https")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("--tls-cert and --tls-key must be given together")
        if self.tls_client_auth_policy and self.tls_required == TLS_NOT_REQUIRED:
            # Go's nsqd.New does the same.
            self.tls_required = TLS_REQUIRED
        if self.tls_required != TLS_NOT_REQUIRED and not self.tls_cert:
            raise ValueError(
                "cannot require TLS client connections without TLS key and cert"
            )
        # An empty HTTP or HTTPS address turns that listener off, as in Go.
        for name in (
            "tcp_address",
            "http_address",
            "https_address",
            "metaq_address",
            "cluster_address",
        ):
            address = getattr(self, name)
            if address or name == "tcp_address":
                check_listen_address(_flag_name(name), address)
        if not self.storage:
            raise ValueError("--storage must name a storage backend")
        if self.retention_bytes < 1:
            raise ValueError("--retention-bytes must be positive (%d)" % (self.retention_bytes,))
        if self.retention_age < 0:
            raise ValueError("--retention-age must not be negative")
        if not 1 <= self.log_partitions <= 1024:
            raise ValueError("--log-partitions must be [1,1024] (%d)" % (self.log_partitions,))
        if self.retain_topics:
            try:
                re.compile(self.retain_topics)
            except re.error as e:
                raise ValueError("--retain-topics is not a valid regular expression: %s" % (e,))
        from txnsq.cluster.options import validate_cluster_options

        validate_cluster_options(self)
        if self.config:
            raise ValueError(
                "--config is not supported yet (config file %r): give the "
                "settings as flags" % (self.config,)
            )

    def may_use_tls(self) -> bool:
        """
        Whether an nsqd with these settings may ever speak TLS: it has a
        certificate (the V2 upgrade, the HTTPS listener), an auth server
        (which may be or redirect to ``https``), or a listen address that
        is neither plain TCP nor a UNIX socket (an ``ssl:`` endpoint, an
        endpoint plugin).  Without any of these the console script imports
        the reactor without TLS (:mod:`txnsq.plain_reactor`).
        """
        if self.tls_cert or self.tls_key or self.auth_http_address or self.cluster_tls_cert:
            return True
        for address in (self.tcp_address, self.http_address):
            if not address:
                continue
            try:
                description = listen_endpoint_description(address)
            except ValueError:
                return True  # the listener reports it; assume nothing
            if description.split(":", 1)[0].lower() not in _PLAIN_ENDPOINT_TYPES:
                return True
        return False


#: Endpoint types that never involve TLS.
_PLAIN_ENDPOINT_TYPES = frozenset(["tcp", "tcp6", "unix"])


def _flag_name(attr: str) -> str:
    return attr.replace("_", "-")


# --- the flag table ---------------------------------------------------------


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
    from txnsq.cluster.options import cluster_flags

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


# --- listen addresses -------------------------------------------------------

# Endpoint types serverFromString knows without a plugin scan.
_KNOWN_ENDPOINT_TYPES = frozenset(["tcp", "tcp6", "unix", "ssl", "systemd"])
_HOSTNAME = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?\.?\Z")
_ENDPOINT_TYPE = re.compile(r"[A-Za-z][A-Za-z0-9_+-]*\Z")


@lru_cache(maxsize=None)
def _plugin_endpoint_types() -> FrozenSet[str]:
    """The prefixes of installed endpoint string parser plugins, lower case."""
    try:
        from twisted.internet.interfaces import IStreamServerEndpointStringParser
        from twisted.plugin import getPlugins

        return frozenset(
            str(plugin.prefix).lower()
            for plugin in getPlugins(IStreamServerEndpointStringParser)
        )
    except Exception:  # a broken third-party plugin must not stop nsqd
        return frozenset()


def _is_endpoint_type(word: str) -> bool:
    if not _ENDPOINT_TYPE.match(word):
        return False
    lowered = word.lower()
    return lowered in _KNOWN_ENDPOINT_TYPES or lowered in _plugin_endpoint_types()


def _quote(value: str) -> str:
    """Escape a value for an endpoint description (``\\``, ``:`` and ``=``)."""
    return value.replace("\\", "\\\\").replace(":", "\\:").replace("=", "\\=")


def _split_host_port(address: str) -> Tuple[str, str]:
    """Go's net.SplitHostPort, raising ValueError with Go's reasons."""
    colon = address.rfind(":")
    if colon < 0:
        raise ValueError("missing port in address")
    if address.startswith("["):
        end = address.find("]")
        if end < 0:
            raise ValueError("missing ']' in address")
        if end + 1 == len(address):
            raise ValueError("missing port in address")
        if end + 1 != colon:
            if address[end + 1] == ":":
                raise ValueError("too many colons in address")
            raise ValueError("missing port in address")
        host = address[1:end]
        start, finish = 1, end + 1
    else:
        host = address[:colon]
        if ":" in host:
            raise ValueError("too many colons in address")
        start, finish = 0, 0
    if "[" in address[start:]:
        raise ValueError("unexpected '[' in address")
    if "]" in address[finish:]:
        raise ValueError("unexpected ']' in address")
    return host, address[colon + 1 :]


def check_listen_address(flag: str, address: str) -> None:
    """
    Refuse the value of the listen flag ``--flag`` when it is empty or
    :func:`listen_endpoint_description` cannot read it.

    :raises ValueError: ``--flag must not be empty`` or ``--flag: reason``.
    """
    if not address:
        raise ValueError("--%s must not be empty" % (flag,))
    try:
        listen_endpoint_description(address)
    except ValueError as error:
        raise ValueError("--%s: %s" % (flag, error))


def listen_endpoint_description(address: str) -> str:
    """
    A Twisted server endpoint description for a listen flag's value.

    - ``host:port`` as Go takes it: ``127.0.0.1:4150`` becomes
      ``tcp:4150:interface=127.0.0.1``, ``[::1]:0`` becomes
      ``tcp6:0:interface=\\:\\:1``, an empty host (``:4150``) listens on
      every IPv4 interface (``tcp:4150``), a host name is resolved when
      listening (``tcp:4150:interface=localhost``);
    - a Twisted endpoint description (``tcp:4150:interface=127.0.0.1``,
      ``unix:/run/nsqd.sock``, any installed endpoint plugin's prefix) is
      returned unchanged;
    - a socket path (containing ``/`` or ending in ``.sock``) becomes a UNIX
      endpoint, as Go nsqd v1.3 listens on a UNIX socket for any address
      that is not ``host:port``.

    :raises ValueError: for anything else, or a bad host or port.
    """
    if not address:
        raise ValueError("empty listen address")
    if "\x00" in address or address != address.strip():
        raise ValueError("invalid listen address %r" % (address,))
    prefix = address.split(":", 1)[0]
    if ":" in address and _is_endpoint_type(prefix):
        return address
    try:
        host, port_text = _split_host_port(address)
    except ValueError as error:
        if "/" in address or address.endswith(".sock"):
            return "unix:" + _quote(address)
        raise ValueError(
            "invalid listen address %r: %s (expected <addr>:<port>, a socket "
            "path or a Twisted endpoint description)" % (address, error)
        )
    if port_text == "":
        port = 0  # Go listens on a free port, as for ":0"
    elif port_text.isdigit() and port_text.isascii():
        port = int(port_text)
        if port > 65535:
            raise ValueError("invalid port %r in listen address %r" % (port_text, address))
    else:
        raise ValueError("invalid port %r in listen address %r" % (port_text, address))
    if host == "":
        return "tcp:%d" % (port,)
    zone = ""
    literal = host
    if "%" in host:
        literal, zone = host.split("%", 1)
    try:
        ip = ipaddress.ip_address(literal)
    except ValueError:
        ip = None
    if ip is not None:
        if ip.version == 6:
            if not address.startswith("["):  # pragma: no cover - Go needs brackets
                raise ValueError("IPv6 address %r must be in brackets" % (host,))
            return "tcp6:%d:interface=%s" % (port, _quote(host))
        if zone:
            raise ValueError("invalid host %r in listen address %r" % (host, address))
        return "tcp:%d:interface=%s" % (port, host)
    if address.startswith("[") or not _HOSTNAME.match(host):
        raise ValueError("invalid host %r in listen address %r" % (host, address))
    return "tcp:%d:interface=%s" % (port, _quote(host))
