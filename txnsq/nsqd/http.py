# -*- test-case-name: tests.test_http -*-
"""
nsqd's HTTP API, served with Klein, answering as Go nsqd v1.3 does.

The app is a class attribute so every :class:`NSQDHTTPAPI` instance serves
its own broker.  The plain HTTP and the HTTPS listener serve the same
instance.

Go routes with julienschmidt/httprouter and decorates each handler
(``internal/http_api``); this module keeps both halves of that design:

- the route table (:data:`ROUTES`) is Go's, and a request that misses it
  gets httprouter's answer: a 301/307 redirect to the path with the
  trailing slash fixed or the case and dots cleaned, ``405`` with an
  ``Allow`` list (``200`` for ``OPTIONS``), else ``404 NOT_FOUND``.  Klein
  (werkzeug) finds the handler; the miss logic and the exact method check
  (werkzeug also routes ``HEAD`` to ``GET`` handlers, httprouter does not)
  are ours;
- a handler returns data or raises :class:`APIError`, and its *style*
  renders it: ``v1`` (``X-NSQ-Content-Type: nsq; version=1.0``; text for
  strings, JSON otherwise, ``{"message": ...}`` for errors), ``text``
  (Go's ``PlainText``: ``/ping``) or ``raw`` (the ``/debug/pprof``
  pages, which write their own headers).

Query strings are parsed as Go's ``url.ParseQuery`` parses them (``;`` is
an error, ``+`` a space, a raw ``#`` part of the value), JSON is written as
Go's ``encoding/json`` writes it, and every reply carries a
``Content-Length``, as Go's do.

``/debug/pprof/...`` keeps Go's paths with Python's equivalents: thread
stacks for ``goroutine``, a memory summary for ``heap``, a cProfile of the
reactor thread for ``profile``.  ``GET /metrics`` (Prometheus) is txnsq's
own.
"""

from __future__ import annotations

import cProfile
import gc
import html
import io
import json
import marshal
import math
import posixpath
import pstats
import re
import socket
import struct
import sys
import threading
import traceback
from collections import Counter
from decimal import Decimal
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
)
from urllib.parse import quote, unquote_to_bytes

from klein import Klein
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.http import HTTPChannel
from twisted.web.iweb import IRequest
from twisted.web.server import Site
from werkzeug.exceptions import HTTPException

from txnsq import __version__
from txnsq.cli import format_duration
from txnsq.nsqd.options import LOG_LEVELS, TLS_REQUIRED, TLS_VERSIONS
from txnsq.nsqd.topic import PublishError
from txnsq.protocol.names import is_valid_channel_name, is_valid_topic_name

if TYPE_CHECKING:
    from txnsq.nsqd.broker import Broker

__all__ = [
    "APIError",
    "CONFIG_OPTIONS",
    "NSQDHTTPAPI",
    "NSQDSite",
    "ROUTES",
    "go_json",
    "parse_mpub_binary",
    "parse_mpub_lines",
    "parse_query",
]

JSON_CONTENT_TYPE = b"application/json; charset=utf-8"
TEXT_CONTENT_TYPE = b"text/plain; charset=utf-8"
HTML_CONTENT_TYPE = b"text/html; charset=utf-8"
NSQ_CONTENT_TYPE = b"nsq; version=1.0"

#: Go's ``boolParams`` (``/mpub?binary=``, ``/stats?include_clients=``).
BOOL_PARAMS: Dict[str, bool] = {"true": True, "1": True, "false": False, "0": False}

_REASONS = {
    301: "Moved Permanently",
    307: "Temporary Redirect",
}

_NS = 1000000000


class APIError(Exception):
    """
    Go's ``http_api.Err``: a status and the text of the reply
    (``{"message": TEXT}`` in the ``v1`` style, the bare text in ``text``).
    """

    def __init__(self, code: int, text: str) -> None:
        Exception.__init__(self, code, text)
        self.code = code
        self.text = text


# ---------------------------------------------------------------------------
# JSON as Go's encoding/json writes it


def _go_float(value: float) -> str:
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


def _go_string(text: str) -> str:
    """A JSON string with Go's HTML-safe escapes (``<`` is ``\\u003c``)."""
    encoded = json.dumps(text, ensure_ascii=False)
    if _HTML_UNSAFE.search(encoded):
        encoded = _HTML_UNSAFE.sub(lambda match: _HTML_ESCAPES[match.group()], encoded)
    return encoded


_HTML_ESCAPES = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}
_HTML_UNSAFE = re.compile("[<>&\u2028\u2029]")


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
        out.append(_go_float(value))
    elif isinstance(value, str):
        out.append(_go_string(value))
    elif isinstance(value, Mapping):
        out.append("{")
        first = True
        for key, item in value.items():
            if not first:
                out.append(",")
            first = False
            out.append(_go_string(str(key)))
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


_SURROGATE = re.compile("[\ud800-\udfff]")


def _html_escape(text: str) -> str:
    """Go's ``htmlEscape`` (net/http): ``& ' < > "``."""
    return (
        text.replace("&", "&amp;")
        .replace("'", "&#39;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&#34;")
    )


# ---------------------------------------------------------------------------
# Request parsing as Go's net/url does it

_HEX = b"0123456789abcdefABCDEF"


def _query_unescape(text: bytes) -> Optional[bytes]:
    """``url.QueryUnescape``: ``+`` is a space; None for a bad ``%`` escape."""
    if b"%" not in text:
        return text.replace(b"+", b" ")
    parts = text.split(b"%")
    out = bytearray(parts[0].replace(b"+", b" "))
    for part in parts[1:]:
        if len(part) < 2 or part[0] not in _HEX or part[1] not in _HEX:
            return None
        out.append(int(part[:2], 16))
        out += part[2:].replace(b"+", b" ")
    return bytes(out)


def parse_query(raw: bytes) -> Tuple[Dict[str, List[str]], Optional[str]]:
    """
    Go's ``url.ParseQuery``: the values by key, in order, and the first
    error (a ``;`` separator or a bad ``%`` escape), which Go's handlers
    answer with ``400 INVALID_REQUEST``.  Pairs that parse are kept even
    when another one does not.  Keys and values are decoded as Latin-1, so
    any byte survives.
    """
    values: Dict[str, List[str]] = {}
    error: Optional[str] = None
    for pair in raw.split(b"&"):
        if b";" in pair:
            error = error or "invalid semicolon separator in query"
            continue
        if not pair:
            continue
        key, _, value = pair.partition(b"=")
        decoded_key = _query_unescape(key)
        decoded_value = _query_unescape(value)
        if decoded_key is None or decoded_value is None:
            error = error or "invalid URL escape"
            continue
        values.setdefault(decoded_key.decode("latin-1"), []).append(
            decoded_value.decode("latin-1")
        )
    return values, error


