# -*- test-case-name: tests.test_protocol_identify -*-
"""
IDENTIFY: the client's settings checked against the server's limits, and
the JSON the server answers with when the client negotiates features.

Ranges and texts are Go nsqd's (``clientV2.Identify`` and
``protocolV2.IDENTIFY``): a heartbeat interval of -1 disables heartbeats,
an output buffer size of -1 means no buffering (reported as size 1 and
timeout 0), an output buffer timeout of -1 means none, and 0 always keeps
the server's default.

The body is decoded as Go's ``encoding/json`` fills nsqd's struct: unknown
keys are ignored, keys match field names case-insensitively, ``null``
leaves a field alone, and a value of the wrong JSON type is an error.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Dict, List, Protocol, Tuple

from txnsq.protocol.errors import ProtocolError, protocol_error


__all__ = [
    "DEFAULT_OUTPUT_BUFFER_SIZE",
    "IdentifySettings",
    "Identity",
    "auth_response",
    "go_json_string",
    "identify_response",
    "negotiate_identify",
]

#: Go nsqd's bufio writer size, used when the client does not ask for one.
DEFAULT_OUTPUT_BUFFER_SIZE = 16 * 1024

#: Go's default deflate level before ``--max-deflate-level`` clamps it.
DEFAULT_DEFLATE_LEVEL = 6

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_INT32_MIN = -(1 << 31)
_INT32_MAX = (1 << 31) - 1


class IdentifySettings(Protocol):
    """
    The :class:`txnsq.nsqd.options.NSQDOptions` attributes IDENTIFY reads
    (durations in float seconds).
    """

    client_timeout: float
    max_heartbeat_interval: float
    output_buffer_timeout: float
    min_output_buffer_timeout: float
    max_output_buffer_timeout: float
    max_output_buffer_size: int
    msg_timeout: float
    max_msg_timeout: float
    max_rdy_count: int
    max_deflate_level: int
    deflate: bool
    snappy: bool


class Identity:
    """
    A client's settings after IDENTIFY.

    Durations are float seconds; ``heartbeat_interval`` and
    ``output_buffer_timeout`` of 0 mean disabled.  ``tls_v1``, ``snappy``
    and ``deflate`` are the upgrades to perform (only ever true with
    ``feature_negotiation``); ``deflate_level`` is the level to use.
    """

    __slots__ = (
        "client_id",
        "hostname",
        "user_agent",
        "feature_negotiation",
        "heartbeat_interval",
        "output_buffer_size",
        "output_buffer_timeout",
        "tls_v1",
        "snappy",
        "deflate",
        "deflate_level",
        "sample_rate",
        "msg_timeout",
    )

    def __init__(
        self,
        client_id: str = "",
        hostname: str = "",
        user_agent: str = "",
        feature_negotiation: bool = False,
        heartbeat_interval: float = 30.0,
        output_buffer_size: int = DEFAULT_OUTPUT_BUFFER_SIZE,
        output_buffer_timeout: float = 0.25,
        tls_v1: bool = False,
        snappy: bool = False,
        deflate: bool = False,
        deflate_level: int = DEFAULT_DEFLATE_LEVEL,
        sample_rate: int = 0,
        msg_timeout: float = 60.0,
    ) -> None:
        self.client_id = client_id
        self.hostname = hostname
        self.user_agent = user_agent
        self.feature_negotiation = feature_negotiation
        self.heartbeat_interval = heartbeat_interval
        self.output_buffer_size = output_buffer_size
        self.output_buffer_timeout = output_buffer_timeout
        self.tls_v1 = tls_v1
        self.snappy = snappy
        self.deflate = deflate
        self.deflate_level = deflate_level
        self.sample_rate = sample_rate
        self.msg_timeout = msg_timeout

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Identity):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self.__slots__)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "Identity(%s)" % (", ".join("%s=%r" % (name, getattr(self, name)) for name in self.__slots__),)


# ---------------------------------------------------------------------------
# Decoding the body as Go's encoding/json does


class _JSONObject(list):  # type: ignore[type-arg]
    """A decoded JSON object: its (key, value) pairs in order."""


class _DecodeError(Exception):
    pass


def _refuse_constant(name: str) -> Any:
    # Python accepts NaN and Infinity; JSON (and Go) do not.
    raise _DecodeError(name)


def _is_string(value: Any) -> bool:
    return isinstance(value, str)


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _is_int64(value: Any) -> bool:
    # bool is an int in Python; a JSON float literal (1.0, 1e3) is not an
    # integer for Go either.
    return type(value) is int and _INT64_MIN <= value <= _INT64_MAX


def _is_int32(value: Any) -> bool:
    return type(value) is int and _INT32_MIN <= value <= _INT32_MAX


# nsqd's identifyDataV2: field name -> type check (Go types string, int,
# bool, int32).
_FIELDS: Dict[str, Callable[[Any], bool]] = {
    "client_id": _is_string,
    "hostname": _is_string,
    "heartbeat_interval": _is_int64,
    "output_buffer_size": _is_int64,
    "output_buffer_timeout": _is_int64,
    "feature_negotiation": _is_bool,
    "tls_v1": _is_bool,
    "deflate": _is_bool,
    "deflate_level": _is_int64,
    "snappy": _is_bool,
    "sample_rate": _is_int32,
    "user_agent": _is_string,
    "msg_timeout": _is_int64,
}

_SURROGATES = re.compile("[\ud800-\udfff]")


def _clean_string(value: str) -> str:
    """Lone surrogates (from ``\\ud800`` escapes) become U+FFFD, as in Go."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATES.sub("\ufffd", value)
    return value


