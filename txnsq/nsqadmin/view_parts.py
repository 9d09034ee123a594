# -*- test-case-name: tests.test_nsqadmin_pages -*-
"""
The parts nsqadmin's HTML pages are built of: the layout around every page,
tables, numbers, badges, inline SVG charts of the sampled
:class:`History <txnsq.nsqadmin.history.History>`, the admin's action buttons, and
the error page.  The pages themselves are in :mod:`txnsq.nsqadmin.views`.

Every value goes through :func:`el <txnsq.nsqadmin.markup.el>`, which escapes it.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Sequence
from urllib.parse import quote

from txnsq import __version__
from txnsq.nsqadmin.clusterinfo import NodeError
from txnsq.nsqadmin.markup import Safe, el, join

__all__ = [
    "Page",
    "REFRESH_MS",
    "action_buttons",
    "button",
    "charts",
    "error_page",
    "error_rows",
    "int_text",
    "layout",
    "mirror_badge",
    "num_cells",
    "num_text",
    "paused_badge",
    "rate_text",
    "sparkline",
    "table",
    "table_or",
    "url_path",
    "warnings",
]


#: Live refresh period of the pages, in milliseconds.
REFRESH_MS = 2000


class Page:
    """What every page needs besides its data: who looks, and the charts' history."""

    def __init__(
        self, admin: bool, history: Any, now: float, lookupd_mode: bool, base: str = ""
    ) -> None:
        self.admin = admin
        self.history = history
        self.now = now
        self.lookupd_mode = lookupd_mode
        #: ``--base-path`` ('' at the root): every URL of the page starts with it.
        self.base = base

    def path(self, *parts: str) -> str:
        """The URL of ``/part/part...`` (each escaped) under the base path."""
        return self.base + url_path(*parts)


def url_path(*parts: str) -> str:
    return "/" + "/".join(quote(p, safe="") for p in parts)


def num_text(value: Any) -> str:
    if isinstance(value, float):
        return "%.2f" % (value,)
    if isinstance(value, int):
        return "{:,}".format(value)
    return str(value)


def rate_text(value: Optional[float]) -> str:
    return "–" if value is None else "%.1f/s" % (value,)


def layout(
    title: str, body: Any, crumbs: Sequence[Any] = (), refresh: bool = True, base: str = ""
) -> str:
    """A whole page: navigation, ``#content`` and the script; every URL under ``base``."""
    nav = el(
        "nav",
        {"class_": "top"},
        el("a", {"href": base + "/", "class_": "brand"}, "nsqadmin"),
        el("a", {"href": base + "/topics"}, "Topics"),
        el("a", {"href": base + "/nodes"}, "Nodes"),
        el("a", {"href": base + "/counter"}, "Counter"),
        el("a", {"href": base + "/lookup"}, "Lookup"),
    )
    trail = None
    if crumbs:
        pieces: List[Any] = []
        for crumb in crumbs:
            if pieces:
                pieces.append(" / ")
            pieces.append(crumb)
        trail = el("div", {"class_": "crumbs"}, pieces)
    page = "<!DOCTYPE html>\n" + el(
        "html",
        {"lang": "en"},
        el(
            "head",
            None,
            el("meta", {"charset": "utf-8"}),
            el("meta", {"name": "viewport", "content": "width=device-width, initial-scale=1"}),
            el("title", None, title + " · nsqadmin"),
            el("link", {"rel": "stylesheet", "href": base + "/static/nsqadmin.css"}),
            el("script", {"src": base + "/static/nsqadmin.js", "defer": True}),
        ),
        el(
            "body",
            {"data_refresh": REFRESH_MS if refresh else None},
            nav,
            el(
                "main",
                {"id": "content"},
                trail,
                body,
            ),
            el("div", {"id": "flash", "role": "status"}),
            el("footer", None, "txnsq nsqadmin ", __version__),
        ),
    )
    return page


def warnings(errors: Sequence[NodeError]) -> Optional[Safe]:
    """A box listing each node that failed and why."""
    if not errors:
        return None
    return el(
        "div",
        {"class_": "warning"},
        el("strong", None, "Some nodes did not answer:"),
        el("ul", None, [el("li", None, el("code", None, e.node), " ", e.text) for e in errors]),
    )


def sparkline(values: Sequence[float], label: str, width: int = 120, height: int = 28) -> Safe:
    """
    A small SVG line of ``values`` (oldest first), titled ``label``, scaled
    from 0 to the largest value, over a faint baseline.
    """
    if not values:
        return el("span", {"class_": "chart-empty", "title": label}, "collecting samples…")
    if len(values) == 1:
        values = [values[0], values[0]]
    top = max(values) or 1.0
    step = width / (len(values) - 1)
    points = " ".join(
        "%.1f,%.1f" % (i * step, height - 2 - (v / top) * (height - 4))
        for i, v in enumerate(values)
    )
    return el(
        "svg",
        {
            "class_": "chart",
            "width": width,
            "height": height,
            "viewBox": "0 0 %d %d" % (width, height),
            "role": "img",
            "aria-label": label,
        },
        el("title", None, "%s (max %s)" % (label, num_text(max(values)))),
        el(
            "polyline",
            {"class_": "baseline", "points": "0,%d %d,%d" % (height - 1, width, height - 1)},
        ),
        el("polyline", {"class_": "line", "points": points, "fill": "none"}),
    )