def _raw_query(request: IRequest) -> Tuple[bytes, bool]:
    """The request target's raw query (a ``#`` is part of it) and whether it had a ``?``."""
    uri: bytes = request.uri
    if b"?" not in uri:
        return b"", False
    return uri.split(b"?", 1)[1], True


_ABSOLUTE_FORM = re.compile(rb"[A-Za-z][A-Za-z0-9+.-]*://[^/]*")


def _request_path(request: IRequest) -> str:
    """
    The request's decoded path (Go's ``URL.Path``), as Latin-1 text; of an
    absolute-form target (``GET http://host/ping``) too.
    """
    path: bytes = request.path
    absolute = _ABSOLUTE_FORM.match(path)
    if absolute is not None:
        path = path[absolute.end() :] or b"/"
    return unquote_to_bytes(path).decode("latin-1")


def _go_parse_int(text: str) -> Optional[int]:
    """``strconv.ParseInt(text, 10, 64)``; None when Go fails."""
    if not re.match(r"[+-]?[0-9]+\Z", text):
        return None
    value = int(text)
    if not -(1 << 63) <= value < (1 << 63):
        return None
    return value


def _int64(value: int) -> int:
    """Wrap to a signed 64-bit integer, as Go's arithmetic does."""
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


def _go_div(numerator: int, denominator: int) -> int:
    """Go's integer division (truncates toward zero)."""
    quotient = abs(numerator) // abs(denominator)
    return quotient if (numerator >= 0) == (denominator > 0) else -quotient


# ---------------------------------------------------------------------------
# Message bodies

_INT32 = struct.Struct(">i")


def parse_mpub_binary(body: bytes, max_msg_size: int, max_body_size: int) -> List[bytes]:
    """
    ``POST /mpub?binary=true``: the MPUB body format, ``u32 count`` then
    ``u32 size | data`` per message, read as Go's ``readMPUB`` reads the
    request body (bytes after the last message are ignored).

    :raises APIError: ``413 BAD_BODY`` for a missing, zero, negative or too
        large count; ``413 BAD_MESSAGE`` for a size that is not positive or
        above ``max_msg_size`` or a body cut short.
    """
    if len(body) < 4:
        raise APIError(413, "BAD_BODY")
    count = _INT32.unpack_from(body)[0]
    # 4 bytes for the count, at least 5 (size + 1 byte) per message.
    if count <= 0 or count > _go_div(max_body_size - 4, 5):
        raise APIError(413, "BAD_BODY")
    messages: List[bytes] = []
    position = 4
    end = len(body)
    for _ in range(count):
        if position + 4 > end:
            raise APIError(413, "BAD_MESSAGE")
        size = _INT32.unpack_from(body, position)[0]
        position += 4
        if size <= 0 or size > max_msg_size:
            raise APIError(413, "BAD_MESSAGE")
        if position + size > end:
            raise APIError(413, "BAD_MESSAGE")
        messages.append(body[position : position + size])
        position += size
    return messages


def parse_mpub_lines(body: bytes, max_msg_size: int, max_body_size: int) -> List[bytes]:
    """
    ``POST /mpub`` (text mode): one message per ``\\n``-terminated line,
    empty lines skipped, ``\\r`` kept; the last line needs no newline.

    Go reads at most ``max_body_size + 1`` bytes and checks each line in
    turn, so a line above ``max_msg_size`` before that point wins over the
    body size.

    :raises APIError: ``413 BODY_TOO_BIG`` when the body is larger than
        ``max_body_size``; ``413 MSG_TOO_BIG`` for a line longer than
        ``max_msg_size``.
    """
    read_max = max_body_size + 1
    data = body[:read_max]
    messages: List[bytes] = []
    total = 0
    position = 0
    while True:
        newline = data.find(b"\n", position)
        last = newline < 0
        stop = len(data) if last else newline + 1
        block = data[position:stop]
        position = stop
        total += len(block)
        if total == read_max:
            raise APIError(413, "BODY_TOO_BIG")
        if block.endswith(b"\n"):
            block = block[:-1]
        if block:
            if len(block) > max_msg_size:
                raise APIError(413, "MSG_TOO_BIG")
            messages.append(block)
        if last:
            return messages


# ---------------------------------------------------------------------------
# The route table and httprouter's answers to a miss


class Route:
    """
    One of Go nsqd's routes.

    :ivar method: the one method it answers (httprouter has no implicit
        ``HEAD``).
    :ivar pattern: httprouter's pattern; ``:name`` matches one non-empty
        path segment.
    :ivar style: how replies are rendered: ``v1``, ``text`` or ``raw``.
    :ivar logged: Go logs the request (its ``http_api.Log`` decorator).
    """

    def __init__(self, method: str, pattern: str, style: str, logged: bool) -> None:
        self.method = method
        self.pattern = pattern
        self.style = style
        self.logged = logged
        self.segments = pattern.split("/")
        #: The unbound handler method, set when it is registered.
        self.handler: Any = None

    def __repr__(self) -> str:
        return "<Route %s %s>" % (self.method, self.pattern)

    def match(self, path: str, fold_case: bool = False) -> Optional[Dict[str, str]]:
        """The parameters if ``path`` matches (case-insensitively with ``fold_case``)."""
        segments = path.split("/")
        if len(segments) != len(self.segments):
            return None
        params: Dict[str, str] = {}
        for want, got in zip(self.segments, segments):
            if want.startswith(":"):
                if not got:
                    return None
                params[want[1:]] = got
            elif want != got and not (fold_case and want.lower() == got.lower()):
                return None
        return params

    def fill(self, path: str) -> str:
        """The route's own spelling of ``path`` (which matches it ignoring case)."""
        return "/".join(
            got if want.startswith(":") else want
            for want, got in zip(self.segments, path.split("/"))
        )

    @property
    def werkzeug_rule(self) -> str:
        """The pattern in werkzeug's syntax, for Klein."""
        return re.sub(r":(\w+)", r"<\1>", self.pattern)


#: Every route of Go nsqd v1.3's HTTP server, plus ``GET /metrics``.
ROUTES: List[Route] = []


