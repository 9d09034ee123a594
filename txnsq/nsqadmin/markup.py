# -*- test-case-name: tests.test_nsqadmin_pages -*-
"""
HTML built from elements whose text is always escaped.

Names of topics and channels, client ids, hostnames and user agents come
from clients, so no page is built by pasting strings: :func:`el` escapes
every text child and attribute value, and only :class:`Safe` (markup this
module or :func:`el` produced) passes through as it is.
"""

from __future__ import annotations

import html
from typing import Any, Dict, Iterable, Optional, Union

__all__ = ["Safe", "el", "escape", "join"]


class Safe(str):
    """Markup that is already escaped."""


Child = Union["Safe", str, int, float, None, Iterable[Any]]


def escape(value: Any) -> Safe:
    """Text as HTML: ``& < > " '`` escaped."""
    if isinstance(value, Safe):
        return value
    return Safe(html.escape(str(value), quote=True))


def _children(children: Iterable[Any]) -> str:
    parts = []
    for child in children:
        if child is None or child is False:
            continue
        if isinstance(child, Safe):
            parts.append(str(child))
        elif isinstance(child, (str, int, float)):
            parts.append(escape(child))
        else:
            parts.append(_children(child))
    return "".join(parts)


_VOID = frozenset(["br", "hr", "img", "input", "link", "meta", "path", "circle", "polyline"])


def el(tag: str, attrs: Optional[Dict[str, Any]] = None, *children: Any) -> Safe:
    """
    ``<tag attrs>children</tag>``; attributes with value None or False are
    left out, True is written bare; ``class_`` is ``class``.
    """
    parts = ["<", tag]
    for name, value in (attrs or {}).items():
        if value is None or value is False:
            continue
        name = name.rstrip("_").replace("_", "-")
        if value is True:
            parts.append(" %s" % (name,))
        else:
            parts.append(' %s="%s"' % (name, escape(value)))
    if tag in _VOID and not children:
        parts.append(">" if tag not in ("path", "circle", "polyline") else "/>")
        return Safe("".join(parts))
    parts.append(">")
    parts.append(_children(children))
    parts.append("</%s>" % (tag,))
    return Safe("".join(parts))


def join(*children: Any) -> Safe:
    """Several children as one piece of markup."""
    return Safe(_children(children))
