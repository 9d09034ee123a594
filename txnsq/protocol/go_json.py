# -*- test-case-name: tests.test_http -*-
"""
JSON as Go's ``encoding/json`` writes it.

``json.Marshal`` differs from Python's ``json.dumps`` in ways a client
comparing bytes notices: no spaces, floats in Go's shortest form (``1``
not ``1.0``, ``1e-7`` not ``1e-07``), HTML-safe string escapes (``<`` is
``\\u003c``) and U+FFFD for a lone surrogate.  Sans-IO: no Twisted here.
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal
from typing import Any, List, Mapping

__all__ = [
    "go_float",
    "go_json",
    "go_string",
]

_HTML_ESCAPES = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}
_HTML_UNSAFE = re.compile("[<>&\u2028\u2029]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def go_float(value: float) -> str:
    """A float64 as ``encoding/json`` writes it (``1`` not ``1.0``, ``1e-7``)."""
    if math.isnan(value) or math.isinf(value):
        # Go refuses to marshal these; a reply must still be valid JSON.
        return "null"
    if value == 0:
        return "0"
    magnitude = abs(value)
    if 1e-6 <= magnitude < 1e21:
        return format(Decimal(repr(value)).normalize(), "f")
    text = repr(value)
    # Go writes the exponent without a leading zero: 1e-07 -> 1e-7.
    return re.sub(r"e([+-])0(\d)", r"e\1\2", text)


def go_string(text: str) -> str:
    """A JSON string with Go's HTML-safe escapes (``<`` is ``\\u003c``)."""
    encoded = json.dumps(text, ensure_ascii=False)
    if _HTML_UNSAFE.search(encoded):
        encoded = _HTML_UNSAFE.sub(lambda match: _HTML_ESCAPES[match.group()], encoded)
    return encoded


def _encode(value: Any, out: List[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        out.append("%d" % (value,))
    elif isinstance(value, float):
        out.append(go_float(value))
    elif isinstance(value, str):
        out.append(go_string(value))
    elif isinstance(value, Mapping):
        out.append("{")
        first = True
        for key, item in value.items():
            if not first:
                out.append(",")
            first = False
            out.append(go_string(str(key)))
            out.append(":")
            _encode(item, out)
        out.append("}")
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _encode(item, out)
        out.append("]")
    else:
        raise TypeError("cannot encode %r as JSON" % (type(value),))


def go_json(value: Any) -> bytes:
    """
    ``json.Marshal(value)``: no spaces, keys in the mapping's order, Go's
    float format and HTML-safe string escapes.

    :raises TypeError: for a value JSON cannot hold.
    """
    out: List[str] = []
    _encode(value, out)
    text = "".join(out)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # Lone surrogates (from a client's JSON escapes): Go writes U+FFFD.
        return _SURROGATE.sub("\ufffd", text).encode("utf-8")