def _route(app: Klein, method: str, pattern: str, style: str = "v1", logged: bool = True) -> Callable[[Any], Any]:
    """
    Register a handler for one Go route: with Klein (which finds it) and in
    :data:`ROUTES` (which answers misses).
    """
    # Go's pprof handlers are not decorated, so not logged.
    route = Route(method, pattern, style, logged and style != "raw")
    ROUTES.append(route)

    def register(handler: Any) -> Any:
        route.handler = handler

        def endpoint(self: "NSQDHTTPAPI", request: IRequest, **kwargs: Any) -> Any:
            return self._serve(request, route)

        endpoint.__name__ = handler.__name__
        endpoint.__doc__ = handler.__doc__
        app.route(route.werkzeug_rule, methods=[method], endpoint=method + " " + pattern)(
            endpoint
        )
        return handler

    return register


def find_route(method: str, path: str) -> Optional[Tuple[Route, Dict[str, str]]]:
    """The route for ``method`` and ``path`` and its parameters, if any."""
    for route in ROUTES:
        if route.method == method:
            params = route.match(path)
            if params is not None:
                return route, params
    return None


def allowed_methods(path: str, method: str) -> str:
    """
    httprouter's ``Allow`` list for ``path``: the other methods it has a
    route for, plus ``OPTIONS``, sorted; empty when there is none.
    """
    methods = {
        route.method
        for route in ROUTES
        if route.method != method and route.match(path) is not None
    }
    methods.discard("OPTIONS")
    if not methods:
        return ""
    return ", ".join(sorted(methods | {"OPTIONS"}))


def clean_path(path: str) -> str:
    """
    httprouter's ``CleanPath`` (and ``http.Redirect``'s clean-up):
    ``path.Clean`` of the rooted path, keeping a trailing slash.
    """
    if not path:
        return "/"
    if not path.startswith("/"):
        path = "/" + path
    cleaned = posixpath.normpath(path)
    if cleaned.startswith("//"):
        cleaned = "/" + cleaned.lstrip("/")
    if path.endswith("/") and cleaned != "/":
        cleaned += "/"
    return cleaned


def redirect_path(method: str, path: str) -> Optional[str]:
    """
    Where httprouter redirects a ``method`` request for ``path`` that has
    no route: the path with its trailing slash added or removed, else the
    cleaned path matched ignoring case (trailing slash fixed too).  Only
    methods with routes redirect; ``CONNECT`` and ``/`` never do.
    """
    if method == "CONNECT" or path == "/":
        return None
    routes = [route for route in ROUTES if route.method == method]
    if not routes:
        return None
    if len(path) > 1 and path.endswith("/"):
        toggled = path[:-1]
    else:
        toggled = path + "/"
    for route in routes:
        if route.match(toggled) is not None:
            return toggled
    cleaned = clean_path(path)
    candidates = [cleaned]
    if cleaned != "/":
        candidates.append(cleaned[:-1] if cleaned.endswith("/") else cleaned + "/")
    for candidate in candidates:
        for route in routes:
            if route.match(candidate, fold_case=True) is not None:
                return route.fill(candidate)
    return None


# ---------------------------------------------------------------------------
# The site: Go's answer to bytes that are not HTTP


def _go_error_reply(status: bytes) -> bytes:
    """The bytes net/http writes for a request it cannot parse."""
    return (
        b"HTTP/1.1 %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
        b"Connection: close\r\n\r\n%s" % (status, status)
    )


class NSQDHTTPChannel(HTTPChannel):
    """
    An HTTP channel reading request heads as Go's net/http does: a line
    may end in a bare ``\\n``, the head may be 1 MiB + 4 KiB, and an
    unparseable request is answered with Go's bytes before the connection
    closes (a V2 client dialling the HTTP port gets ``400 Bad Request`` once
    its first line ends).
    """

    delimiter = b"\n"
    # http.DefaultMaxHeaderBytes plus the 4096 bytes of slack Go allows.
    MAX_LENGTH = totalHeadersSize = (1 << 20) + 4096

    BAD_REQUEST = _go_error_reply(b"400 Bad Request")
    HEADERS_TOO_LARGE = _go_error_reply(b"431 Request Header Fields Too Large")

    def lineReceived(self, line: bytes) -> None:
        """A head line, without its ``\\r\\n`` or ``\\n``."""
        if line.endswith(b"\r"):
            line = line[:-1]
        HTTPChannel.lineReceived(self, line)

    def lineLengthExceeded(self, line: bytes) -> None:
        """Go answers 431 when the head passes its limit."""
        self._reply_and_close(self.HEADERS_TOO_LARGE)

    def _respondToBadRequestAndDisconnect(self) -> None:
        self._reply_and_close(self.BAD_REQUEST)

    def _reply_and_close(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)
        self.loseConnection()


class NSQDSite(Site):
    """A quiet :class:`Site` speaking through :class:`NSQDHTTPChannel`."""

    protocol = NSQDHTTPChannel  # type: ignore[assignment]
    noisy = False

    def log(self, request: Any) -> None:
        """Go logs API requests itself (``http_api.Log``); no access log."""


# ---------------------------------------------------------------------------
# /config: the options Go reads and writes by their config names

_INT, _STR, _DURATION, _BOOL, _LIST, _FLOATS, _LOG_LEVEL, _TLS_VERSION = range(8)

#: Go's config names (the ``cfg`` tag, else the flag name with ``_``) of
#: every option that has a flag, mapped to the ``NSQDOptions`` attribute
#: and how Go's value is typed.  ``storage`` is txnsq's own flag.
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


def _decode_string_list(body: bytes) -> Optional[List[str]]:
    """
    ``json.Unmarshal`` into a ``[]string``: a JSON array of strings
    (``null`` items become ``""``, ``null`` itself an empty list); None
    when Go would fail.
    """
    try:
        value = json.loads(body.decode("utf-8", "replace"), parse_constant=_no_constant)
    except ValueError:
        return None
    if value is None:
        return []
    if not isinstance(value, list):
        return None
    result: List[str] = []
    for item in value:
        if item is None:
            item = ""
        if not isinstance(item, str):
            return None
        result.append(item)
    return result


def _no_constant(name: str) -> Any:
    """Go's JSON has no NaN or Infinity."""
    raise ValueError(name)


# ---------------------------------------------------------------------------
# Python's stand-ins for Go's runtime/pprof