def _field_name(key: str) -> str:
    """
    The field a key fills: Go matches names case-insensitively, with
    Unicode simple folding (so the long s and the Kelvin sign fold to
    ``s`` and ``k``); our field names are ASCII.
    """
    return key.replace("\u017f", "s").lower()


def _decode_fields(body: bytes) -> Dict[str, Any]:
    """
    The identifyDataV2 fields set by ``body``.

    :raises ProtocolError: not JSON, not an object, or a value of the wrong
        type ("IDENTIFY failed to decode JSON body").
    """
    try:
        # Go replaces invalid UTF-8 in strings with U+FFFD; elsewhere it is
        # a syntax error either way.
        text = body.decode("utf-8", "replace")
        document = json.loads(text, object_pairs_hook=_JSONObject, parse_constant=_refuse_constant)
    except (ValueError, _DecodeError, RecursionError):
        raise _bad_json()
    fields: Dict[str, Any] = {}
    if document is None:
        # Go: unmarshalling null into a struct leaves it untouched.
        return fields
    if not isinstance(document, _JSONObject):
        raise _bad_json()
    pairs: List[Tuple[str, Any]] = document
    for key, value in pairs:
        field = _field_name(key)
        check = _FIELDS.get(field)
        if check is None or value is None:
            continue
        if not check(value):
            raise _bad_json()
        if isinstance(value, str):
            value = _clean_string(value)
        # A later duplicate key wins, as in Go.
        fields[field] = value
    return fields


def _bad_json() -> ProtocolError:
    return protocol_error("E_BAD_BODY", "IDENTIFY failed to decode JSON body")


def _ms(seconds: float) -> int:
    """
    A duration in whole milliseconds, as Go's ``d / time.Millisecond``:
    via nanoseconds so that 1.001 s is 1001, not 1000.999...
    """
    return int(round(seconds * 1e9)) // 1000000


# ---------------------------------------------------------------------------
# Negotiation


def negotiate_identify(
    body: bytes,
    settings: IdentifySettings,
    tls_configured: bool = False,
    snappy_enabled: bool = True,
    deflate_enabled: bool = True,
) -> Identity:
    """
    Decode an IDENTIFY body and settle the client's settings, with Go
    nsqd's checks in Go's order.

    :param settings: an :class:`NSQDOptions` (see :class:`IdentifySettings`
        for the attributes read): ``client_timeout`` (default heartbeat is
        half of it), ``max_heartbeat_interval``, ``output_buffer_timeout``,
        ``min_output_buffer_timeout``, ``max_output_buffer_timeout``,
        ``max_output_buffer_size``, ``msg_timeout``, ``max_msg_timeout``,
        ``deflate``, ``snappy``, ``max_deflate_level``.
    :param tls_configured: the server has a TLS certificate (Go: tlsConfig
        is set), so ``tls_v1`` can be granted.
    :param snappy_enabled: the server can perform the snappy upgrade
        (granted only if ``settings.snappy`` too).
    :param deflate_enabled: likewise for deflate (``settings.deflate``).
    :raises ProtocolError: E_BAD_BODY for a body that does not decode or a
        value out of range, E_IDENTIFY_FAILED when the client negotiates
        features and both snappy and deflate would be granted.
    """
    fields = _decode_fields(body)
    get = fields.get
    identity = Identity(
        # Go assigns these unconditionally: absent means empty.
        client_id=get("client_id", ""),
        hostname=get("hostname", ""),
        user_agent=get("user_agent", ""),
        feature_negotiation=get("feature_negotiation", False),
        heartbeat_interval=settings.client_timeout / 2,
        output_buffer_size=DEFAULT_OUTPUT_BUFFER_SIZE,
        output_buffer_timeout=settings.output_buffer_timeout,
        msg_timeout=settings.msg_timeout,
    )

    heartbeat = get("heartbeat_interval", 0)
    if heartbeat == -1:
        identity.heartbeat_interval = 0.0
    elif heartbeat == 0:
        pass
    elif 1000 <= heartbeat <= _ms(settings.max_heartbeat_interval):
        identity.heartbeat_interval = heartbeat / 1000.0
    else:
        raise protocol_error("E_BAD_BODY", "IDENTIFY heartbeat interval (%d) is invalid" % (heartbeat,))

    # Go checks the timeout before the size (one SetOutputBuffer call).
    timeout = get("output_buffer_timeout", 0)
    if timeout == -1:
        identity.output_buffer_timeout = 0.0
    elif timeout == 0:
        pass
    elif _ms(settings.min_output_buffer_timeout) <= timeout <= _ms(settings.max_output_buffer_timeout):
        identity.output_buffer_timeout = timeout / 1000.0
    else:
        raise protocol_error("E_BAD_BODY", "IDENTIFY output buffer timeout (%d) is invalid" % (timeout,))

    size = get("output_buffer_size", 0)
    if size == -1:
        # A one-byte buffer: every write goes straight out, no flush timer.
        identity.output_buffer_size = 1
        identity.output_buffer_timeout = 0.0
    elif size == 0:
        pass
    elif 64 <= size <= settings.max_output_buffer_size:
        identity.output_buffer_size = size
    else:
        raise protocol_error("E_BAD_BODY", "IDENTIFY output buffer size (%d) is invalid" % (size,))

    sample_rate = get("sample_rate", 0)
    if not 0 <= sample_rate <= 99:
        raise protocol_error("E_BAD_BODY", "IDENTIFY sample rate (%d) is invalid" % (sample_rate,))
    identity.sample_rate = sample_rate

    msg_timeout = get("msg_timeout", 0)
    if msg_timeout == 0:
        pass
    elif 1000 <= msg_timeout <= _ms(settings.max_msg_timeout):
        identity.msg_timeout = msg_timeout / 1000.0
    else:
        raise protocol_error("E_BAD_BODY", "IDENTIFY msg timeout (%d) is invalid" % (msg_timeout,))

    # Go computes the level (and reports it) even when deflate is off.
    deflate = bool(settings.deflate and deflate_enabled and get("deflate", False))
    level = DEFAULT_DEFLATE_LEVEL
    requested_level = get("deflate_level", 0)
    if deflate and requested_level > 0:
        level = requested_level
    identity.deflate_level = min(level, settings.max_deflate_level)

    if not identity.feature_negotiation:
        # Without negotiation Go never upgrades, and never looks further.
        return identity

    snappy = bool(settings.snappy and snappy_enabled and get("snappy", False))
    if deflate and snappy:
        raise protocol_error("E_IDENTIFY_FAILED", "cannot enable both deflate and snappy compression")
    identity.tls_v1 = bool(tls_configured and get("tls_v1", False))
    identity.deflate = deflate
    identity.snappy = snappy
    return identity


