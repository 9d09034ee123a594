# -*- test-case-name: tests.test_conformance_engine -*-
"""
Replay engine for the recorded Go NSQ conformance fixtures.

The fixtures in ``tests/fixtures/conformance/`` (see its README.md) are
steps recorded against Go nsqd/nsqlookupd v1.3.0: bytes to send and what came
back.  :class:`CaseReplay` plays one case against any daemon reachable over
TCP (an in-process :func:`txnsq.testing.start_nsqd` or a spawned ``nsqd``
process) and raises :class:`ConformanceFailure` at the first difference.

Everything runs on the Twisted reactor: connections are endpoints on
``127.0.0.1``, waits are Deferreds, windows are ``deferLater``; nothing
blocks the reactor thread.

The pure parts (escaping, placeholder templates, JSON/shape comparison,
frame and HTTP response matching) are module-level functions so that
``tests.test_conformance_engine`` checks them with fixed inputs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import struct
import tempfile
import time
import zlib
from typing import (
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

from twisted.internet.defer import Deferred, inlineCallbacks, succeed
from twisted.internet.endpoints import (
    TCP4ClientEndpoint,
    TCP4ServerEndpoint,
    connectProtocol,
)
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import deferLater
from twisted.protocols.policies import WrappingFactory
from twisted.python.failure import Failure
from twisted.trial.unittest import FailTest
from twisted.web.resource import Resource
from twisted.web.server import Request, Site

__all__ = [
    "ConformanceFailure",
    "FixtureError",
    "FixtureMissing",
    "CaseReplay",
    "Target",
    "Bindings",
    "QUIET_MS",
    "conformance_dir",
    "load_fixture",
    "unescape",
    "escape",
    "match_template",
    "render_template",
    "match_json",
    "match_shape",
    "match_frame",
    "match_http_response",
    "parse_http_response",
]

#: After an ``expect_frames`` step nothing else may arrive "soon after"
#: (the recorder waited for 150 ms of quiet after every reply); this is how
#: long we listen for such an extra frame.
QUIET_MS = 100

#: ``within_ms`` of ``expect_frames`` when the step does not say.
DEFAULT_WITHIN_MS = 3000

#: How long ``expect_close`` waits for the server to close.
CLOSE_WITHIN_MS = 3000

#: How long ``peer_expect`` waits for nsqd's bytes to reach the stand-in
#: lookupd (nsqd connects to it while starting up).
PEER_WITHIN_MS = 5000

#: ``peer_expect: []`` and the tail of every ``peer_expect``: the window in
#: which no further bytes may reach the stand-in lookupd.
PEER_QUIET_MS = 300

#: An HTTP exchange (request written to server closed) must finish within.
HTTP_WITHIN_MS = 10000

#: Keys txnsq adds to Go's JSON objects on purpose (``/info``'s
#: ``txnsq_version``, ``metaq_port`` with ``--metaq-address``): allowed
#: after all of Go's keys, never among them.
EXTENSION_KEYS = frozenset(["txnsq_version", "metaq_port"])

#: Where the fixture files are: test data of this repository, beside the tests.
FIXTURE_DIR = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "conformance"
)

#: Steps that themselves reject any unexpected bytes on their connection, so
#: an ``expect_frames`` immediately before one of them on the same connection
#: needs no separate quiet window (and before ``upgrade`` must not have one:
#: the bytes that follow are compressed).
_READING_STEPS = ("expect_frames", "expect_close", "expect_nothing_ms", "expect_raw", "upgrade")


class ConformanceFailure(FailTest):
    """
    The daemon under test did not behave as the recording says.

    A ``FailTest`` (an AssertionError), so trial reports a failure, not an
    error.
    """


class FixtureError(Exception):
    """A fixture (or a test using it) is malformed: not the daemon's fault."""


class FixtureMissing(FailTest):
    """
    The conformance fixtures are not where they should be.

    A ``FailTest`` (an AssertionError), so that tests relying on the
    fixtures fail (rather than error or skip) when they are missing.
    """


# ---------------------------------------------------------------------------
# Fixture files


def conformance_dir() -> str:
    """The directory holding the fixtures: :data:`FIXTURE_DIR`."""
    return FIXTURE_DIR


def load_fixture(filename: str) -> Dict[str, Any]:
    """
    Read one fixture file (``tcp_v2.json``).

    :raises FixtureMissing: when the file cannot be read; the message says
        where it was looked for and how to point at another place.
    """
    path = os.path.join(conformance_dir(), filename)
    try:
        with open(path, encoding="utf-8") as handle:
            document: Dict[str, Any] = json.load(handle)
    except OSError as error:
        raise FixtureMissing(
            "conformance fixture %s not found (%s): the Go NSQ recordings are "
            "part of the repository, in tests/fixtures/conformance/"
            % (path, error.strerror)
        )
    if document.get("format") != "nsq-conformance/1":
        raise FixtureError("%s: unknown format %r" % (path, document.get("format")))
    return document


# ---------------------------------------------------------------------------
# Byte strings


def unescape(text: str) -> bytes:
    """Decode a fixture byte string (``\\n``, ``\\xHH``, ``\\\\``) into bytes."""
    return text.encode("latin-1").decode("unicode_escape").encode("latin-1")