def charts(history: Any, key: str) -> Safe:
    """Depth and message rate of ``key`` over the sampled minutes."""
    samples = history.samples(key)
    depths = [float(s.depth) for s in samples]
    rates = history.rates(key)
    depth_now = "" if not samples else ", now %s (max %s)" % (
        num_text(samples[-1].depth),
        num_text(max(s.depth for s in samples)),
    )
    rate_max = "" if not rates else " (max %.1f/s)" % (max(rates),)
    return el(
        "div",
        {"class_": "charts"},
        el(
            "figure",
            None,
            sparkline(depths, "depth", 320, 60),
            el("figcaption", None, "depth, last minutes", depth_now),
        ),
        el(
            "figure",
            None,
            sparkline(rates, "messages/s", 320, 60),
            el("figcaption", None, "message rate, now ", rate_text(history.rate(key)), rate_max),
        ),
    )


def button(label: str, method: str, url: str, body: Optional[Dict[str, Any]], confirm: str) -> Safe:
    """An action button; the script confirms, sends it and refreshes."""
    return el(
        "button",
        {
            "type": "button",
            "class_": "action",
            "data_method": method,
            "data_url": url,
            "data_body": json.dumps(body) if body is not None else None,
            "data_confirm": confirm,
        },
        label,
    )


def table(headers: Sequence[str], rows: List[Any], cls: str = "") -> Safe:
    return el(
        "table",
        {"class_": cls or None},
        el("thead", None, el("tr", None, [el("th", None, h) for h in headers])),
        el("tbody", None, rows),
    )


def table_or(headers: Sequence[str], rows: List[Any], cls: str, empty: str) -> Safe:
    """The table of ``rows``, or the muted sentence ``empty`` when there are none."""
    return table(headers, rows, cls) if rows else el("p", {"class_": "muted"}, empty)


def num_cells(record: Dict[str, Any], keys: Sequence[str], default: Any = None) -> List[Safe]:
    """
    A right-aligned cell for each of ``keys`` of ``record``; when a
    ``default`` is given, it stands for a missing key.
    """
    if default is None:
        return [el("td", {"class_": "num"}, num_text(record[key])) for key in keys]
    return [el("td", {"class_": "num"}, num_text(record.get(key, default))) for key in keys]


#: Unacked bytes to a mirrored topic's peers past which the topic page warns.
MIRROR_LAG_WARNING = 1 << 20


def mirror_badge(mirror: Any) -> Optional[Safe]:
    """
    A mirrored topic's role on one nsqd (txnsq's ``mirror`` field of its
    topic stats): primary, standby (with the copies it holds), active
    after a takeover; a warning when its peers lag.
    """
    if not isinstance(mirror, dict):
        return None
    role = str(mirror.get("role", ""))
    text = "mirror: " + role
    if role == "standby":
        text += " (%s copies)" % (int_text(mirror.get("standby_messages")),)
    if not mirror.get("peers"):
        text += ", no peer"
    badges = [el("span", {"class_": "badge mirror-role"}, text)]
    lag = mirror.get("lag_bytes")
    if isinstance(lag, int) and lag > MIRROR_LAG_WARNING:
        badges.append(
            el("span", {"class_": "badge warning mirror-lag"}, "standby lags %s bytes" % (lag,))
        )
    return join(*badges)


def int_text(value: Any) -> str:
    return str(value) if isinstance(value, int) else "?"


def paused_badge(paused: Any) -> Optional[Safe]:
    return el("span", {"class_": "badge"}, "paused") if paused else None


def error_rows(errors: Sequence[NodeError], colspan: int) -> List[Safe]:
    """A row for each node that failed, its reason spanning ``colspan`` cells."""
    return [
        el(
            "tr",
            {"class_": "error", "data_node": error.node},
            el("td", None, error.node),
            el("td", {"colspan": colspan}, error.text),
        )
        for error in errors
    ]


def action_buttons(
    page: Page, api: str, kind: str, name: str, paused: Any, delete: str
) -> Optional[Safe]:
    """
    An admin's Pause (or Unpause), Empty and Delete buttons for the topic or
    channel ``name`` (``kind``) at ``api``; ``delete`` asks to confirm.
    """
    if not page.admin:
        return None
    return el(
        "div",
        {"class_": "actions"},
        button(
            "Unpause" if paused else "Pause",
            "POST",
            api,
            {"action": "unpause" if paused else "pause"},
            "%s %s %s?" % ("Unpause" if paused else "Pause", kind, name),
        ),
        button(
            "Empty",
            "POST",
            api,
            {"action": "empty"},
            "Empty %s %s (its queued messages are lost)?" % (kind, name),
        ),
        button("Delete", "DELETE", api, None, delete),
    )


def error_page(code: int, title: str, detail: str = "", base: str = "") -> str:
    """A page for a status other than 200 (404 for an unknown topic ...), under ``base``."""
    body = join(
        el("h1", {"class_": "error-title"}, "%d " % (code,), title),
        el("p", {"class_": "detail"}, detail) if detail else None,
        el("p", None, el("a", {"href": base + "/topics"}, "Back to the topics")),
    )
    return layout("%d %s" % (code, title), body, refresh=False, base=base)
