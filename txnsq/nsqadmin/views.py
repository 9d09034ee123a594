# -*- test-case-name: tests.test_nsqadmin_pages -*-
"""
nsqadmin's HTML pages, rendered on the server from the same data the JSON
API answers with, so that they read without JavaScript: the topics, a
topic, a channel, the nodes, a node, the counter and the lookup page.  The
little script (``static/nsqadmin.js``) refreshes ``#content`` in place,
asks for confirmation and sends the actions.  What the pages are built of
(layout, tables, charts, buttons) is in :mod:`txnsq.nsqadmin.view_parts`.

Every value goes through :func:`el <txnsq.nsqadmin.markup.el>`, which escapes it.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Sequence

from txnsq.nsqadmin.clusterinfo import NodeError, http_address
from txnsq.nsqadmin.markup import Safe, el, join
from txnsq.nsqadmin.stats import CHANNEL_COUNTS
from txnsq.nsqadmin.view_parts import (
    Page,
    action_buttons,
    button,
    charts,
    error_rows,
    layout,
    mirror_badge,
    num_cells,
    num_text,
    paused_badge,
    rate_text,
    sparkline,
    table,
    table_or,
    warnings,
)

__all__ = [
    "channel_page",
    "counter_page",
    "lookup_page",
    "node_page",
    "nodes_page",
    "topic_page",
    "topics_page",
    "total_depth",
]


#: The counts of a queue (a topic's, a channel's) after its depth and rate,
#: in column order: a channel sum's counters but the depths.
_QUEUE_COUNTS = tuple(name for name in CHANNEL_COUNTS if not name.endswith("depth"))

#: A client's counts, in the clients table's column order.
_CLIENT_COUNTS = (
    "ready_count",
    "in_flight_count",
    "finish_count",
    "requeue_count",
    "message_count",
)

#: The columns of a row of queue statistics (a topic's, a channel's).
_QUEUE_COLUMNS = (
    "Depth",
    "Rate",
    "In-Flight",
    "Deferred",
    "Requeued",
    "Timed Out",
    "Messages",
    "Clients",
)


def _queue_cells(page: Page, key: str, depth: int, record: Dict[str, Any]) -> List[Safe]:
    """Depth, rate (of history ``key``), the counts, messages and clients of a queue."""
    return [
        el("td", {"class_": "num depth"}, num_text(depth)),
        el("td", {"class_": "num rate"}, rate_text(page.history.rate(key))),
        *num_cells(record, _QUEUE_COUNTS),
    ]


def total_depth(topic: Dict[str, Any]) -> int:
    """A topic's own depth plus its channels' (what waits to be delivered)."""
    return int(topic["depth"]) + sum(int(c["depth"]) for c in topic.get("channels", ()))


def _channel_sums(topic: Dict[str, Any]) -> Dict[str, int]:
    sums = {
        k: 0
        for k in (
            "in_flight_count",
            "deferred_count",
            "requeue_count",
            "timeout_count",
            "client_count",
        )
    }
    for channel in topic.get("channels", ()):
        for name in sums:
            sums[name] += channel.get(name, 0)
    return sums


def topics_page(
    page: Page, names: Sequence[str], totals: Dict[str, Dict[str, Any]], errors: Sequence[NodeError]
) -> str:
    """Every topic with its depth, rate, in-flight, deferred, requeue, timeout and client counts."""
    rows = []
    for name in names:
        total = totals.get(name)
        link = el("a", {"href": page.path("topics", name)}, name)
        if total is None:
            rows.append(
                el(
                    "tr",
                    {"data_topic": name},
                    el("td", None, link),
                    el("td", {"colspan": 9, "class_": "muted"}, "no producers"),
                )
            )
            continue
        counts = dict(_channel_sums(total), message_count=total["message_count"])
        rows.append(
            el(
                "tr",
                {"data_topic": name},
                el("td", None, link, paused_badge(total["paused"])),
                *_queue_cells(page, name, total_depth(total), counts),
                el(
                    "td",
                    None,
                    sparkline(
                        [float(s.depth) for s in page.history.samples(name)], "depth of " + name
                    ),
                ),
            )
        )
    headers = ["Topic", "Total depth", *_QUEUE_COLUMNS[1:], "Depth (last minutes)"]
    body = join(
        el("h1", None, "Topics"),
        warnings(errors),
        table_or(headers, rows, "topics", "No topics yet."),
    )
    return layout("Topics", body, base=page.base)


def _node_cell(page: Page, node: str) -> Safe:
    return el("a", {"href": page.path("nodes", node)}, node)


def _retention(page: Page, api: str, total: Dict[str, Any]) -> Any:
    """
    txnsq's retained log of the topic, per node and partition, and a form
    rewinding a channel (nothing when no node retains the topic).
    """
    rows = []
    for node in total["nodes"]:
        retention = node.get("retention")
        if not isinstance(retention, dict):
            continue
        for part in retention.get("partitions", []):
            rows.append(
                el(
                    "tr",
                    {"data_node": node["node"]},
                    el("td", None, _node_cell(page, node["node"])),
                    el("td", {"class_": "num"}, num_text(retention.get("bytes_limit", 0))),
                    el("td", {"class_": "num"}, num_text(retention.get("age_ms", 0) // 1000)),
                    el("td", {"class_": "num"}, num_text(part["partition"])),
                    el("td", {"class_": "num"}, num_text(part["first_offset"])),
                    el("td", {"class_": "num"}, num_text(part["next_offset"])),
                    el("td", {"class_": "num log-bytes"}, num_text(part["bytes"])),
                    el("td", {"class_": "num"}, num_text(part["segments"])),
                )
            )
    if not rows:
        return None
    parts = [
        el("h2", None, "Retention"),
        table(
            ["nsqd", "Limit (bytes)", "Age (s)", "Partition", "First offset", "Next offset", "Log bytes", "Segments"],
            rows,
            "retention",
        ),
    ]
    channels = [c["channel_name"] for c in total["channels"]]
    if page.admin and channels:
        parts.append(
            el(
                "form",
                {"class_": "rewind", "data_url": api},
                "Rewind channel ",
                el("select", {"name": "channel"}, [el("option", None, name) for name in channels]),
                " to ",
                el("input", {"name": "from", "value": "earliest", "size": "30",
                             "title": "earliest, RFC 3339 or unix milliseconds"}),
                " ",
                el("button", {"type": "submit"}, "Rewind"),
            )
        )
    return join(*parts)


def topic_page(page: Page, topic: str, total: Dict[str, Any], errors: Sequence[NodeError]) -> str:
    """One topic: actions, charts, a row per nsqd, a row per channel."""
    api = page.path("api", "topics", topic)
    delete = "Delete topic %s and all its channels?" % topic
    actions = action_buttons(page, api, "topic", topic, total["paused"], delete)
    node_rows = []
    for node in total["nodes"]:
        tombstone = None
        if page.admin and page.lookupd_mode:
            tombstone = button(
                "Tombstone",
                "DELETE",
                page.path("api", "nodes", node["node"]),
                {"topic": topic},
                "Tombstone %s for topic %s?" % (node["node"], topic),
            )
        node_rows.append(
            el(
                "tr",
                {"data_node": node["node"]},
                el(
                    "td",
                    None,
                    _node_cell(page, node["node"]),
                    " ",
                    el("span", {"class_": "muted"}, node["hostname"]),
                ),
                el("td", {"class_": "num depth"}, num_text(node["depth"])),
                *num_cells(node, ("memory_depth", "backend_depth", "message_count")),
                el("td", None, "paused" if node["paused"] else "", mirror_badge(node.get("mirror"))),
                el("td", None, tombstone),
            )
        )
    node_rows.extend(error_rows(errors, 6))
    channel_rows = []
    for channel in total["channels"]:
        name = channel["channel_name"]
        key = "%s/%s" % (topic, name)
        channel_rows.append(
            el(
                "tr",
                {"data_channel": name},
                el(
                    "td",
                    None,
                    el("a", {"href": page.path("topics", topic, name)}, name),
                    paused_badge(channel["paused"]),
                ),
                *_queue_cells(page, key, channel["depth"], channel),
            )
        )
    body = join(
        el(
            "h1",
            None,
            "Topic ",
            el("span", {"class_": "name"}, topic),
            paused_badge(total["paused"]),
        ),
        warnings(errors),
        actions,
        charts(page.history, topic),
        el("h2", None, "Nodes"),
        table(["nsqd", "Depth", "Memory", "Backend", "Messages", "", ""], node_rows, "nodes"),
        el("h2", None, "Channels"),
        table_or(["Channel", *_QUEUE_COLUMNS], channel_rows, "channels", "No channels."),
        _retention(page, api, total),
    )
    crumbs = [el("a", {"href": page.path("topics")}, "Topics"), topic]
    return layout("Topic " + topic, body, crumbs, base=page.base)


def _attributes(client: Dict[str, Any]) -> List[Safe]:
    found = []
    if client.get("tls"):
        found.append(
            el("span", {"class_": "attr", "title": str(client.get("tls_version", ""))}, "TLS")
        )
    if client.get("snappy"):
        found.append(el("span", {"class_": "attr"}, "snappy"))
    if client.get("deflate"):
        found.append(el("span", {"class_": "attr"}, "deflate"))
    if client.get("authed"):
        found.append(
            el("span", {"class_": "attr", "title": str(client.get("auth_identity", ""))}, "AUTH")
        )
    return found


def _since(connect_ts: Any, now: float) -> str:
    if not isinstance(connect_ts, (int, float)) or connect_ts <= 0:
        return ""
    seconds = max(0, int(now - connect_ts))
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(connect_ts))
    return "%s UTC (%dm%02ds ago)" % (stamp, seconds // 60, seconds % 60)


def channel_page(
    page: Page, topic: str, channel: str, total: Dict[str, Any], errors: Sequence[NodeError]
) -> str:
    """One channel: actions, charts, a row per nsqd and every client."""
    api = page.path("api", "topics", topic, channel)
    delete = "Delete channel %s?" % channel
    actions = action_buttons(page, api, "channel", channel, total["paused"], delete)
    node_rows = [
        el(
            "tr",
            {"data_node": node["node"]},
            el("td", None, _node_cell(page, node["node"])),
            el("td", {"class_": "num depth"}, num_text(node["depth"])),
            *num_cells(node, _QUEUE_COUNTS),
            el("td", {"class_": "paused-state"}, "paused" if node["paused"] else ""),
        )
        for node in total["nodes"]
    ]
    node_rows.extend(error_rows(errors, 8))
    client_rows = [
        el(
            "tr",
            {"class_": "client"},
            el(
                "td",
                {"class_": "client-id", "title": str(c.get("remote_address", ""))},
                str(c.get("client_id", "")),
            ),
            el("td", {"class_": "hostname"}, str(c.get("hostname", ""))),
            el(
                "td",
                {"class_": "user-agent"},
                "%s " % (c.get("version", ""),),
                str(c.get("user_agent", "")),
            ),
            el("td", None, _attributes(c)),
            el("td", None, _node_cell(page, str(c.get("node", "")))),
            *num_cells(c, _CLIENT_COUNTS, 0),
            el("td", None, _since(c.get("connect_ts"), page.now)),
        )
        for c in total["clients"]
    ]
    body = join(
        el(
            "h1",
            None,
            "Channel ",
            el("span", {"class_": "name"}, topic),
            " / ",
            el("span", {"class_": "name"}, channel),
            (
                el("span", {"class_": "badge", "id": "paused-badge"}, "paused")
                if total["paused"]
                else None
            ),
        ),
        warnings(errors),
        actions,
        charts(page.history, "%s/%s" % (topic, channel)),
        el("h2", None, "Nodes"),
        table(["nsqd", "Depth", *_QUEUE_COLUMNS[2:], ""], node_rows, "nodes"),
        el("h2", None, "Clients"),
        table_or(
            [
                "Client ID",
                "Host",
                "Protocol / User Agent",
                "Attributes",
                "nsqd",
                "Ready",
                "In-Flight",
                "Finished",
                "Requeued",
                "Messages",
                "Connected since",
            ],
            client_rows,
            "clients",
            "No clients connected.",
        ),
    )
    crumbs = [
        el("a", {"href": page.path("topics")}, "Topics"),
        el("a", {"href": page.path("topics", topic)}, topic),
        channel,
    ]
    return layout("Channel %s/%s" % (topic, channel), body, crumbs, base=page.base)


def nodes_page(page: Page, producers: Sequence[Dict[str, Any]], errors: Sequence[NodeError]) -> str:
    """Every nsqd the lookupds (or the flags) know."""
    rows = [
        el(
            "tr",
            {"data_node": http_address(p)},
            el("td", None, p["hostname"]),
            el("td", None, _node_cell(page, http_address(p))),
            el("td", {"class_": "num"}, p["tcp_port"]),
            el(
                "td",
                None,
                p["version"],
                el("span", {"class_": "badge"}, "out of date") if p.get("out_of_date") else None,
            ),
            el(
                "td",
                None,
                el(
                    "ul",
                    {"class_": "plain"},
                    [el("li", None, a) for a in p.get("remote_addresses", ())],
                ),
            ),
            el(
                "td",
                None,
                [
                    join(
                        el(
                            "a",
                            {
                                "href": page.path("topics", t["topic"]),
                                "class_": "tombstoned" if t["tombstoned"] else None,
                            },
                            t["topic"],
                        ),
                        " ",
                    )
                    for t in p["topics"]
                ],
            ),
        )
        for p in producers
    ]
    body = join(
        el("h1", None, "Nodes"),
        warnings(errors),
        table_or(
            ["Hostname", "HTTP address", "TCP port", "Version", "Lookupd connections", "Topics"],
            rows,
            "nodes",
            "No nsqd known.",
        ),
    )
    return layout("Nodes", body, base=page.base)


def node_page(
    page: Page, node: str, topics: Sequence[Dict[str, Any]], errors: Sequence[NodeError]
) -> str:
    """One nsqd: its topics and channels."""
    rows = []
    for topic in topics:
        rows.append(
            el(
                "tr",
                {"class_": "topic-row"},
                el(
                    "td",
                    None,
                    el(
                        "a",
                        {"href": page.path("topics", topic["topic_name"])},
                        topic["topic_name"],
                    ),
                ),
                el("td", None, ""),
                *num_cells(topic, ("depth", "message_count")),
                el("td", {"class_": "num"}, ""),
            )
        )
        for channel in topic["channels"]:
            rows.append(
                el(
                    "tr",
                    None,
                    el("td", None, ""),
                    el(
                        "td",
                        None,
                        el(
                            "a",
                            {
                                "href": page.path(
                                    "topics", topic["topic_name"], channel["channel_name"]
                                )
                            },
                            channel["channel_name"],
                        ),
                    ),
                    *num_cells(channel, ("depth", "message_count", "client_count")),
                )
            )
    body = join(
        el("h1", None, "Node ", el("span", {"class_": "name"}, node)),
        warnings(errors),
        table_or(["Topic", "Channel", "Depth", "Messages", "Clients"], rows, "node", "No topics."),
    )
    crumbs = [el("a", {"href": page.path("nodes")}, "Nodes"), node]
    return layout("Node " + node, body, crumbs, base=page.base)


def counter_page(page: Page, total: int, errors: Sequence[NodeError]) -> str:
    """The number of messages every channel has been sent, summed."""
    body = join(
        el("h1", None, "Messages processed"),
        warnings(errors),
        el("p", {"class_": "counter", "id": "counter"}, num_text(total)),
    )
    return layout("Counter", body, base=page.base)


def lookup_page(page: Page, topics: Dict[str, List[str]], errors: Sequence[NodeError]) -> str:
    """The topics and channels the lookupds know; forms to create them."""
    if not page.lookupd_mode:
        body = join(
            el("h1", None, "Lookup"),
            el(
                "p",
                {"class_": "muted"},
                "nsqadmin was started with --nsqd-http-address: there is no nsqlookupd to show.",
            ),
        )
        return layout("Lookup", body, base=page.base)
    items = [
        el(
            "li",
            None,
            el("a", {"href": page.path("topics", name)}, name),
            (
                el(
                    "ul",
                    None,
                    [
                        el("li", None, el("a", {"href": page.path("topics", name, c)}, c))
                        for c in channels
                    ],
                )
                if channels
                else None
            ),
        )
        for name, channels in sorted(topics.items())
    ]
    form = None
    if page.admin:
        form = el(
            "form",
            {
                "class_": "create",
                "data_url": page.path("api", "topics"),
                "method": "post",
                "action": page.path("api", "topics"),
            },
            el("h2", None, "Create topic / channel"),
            el(
                "label",
                None,
                "Topic ",
                el(
                    "input",
                    {
                        "name": "topic",
                        "required": True,
                        "pattern": "[.a-zA-Z0-9_-]+(#ephemeral)?",
                        "maxlength": 64,
                    },
                ),
            ),
            el(
                "label",
                None,
                "Channel (optional) ",
                el(
                    "input",
                    {"name": "channel", "pattern": "[.a-zA-Z0-9_-]+(#ephemeral)?", "maxlength": 64},
                ),
            ),
            el("button", {"type": "submit"}, "Create"),
            el(
                "p",
                {"class_": "muted"},
                "A topic created here is known to nsqlookupd only, until an nsqd has it.",
            ),
        )
    body = join(
        el("h1", None, "Lookup"),
        warnings(errors),
        (
            el("ul", {"class_": "lookup"}, items)
            if items
            else el("p", {"class_": "muted"}, "nsqlookupd knows no topic.")
        ),
        form,
    )
    return layout("Lookup", body, refresh=False, base=page.base)