# ---------------------------------------------------------------------------
# Replies


_JSON_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\b": "\\b",
    "\f": "\\f",
    # Go escapes these for safe embedding in HTML and JavaScript.
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}
_JSON_SPECIAL = re.compile('["\\\\<>&\u2028\u2029\x00-\x1f\ud800-\udfff]')


def _json_escape(match: "re.Match[str]") -> str:
    char = match.group(0)
    escaped = _JSON_ESCAPES.get(char)
    if escaped is not None:
        return escaped
    if "\ud800" <= char <= "\udfff":
        # Not valid UTF-8: Go writes the replacement character.
        return "\\ufffd"
    return "\\u%04x" % (ord(char),)


def go_json_string(value: str) -> str:
    """``value`` as a JSON string exactly as Go's ``json.Marshal`` writes it."""
    return '"' + _JSON_SPECIAL.sub(_json_escape, value) + '"'


def _bool(value: bool) -> str:
    return "true" if value else "false"


def identify_response(
    identity: Identity,
    settings: IdentifySettings,
    version: str,
    auth_required: bool = False,
) -> bytes:
    """
    The JSON reply to a feature-negotiating IDENTIFY, byte for byte as Go
    marshals its struct: compact, keys in Go's field order, durations as
    integer milliseconds.

    :param settings: read for ``max_rdy_count``, ``max_msg_timeout``,
        ``max_deflate_level``.
    :param version: the daemon's version string.
    :param auth_required: the server has ``--auth-http-address`` set.
    """
    return (
        '{"max_rdy_count":%d,"version":%s,"max_msg_timeout":%d,"msg_timeout":%d,'
        '"tls_v1":%s,"deflate":%s,"deflate_level":%d,"max_deflate_level":%d,'
        '"snappy":%s,"sample_rate":%d,"auth_required":%s,'
        '"output_buffer_size":%d,"output_buffer_timeout":%d}'
        % (
            settings.max_rdy_count,
            go_json_string(version),
            _ms(settings.max_msg_timeout),
            _ms(identity.msg_timeout),
            _bool(identity.tls_v1),
            _bool(identity.deflate),
            identity.deflate_level,
            settings.max_deflate_level,
            _bool(identity.snappy),
            identity.sample_rate,
            _bool(auth_required),
            identity.output_buffer_size,
            _ms(identity.output_buffer_timeout),
        )
    ).encode("utf-8")


def auth_response(identity: str, identity_url: str, permission_count: int) -> bytes:
    """The JSON reply to a successful AUTH, as Go marshals it."""
    return ('{"identity":%s,"identity_url":%s,"permission_count":%d}' % (
        go_json_string(identity),
        go_json_string(identity_url),
        permission_count,
    )).encode("utf-8")