def thread_stacks(full: bool) -> str:
    """
    Every thread's stack, innermost call first: each thread on its own
    (``goroutine?debug=2``) or identical stacks counted together.
    """
    frames = sys._current_frames()
    names = {thread.ident: thread for thread in threading.enumerate()}
    entries: List[Tuple[str, List[str]]] = []
    for ident, frame in frames.items():
        thread = names.get(ident)
        if thread is None:
            label = "thread %d [unknown]" % (ident,)
        else:
            label = "thread %d [%s%s]" % (
                ident,
                thread.name,
                ", daemon" if thread.daemon else "",
            )
        lines: List[str] = []
        for summary in reversed(traceback.extract_stack(frame)):
            lines.append("%s()\n\t%s:%s" % (summary.name, summary.filename, summary.lineno))
        entries.append((label, lines))
    if full:
        return "".join(
            "%s:\n%s\n\n" % (label, "\n".join(lines)) for label, lines in entries
        )
    groups: Counter[Tuple[str, ...]] = Counter(tuple(lines) for _, lines in entries)
    out = ["thread profile: total %d\n" % (len(entries),)]
    for stack, count in groups.most_common():
        out.append("%d @\n" % (count,))
        for line in stack:
            function, location = line.split("\n\t", 1)
            out.append("#\t%s\t%s\n" % (function, location))
        out.append("\n")
    return "".join(out)


def memory_summary(top: int = 30) -> str:
    """
    The heap as Python sees it: process memory, the garbage collector's
    counters, live objects by type and, while ``tracemalloc`` traces, the
    lines that allocated most.
    """
    out = ["heap profile (Python %s)\n" % (sys.version.split()[0],)]
    try:
        import resource

        usage = resource.getrusage(resource.RUSAGE_SELF)
        out.append("max_rss_kb %d\n" % (usage.ru_maxrss,))
    except ImportError:  # pragma: no cover - not on POSIX
        pass
    try:
        with open("/proc/self/statm") as statm:
            pages = statm.read().split()
        page_size = 4096
        try:
            import os

            page_size = os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, ValueError, OSError):  # pragma: no cover
            pass
        out.append("rss_bytes %d\n" % (int(pages[1]) * page_size,))
    except (OSError, IndexError, ValueError):
        pass
    out.append("\n# gc\n")
    out.append("enabled %s\n" % (gc.isenabled(),))
    get_count = getattr(gc, "get_count", None)
    if get_count is not None:
        out.append("count %s\n" % (" ".join(str(n) for n in get_count()),))
    get_threshold = getattr(gc, "get_threshold", None)
    if get_threshold is not None:
        out.append("threshold %s\n" % (" ".join(str(n) for n in get_threshold()),))
    get_stats = getattr(gc, "get_stats", None)
    if get_stats is not None:
        for generation, stats in enumerate(get_stats()):
            out.append(
                "generation %d: collections %s collected %s uncollectable %s\n"
                % (
                    generation,
                    stats.get("collections"),
                    stats.get("collected"),
                    stats.get("uncollectable"),
                )
            )
    objects = gc.get_objects()
    by_type: Counter[str] = Counter(type(obj).__qualname__ for obj in objects)
    out.append("\n# objects tracked by the collector: %d\n" % (len(objects),))
    del objects
    for name, count in by_type.most_common(top):
        out.append("%10d %s\n" % (count, name))
    out.append("\n# tracemalloc\n")
    try:
        import tracemalloc

        tracing = tracemalloc.is_tracing()
    except Exception:  # PyPy has no working tracemalloc
        tracing = False
    if not tracing:
        out.append(
            "not tracing: start nsqd with PYTHONTRACEMALLOC=1 (or more frames) "
            "to see which lines allocate\n"
        )
    else:
        current, peak = tracemalloc.get_traced_memory()
        out.append("traced_bytes %d\npeak_traced_bytes %d\n" % (current, peak))
        for stat in tracemalloc.take_snapshot().statistics("lineno")[:top]:
            out.append("%s\n" % (stat,))
    return "".join(out)


def thread_list() -> str:
    """The live threads (Go's ``threadcreate`` profile counts OS threads)."""
    threads = threading.enumerate()
    out = ["threadcreate profile: total %d\n" % (len(threads),)]
    for thread in threads:
        out.append(
            "%s ident=%s daemon=%s alive=%s\n"
            % (thread.name, thread.ident, thread.daemon, thread.is_alive())
        )
    return "".join(out)


_PPROF_PROFILES: Sequence[Tuple[str, str, str]] = (
    ("block", "block", "Python has no blocking profile; see profile for the reactor thread's time."),
    ("cmdline", "cmdline", "The command line of the running nsqd, NUL separated."),
    (
        "goroutine",
        "goroutine?debug=1",
        "Stack traces of all threads, identical stacks counted together; "
        "debug=2 shows each thread.",
    ),
    (
        "heap",
        "heap",
        "Process memory, garbage collector counters, live objects by type and "
        "tracemalloc's top lines when tracing (gc=1 collects first).",
    ),
    (
        "profile",
        "profile",
        "cProfile of the reactor thread for ?seconds= (default 30): text, or "
        "format=pstats for a file pstats and snakeviz read.",
    ),
    ("symbol", "symbol", "Go symbol lookup; nothing to look up in Python (num_symbols: 0)."),
    ("threadcreate", "threadcreate", "The live threads."),
)


def pprof_index() -> bytes:
    """The ``/debug/pprof/`` page, in the shape of Go's."""
    rows = []
    counts = {
        "goroutine": str(len(sys._current_frames())),
        "threadcreate": str(threading.active_count()),
    }
    for name, link, _ in _PPROF_PROFILES:
        rows.append(
            "<tr><td>%s</td><td><a href='%s'>%s</a></td></tr>\n"
            % (counts.get(name, ""), html.escape(link, quote=True), name)
        )
    descriptions = "".join(
        "<li><div class=profile-name>%s: </div> %s</li>\n" % (name, html.escape(text))
        for name, _, text in _PPROF_PROFILES
    )
    page = (
        "<html>\n<head>\n<title>/debug/pprof/</title>\n</head>\n<body>\n"
        "/debug/pprof/\n<br>\n<p>Set debug=1 as a query parameter to export in "
        "legacy text format</p>\n<br>\nTypes of profiles available:\n<table>\n"
        "<thead><td>Count</td><td>Profile</td></thead>\n%s</table>\n"
        "<a href='goroutine?debug=2'>full goroutine stack dump</a>\n<br>\n"
        "<p>\nProfile Descriptions (txnsq: Python's equivalents of Go's):\n<ul>\n%s</ul>\n"
        "</p>\n</body>\n</html>\n" % ("".join(rows), descriptions)
    )
    return page.encode("utf-8")


