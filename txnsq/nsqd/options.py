# -*- test-case-name: tests.test_options -*-
"""
nsqd's settings: every flag of Go nsqd v1.3 as an attribute, with Go's
defaults, plus txnsq's own (``--storage``, the retained log, the cluster).

:class:`NSQDOptions` holds them as snake_case attributes (``--mem-queue-size``
is ``mem_queue_size``); durations are float seconds, sizes ints.  It is what
the broker, the adapters and the service read, whether the settings came
from the command line (:func:`txnsq.nsqd.flags.parse_nsqd_args`), twistd
(:mod:`txnsq.nsqd.tap`) or code embedding nsqd.

Listen addresses stay strings: Go's ``host:port`` or any Twisted server
endpoint description; :func:`txnsq.listen_address.listen_endpoint_description`
turns them into the latter.
"""

from __future__ import annotations

import hashlib
import re
import socket
import zlib
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, List, Optional

from txnsq.listen_address import check_listen_address, listen_endpoint_description
from txnsq.logging import LOG_LEVELS, parse_log_level_flag
from txnsq.protocol.go_values import format_duration, format_go_float

__all__ = [
    "LOG_LEVELS",
    "TLS_NOT_REQUIRED",
    "TLS_REQUIRED",
    "TLS_REQUIRED_EXCEPT_HTTP",
    "TLS_VERSIONS",
    "NSQDOptions",
    "default_node_id",
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
    # mirrored topics (txnsq/mirror/, docs/mirroring.md)
    mirror_topics: str = ""
    mirror_ack: str = "sync"
    mirror_failover_timeout: float = 10.0
    #: Live standbys a publish to a mirrored topic needs (0: none asked).
    mirror_min_standbys: int = 0

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
                    % (_flag_name(name), format_duration(getattr(self, name)))
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
                    % (format_go_float(value),)
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
