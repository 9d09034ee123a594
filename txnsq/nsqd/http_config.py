# -*- test-case-name: tests.test_http -*-
"""
``/config/NAME``: the options Go nsqd reads and writes by their config names.

``GET`` answers any option that has a flag, typed as Go types it
(durations in nanoseconds, the log level and TLS version as Go's numbers);
``PUT`` changes the two Go lets change at run time,
``nsqlookupd_tcp_addresses`` and ``log_level``.
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

from txnsq.nsqd.options import LOG_LEVELS, TLS_VERSIONS
from txnsq.protocol.http_params import APIError, decode_string_list

__all__ = [
    "CONFIG_OPTIONS",
    "LOG_LEVEL_NUMBERS",
    "config_value",
    "set_config_value",
]

_NS = 1000000000

_INT, _STR, _DURATION, _BOOL, _LIST, _FLOATS, _LOG_LEVEL, _TLS_VERSION = range(8)

#: Go's config names (the ``cfg`` tag, else the flag name with ``_``) of
#: every option that has a flag, mapped to the ``NSQDOptions`` attribute
#: and how Go's value is typed.  ``storage``, ``metaq_address`` and the
#: retention ones are txnsq's own flags.
CONFIG_OPTIONS: Dict[str, Tuple[str, int]] = {
    "id": ("node_id", _INT),
    "log_level": ("log_level", _LOG_LEVEL),
    "log_prefix": ("log_prefix", _STR),
    "tcp_address": ("tcp_address", _STR),
    "http_address": ("http_address", _STR),
    "https_address": ("https_address", _STR),
    "broadcast_address": ("broadcast_address", _STR),
    "broadcast_tcp_port": ("broadcast_tcp_port", _INT),
    "broadcast_http_port": ("broadcast_http_port", _INT),
    "nsqlookupd_tcp_addresses": ("lookupd_tcp_address", _LIST),
    "auth_http_addresses": ("auth_http_address", _LIST),
    "auth_http_request_method": ("auth_http_request_method", _STR),
    "http_client_connect_timeout": ("http_client_connect_timeout", _DURATION),
    "http_client_request_timeout": ("http_client_request_timeout", _DURATION),
    "data_path": ("data_path", _STR),
    "mem_queue_size": ("mem_queue_size", _INT),
    "max_bytes_per_file": ("max_bytes_per_file", _INT),
    "sync_every": ("sync_every", _INT),
    "sync_timeout": ("sync_timeout", _DURATION),
    "queue_scan_selection_count": ("queue_scan_selection_count", _INT),
    "queue_scan_worker_pool_max": ("queue_scan_worker_pool_max", _INT),
    "msg_timeout": ("msg_timeout", _DURATION),
    "max_msg_timeout": ("max_msg_timeout", _DURATION),
    "max_msg_size": ("max_msg_size", _INT),
    "max_body_size": ("max_body_size", _INT),
    "max_req_timeout": ("max_req_timeout", _DURATION),
    "max_heartbeat_interval": ("max_heartbeat_interval", _DURATION),
    "max_rdy_count": ("max_rdy_count", _INT),
    "max_output_buffer_size": ("max_output_buffer_size", _INT),
    "max_output_buffer_timeout": ("max_output_buffer_timeout", _DURATION),
    "min_output_buffer_timeout": ("min_output_buffer_timeout", _DURATION),
    "output_buffer_timeout": ("output_buffer_timeout", _DURATION),
    "max_channel_consumers": ("max_channel_consumers", _INT),
    "statsd_address": ("statsd_address", _STR),
    "statsd_prefix": ("statsd_prefix", _STR),
    "statsd_interval": ("statsd_interval", _DURATION),
    "statsd_mem_stats": ("statsd_mem_stats", _BOOL),
    "statsd_udp_packet_size": ("statsd_udp_packet_size", _INT),
    "statsd_exclude_ephemeral": ("statsd_exclude_ephemeral", _BOOL),
    "e2e_processing_latency_window_time": ("e2e_processing_latency_window_time", _DURATION),
    "e2e_processing_latency_percentiles": ("e2e_processing_latency_percentile", _FLOATS),
    "tls_cert": ("tls_cert", _STR),
    "tls_key": ("tls_key", _STR),
    "tls_client_auth_policy": ("tls_client_auth_policy", _STR),
    "tls_root_ca_file": ("tls_root_ca_file", _STR),
    "tls_required": ("tls_required", _INT),
    "tls_min_version": ("tls_min_version", _TLS_VERSION),
    "deflate": ("deflate", _BOOL),
    "max_deflate_level": ("max_deflate_level", _INT),
    "snappy": ("snappy", _BOOL),
    "storage": ("storage", _STR),
    "metaq_address": ("metaq_address", _STR),
    "retention_bytes": ("retention_bytes", _INT),
    "retention_age": ("retention_age", _DURATION),
    "retain_topics": ("retain_topics", _STR),
    "log_partitions": ("log_partitions", _INT),
    "cluster_address": ("cluster_address", _STR),
    "cluster_name": ("cluster_name", _STR),
    "routes": ("routes", _LIST),
    "cluster_advertise": ("cluster_advertise", _STR),
    "cluster_ping_interval": ("cluster_ping_interval", _DURATION),
    "cluster_tls_cert": ("cluster_tls_cert", _STR),
    "cluster_tls_key": ("cluster_tls_key", _STR),
    "cluster_tls_ca": ("cluster_tls_ca", _STR),
    "nats_subject_prefix": ("nats_subject_prefix", _STR),
    "nats_account": ("nats_account", _STR),
    "nats_topics": ("nats_topics", _STR),
    "mirror_topics": ("mirror_topics", _STR),
    "mirror_ack": ("mirror_ack", _STR),
    "mirror_failover_timeout": ("mirror_failover_timeout", _DURATION),
    "mirror_min_standbys": ("mirror_min_standbys", _INT),
}

#: Go's ``lg.LogLevel`` numbers.
LOG_LEVEL_NUMBERS: Dict[str, int] = {name: index + 1 for index, name in enumerate(LOG_LEVELS)}


def config_value(options: Any, name: str) -> Any:
    """
    The value Go's ``getOptByCfgName`` returns for config name ``name``:
    durations in nanoseconds, the log level and TLS version as Go's
    numbers.

    :raises KeyError: no option has that config name.
    """
    attribute, kind = CONFIG_OPTIONS[name]
    value = getattr(options, attribute)
    if kind == _DURATION:
        return int(round(value * _NS))
    if kind == _LOG_LEVEL:
        return LOG_LEVEL_NUMBERS.get(str(value).lower(), 0)
    if kind == _TLS_VERSION:
        return TLS_VERSIONS.get(str(value).lower(), 0)
    if kind == _LIST:
        return [str(item) for item in value]
    if kind == _FLOATS:
        return [float(item) for item in value]
    if kind == _BOOL:
        return bool(value)
    if kind == _INT:
        return int(value)
    return str(value)


def set_config_value(options: Any, name: str, body: bytes, max_msg_size: int) -> None:
    """
    ``PUT /config/NAME`` with ``body``: set the option in ``options`` as
    Go does (a JSON list of addresses, or a log level name).

    :raises APIError: ``413 INVALID_VALUE`` for an empty body or one above
        ``max_msg_size``; ``400 INVALID_VALUE`` for a value Go rejects;
        ``400 INVALID_OPTION`` for an option that cannot be changed.
    """
    if len(body) > max_msg_size or not body:
        raise APIError(413, "INVALID_VALUE")
    if name == "nsqlookupd_tcp_addresses":
        addresses = decode_string_list(body)
        if addresses is None:
            raise APIError(400, "INVALID_VALUE")
        options.lookupd_tcp_address = addresses
    elif name == "log_level":
        level = body.decode("latin-1").lower()
        if level not in LOG_LEVEL_NUMBERS:
            raise APIError(400, "INVALID_VALUE")
        options.log_level = level
    else:
        raise APIError(400, "INVALID_OPTION")