# ---------------------------------------------------------------------------
# The API


class NSQDHTTPAPI:
    """
    The HTTP endpoints of one nsqd.

    :param broker: the broker to publish to and report on.
    :param start_time: when nsqd started (Unix seconds).
    :param ports: called to learn the bound ports by listener label
        (``TCP``, ``HTTP``, ``HTTPS``), which are only known once the
        listeners are up.
    :param clients: called to list the TCP clients (for ``/stats``).
    :param options_changed: called with the config name after ``PUT
        /config/NAME`` changed ``broker.options`` (Go's options
        notification: the lookup peers reconnect, the log level applies).
    """

    app = Klein()
    _log = Logger()

    def __init__(
        self,
        broker: Broker,
        start_time: float,
        ports: Callable[[], Dict[str, int]],
        clients: Optional[Callable[[], Iterable[Any]]] = None,
        options_changed: Optional[Callable[[str], None]] = None,
    ) -> None:
        self.broker = broker
        self.start_time = start_time
        self._ports = ports
        self._clients = clients if clients is not None else (lambda: ())
        self.options_changed = options_changed
        self._profiling = False

    # -- request plumbing ------------------------------------------------

    def _begin(self, request: IRequest) -> None:
        """Headers Go would not send go; nothing gets a default type."""
        request.defaultContentType = None  # type: ignore[attr-defined]
        request.responseHeaders.removeHeader(b"server")

    def _tls_refusal(self, request: IRequest) -> Optional[bytes]:
        """
        With ``--tls-required=true``, Go's plain HTTP server answers
        every request ``403 TLS_REQUIRED`` (``tcp-https`` leaves HTTP open).
        """
        if self.broker.options.tls_required != TLS_REQUIRED or request.isSecure():
            return None
        body = ('{"message": "TLS_REQUIRED", "https_port": %d}' % (
            self._ports().get("HTTPS", 0),
        )).encode("ascii")
        return self._reply(request, 403, body, JSON_CONTENT_TYPE, nsq=True)

    def _reply(
        self,
        request: IRequest,
        code: int,
        body: bytes,
        content_type: Optional[bytes],
        nsq: bool = False,
    ) -> bytes:
        """Set the status and headers of a complete reply; return its body."""
        request.setResponseCode(code)
        if content_type is not None:
            request.setHeader(b"Content-Type", content_type)
        if nsq:
            request.setHeader(b"X-NSQ-Content-Type", NSQ_CONTENT_TYPE)
        request.setHeader(b"Content-Length", b"%d" % (len(body),))
        return body

    def _respond_v1(self, request: IRequest, code: int, data: Any) -> bytes:
        """Go's ``RespondV1``: text for strings, JSON for other data and errors."""
        if code == 200:
            if data is None:
                return self._reply(request, 200, b"", None, nsq=True)
            if isinstance(data, str):
                data = data.encode("utf-8")
            if isinstance(data, bytes):
                # Go sets no type; net/http sniffs text as text/plain.
                kind = TEXT_CONTENT_TYPE if data else None
                return self._reply(request, 200, data, kind, nsq=True)
            return self._reply(request, 200, go_json(data), JSON_CONTENT_TYPE, nsq=True)
        return self._reply(request, code, go_json({"message": data}), JSON_CONTENT_TYPE, nsq=True)

    def _respond_text(self, request: IRequest, code: int, data: Any) -> bytes:
        """Go's ``PlainText``: the text, whatever the status."""
        if data is None:
            data = b""
        if isinstance(data, str):
            data = data.encode("utf-8")
        return self._reply(request, code, data, TEXT_CONTENT_TYPE if data else None)

    def _render(self, request: IRequest, route: Route, code: int, data: Any) -> bytes:
        if route.style == "text":
            return self._respond_text(request, code, data)
        return self._respond_v1(request, code, data)

    def _log_request(self, request: IRequest, status: int, started: float) -> None:
        """Go's ``http_api.Log`` line: ``200 GET /stats (127.0.0.1:5000) 1.2ms``."""
        address = request.getClientAddress()
        host = getattr(address, "host", None)
        if host is None:
            remote = str(address)
        elif ":" in host:
            remote = "[%s]:%s" % (host, getattr(address, "port", 0))
        else:
            remote = "%s:%s" % (host, getattr(address, "port", 0))
        self._log.info(
            "{status} {method} {uri} ({remote}) {elapsed}",
            status=status,
            method=request.method.decode("latin-1"),
            uri=request.uri.decode("latin-1"),
            remote=remote,
            elapsed=format_duration(max(0.0, self.broker.clock.seconds() - started)),
        )

    def _serve(self, request: IRequest, route: Optional[Route]) -> Any:
        """
        Answer a request Klein routed to ``route`` (or to no route): run
        the handler of the Go route it matches exactly, and render the
        result in that route's style, or answer the miss as httprouter.
        """
        self._begin(request)
        refusal = self._tls_refusal(request)
        if refusal is not None:
            return refusal
        method = request.method.decode("latin-1")
        path = _request_path(request)
        params = route.match(path) if route is not None and method == route.method else None
        if route is None or params is None:
            # werkzeug and httprouter disagree at the edges (HEAD routed to
            # GET handlers, an absolute-form request target): ours decides.
            found = find_route(method, path)
            if found is None:
                return self._miss(request, method, path)
            route, params = found
        handler = route.handler
        started = self.broker.clock.seconds()
        if route.style == "raw":
            return handler(self, request, **params)
        try:
            data = handler(self, request, **params)
        except APIError as error:
            if route.logged:
                self._log_request(request, error.code, started)
            return self._render(request, route, error.code, error.text)
        except Exception:
            self._log.failure("panic in HTTP handler {route}", route=route)
            return self._respond_v1(request, 500, "INTERNAL_ERROR")
        if route.logged:
            self._log_request(request, 200, started)
        return self._render(request, route, 200, data)

    def _miss(self, request: IRequest, method: str, path: str) -> bytes:
        """httprouter's answer when no route has this method and path."""
        target = redirect_path(method, path)
        if target is not None:
            return self._redirect(request, method, target)
        allow = allowed_methods(path, method)
        started = self.broker.clock.seconds()
        if allow:
            request.setHeader(b"Allow", allow.encode("ascii"))
            if method == "OPTIONS":
                return self._reply(request, 200, b"", None)
            self._log_request(request, 405, started)
            return self._respond_v1(request, 405, "METHOD_NOT_ALLOWED")
        self._log_request(request, 404, started)
        return self._respond_v1(request, 404, "NOT_FOUND")

    def _redirect(self, request: IRequest, method: str, path: str) -> bytes:
        """``http.Redirect`` to ``path`` (the query kept): 301 for GET, else 307."""
        code = 301 if method == "GET" else 307
        query, had_query = _raw_query(request)
        # http.Redirect cleans the escaped path as httprouter cleans paths.
        url = clean_path(quote(path.encode("latin-1"), safe="/$&+,:;=@"))
        if had_query:
            url += "?" + query.decode("latin-1")
        location = re.sub(
            "[\x80-\xff]", lambda match: "%%%02X" % (ord(match.group()),), url
        ).encode("latin-1")
        request.setHeader(b"Location", location)
        if method == "GET":
            body = '<a href="%s">%s</a>.\n\n' % (
                _html_escape(location.decode("latin-1")),
                _REASONS[code],
            )
            return self._reply(request, code, body.encode("latin-1"), HTML_CONTENT_TYPE)
        return self._reply(request, code, b"", None)

    @app.handle_errors(HTTPException)
    def _unrouted(self, request: IRequest, failure: Failure) -> Any:
        """Klein found no handler: usually Go's redirect, 405 or 404."""
        return self._serve(request, None)

    # -- helpers ---------------------------------------------------------

    def _query(self, request: IRequest) -> Dict[str, List[str]]:
        """The query values; ``400 INVALID_REQUEST`` when Go cannot parse them."""
        values, error = parse_query(_raw_query(request)[0])
        if error is not None:
            self._log.error("failed to parse request params - {error}", error=error)
            raise APIError(400, "INVALID_REQUEST")
        return values

    @staticmethod
    def _body(request: IRequest) -> bytes:
        content = request.content
        if content is None:
            return b""
        content.seek(0)
        data: bytes = content.read()
        return data

    @staticmethod
    def _declared_length(request: IRequest) -> int:
        """The Content-Length the client sent, or -1 (Go's ``ContentLength``)."""
        header = request.getHeader(b"content-length")
        if header is None:
            return -1
        try:
            return int(header)
        except ValueError:
            return -1

    def _topic_from_query(self, request: IRequest) -> Tuple[Dict[str, List[str]], Any]:
        """
        Go's ``getTopicFromQuery``: the query and the topic named by
        ``topic``, created if need be.
        """
        values = self._query(request)
        names = values.get("topic")
        if names is None:
            raise APIError(400, "MISSING_ARG_TOPIC")
        name = names[0]
        if not is_valid_topic_name(name):
            raise APIError(400, "INVALID_TOPIC")
        try:
            return values, self.broker.get_topic(name)
        except ValueError:
            raise APIError(400, "INVALID_TOPIC")

    def _existing_topic_and_channel(self, request: IRequest) -> Tuple[Any, str]:
        """
        Go's ``getExistingTopicFromQuery``: both names valid, the topic
        must exist.
        """
        values = self._query(request)
        topics = values.get("topic")
        if topics is None:
            raise APIError(400, "MISSING_ARG_TOPIC")
        if not is_valid_topic_name(topics[0]):
            raise APIError(400, "INVALID_ARG_TOPIC")
        channels = values.get("channel")
        if channels is None:
            raise APIError(400, "MISSING_ARG_CHANNEL")
        if not is_valid_channel_name(channels[0]):
            raise APIError(400, "INVALID_ARG_CHANNEL")
        topic = self.broker.find_topic(topics[0])
        if topic is None:
            raise APIError(404, "TOPIC_NOT_FOUND")
        return topic, channels[0]

    def _existing_channel(self, request: IRequest) -> Any:
        topic, name = self._existing_topic_and_channel(request)
        channel = topic.find_channel(name)
        if channel is None:
            raise APIError(404, "CHANNEL_NOT_FOUND")
        return channel

    def _topic_name(self, request: IRequest) -> str:
        values = self._query(request)
        names = values.get("topic")
        if names is None:
            raise APIError(400, "MISSING_ARG_TOPIC")
        return names[0]

    def _health(self) -> Tuple[bool, str]:
        error = self.broker.storage_error()
        if error is None:
            return True, "OK"
        return False, "NOK - %s" % (error,)

    # -- endpoints -------------------------------------------------------

    @_route(app, "GET", "/ping", style="text")
    def ping(self, request: IRequest) -> str:
        """``OK`` while healthy; else 500 with Go's ``NOK - <reason>``."""
        healthy, health = self._health()
        if not healthy:
            raise APIError(500, health)
        return health

    @_route(app, "GET", "/info")
    def info(self, request: IRequest) -> Any:
        """Describe this nsqd: version, addresses, ports and limits."""
        options = self.broker.options
        ports = self._ports()
        return {
            "version": __version__,
            "broadcast_address": options.broadcast_address,
            "hostname": socket.gethostname(),
            "http_port": ports.get("HTTP", 0),
            "tcp_port": ports.get("TCP", 0),
            "start_time": int(self.start_time),
            "max_heartbeat_interval": int(round(options.max_heartbeat_interval * _NS)),
            "max_output_buffer_size": options.max_output_buffer_size,
            "max_output_buffer_timeout": int(round(options.max_output_buffer_timeout * _NS)),
            "max_deflate_level": options.max_deflate_level,
        }

    @_route(app, "POST", "/pub", logged=False)
    def pub(self, request: IRequest) -> str:
        """
        Publish the body to ``?topic=`` (created if need be), ``defer``
        milliseconds later when given.
        """
        options = self.broker.options
        body = self._body(request)
        if len(body) > options.max_msg_size:
            raise APIError(413, "MSG_TOO_BIG")
        if not body:
            raise APIError(400, "MSG_EMPTY")
        values, topic = self._topic_from_query(request)
        deferred_ns = 0
        defers = values.get("defer")
        if defers is not None:
            milliseconds = _go_parse_int(defers[0])
            if milliseconds is None:
                raise APIError(400, "INVALID_DEFER")
            deferred_ns = _int64(milliseconds * 1000000)
            if deferred_ns < 0 or deferred_ns > int(round(options.max_req_timeout * _NS)):
                raise APIError(400, "INVALID_DEFER")
        try:
            if deferred_ns:
                topic.publish_deferred(body, deferred_ns / 1e9)
            else:
                topic.publish(body)
        except PublishError:
            raise APIError(503, "EXITING")
        return "OK"

    @_route(app, "POST", "/mpub", logged=False)
    def mpub(self, request: IRequest) -> str:
        """
        Publish several messages to ``?topic=``, all or none: one per line,
        or the MPUB binary format with ``binary=true``.
        """
        options = self.broker.options
        if self._declared_length(request) > options.max_body_size:
            raise APIError(413, "BODY_TOO_BIG")
        values, topic = self._topic_from_query(request)
        binary = False
        flags = values.get("binary")
        if flags is not None:
            binary = BOOL_PARAMS.get(flags[0], True)
            if flags[0] not in BOOL_PARAMS:
                self._log.warn(
                    "deprecated value '{value}' used for /mpub binary param",
                    value=flags[0],
                )
        body = self._body(request)
        if binary:
            messages = parse_mpub_binary(body, options.max_msg_size, options.max_body_size)
        else:
            messages = parse_mpub_lines(body, options.max_msg_size, options.max_body_size)
        try:
            topic.publish_many(messages)
        except PublishError:
            raise APIError(503, "EXITING")
        return "OK"

    @_route(app, "GET", "/stats")
    def stats(self, request: IRequest) -> Any:
        """
        Topics, channels, clients and memory: text, or JSON with
        ``format=json``; ``topic``/``channel`` narrow it,
        ``include_clients``/``include_mem`` (default true) trim it.
        """
        from txnsq.nsqd import stats as nsqd_stats

        values = self._query(request)

        def first(name: str) -> str:
            found = values.get(name)
            return found[0] if found else ""

        snapshot = nsqd_stats.collect(
            self.broker,
            self._clients(),
            self.start_time,
            __version__,
            topic=first("topic") or None,
            channel=first("channel") or None,
            include_clients=BOOL_PARAMS.get(first("include_clients"), True),
            include_mem=BOOL_PARAMS.get(first("include_mem"), True),
        )
        if first("format") == "json":
            return nsqd_stats.to_json(snapshot)
        return nsqd_stats.to_text(snapshot, self.broker.clock.seconds()).encode("utf-8")

    @_route(app, "GET", "/metrics", style="raw")
    def metrics(self, request: IRequest) -> bytes:
        """txnsq's own: the ``/stats`` numbers for Prometheus."""
        from txnsq.nsqd import metrics as nsqd_metrics
        from txnsq.nsqd import stats as nsqd_stats

        snapshot = nsqd_stats.collect(
            self.broker, self._clients(), self.start_time, __version__
        )
        body = nsqd_metrics.render_metrics(nsqd_stats.to_json(snapshot))
        content_type: Any = nsqd_metrics.CONTENT_TYPE
        if isinstance(content_type, str):
            content_type = content_type.encode("ascii")
        return self._reply(request, 200, body, content_type)

    # -- topics and channels ---------------------------------------------

    @_route(app, "POST", "/topic/create")
    def topic_create(self, request: IRequest) -> None:
        """Create ``?topic=`` (nothing happens if it exists)."""
        self._topic_from_query(request)

    @_route(app, "POST", "/topic/delete")
    def topic_delete(self, request: IRequest) -> None:
        """Delete ``?topic=``, its channels and their messages."""
        name = self._topic_name(request)
        try:
            self.broker.delete_topic(name)
        except KeyError:
            raise APIError(404, "TOPIC_NOT_FOUND")

    @_route(app, "POST", "/topic/empty")
    def topic_empty(self, request: IRequest) -> None:
        """Drop the messages ``?topic=`` holds itself (its channels keep theirs)."""
        name = self._topic_name(request)
        if not is_valid_topic_name(name):
            raise APIError(400, "INVALID_TOPIC")
        topic = self.broker.find_topic(name)
        if topic is None:
            raise APIError(404, "TOPIC_NOT_FOUND")
        topic.empty()

    def _pause_topic(self, request: IRequest, pause: bool) -> None:
        name = self._topic_name(request)
        topic = self.broker.find_topic(name)
        if topic is None:
            raise APIError(404, "TOPIC_NOT_FOUND")
        if pause:
            topic.pause()
        else:
            topic.unpause()

    @_route(app, "POST", "/topic/pause")
    def topic_pause(self, request: IRequest) -> None:
        """Hold ``?topic=``'s messages in the topic until unpaused."""
        self._pause_topic(request, True)

    @_route(app, "POST", "/topic/unpause")
    def topic_unpause(self, request: IRequest) -> None:
        """Resume copying ``?topic=``'s messages to its channels."""
        self._pause_topic(request, False)

    @_route(app, "POST", "/channel/create")
    def channel_create(self, request: IRequest) -> None:
        """Create ``?channel=`` on the existing ``?topic=``."""
        topic, name = self._existing_topic_and_channel(request)
        try:
            topic.get_channel(name)
        except ValueError:
            raise APIError(400, "INVALID_ARG_CHANNEL")

    @_route(app, "POST", "/channel/delete")
    def channel_delete(self, request: IRequest) -> None:
        """Delete a channel and its messages; its consumers are closed."""
        topic, name = self._existing_topic_and_channel(request)
        try:
            topic.delete_channel(name)
        except KeyError:
            raise APIError(404, "CHANNEL_NOT_FOUND")

    @_route(app, "POST", "/channel/empty")
    def channel_empty(self, request: IRequest) -> None:
        """Drop a channel's queued messages."""
        self._existing_channel(request).empty()

    @_route(app, "POST", "/channel/pause")
    def channel_pause(self, request: IRequest) -> None:
        """Stop a channel delivering until unpaused."""
        self._existing_channel(request).pause()

    @_route(app, "POST", "/channel/unpause")
    def channel_unpause(self, request: IRequest) -> None:
        """Let a paused channel deliver again."""
        self._existing_channel(request).unpause()

    # -- /config ---------------------------------------------------------

    def _config(self, request: IRequest, opt: str, put: bool) -> Any:
        options = self.broker.options
        if put:
            body = self._body(request)
            if len(body) > options.max_msg_size or not body:
                raise APIError(413, "INVALID_VALUE")
            if opt == "nsqlookupd_tcp_addresses":
                addresses = _decode_string_list(body)
                if addresses is None:
                    raise APIError(400, "INVALID_VALUE")
                options.lookupd_tcp_address = addresses
            elif opt == "log_level":
                level = body.decode("latin-1").lower()
                if level not in LOG_LEVEL_NUMBERS:
                    raise APIError(400, "INVALID_VALUE")
                options.log_level = level
            else:
                raise APIError(400, "INVALID_OPTION")
            if self.options_changed is not None:
                self.options_changed(opt)
        try:
            return config_value(options, opt)
        except KeyError:
            raise APIError(400, "INVALID_OPTION")

    @_route(app, "GET", "/config/:opt")
    def config_get(self, request: IRequest, opt: str) -> Any:
        """An option's value by Go's config name."""
        return self._config(request, opt, False)

    @_route(app, "PUT", "/config/:opt")
    def config_put(self, request: IRequest, opt: str) -> Any:
        """Change ``nsqlookupd_tcp_addresses`` (a JSON list) or ``log_level``."""
        return self._config(request, opt, True)

    # -- /debug ----------------------------------------------------------

    def _debug_text(self, request: IRequest, text: str, code: int = 200) -> bytes:
        request.setHeader(b"X-Content-Type-Options", b"nosniff")
        return self._reply(request, code, text.encode("utf-8"), TEXT_CONTENT_TYPE)

    @_route(app, "GET", "/debug/pprof/", style="raw")
    def debug_index(self, request: IRequest) -> bytes:
        """The list of profiles."""
        request.setHeader(b"X-Content-Type-Options", b"nosniff")
        return self._reply(request, 200, pprof_index(), HTML_CONTENT_TYPE)

    @_route(app, "GET", "/debug/pprof/cmdline", style="raw")
    def debug_cmdline(self, request: IRequest) -> bytes:
        """The command line, NUL separated."""
        return self._debug_text(request, "\x00".join(sys.argv))

    @_route(app, "GET", "/debug/pprof/symbol", style="raw")
    def debug_symbol(self, request: IRequest) -> bytes:
        """Go's symbol lookup: there are no program counters to look up."""
        return self._debug_text(request, "num_symbols: 0\n")

    @_route(app, "POST", "/debug/pprof/symbol", style="raw")
    def debug_symbol_lookup(self, request: IRequest) -> bytes:
        """Go's symbol lookup: there are no program counters to look up."""
        return self._debug_text(request, "num_symbols: 0\n")

    @_route(app, "GET", "/debug/pprof/profile", style="raw")
    def debug_profile(self, request: IRequest) -> Any:
        """
        cProfile the reactor thread, where all of nsqd's work runs, for
        ``?seconds=`` (default 30); pstats text, or the marshalled stats
        with ``format=pstats``.
        """
        values, _ = parse_query(_raw_query(request)[0])
        seconds = _go_parse_int((values.get("seconds") or [""])[0])
        if seconds is None or seconds <= 0:
            seconds = 30
        binary = (values.get("format") or [""])[0] == "pstats"
        if self._profiling:
            return self._debug_text(
                request,
                "Could not enable CPU profiling: cpu profiling already in use\n",
                500,
            )
        profiler = cProfile.Profile()
        try:
            profiler.enable()
        except ValueError as error:  # another profiler owns the thread
            return self._debug_text(
                request, "Could not enable CPU profiling: %s\n" % (error,), 500
            )
        self._profiling = True
        finished: Deferred[bytes] = Deferred()

        def stop() -> None:
            profiler.disable()
            self._profiling = False
            if binary:
                profiler.create_stats()
                data = marshal.dumps(profiler.stats)  # type: ignore[attr-defined]
                request.setHeader(
                    b"Content-Disposition", b'attachment; filename="profile.pstats"'
                )
                finished.callback(
                    self._reply(request, 200, data, b"application/octet-stream")
                )
                return
            out = io.StringIO()
            stats = pstats.Stats(profiler, stream=out)
            stats.sort_stats("cumulative").print_stats(60)
            finished.callback(self._debug_text(request, out.getvalue()))

        call = self.broker.clock.callLater(seconds, stop)

        def gone(reason: Any) -> None:
            if call.active():
                call.cancel()
                profiler.disable()
                self._profiling = False

        request.notifyFinish().addErrback(gone)  # type: ignore[attr-defined]
        return finished

    @_route(app, "GET", "/debug/pprof/heap", style="raw")
    def debug_heap(self, request: IRequest) -> bytes:
        """A memory summary; ``gc=1`` runs a full collection first."""
        values, _ = parse_query(_raw_query(request)[0])
        if (values.get("gc") or ["0"])[0] not in ("", "0"):
            gc.collect()
        return self._debug_text(request, memory_summary())

    @_route(app, "GET", "/debug/pprof/goroutine", style="raw")
    def debug_goroutine(self, request: IRequest) -> bytes:
        """Every thread's stack: grouped, or one by one with ``debug=2``."""
        values, _ = parse_query(_raw_query(request)[0])
        debug = _go_parse_int((values.get("debug") or ["0"])[0]) or 0
        return self._debug_text(request, thread_stacks(debug >= 2))

    @_route(app, "GET", "/debug/pprof/block", style="raw")
    def debug_block(self, request: IRequest) -> bytes:
        """Go's blocking profile has no Python equivalent."""
        return self._debug_text(
            request,
            "block profile: not available in Python; GET /debug/pprof/profile "
            "shows where the reactor thread spends its time\n",
        )

    @_route(app, "GET", "/debug/pprof/threadcreate", style="raw")
    def debug_threadcreate(self, request: IRequest) -> bytes:
        """The live threads."""
        return self._debug_text(request, thread_list())

    @_route(app, "PUT", "/debug/setblockrate", style="text")
    def debug_setblockrate(self, request: IRequest) -> str:
        """Go's block profile rate: checked as Go does; no effect in Python."""
        values, _ = parse_query(_raw_query(request)[0])
        text = (values.get("rate") or [""])[0]
        if _go_parse_int(text) is None:
            raise APIError(
                400,
                'invalid block rate : strconv.Atoi: parsing "%s": invalid syntax' % (text,),
            )
        return ""

    @_route(app, "POST", "/debug/freememory", style="text")
    def debug_freememory(self, request: IRequest) -> str:
        """Go's ``debug.FreeOSMemory``: here a full garbage collection."""
        gc.collect()
        return ""