_ESCAPES = {0x5C: "\\\\", 0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"}


def escape(data: bytes) -> str:
    """Render bytes in the fixtures' escaped ASCII notation (for messages)."""
    out = []
    for byte in data:
        if byte in _ESCAPES:
            out.append(_ESCAPES[byte])
        elif 0x20 <= byte <= 0x7E:
            out.append(chr(byte))
        else:
            out.append("\\x%02x" % (byte,))
    return "".join(out)


def _short(data: bytes, limit: int = 300) -> str:
    """Escaped bytes, cut to ``limit`` characters for failure messages."""
    text = escape(data)
    if len(text) > limit:
        return text[:limit] + "...(%d bytes)" % (len(data),)
    return text


def send_bytes(spec: Union[str, Sequence[Any]], render: Optional[Callable[[bytes], bytes]] = None) -> bytes:
    """
    The bytes of a ``send`` value: one escaped string, or a list of such
    strings and ``{"repeat": str, "count": n}`` parts, concatenated.

    :param render: applied to each escaped string part (template steps).
    """
    parts: Sequence[Any] = [spec] if isinstance(spec, str) else spec
    out = []
    for part in parts:
        if isinstance(part, str):
            data = unescape(part)
            out.append(render(data) if render is not None else data)
        elif isinstance(part, dict) and set(part) == {"repeat", "count"}:
            out.append(unescape(part["repeat"]) * int(part["count"]))
        else:
            raise FixtureError("bad send part %r" % (part,))
    return b"".join(out)


# ---------------------------------------------------------------------------
# Placeholders

#: Placeholders bound to the environment: compared for equality.
BOUND_PLACEHOLDERS = frozenset(
    [
        "version",
        "hostname",
        "nsqd_tcp_port",
        "nsqd_http_port",
        "lookupd_tcp_port",
        "lookupd_http_port",
        "auth_http_port",
        "tls_cert_file",
        "tls_key_file",
    ]
)

#: Free placeholders and the regexes (over bytes) their values must match.
#: ``<duration>`` is a Go duration string, whose micro sign is UTF-8.
FREE_PLACEHOLDERS: Dict[str, bytes] = {
    "int": rb"-?[0-9]+",
    "unix_s": rb"[0-9]+",
    "timestamp_ns": rb"[0-9]+",
    "rfc3339": rb"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?(?:Z|[+-][0-9]{2}:[0-9]{2})",
    "duration": rb"[0-9](?:[0-9a-z.]|\xc2\xb5)*",
    "port": rb"[0-9]{1,5}",
    "any": rb"[^\n]*",
}

#: A message id: 16 lowercase hex digits (Go's ``hex.Encode``).
MESSAGE_ID_PATTERN = rb"[0-9a-f]{16}"

_PLACEHOLDER = re.compile(rb"<([a-z_0-9]+(?::[A-Za-z0-9_.-]+)?)>")


def _is_placeholder_name(name: str) -> bool:
    """Whether ``<name>`` is a placeholder (others are literal text)."""
    return (
        name in BOUND_PLACEHOLDERS
        or name in FREE_PLACEHOLDERS
        or name.startswith("port:")
        or name.startswith("id:")
    )


class Bindings:
    """
    Values of the bound placeholders of one case.

    Environment values (ports, version, hostname, ``port:NAME``) are set by
    the replay; ``id:mN`` values are bound at their first occurrence in a
    matched template and must be equal afterwards.
    """

    def __init__(self, values: Optional[Mapping[str, Union[str, int, bytes]]] = None) -> None:
        self.values: Dict[str, bytes] = {}
        for name, value in (values or {}).items():
            self.set(name, value)

    def set(self, name: str, value: Union[str, int, bytes]) -> None:
        """Bind ``<name>`` to ``value``."""
        if isinstance(value, bytes):
            self.values[name] = value
        else:
            self.values[name] = str(value).encode("utf-8")

    def get(self, name: str) -> Optional[bytes]:
        """The value of ``<name>``, or None when unbound."""
        return self.values.get(name)

    def snapshot(self) -> Dict[str, bytes]:
        """A copy to :meth:`restore` when a tentative match fails."""
        return dict(self.values)

    def restore(self, snapshot: Dict[str, bytes]) -> None:
        """Undo the bindings made since :meth:`snapshot`."""
        self.values = dict(snapshot)


def _template_tokens(template: bytes) -> List[Tuple[bool, bytes]]:
    """Split a template into ``(is_placeholder, literal_or_name)`` tokens."""
    tokens: List[Tuple[bool, bytes]] = []
    position = 0
    for found in _PLACEHOLDER.finditer(template):
        name = found.group(1)
        if not _is_placeholder_name(name.decode("ascii")):
            continue
        if found.start() > position:
            tokens.append((False, template[position : found.start()]))
        tokens.append((True, name))
        position = found.end()
    if position < len(template):
        tokens.append((False, template[position:]))
    return tokens


def _group_name(name: str) -> str:
    """A regex group name for the placeholder ``id:NAME``."""
    return "id_" + re.sub(r"[^A-Za-z0-9_]", "_", name[3:])


def render_template(template: bytes, bindings: Bindings) -> bytes:
    """
    Replace the bound placeholders of ``template`` by their values.

    :raises FixtureError: for a free or not yet bound placeholder.
    """
    out = []
    for is_placeholder, token in _template_tokens(template):
        if not is_placeholder:
            out.append(token)
            continue
        name = token.decode("ascii")
        value = bindings.get(name)
        if value is None:
            raise FixtureError("cannot render <%s>: not bound here" % (name,))
        out.append(value)
    return b"".join(out)


def match_template(template: bytes, actual: bytes, bindings: Bindings) -> bool:
    """
    Whether ``actual`` matches ``template`` as a whole.

    Literal text is compared exactly, bound placeholders by value, free ones
    by their regex; a not yet bound ``<id:mN>`` matches a message id and is
    bound when the whole template matches.

    :raises FixtureError: for an unbound environment placeholder.
    """
    pattern = []
    new_ids: Dict[str, str] = {}
    for is_placeholder, token in _template_tokens(template):
        if not is_placeholder:
            pattern.append(re.escape(token))
            continue
        name = token.decode("ascii")
        if name in FREE_PLACEHOLDERS:
            pattern.append(b"(?:" + FREE_PLACEHOLDERS[name] + b")")
            continue
        value = bindings.get(name)
        if value is not None:
            pattern.append(re.escape(value))
        elif name.startswith("id:"):
            group = _group_name(name)
            if name in new_ids:
                pattern.append(b"(?P=" + group.encode("ascii") + b")")
            else:
                new_ids[name] = group
                pattern.append(b"(?P<" + group.encode("ascii") + b">" + MESSAGE_ID_PATTERN + b")")
        else:
            raise FixtureError("placeholder <%s> is not bound in this case" % (name,))
    found = re.fullmatch(b"".join(pattern), actual, re.DOTALL)
    if found is None:
        return False
    for name, group in new_ids.items():
        bindings.set(name, found.group(group))
    return True


def _whole_placeholder(value: str) -> Optional[str]:
    """The name when ``value`` is exactly one placeholder, else None."""
    found = _PLACEHOLDER.fullmatch(value.encode("utf-8"))
    if found is None:
        return None
    name = found.group(1).decode("ascii")
    return name if _is_placeholder_name(name) else None


#: Plausibility windows for free time placeholders given as whole values:
#: a value in the wrong unit (ms for ns) is caught even though it is an int.
_DAY = 86400


def plausible_time(name: str, value: int, now: Optional[float] = None) -> bool:
    """Whether ``value`` is a time of the placeholder's kind within a day of now."""
    current = time.time() if now is None else now
    if name == "unix_s":
        return abs(value - current) < _DAY
    if name == "timestamp_ns":
        return abs(value - current * 1e9) < _DAY * 1e9
    return True


# ---------------------------------------------------------------------------
# JSON


def _path_text(path: Sequence[str]) -> str:
    return "." + ".".join(path) if path else "(top)"


def _path_matches(path: Sequence[str], pattern: str) -> bool:
    """Whether a ``.``-separated pattern with ``*`` names this path."""
    parts = pattern.split(".")
    if len(parts) != len(path):
        return False
    return all(part == "*" or part == segment for part, segment in zip(parts, path))


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def match_json(
    expected: Any,
    actual: Any,
    bindings: Bindings,
    unordered: Sequence[str] = (),
    path: Sequence[str] = (),
) -> Optional[str]:
    """
    Compare a decoded JSON value with a fixture's normalised ``json``.

    Objects need exactly the keys shown, in the order shown (txnsq's own
    :data:`EXTENSION_KEYS` may follow them); arrays the same
    length (any order for the ``unordered`` paths); scalars equality with
    int, bool and null kept apart.  A string containing placeholders is a
    template; a string that is one placeholder also stands for an int.

    :return: None when they match, else what differs (bindings made during
        a failed match are undone).
    """
    snapshot = bindings.snapshot()
    problem = _match_json(expected, actual, bindings, unordered, list(path))
    if problem is not None:
        bindings.restore(snapshot)
    return problem


def _match_json(
    expected: Any, actual: Any, bindings: Bindings, unordered: Sequence[str], path: List[str]
) -> Optional[str]:
    where = _path_text(path)
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return "%s: expected an object, got %s" % (where, json.dumps(actual))
        keys = list(actual)
        while keys and keys[-1] in EXTENSION_KEYS and keys[-1] not in expected:
            keys.pop()
        if keys != list(expected):
            return "%s: expected keys %s, got %s" % (where, list(expected), list(actual))
        for key, value in expected.items():
            problem = _match_json(value, actual[key], bindings, unordered, path + [key])
            if problem is not None:
                return problem
        return None
    if isinstance(expected, list):
        if not isinstance(actual, list):
            return "%s: expected an array, got %s" % (where, json.dumps(actual))
        if len(actual) != len(expected):
            return "%s: expected %d elements, got %d: %s" % (
                where, len(expected), len(actual), json.dumps(actual)[:300])
        if any(_path_matches(path, pattern) for pattern in unordered):
            return _match_unordered(expected, actual, bindings, unordered, path)
        for index, (want, got) in enumerate(zip(expected, actual)):
            problem = _match_json(want, got, bindings, unordered, path + [str(index)])
            if problem is not None:
                return problem
        return None
    if isinstance(expected, str):
        name = _whole_placeholder(expected)
        if isinstance(actual, str):
            if match_template(expected.encode("utf-8"), actual.encode("utf-8"), bindings):
                return None
            return "%s: expected %s, got %s" % (where, json.dumps(expected), json.dumps(actual))
        if name is not None and _json_type(actual) == "int":
            if not match_template(expected.encode("utf-8"), str(actual).encode("ascii"), bindings):
                return "%s: expected %s (%r), got %s" % (
                    where, expected, bindings.get(name), json.dumps(actual))
            if not plausible_time(name, actual):
                return "%s: %d is not a plausible %s" % (where, actual, expected)
            return None
        return "%s: expected %s, got %s" % (where, json.dumps(expected), json.dumps(actual))
    if _json_type(expected) != _json_type(actual) or expected != actual:
        return "%s: expected %s, got %s" % (where, json.dumps(expected), json.dumps(actual))
    return None


def _match_unordered(
    expected: List[Any], actual: List[Any], bindings: Bindings, unordered: Sequence[str], path: List[str]
) -> Optional[str]:
    """Match arrays as multisets: each expected element against a distinct actual one."""
    remaining = list(range(len(actual)))
    for index, want in enumerate(expected):
        for candidate in remaining:
            snapshot = bindings.snapshot()
            if _match_json(want, actual[candidate], bindings, unordered, path + [str(candidate)]) is None:
                remaining.remove(candidate)
                break
            bindings.restore(snapshot)
        else:
            return "%s: no element matches %s (unordered) in %s" % (
                _path_text(path), json.dumps(want), json.dumps(actual)[:300])
    return None


def match_shape(shape: Any, actual: Any, path: Sequence[str] = ()) -> Optional[str]:
    """
    Check the value types of ``actual`` against a fixture ``shape``.

    ``"int"`` needs an integer, ``"float"`` any number (Go writes 1.0 as
    ``1``), ``"string"``, ``"bool"``, ``"null"``; ``[elem]`` an array whose
    elements all have that shape (``[]``: any array); ``{key: shape}`` an
    object with exactly those keys (and any of txnsq's :data:`EXTENSION_KEYS`).

    :return: None when it fits, else what does not.
    """
    where = _path_text(path)
    kind = _json_type(actual)
    if isinstance(shape, str):
        fits = {
            "int": kind == "int",
            "float": kind in ("int", "float"),
            "string": kind == "string",
            "bool": kind == "bool",
            "null": kind == "null",
        }.get(shape)
        if fits is None:
            raise FixtureError("unknown shape %r at %s" % (shape, where))
        if not fits:
            return "%s: expected a %s, got %s" % (where, shape, json.dumps(actual))
        return None
    if isinstance(shape, list):
        if kind != "array":
            return "%s: expected an array, got %s" % (where, json.dumps(actual))
        if shape:
            for index, element in enumerate(actual):
                problem = match_shape(shape[0], element, list(path) + [str(index)])
                if problem is not None:
                    return problem
        return None
    if isinstance(shape, dict):
        if kind != "object":
            return "%s: expected an object, got %s" % (where, json.dumps(actual))
        if set(actual) - (EXTENSION_KEYS - set(shape)) != set(shape):
            return "%s: expected keys %s, got %s" % (where, sorted(shape), sorted(actual))
        for key, inner in shape.items():
            problem = match_shape(inner, actual[key], list(path) + [key])
            if problem is not None:
                return problem
        return None
    raise FixtureError("unknown shape %r at %s" % (shape, where))


def _match_json_document(expected: Mapping[str, Any], data: bytes, bindings: Bindings) -> Optional[str]:
    """Decode ``data`` and check it against a fixture's ``json``/``shape``/``unordered``."""
    try:
        actual = json.loads(data.decode("utf-8"))
    except ValueError as error:
        return "not JSON (%s): %s" % (error, _short(data))
    problem = match_json(expected["json"], actual, bindings, expected.get("unordered", ()))
    if problem is None and "shape" in expected:
        problem = match_shape(expected["shape"], actual)
    if problem is not None:
        return "%s in %s" % (problem, _short(data, 600))
    return None


# ---------------------------------------------------------------------------
# Frames

#: A frame as read: ``(type, data)``; the type is None for V1 (lookupd)
#: frames, which have none.
Frame = Tuple[Optional[int], bytes]

_MESSAGE_HEADER = struct.Struct(">qH16s")


def describe_frame(frame: Frame) -> str:
    """A readable rendering of a frame for failure messages."""
    frame_type, data = frame
    if frame_type is None:
        return "V1 frame %r" % (_short(data),)
    return "frame type %d %r" % (frame_type, _short(data))


def match_frame(expected: Mapping[str, Any], frame: Frame, bindings: Bindings) -> Optional[str]:
    """
    Compare one frame with a fixture frame object.

    ``type`` (absent for V1), ``size`` (V2: 4 + data; V1: data), ``data``
    (exact, or a template with ``template: true``), ``json`` + ``shape``,
    or ``message`` (timestamp, attempts, id, body of a V2 message payload).

    :return: None when it matches, else what differs.
    """
    frame_type, data = frame
    snapshot = bindings.snapshot()
    problem = _match_frame(expected, frame_type, data, bindings)
    if problem is not None:
        bindings.restore(snapshot)
        return "%s; got %s" % (problem, describe_frame(frame))
    return None


def _match_frame(
    expected: Mapping[str, Any], frame_type: Optional[int], data: bytes, bindings: Bindings
) -> Optional[str]:
    if expected.get("type") != frame_type:
        return "expected frame type %s" % (expected.get("type"),)
    if "size" in expected:
        size = len(data) + (4 if frame_type is not None else 0)
        if size != expected["size"]:
            return "expected size %d, got %d" % (expected["size"], size)
    if "data" in expected:
        want = unescape(expected["data"])
        if expected.get("template"):
            if not match_template(want, data, bindings):
                return "expected data matching %r" % (expected["data"],)
        elif data != want:
            return "expected data %r" % (expected["data"],)
    if "json" in expected:
        return _match_json_document(expected, data, bindings)
    if "message" in expected:
        return _match_message(expected["message"], data, bindings)
    return None


def _match_message(expected: Mapping[str, Any], data: bytes, bindings: Bindings) -> Optional[str]:
    """Decode a message payload independently of the code under test and compare."""
    if len(data) < _MESSAGE_HEADER.size:
        return "message payload shorter than its %d-byte header" % (_MESSAGE_HEADER.size,)
    timestamp, attempts, message_id = _MESSAGE_HEADER.unpack_from(data)
    body = data[_MESSAGE_HEADER.size :]
    want_ts = expected.get("timestamp", "<timestamp_ns>")
    if want_ts == "<timestamp_ns>":
        if not plausible_time("timestamp_ns", timestamp):
            return "message timestamp %d is not Unix nanoseconds of today" % (timestamp,)
    elif timestamp != want_ts:
        return "expected timestamp %r, got %d" % (want_ts, timestamp)
    if attempts != expected["attempts"]:
        return "expected attempts %d, got %d" % (expected["attempts"], attempts)
    if not match_template(expected["id"].encode("ascii"), message_id, bindings):
        return "expected id %s (%r), got %r" % (
            expected["id"], bindings.get(expected["id"][1:-1]), message_id)
    if body != unescape(expected["body"]):
        return "expected body %r, got %r" % (expected["body"], _short(body))
    return None


# ---------------------------------------------------------------------------
# HTTP


class HTTPResponse:
    """A parsed HTTP/1.1 response."""

    def __init__(self, status: int, reason: str, headers: List[Tuple[str, str]], body: bytes) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body = body

    def header(self, name: str) -> Optional[str]:
        """The first value of a header (case-insensitive name), or None."""
        lowered = name.lower()
        for key, value in self.headers:
            if key.lower() == lowered:
                return value
        return None


def parse_http_response(raw: bytes, head_request: bool = False) -> HTTPResponse:
    """
    Parse a complete HTTP/1.1 response (read until the server closed).

    The body is delimited by chunked encoding, Content-Length, or the close;
    a response to HEAD (``head_request``) has none, whatever its headers say.

    :raises ConformanceFailure: when it is not a well-formed response.
    """
    head, separator, rest = raw.partition(b"\r\n\r\n")
    if not separator:
        raise ConformanceFailure("incomplete HTTP response: %s" % (_short(raw),))
    lines = head.split(b"\r\n")
    status_line = lines[0].split(b" ", 2)
    if len(status_line) < 2 or not status_line[0].startswith(b"HTTP/1."):
        raise ConformanceFailure("bad HTTP status line: %s" % (_short(lines[0]),))
    try:
        status = int(status_line[1])
    except ValueError:
        raise ConformanceFailure("bad HTTP status line: %s" % (_short(lines[0]),))
    reason = status_line[2].decode("latin-1") if len(status_line) > 2 else ""
    headers: List[Tuple[str, str]] = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon:
            raise ConformanceFailure("bad HTTP header line: %s" % (_short(line),))
        headers.append((name.decode("latin-1").strip(), value.decode("latin-1").strip()))
    response = HTTPResponse(status, reason, headers, b"")
    if head_request:
        if rest:
            raise ConformanceFailure("a response to HEAD with a body: %s" % (_short(rest),))
        return response
    encoding = response.header("Transfer-Encoding")
    length = response.header("Content-Length")
    if encoding is not None and encoding.lower() == "chunked":
        response.body = _dechunk(rest)
    elif length is not None:
        size = int(length)
        if len(rest) < size:
            raise ConformanceFailure("HTTP body shorter (%d) than Content-Length %d" % (len(rest), size))
        response.body = rest[:size]
    else:
        response.body = rest
    return response


def _dechunk(data: bytes) -> bytes:
    """Decode a chunked transfer-encoded body."""
    out: List[bytes] = []
    while True:
        size_line, separator, data = data.partition(b"\r\n")
        if not separator:
            raise ConformanceFailure("truncated chunked HTTP body")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return b"".join(out)
        out.append(data[:size])
        data = data[size + 2 :]


#: Headers that must be absent when the fixture does not list them.
_MUST_BE_ABSENT = ("Content-Type", "X-Nsq-Content-Type")


def match_http_response(expected: Mapping[str, Any], response: HTTPResponse, bindings: Bindings) -> Optional[str]:
    """
    Compare a response with a fixture ``expect``: status, the listed headers
    (templates), absence of unlisted Content-Type/X-Nsq-Content-Type, and
    ``json``+``shape`` and/or ``body``, or ``body_template``.

    :return: None when it matches, else what differs.
    """
    if response.status != expected["status"]:
        return "expected status %d, got %d %s; body %s" % (
            expected["status"], response.status, response.reason, _short(response.body))
    listed = {name.lower() for name in expected.get("headers", {})}
    for name, value in expected.get("headers", {}).items():
        got = response.header(name)
        if got is None:
            return "expected header %s: %s, it is absent (headers %s)" % (name, value, response.headers)
        if not match_template(value.encode("utf-8"), got.encode("latin-1"), bindings):
            return "expected header %s: %s, got %s" % (name, value, got)
    for name in _MUST_BE_ABSENT:
        if name.lower() not in listed and response.header(name) is not None:
            return "header %s must be absent, got %s" % (name, response.header(name))
    if "json" in expected:
        problem = _match_json_document(expected, response.body, bindings)
        if problem is not None:
            return "body: " + problem
    if "body" in expected and response.body != unescape(expected["body"]):
        return "expected body %r, got %r" % (expected["body"], _short(response.body, 600))
    if "body_template" in expected:
        if not match_template(unescape(expected["body_template"]), response.body, bindings):
            return "body does not match the template %r; got %r" % (
                expected["body_template"], _short(response.body, 2000))
    return None


def http_request_bytes(request: Mapping[str, Any], host: str, port: int, bindings: Bindings) -> bytes:
    """
    The bytes of a fixture HTTP request: path sent as is, a Content-Length
    with any body (also 0 for an empty POST/PUT), ``Connection: close``.
    """
    path = request["path"].encode("latin-1")
    body: Optional[bytes] = unescape(request["body"]) if "body" in request else None
    if request.get("template"):
        path = render_template(path, bindings)
        if body is not None:
            body = render_template(body, bindings)
    method = request["method"].encode("ascii")
    if body is None and method in (b"POST", b"PUT"):
        body = b""
    lines = [method + b" " + path + b" HTTP/1.1", b"Host: %s:%d" % (host.encode("ascii"), port)]
    for name, value in request.get("headers", {}).items():
        lines.append(name.encode("latin-1") + b": " + value.encode("latin-1"))
    if body is not None:
        lines.append(b"Content-Length: %d" % (len(body),))
    lines.append(b"Connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n" + (body or b"")


# ---------------------------------------------------------------------------
# Peer (stand-in lookupd) byte streams


def match_peer_items(items: Sequence[Mapping[str, Any]], data: bytes, bindings: Bindings) -> Tuple[str, Union[int, str]]:
    """
    Match what nsqd wrote to the stand-in lookupd against ``peer_expect``.

    :return: ``("ok", consumed)``, ``("more", 0)`` when the bytes so far are
        a prefix of what is expected, or ``("bad", description)``.
    """
    position = 0
    for item in items:
        if "magic" in item:
            want = unescape(item["magic"])
            got = data[position : position + len(want)]
            if got != want[: len(got)]:
                return "bad", "expected magic %r, got %r" % (item["magic"], _short(data[position:]))
            if len(got) < len(want):
                return "more", 0
            position += len(want)
            continue
        if "line" not in item:
            raise FixtureError("unknown peer_expect item %r" % (item,))
        want = unescape(item["line"])
        got = data[position : position + len(want)]
        if got != want[: len(got)]:
            return "bad", "expected line %r, got %r" % (item["line"], _short(data[position:]))
        if len(got) < len(want):
            return "more", 0
        position += len(want)
        if item.get("body_size_prefix"):
            if len(data) < position + 4:
                return "more", 0
            (size,) = struct.unpack(">i", data[position : position + 4])
            if size < 0 or len(data) < position + 4 + size:
                return ("more", 0) if size >= 0 else ("bad", "negative body size %d" % (size,))
            body = data[position + 4 : position + 4 + size]
            position += 4 + size
            if "json" in item:
                problem = _match_json_document(item, body, bindings)
                if problem is not None:
                    return "bad", "%s body: %s" % (item["line"].strip(), problem)
    return "ok", position


# ---------------------------------------------------------------------------
# Twisted plumbing


def _fire_once(waiter: "Deferred[None]") -> None:
    """Fire ``waiter`` unless something else already did."""
    if not waiter.called:
        waiter.callback(None)


class _Changes:
    """Lets a coroutine wait, with a deadline, until a predicate holds."""

    def __init__(self, reactor: Any) -> None:
        self._reactor = reactor
        self._waiters: List[Deferred[None]] = []

    def changed(self) -> None:
        """Something happened: wake every waiter to re-check its predicate."""
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.called:
                waiter.callback(None)

    @inlineCallbacks
    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> Any:
        """A Deferred firing True once ``predicate()`` holds, False at the deadline."""
        deadline = self._reactor.seconds() + timeout
        while not predicate():
            remaining = deadline - self._reactor.seconds()
            if remaining <= 0:
                return False
            waiter: Deferred[None] = Deferred()
            self._waiters.append(waiter)
            timer = self._reactor.callLater(remaining, _fire_once, waiter)
            try:
                yield waiter
            finally:
                if timer.active():
                    timer.cancel()
        return True


class _DeflateCodec:
    """Raw RFC 1951 deflate both ways, every write sync-flushed (as NSQ)."""

    def __init__(self) -> None:
        self._compress = zlib.compressobj(6, zlib.DEFLATED, -15)
        self._decompress = zlib.decompressobj(-15)

    def encode(self, data: bytes) -> bytes:
        return self._compress.compress(data) + self._compress.flush(zlib.Z_SYNC_FLUSH)

    def decode(self, data: bytes) -> bytes:
        return self._decompress.decompress(data)


class _SnappyCodec:
    """The snappy framed format both ways (python-snappy's stream classes)."""

    def __init__(self) -> None:
        import snappy

        self._compress = snappy.StreamCompressor()
        self._decompress = snappy.StreamDecompressor()

    def encode(self, data: bytes) -> bytes:
        # add_chunk emits the stream identifier before the first chunk.
        out = []
        for start in range(0, max(len(data), 1), 65536):
            out.append(self._compress.add_chunk(data[start : start + 65536]))
        return b"".join(out)

    def decode(self, data: bytes) -> bytes:
        return bytes(self._decompress.decompress(data))


def make_codec(kind: str) -> Union[_DeflateCodec, _SnappyCodec]:
    """The client side of an ``upgrade`` step: ``deflate`` or ``snappy``."""
    if kind == "deflate":
        return _DeflateCodec()
    if kind == "snappy":
        return _SnappyCodec()
    raise FixtureError("unknown upgrade %r" % (kind,))


def take_frame(pending: bytearray, framing: str, parser: Any = None) -> Optional[Frame]:
    """
    Remove and return the first complete frame of ``pending``, if any.

    Frames are cut lazily, one at a time, so that bytes after a frame stay
    raw until asked for: after an ``upgrade`` the not yet read bytes are
    compressed and must go through the decoder first.  A V2 frame's bytes
    are decoded by the shared ``FrameParser`` (``parser``).

    :param framing: ``v2`` (nsqd) or ``v1`` (nsqlookupd: no type).
    """
    if len(pending) < 4:
        return None
    (size,) = struct.unpack(">I", bytes(pending[:4]))
    if len(pending) < 4 + size:
        return None
    chunk = bytes(pending[: 4 + size])
    del pending[: 4 + size]
    if framing == "v1":
        return (None, chunk[4:])
    try:
        frames = parser.feed(chunk)
    except Exception as error:  # the server sent a malformed frame
        raise ConformanceFailure("unreadable frame %r: %s" % (_short(chunk), error))
    if len(frames) != 1:
        raise ConformanceFailure("FrameParser made %d frames of one frame %r" % (len(frames), _short(chunk)))
    frame_type, data = frames[0]
    return (frame_type, bytes(data))


class ReplayConnection(Protocol):
    """
    One named client connection of a case.

    Received bytes are decoded (after an ``upgrade``) into ``pending`` and
    consumed by the steps: as frames (``v2``/``v1``) or raw.
    """

    def __init__(self, name: str, framing: str, reactor: Any) -> None:
        self.name = name
        self.framing = framing
        self.pending = bytearray()
        self.lost: Optional[Failure] = None
        self.codec: Optional[Union[_DeflateCodec, _SnappyCodec]] = None
        self.decode_error: Optional[Exception] = None
        self.changes = _Changes(reactor)
        self._parser: Any = None
        if framing == "v2":
            # The shared sans-IO codec reads the frames (see the contract).
            from txnsq.protocol.frames import FrameParser

            self._parser = FrameParser()

    def dataReceived(self, data: bytes) -> None:
        """Keep (decoded) bytes for the steps."""
        if self.codec is not None:
            try:
                data = self.codec.decode(data)
            except Exception as error:  # any decoder error is the server's
                self.decode_error = error
                data = b""
        self.pending += data
        self.changes.changed()

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        """Remember how the connection ended."""
        self.lost = reason if reason is not None else Failure(Exception("lost"))
        self.changes.changed()

    def send(self, data: bytes) -> None:
        """Write bytes (compressed after an upgrade)."""
        if self.codec is not None:
            data = self.codec.encode(data)
        self.transport.write(data)  # type: ignore[union-attr,call-arg]

    def upgrade(self, kind: str) -> None:
        """Compress both directions from here on; decode what is not read yet."""
        self.codec = make_codec(kind)
        waiting = bytes(self.pending)
        del self.pending[:]
        self.dataReceived(waiting)

    def take_frame(self) -> Optional[Frame]:
        """The next complete frame, or None."""
        return take_frame(self.pending, self.framing, self._parser)

    def has_frame(self) -> bool:
        """Whether a complete frame is waiting."""
        if len(self.pending) < 4:
            return False
        (size,) = struct.unpack(">I", bytes(self.pending[:4]))
        return len(self.pending) >= 4 + size


class _HTTPExchange(Protocol):
    """Write one request, read until the server closes."""

    def __init__(self, request: bytes) -> None:
        self.request = request
        self.data = bytearray()
        self.done: Deferred[bytes] = Deferred()

    def connectionMade(self) -> None:
        self.transport.write(self.request)  # type: ignore[union-attr,call-arg]

    def dataReceived(self, data: bytes) -> None:
        self.data += data

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        if not self.done.called:
            self.done.callback(bytes(self.data))


class _TrackingFactory(WrappingFactory):  # type: ignore[type-arg]
    """A WrappingFactory that can close all its connections and wait."""

    def __init__(self, wrapped: Any, reactor: Any) -> None:
        WrappingFactory.__init__(self, wrapped)  # type: ignore[arg-type]
        self.changes = _Changes(reactor)

    def registerProtocol(self, p: Any) -> None:
        WrappingFactory.registerProtocol(self, p)  # type: ignore[arg-type]
        self.changes.changed()

    def unregisterProtocol(self, p: Any) -> None:
        WrappingFactory.unregisterProtocol(self, p)  # type: ignore[arg-type]
        self.changes.changed()

    def close_all(self) -> "Deferred[Any]":
        """Abort every connection; fires when all are gone."""
        for protocol in list(self.protocols):
            protocol.transport.abortConnection()
        return self.changes.wait_for(lambda: not self.protocols, 5.0)


class _AuthResource(Resource):
    """The stand-in auth server: answers ``/auth?...&secret=S`` from a map."""

    isLeaf = True

    def __init__(self, answers: Mapping[str, Sequence[Any]]) -> None:
        Resource.__init__(self)
        self.answers = answers
        self.seen: List[bytes] = []

    def render(self, request: Request) -> bytes:
        self.seen.append(request.uri)
        secret = (request.args or {}).get(b"secret", [b""])[0].decode("utf-8", "replace")
        status, body = self.answers.get(secret, (404, {"message": "NOT_FOUND"}))
        request.setResponseCode(int(status))
        request.setHeader(b"Content-Type", b"application/json; charset=utf-8")
        return json.dumps(body).encode("utf-8")


class StandInAuthServer:
    """An HTTP server on a loopback port standing in for nsqd's auth server."""

    def __init__(self, answers: Mapping[str, Sequence[Any]], reactor: Any) -> None:
        self.resource = _AuthResource(answers)
        site = Site(self.resource)
        site.noisy = False
        self.factory = _TrackingFactory(site, reactor)
        self._reactor = reactor
        self.port: Any = None
        self._taken = 0

    @inlineCallbacks
    def listen(self) -> Any:
        """Listen on 127.0.0.1, a kernel-chosen port; fires with the port number."""
        endpoint = TCP4ServerEndpoint(self._reactor, 0, interface="127.0.0.1")
        self.port = yield endpoint.listen(self.factory)
        return self.port.getHost().port

    def take_seen(self) -> List[bytes]:
        """Request targets received since the previous call."""
        seen = self.resource.seen[self._taken :]
        self._taken = len(self.resource.seen)
        return seen

    @inlineCallbacks
    def close(self) -> Any:
        """Stop listening and drop nsqd's connections."""
        if self.port is not None:
            yield self.port.stopListening()
        yield self.factory.close_all()


class _PeerProtocol(Protocol):
    """nsqd's connection to the stand-in lookupd."""

    def __init__(self, owner: "StandInLookupd") -> None:
        self.owner = owner

    def connectionMade(self) -> None:
        self.owner.peers.append(self)
        self.owner.changes.changed()

    def dataReceived(self, data: bytes) -> None:
        self.owner.received += data
        self.owner.changes.changed()

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        if self in self.owner.peers:
            self.owner.peers.remove(self)
        self.owner.changes.changed()


class StandInLookupd:
    """A loopback listener standing in for nsqlookupd: records, and replies as told."""

    def __init__(self, reactor: Any) -> None:
        self._reactor = reactor
        self.received = bytearray()
        self.peers: List[_PeerProtocol] = []
        self.changes = _Changes(reactor)
        self.port: Any = None

    @inlineCallbacks
    def listen(self) -> Any:
        """Listen on 127.0.0.1, a kernel-chosen port; fires with the port number."""
        factory = Factory.forProtocol(lambda: _PeerProtocol(self))  # type: ignore[arg-type]
        factory.noisy = False
        endpoint = TCP4ServerEndpoint(self._reactor, 0, interface="127.0.0.1")
        self.port = yield endpoint.listen(factory)
        return self.port.getHost().port

    @inlineCallbacks
    def close(self) -> Any:
        """Stop listening and drop nsqd's connections."""
        if self.port is not None:
            yield self.port.stopListening()
        for peer in list(self.peers):
            peer.transport.abortConnection()  # type: ignore[union-attr]
        yield self.changes.wait_for(lambda: not self.peers, 5.0)


# ---------------------------------------------------------------------------
# The replay


class Target:
    """
    Where the daemons of a case listen and what they report about themselves.

    :ivar ports: by fixture name: ``nsqd_tcp``, ``nsqd_http``, ``lookupd_tcp``,
        ``lookupd_http`` (those that run).
    :ivar version: the daemons' version string (``<version>``).
    :ivar hostname: ``<hostname>``; the OS hostname by default.
    """

    def __init__(
        self,
        host: str,
        ports: Mapping[str, int],
        version: str,
        hostname: Optional[str] = None,
    ) -> None:
        self.host = host
        self.ports = dict(ports)
        self.version = version
        self.hostname = socket.gethostname() if hostname is None else hostname


_FRAMING = {"nsqd_tcp": "v2", "lookupd_tcp": "v1", "nsqd_http": "raw", "lookupd_http": "raw"}


class CaseReplay:
    """
    Play one fixture case against running daemons.

    Use: ``yield replay.start_stand_ins()``, start the daemons with
    ``replay.nsqd_flags()``, ``yield replay.run(target)``; then always
    ``yield replay.close_connections()``, stop the daemons, and
    ``yield replay.close_stand_ins()`` (see :func:`replay_case`).
    """

    def __init__(self, case: Mapping[str, Any], reactor: Any = None, quiet_ms: int = QUIET_MS) -> None:
        if reactor is None:
            from twisted.internet import reactor as global_reactor

            reactor = global_reactor
        self.case = case
        self.reactor = reactor
        self.quiet_ms = quiet_ms
        self.bindings = Bindings()
        self.connections: Dict[str, ReplayConnection] = {}
        self.auth_server: Optional[StandInAuthServer] = None
        self.lookupd: Optional[StandInLookupd] = None
        self.target: Optional[Target] = None
        self.tls_directory: Optional[str] = None

    @property
    def name(self) -> str:
        """The case's name."""
        return str(self.case["name"])

    @inlineCallbacks
    def start_stand_ins(self) -> Any:
        """
        Start the stand-in auth server and lookupd the case asks for, and
        write the TLS server files (``tls_server_files``).
        """
        if self.case.get("tls_server_files"):
            from tests.integration.tls_certs import write_server_files

            self.tls_directory = tempfile.mkdtemp(prefix="conformance-tls-")
            files = write_server_files(self.tls_directory)
            self.bindings.set("tls_cert_file", files.cert)
            self.bindings.set("tls_key_file", files.key)
        answers = self.case.get("stand_in_auth_server")
        if answers is not None:
            self.auth_server = StandInAuthServer(answers, self.reactor)
            port = yield self.auth_server.listen()
            self.bindings.set("auth_http_port", port)
        if self.case.get("stand_in_lookupd"):
            self.lookupd = StandInLookupd(self.reactor)
            port = yield self.lookupd.listen()
            self.bindings.set("lookupd_tcp_port", port)

    def nsqd_flags(self) -> List[str]:
        """The case's ``nsqd_flags`` with stand-in ports filled in."""
        return [
            render_template(flag.encode("utf-8"), self.bindings).decode("utf-8")
            for flag in self.case.get("nsqd_flags", [])
        ]

    def lookupd_flags(self) -> List[str]:
        """The case's ``lookupd_flags`` with placeholders filled in."""
        return [
            render_template(flag.encode("utf-8"), self.bindings).decode("utf-8")
            for flag in self.case.get("lookupd_flags", [])
        ]

    @inlineCallbacks
    def run(self, target: Target) -> Any:
        """
        Play every step against ``target``.

        :raises ConformanceFailure: at the first difference, naming the case,
            the step and what arrived.
        """
        self.target = target
        self.bindings.set("version", target.version)
        self.bindings.set("hostname", target.hostname)
        for name, port in target.ports.items():
            self.bindings.set(name + "_port", port)
        steps = self.case["steps"]
        for index, step in enumerate(steps):
            try:
                yield self._run_step(index, step)
            except ConformanceFailure as failure:
                raise ConformanceFailure(
                    "case %s, step %d %s:\n  %s" % (self.name, index, json.dumps(step)[:400], failure)
                )

    @inlineCallbacks
    def close_connections(self) -> Any:
        """Close every client connection of the case; fires when all are gone."""
        for connection in self.connections.values():
            if connection.lost is None and connection.transport is not None:
                connection.transport.abortConnection()  # type: ignore[attr-defined]
        for connection in self.connections.values():
            yield connection.changes.wait_for(lambda c=connection: c.lost is not None, 5.0)  # type: ignore[misc]

    @inlineCallbacks
    def close_stand_ins(self) -> Any:
        """Stop the stand-in auth server and lookupd (after the daemons); remove the TLS files."""
        directory, self.tls_directory = self.tls_directory, None
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)
        auth_server, self.auth_server = self.auth_server, None
        if auth_server is not None:
            yield auth_server.close()
        lookupd, self.lookupd = self.lookupd, None
        if lookupd is not None:
            yield lookupd.close()

    # -- steps ---------------------------------------------------------

    def _run_step(self, index: int, step: Mapping[str, Any]) -> "Deferred[Any]":
        if "connect" in step:
            return self._connect(step)
        if "http" in step:
            return self._http(step)
        if "sleep_ms" in step:
            return self._sleep(step["sleep_ms"])
        if "auth_server_saw" in step:
            return self._auth_server_saw(step)
        if "peer_expect" in step:
            return self._peer_expect(step)
        if "peer_send" in step:
            return self._peer_send(step)
        connection = self._connection(step)
        if "send" in step:
            render = (lambda data: render_template(data, self.bindings)) if step.get("template") else None
            connection.send(send_bytes(step["send"], render))
            return succeed(None)
        if "expect_frames" in step:
            return self._expect_frames(index, step, connection)
        if "expect_close" in step:
            return self._expect_close(connection)
        if "expect_nothing_ms" in step:
            return self._expect_nothing(connection, step["expect_nothing_ms"])
        if "expect_raw" in step:
            return self._expect_raw(connection, unescape(step["expect_raw"]))
        if "upgrade" in step:
            connection.upgrade(step["upgrade"])
            return succeed(None)
        if "close" in step:
            return self._close(connection)
        raise FixtureError("unknown step %r" % (step,))

    def _connection(self, step: Mapping[str, Any]) -> ReplayConnection:
        name = step.get("conn")
        if name not in self.connections:
            raise FixtureError("step %r uses unknown connection %r" % (step, name))
        return self.connections[name]

    def _sleep(self, ms: float) -> "Deferred[None]":
        return deferLater(self.reactor, ms / 1000.0, lambda: None)

    def _port(self, to: str) -> int:
        assert self.target is not None
        if to not in self.target.ports:
            raise FixtureError("case %s needs %s, which the target does not have" % (self.name, to))
        return self.target.ports[to]

    @inlineCallbacks
    def _connect(self, step: Mapping[str, Any]) -> Any:
        assert self.target is not None
        to = step["to"]
        name = step["connect"]
        connection = ReplayConnection(name, _FRAMING[to], self.reactor)
        endpoint = TCP4ClientEndpoint(self.reactor, self.target.host, self._port(to), timeout=5)
        try:
            yield connectProtocol(endpoint, connection)
        except Exception as error:
            raise ConformanceFailure("cannot connect %s to %s: %s" % (name, to, error))
        self.connections[name] = connection
        self.bindings.set("port:" + name, connection.transport.getHost().port)  # type: ignore[union-attr,misc]

    def _check_decoder(self, connection: ReplayConnection) -> None:
        if connection.decode_error is not None:
            raise ConformanceFailure(
                "%s: cannot decode the %s stream: %r" % (
                    connection.name, type(connection.codec).__name__, connection.decode_error))

    @inlineCallbacks
    def _expect_frames(self, index: int, step: Mapping[str, Any], connection: ReplayConnection) -> Any:
        expected = step["expect_frames"]
        deadline = self.reactor.seconds() + step.get("within_ms", DEFAULT_WITHIN_MS) / 1000.0
        for position, want in enumerate(expected):
            remaining = max(0.0, deadline - self.reactor.seconds())
            yield connection.changes.wait_for(
                lambda: connection.has_frame() or connection.lost is not None
                or connection.decode_error is not None,
                remaining,
            )
            self._check_decoder(connection)
            frame = connection.take_frame()
            if frame is None:
                if connection.lost is not None:
                    what = "the connection was closed (%s)" % (connection.lost.getErrorMessage(),)
                else:
                    what = "nothing came within %d ms" % (step.get("within_ms", DEFAULT_WITHIN_MS),)
                raise ConformanceFailure(
                    "%s: expected frame %d of %d %s; %s; pending bytes %r" % (
                        connection.name, position + 1, len(expected), json.dumps(want),
                        what, _short(bytes(connection.pending))))
            problem = match_frame(want, frame, self.bindings)
            if problem is not None:
                raise ConformanceFailure(
                    "%s: frame %d of %d: %s" % (connection.name, position + 1, len(expected), problem))
        if self._needs_quiet_window(index, step):
            yield self._sleep(self.quiet_ms)
            self._check_decoder(connection)
            if connection.pending:
                extra = connection.take_frame()
                raise ConformanceFailure(
                    "%s: and nothing else soon after, but within %d ms came %s" % (
                        connection.name, self.quiet_ms,
                        describe_frame(extra) if extra is not None
                        else repr(_short(bytes(connection.pending)))))

    def _needs_quiet_window(self, index: int, step: Mapping[str, Any]) -> bool:
        """False when the next step itself rejects anything unexpected on this connection."""
        steps = self.case["steps"]
        if index + 1 >= len(steps):
            return True
        following = steps[index + 1]
        if following.get("conn") != step["conn"]:
            return True
        return not any(kind in following for kind in _READING_STEPS)

    @inlineCallbacks
    def _expect_close(self, connection: ReplayConnection) -> Any:
        closed = yield connection.changes.wait_for(
            lambda: connection.lost is not None or bool(connection.pending), CLOSE_WITHIN_MS / 1000.0
        )
        self._check_decoder(connection)
        if connection.pending:
            extra = connection.take_frame() if connection.framing != "raw" else None
            raise ConformanceFailure(
                "%s: expected the server to close, but it sent %s" % (
                    connection.name,
                    describe_frame(extra) if extra is not None else repr(_short(bytes(connection.pending)))))
        if not closed:
            raise ConformanceFailure(
                "%s: expected the server to close within %d ms; it stays open" % (connection.name, CLOSE_WITHIN_MS))

    @inlineCallbacks
    def _expect_nothing(self, connection: ReplayConnection, ms: float) -> Any:
        yield self._sleep(ms)
        self._check_decoder(connection)
        if connection.pending:
            extra = connection.take_frame() if connection.framing != "raw" else None
            raise ConformanceFailure(
                "%s: expected nothing for %d ms, got %s" % (
                    connection.name, ms,
                    describe_frame(extra) if extra is not None else repr(_short(bytes(connection.pending)))))
        if connection.lost is not None:
            raise ConformanceFailure(
                "%s: expected the connection to stay open for %d ms; it was closed (%s)" % (
                    connection.name, ms, connection.lost.getErrorMessage()))

    @inlineCallbacks
    def _expect_raw(self, connection: ReplayConnection, want: bytes) -> Any:
        yield connection.changes.wait_for(
            lambda: len(connection.pending) >= len(want) or connection.lost is not None,
            DEFAULT_WITHIN_MS / 1000.0,
        )
        got = bytes(connection.pending[: len(want)])
        if got != want:
            raise ConformanceFailure(
                "%s: expected bytes %r, got %r" % (connection.name, _short(want, 1000), _short(bytes(connection.pending), 1000)))
        del connection.pending[: len(want)]

    @inlineCallbacks
    def _close(self, connection: ReplayConnection) -> Any:
        connection.transport.loseConnection()  # type: ignore[union-attr,misc]
        yield connection.changes.wait_for(lambda: connection.lost is not None, 5.0)

    @inlineCallbacks
    def _http(self, step: Mapping[str, Any]) -> Any:
        assert self.target is not None
        request = step["http"]
        port = self._port(request["to"])
        exchange = _HTTPExchange(http_request_bytes(request, self.target.host, port, self.bindings))
        endpoint = TCP4ClientEndpoint(self.reactor, self.target.host, port, timeout=5)
        try:
            yield connectProtocol(endpoint, exchange)
        except Exception as error:
            raise ConformanceFailure("cannot connect to %s: %s" % (request["to"], error))
        timer = self.reactor.callLater(
            HTTP_WITHIN_MS / 1000.0, lambda: exchange.transport.abortConnection())  # type: ignore[union-attr]
        raw = yield exchange.done
        if timer.active():
            timer.cancel()
        else:
            raise ConformanceFailure(
                "%s %s: no complete response (server did not close) within %d ms; got %r" % (
                    request["method"], request["path"], HTTP_WITHIN_MS, _short(raw)))
        response = parse_http_response(raw, head_request=request["method"] == "HEAD")
        problem = match_http_response(step["expect"], response, self.bindings)
        if problem is not None:
            raise ConformanceFailure("%s %s: %s" % (request["method"], request["path"], problem))

    @inlineCallbacks
    def _auth_server_saw(self, step: Mapping[str, Any]) -> Any:
        if self.auth_server is None:
            raise FixtureError("auth_server_saw in a case without stand_in_auth_server")
        # nsqd asks the auth server before it answers AUTH; a short wait
        # still catches a request that arrives late.
        yield self._sleep(self.quiet_ms)
        seen = self.auth_server.take_seen()
        wanted = [path.encode("utf-8") for path in step["auth_server_saw"]]
        if len(seen) != len(wanted) or not all(
            match_template(want, got, self.bindings) for want, got in zip(wanted, seen)
        ):
            raise ConformanceFailure(
                "the auth server expected requests %s, got %s" % (
                    step["auth_server_saw"], [got.decode("latin-1") for got in seen]))

    @inlineCallbacks
    def _peer_expect(self, step: Mapping[str, Any]) -> Any:
        lookupd = self.lookupd
        if lookupd is None:
            raise FixtureError("peer_expect in a case without stand_in_lookupd")
        items = step["peer_expect"]
        label = step.get("label", "")
        if items:
            outcome: List[Tuple[str, Union[int, str]]] = []

            def settled() -> bool:
                outcome[:] = [match_peer_items(items, bytes(lookupd.received), self.bindings)]
                return outcome[0][0] != "more"

            yield lookupd.changes.wait_for(settled, PEER_WITHIN_MS / 1000.0)
            status, detail = outcome[0]
            if status == "more":
                raise ConformanceFailure(
                    "lookupd (%s): incomplete after %d ms: %r" % (label, PEER_WITHIN_MS, _short(bytes(lookupd.received))))
            if status == "bad":
                raise ConformanceFailure("lookupd (%s): %s" % (label, detail))
            del lookupd.received[: int(detail)]
        yield self._sleep(PEER_QUIET_MS)
        if lookupd.received:
            raise ConformanceFailure(
                "lookupd (%s): unexpected bytes from nsqd: %r" % (label, _short(bytes(lookupd.received))))

    @inlineCallbacks
    def _peer_send(self, step: Mapping[str, Any]) -> Any:
        lookupd = self.lookupd
        if lookupd is None:
            raise FixtureError("peer_send in a case without stand_in_lookupd")
        connected = yield lookupd.changes.wait_for(lambda: bool(lookupd.peers), PEER_WITHIN_MS / 1000.0)
        if not connected:
            raise ConformanceFailure("nsqd never connected to the stand-in lookupd")
        render = (lambda data: render_template(data, self.bindings)) if step.get("template") else None
        lookupd.peers[-1].transport.write(send_bytes(step["peer_send"], render))  # type: ignore[union-attr,call-arg]


@inlineCallbacks
def replay_case(
    case: Mapping[str, Any],
    start_nsqd: Callable[[List[str]], "Deferred[Any]"],
    reactor: Any = None,
) -> Any:
    """
    Play a case against a brand-new nsqd, cleaning everything up after.

    :param start_nsqd: called with the case's nsqd flags (stand-in ports
        filled in); fires with ``(target, stop)`` where ``stop()`` returns a
        Deferred firing once that nsqd has stopped.
    :raises ConformanceFailure: as :meth:`CaseReplay.run`.
    """
    if list(case.get("daemons", ["nsqd"])) != ["nsqd"]:
        raise FixtureError("case %s needs daemons %s; only nsqd is started here" % (case["name"], case.get("daemons")))
    replay = CaseReplay(case, reactor)
    try:
        yield replay.start_stand_ins()
        target, stop = yield start_nsqd(replay.nsqd_flags())
        try:
            yield replay.run(target)
        except BaseException:
            yield replay.close_connections()
            try:
                yield stop()
            except Exception:
                pass  # the replay's failure is the one to report
            raise
        yield replay.close_connections()
        yield stop()
    finally:
        yield replay.close_stand_ins()


def generated_test_name(case_name: str) -> str:
    """The trial method name for a case: ``test_<name>`` as a Python identifier."""
    return "test_" + re.sub(r"[^A-Za-z0-9_]", "_", case_name)


def cases_by_name(document: Mapping[str, Any]) -> Dict[str, Mapping[str, Any]]:
    """The cases of a fixture document by name (names are unique per file)."""
    return {case["name"]: case for case in document["cases"]}


def select_cases(document: Mapping[str, Any], names: Iterable[str]) -> List[Mapping[str, Any]]:
    """The named cases, in the given order; FixtureError for an unknown name."""
    by_name = cases_by_name(document)
    missing = [name for name in names if name not in by_name]
    if missing:
        raise FixtureError("no such cases: %s" % (missing,))
    return [by_name[name] for name in names]
