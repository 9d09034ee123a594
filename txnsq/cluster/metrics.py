# -*- test-case-name: tests.test_cluster_metrics -*-
"""
The cluster's numbers for ``GET /metrics`` (Prometheus text format 0.0.4),
from the ``cluster`` section of ``/stats?format=json``:

* ``nsqd_cluster_routes`` (servers routed), ``nsqd_cluster_connections``,
  ``nsqd_cluster_errors_total``, ``nsqd_cluster_backpressure_pauses_total``,
  ``nsqd_cluster_messages_unwanted_total`` (came with no local interest);
* per route server and direction (connections summed), labels
  ``{server_id,server_name,direction}``:
  ``nsqd_cluster_route_interest`` and
  ``nsqd_cluster_route_{messages,bytes}_{in,out}_total``;
* the bridge: ``nsqd_nats_bridge_messages_{from_nats,to_nats,invalid}_total``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Tuple

from txnsq.nsqd.metrics import escape_label_value, format_value

__all__ = ["render_cluster_metrics"]

_ROUTE = (
    ("nsqd_cluster_route_interest", "gauge", "interest_count", "Subjects and queue groups the route's server wants."),
    ("nsqd_cluster_route_messages_in_total", "counter", "messages_in", "Messages received on the route."),
    ("nsqd_cluster_route_bytes_in_total", "counter", "bytes_in", "Payload bytes received on the route."),
    ("nsqd_cluster_route_messages_out_total", "counter", "messages_out", "Messages sent on the route."),
    ("nsqd_cluster_route_bytes_out_total", "counter", "bytes_out", "Payload bytes sent on the route."),
)


def _family(out: List[str], name: str, kind: str, text: str) -> None:
    out.append("# HELP %s %s\n# TYPE %s %s\n" % (name, text, name, kind))


def render_cluster_metrics(cluster: Mapping[str, Any]) -> bytes:
    """The cluster's metric families for one ``cluster`` stats section."""
    out: List[str] = []
    for name, kind, key, text in (
        ("nsqd_cluster_routes", "gauge", "route_count", "Cluster servers with a route up."),
        ("nsqd_cluster_connections", "gauge", "connection_count", "Open route connections."),
        ("nsqd_cluster_errors_total", "counter", "errors", "Route protocol errors, sent or received."),
        (
            "nsqd_cluster_backpressure_pauses_total",
            "counter",
            "paused",
            "Times a route stopped being read because NSQ could not take a message.",
        ),
        (
            "nsqd_cluster_messages_unwanted_total",
            "counter",
            "messages_dropped",
            "Messages from routes with no local interest in their subject.",
        ),
    ):
        _family(out, name, kind, text)
        out.append("%s %s\n" % (name, format_value(cluster.get(key, 0))))
    routes = cluster.get("routes") or ()
    for name, kind, key, text in _ROUTE:
        _family(out, name, kind, text)
        # Two connections to one server in one direction (a server's extra
        # connection) are one sample: a label set may appear only once.
        samples: Dict[Tuple[str, str, str], Any] = {}
        for route in routes:
            labels = (
                str(route.get("server_id", "")),
                str(route.get("server_name", "")),
                "out" if route.get("outbound") else "in",
            )
            samples[labels] = samples.get(labels, 0) + route.get(key, 0)
        for (server_id, server_name, direction), value in samples.items():
            out.append(
                '%s{server_id="%s",server_name="%s",direction="%s"} %s\n'
                % (
                    name,
                    escape_label_value(server_id),
                    escape_label_value(server_name),
                    direction,
                    format_value(value),
                )
            )
    bridge = cluster.get("nats_bridge")
    if bridge:
        for name, key, text in (
            ("nsqd_nats_bridge_messages_from_nats_total", "messages_from_nats", "NATS messages published to NSQ topics."),
            ("nsqd_nats_bridge_messages_to_nats_total", "messages_to_nats", "NSQ messages sent to NATS servers."),
            ("nsqd_nats_bridge_messages_invalid_total", "messages_invalid", "NATS messages dropped: no valid bridged topic name."),
        ):
            _family(out, name, "counter", text)
            out.append("%s %s\n" % (name, format_value(bridge.get(key, 0))))
    return "".join(out).encode("utf-8")
