# -*- test-case-name: tests.test_protocol_auth -*-
"""
NSQ's auth protocol, sans-IO: the query nsqd sends an auth server, the
reply it gets, and the checks that reply allows.

Go nsqd (``internal/auth/authorizations.go``) asks the servers named by
``--auth-http-address`` whether a client's ``AUTH`` secret grants it
anything.  The reply is JSON::

    {"ttl": 3600, "identity": "user", "identity_url": "http://...",
     "authorizations": [{"permissions": ["subscribe", "publish"],
                         "topic": ".*", "channels": [".*"]}]}

and every ``PUB``/``MPUB``/``DPUB``/``SUB`` is then checked against it
(publishing is the check with channel ``""``), asking again once the TTL has
run out.  :class:`txnsq.nsqd.auth.AuthClient` runs the query over HTTP.
Nothing here logs, and no error text contains the secret or a URL carrying
it: Go's ``net/http`` errors print the whole URL, which leaked secrets into
nsqd's log (nsqio/nsq#1486).
"""

from __future__ import annotations

import json
import re
from typing import Any, List, Optional, Sequence, Tuple, Union
from urllib.parse import quote_plus, urlsplit, urlunsplit

from txnsq.protocol.errors import go_quote
from txnsq.protocol.go_json import go_json, go_string
from txnsq.protocol.go_regexp import GoRegexpError, compile_go_regexp

__all__ = [
    "AuthError",
    "AuthState",
    "Authorization",
    "PERMISSION_PUBLISH",
    "PERMISSION_SUBSCRIBE",
    "auth_query_url",
    "auth_response_body",
    "has_authorizations",
    "https_endpoint",
    "parse_auth_response",
    "unauthorized_description",
]

PERMISSION_SUBSCRIBE = "subscribe"
PERMISSION_PUBLISH = "publish"
_PERMISSIONS = frozenset([PERMISSION_SUBSCRIBE, PERMISSION_PUBLISH])


class AuthError(Exception):
    """
    An auth server could not be asked, or its answer was unusable.

    The text is Go's (``invalid TTL 0 (must be >0)``, ``failed to auth
    against HOST - ...``); it is for nsqd's log only, since Go tells the
    client no more than ``E_AUTH_FAILED AUTH failed``.
    """


# -- authorizations --------------------------------------------------------


class Authorization:
    """
    One entry of an auth reply: which topics (a regular expression), which
    channels (a list of them) and which permissions.

    :ivar topic: the topic pattern, RE2 syntax.
    :ivar channels: the channel patterns.
    :ivar permissions: ``"subscribe"`` and/or ``"publish"``.
    """

    __slots__ = ("topic", "channels", "permissions", "_topic", "_channels")

    def __init__(
        self, topic: str, channels: Sequence[str], permissions: Sequence[str]
    ) -> None:
        """
        :raises GoRegexpError: if a pattern does not compile (see
            :func:`compile_go_regexp`).
        """
        self.topic = topic
        self.channels = tuple(channels)
        self.permissions = tuple(permissions)
        self._topic = compile_go_regexp(topic)
        self._channels = tuple(compile_go_regexp(channel) for channel in self.channels)

    def __repr__(self) -> str:
        return "Authorization(topic=%r, channels=%r, permissions=%r)" % (
            self.topic,
            list(self.channels),
            list(self.permissions),
        )

    def has_permission(self, permission: str) -> bool:
        """Whether ``permission`` is one of this entry's permissions."""
        return permission in self.permissions

    def is_allowed(self, topic: str, channel: str) -> bool:
        """
        Go's ``Authorization.IsAllowed``: channel ``""`` asks to publish
        (needs ``publish``), any other channel to subscribe (needs
        ``subscribe``); the topic pattern must match the topic and one
        channel pattern the channel -- for publishing, the empty string.
        Patterns match anywhere in the name (``re.search``): ``"foo"``
        allows topic ``"xfoox"``.
        """
        if channel:
            if PERMISSION_SUBSCRIBE not in self.permissions:
                return False
        elif PERMISSION_PUBLISH not in self.permissions:
            return False
        if self._topic.search(topic) is None:
            return False
        for pattern in self._channels:
            if pattern.search(channel) is not None:
                return True
        return False


class AuthState:
    """
    A client's authorizations as the auth server returned them.

    :ivar identity: who the secret belongs to (shown in ``/stats``).
    :ivar identity_url: a link about that identity.
    :ivar authorizations: the :class:`Authorization` entries.
    :ivar expires: when to ask again, in the clock's seconds.
    :ivar ttl: the TTL the server gave, in seconds.
    """

    __slots__ = ("identity", "identity_url", "authorizations", "expires", "ttl")

    def __init__(
        self,
        identity: str,
        identity_url: str,
        authorizations: Sequence[Authorization],
        expires: float,
        ttl: int = 0,
    ) -> None:
        self.identity = identity
        self.identity_url = identity_url
        self.authorizations = tuple(authorizations)
        self.expires = expires
        self.ttl = ttl

    def __repr__(self) -> str:
        return "AuthState(identity=%r, identity_url=%r, authorizations=%r, expires=%r)" % (
            self.identity,
            self.identity_url,
            list(self.authorizations),
            self.expires,
        )

    def is_expired(self, now: float) -> bool:
        """Go's ``IsExpired``: whether ``expires`` is before ``now``."""
        return self.expires < now

    def is_allowed(self, topic: str, channel: str) -> bool:
        """Whether any authorization allows ``topic``/``channel`` (Go's ``State.IsAllowed``)."""
        for authorization in self.authorizations:
            if authorization.is_allowed(topic, channel):
                return True
        return False


def has_authorizations(state: Optional[AuthState]) -> bool:
    """
    Go's ``clientV2.HasAuthorizations``: a state with at least one
    authorization.  False means ``E_AUTH_FIRST`` before PUB/SUB and
    ``E_UNAUTHORIZED`` as the answer to AUTH.
    """
    return state is not None and len(state.authorizations) != 0


def auth_response_body(state: AuthState) -> bytes:
    """
    The JSON Go nsqd sends in a response frame after a successful AUTH:
    ``{"identity":...,"identity_url":...,"permission_count":N}`` where N is
    the number of authorizations.
    """
    return go_json(
        {
            "identity": state.identity,
            "identity_url": state.identity_url,
            "permission_count": len(state.authorizations),
        }
    )


def unauthorized_description(command: str, topic: str, channel: str) -> str:
    """
    The text of Go's ``E_UNAUTHORIZED`` for a refused command:
    ``AUTH failed for PUB on "topic" ""``.
    """
    return "AUTH failed for %s on %s %s" % (command, go_quote(topic), go_quote(channel))


# -- the auth server's reply -----------------------------------------------


class _Object(List[Tuple[str, Any]]):
    """A JSON object as its (key, value) pairs in order, as Go's decoder sees it."""


class _Number(str):
    """A JSON number Python would make a float: its text, for Go's messages."""


def _reject_constant(name: str) -> Any:
    raise ValueError("invalid character %r looking for beginning of value" % (name[0],))


_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_RFC3339 = re.compile(
    r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})\Z"
)


def _json_kind(value: Any) -> str:
    if value is True or value is False:
        return "bool"
    if isinstance(value, (int, _Number)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, _Object):
        return "object"
    if isinstance(value, list):
        return "array"
    return "null"


def _unmarshal_error(value: Any, field: str, type_name: str) -> AuthError:
    kind = _json_kind(value)
    if kind == "number":
        kind = "number %s" % (value,)
    return AuthError(
        "json: cannot unmarshal %s into Go struct field %s of type %s" % (kind, field, type_name)
    )


def _fold_equal(key: str, name: str) -> bool:
    # Go's decoder accepts a key that matches a field name ignoring case
    # (simple folding, character by character, so the lengths agree).
    return len(key) == len(name) and all(
        a == b or a.casefold() == b.casefold() for a, b in zip(key, name)
    )


def _fields(obj: _Object, names: Sequence[str]) -> List[Tuple[str, Any]]:
    """The pairs of ``obj`` that set one of ``names``, in order, keys mapped to names."""
    found = []
    for key, value in obj:
        if key in names:
            found.append((key, value))
            continue
        for name in names:
            if _fold_equal(key, name):
                found.append((name, value))
                break
    return found


def _string(value: Any, current: str, field: str) -> str:
    if value is None:
        return current
    if isinstance(value, str) and not isinstance(value, _Number):
        return value
    raise _unmarshal_error(value, field, "string")


def _strings(value: Any, field: str) -> List[str]:
    if value is None:
        return []
    if not isinstance(value, list) or isinstance(value, _Object):
        raise _unmarshal_error(value, field, "[]string")
    return [_string(item, "", field) for item in value]


def _decode_authorization(value: Any) -> Tuple[str, List[str], List[str]]:
    topic = ""
    channels: List[str] = []
    permissions: List[str] = []
    if value is None:
        return topic, channels, permissions
    if not isinstance(value, _Object):
        raise _unmarshal_error(value, "State.authorizations", "auth.Authorization")
    for name, item in _fields(value, ("topic", "channels", "permissions")):
        if name == "topic":
            topic = _string(item, topic, "State.authorizations.topic")
        elif name == "channels":
            channels = _strings(item, "State.authorizations.channels")
        else:
            permissions = _strings(item, "State.authorizations.permissions")
    return topic, channels, permissions


def _decode_state(
    body: bytes,
) -> Tuple[int, str, str, List[Tuple[str, List[str], List[str]]]]:
    """Go's ``json.Unmarshal`` of the reply into ``auth.State``."""
    try:
        # Go reads invalid UTF-8 inside strings as U+FFFD.
        document = json.loads(
            body.decode("utf-8", "replace"),
            object_pairs_hook=_Object,
            parse_float=_Number,
            parse_constant=_reject_constant,
        )
    except ValueError as error:
        raise AuthError("invalid JSON in auth response: %s" % (error,))
    ttl = 0
    identity = ""
    identity_url = ""
    authorizations: List[Tuple[str, List[str], List[str]]] = []
    if document is None:
        # Go leaves the zero State, refused below for its TTL.
        return ttl, identity, identity_url, authorizations
    if not isinstance(document, _Object):
        raise AuthError(
            "json: cannot unmarshal %s into Go value of type auth.State" % (_json_kind(document),)
        )
    names = ("ttl", "authorizations", "identity", "identity_url", "Expires")
    for name, value in _fields(document, names):
        if name == "ttl":
            if value is None:
                continue
            if (
                isinstance(value, int)
                and not isinstance(value, bool)
                and _INT64_MIN <= value <= _INT64_MAX
            ):
                ttl = value
            else:
                raise _unmarshal_error(value, "State.ttl", "int")
        elif name == "authorizations":
            if value is None:
                authorizations = []
            elif isinstance(value, list) and not isinstance(value, _Object):
                authorizations = [_decode_authorization(item) for item in value]
            else:
                raise _unmarshal_error(value, "State.authorizations", "[]auth.Authorization")
        elif name == "identity":
            identity = _string(value, identity, "State.identity")
        elif name == "identity_url":
            identity_url = _string(value, identity_url, "State.identity_url")
        else:
            # Go's State has an untagged Expires time.Time: a key
            # "expires" must hold an RFC 3339 time (it is then replaced).
            if value is None:
                continue
            if not isinstance(value, str) or isinstance(value, _Number):
                raise _unmarshal_error(value, "State.Expires", "time.Time")
            if not _RFC3339.match(value):
                raise AuthError("parsing time %s: not RFC 3339" % (go_quote(value),))
    return ttl, identity, identity_url, authorizations


def _ttl_seconds(ttl: int) -> float:
    # Go computes time.Duration(ttl) * time.Second in int64 nanoseconds,
    # which wraps for TTLs beyond ~292 years.
    nanoseconds = (ttl * 1_000_000_000) & 0xFFFFFFFFFFFFFFFF
    if nanoseconds > _INT64_MAX:
        nanoseconds -= 1 << 64
    return nanoseconds / 1e9


def parse_auth_response(body: bytes, now: float) -> AuthState:
    """
    Decode and check an auth server's 200 reply as Go's ``QueryAuthd``
    does, returning the state that expires ``ttl`` seconds after ``now``.

    Checked in Go's order, each authorization in turn: its permissions
    (``unknown permission X``), its topic pattern (``unable to compile
    topic "X" error parsing regexp: ...``), its channel patterns (``unable
    to compile channel "X" ...``); then the TTL (``invalid TTL 0 (must be
    >0)``).  Keys match Go's field names ignoring case; unknown keys are
    ignored; a value of the wrong JSON type is refused as Go's decoder
    refuses it.  An empty ``authorizations`` list is valid here -- it is
    the caller that answers AUTH with ``E_UNAUTHORIZED``.

    :raises AuthError: for a reply Go would refuse.
    """
    ttl, identity, identity_url, raw = _decode_state(body)
    authorizations = []
    for topic, channels, permissions in raw:
        for permission in permissions:
            if permission not in _PERMISSIONS:
                raise AuthError("unknown permission %s" % (permission,))
        try:
            compile_go_regexp(topic)
        except GoRegexpError as error:
            raise AuthError("unable to compile topic %s %s" % (go_quote(topic), error))
        for channel in channels:
            try:
                compile_go_regexp(channel)
            except GoRegexpError as error:
                raise AuthError("unable to compile channel %s %s" % (go_quote(channel), error))
        authorizations.append(Authorization(topic, channels, permissions))
    if ttl <= 0:
        raise AuthError("invalid TTL %d (must be >0)" % (ttl,))
    return AuthState(identity, identity_url, authorizations, now + _ttl_seconds(ttl), ttl)


# -- the query -------------------------------------------------------------


def _secret_bytes(secret: Union[str, bytes]) -> bytes:
    if isinstance(secret, str):
        return secret.encode("utf-8", "surrogateescape")
    return bytes(secret)


def _go_json_string_list(value: bytes) -> str:
    # json.Marshal of a Go string: HTML-safe escapes, and each byte of an
    # invalid UTF-8 sequence written as the escape \ufffd.
    text = go_string(value.decode("utf-8", "surrogateescape"))
    return "[" + re.sub("[\udc80-\udcff]", lambda _: "\\ufffd", text) + "]"


def auth_query_url(
    authd: str,
    remote_ip: str,
    tls: bool,
    secret: Union[str, bytes],
    common_name: str,
    method: str = "get",
) -> Tuple[str, str, Optional[bytes]]:
    """
    The request Go's ``QueryAuthd`` makes to one ``--auth-http-address``:
    ``(http_method, url, body)``.

    The URL is ``http://AUTHD/auth``, or ``AUTHD`` itself when it contains
    ``://``.  The parameters are ``common_name``, ``remote_ip``, ``secret``
    and ``tls`` (``"true"``/``"false"``).  With ``method="get"`` (the
    default) they are the query string, encoded as Go's ``url.Values``
    (keys sorted, ``QueryEscape``: space is ``+``); the body is ``None``.
    With ``method="post"`` the URL has no query and the body is Go's
    ``json.Marshal`` of the ``url.Values`` -- a JSON object of one-element
    lists, ``{"common_name":[""],"remote_ip":["..."],...}``, sent as
    ``application/json`` (not a form).

    ``secret`` is the AUTH body; ``bytes`` are taken as Go takes them
    (percent-encoded byte by byte; invalid UTF-8 becomes ``\\ufffd`` in the
    JSON).  The GET URL contains the secret: never log it.

    :raises ValueError: for a method other than ``get`` or ``post``.
    """
    if method not in ("get", "post"):
        raise ValueError("--auth-http-request-method must be post or get")
    endpoint = authd if "://" in authd else "http://%s/auth" % (authd,)
    values = [
        ("common_name", common_name.encode("utf-8", "surrogateescape")),
        ("remote_ip", remote_ip.encode("utf-8", "surrogateescape")),
        ("secret", _secret_bytes(secret)),
        ("tls", b"true" if tls else b"false"),
    ]
    if method == "post":
        body = "{%s}" % (
            ",".join(
                "%s:%s" % (go_string(key), _go_json_string_list(value)) for key, value in values
            ),
        )
        return "POST", endpoint, body.encode("utf-8")
    query = "&".join("%s=%s" % (key, quote_plus(value, safe="")) for key, value in values)
    return "GET", "%s?%s" % (endpoint, query), None


def _split_host_port(hostport: str) -> Tuple[str, str]:
    """Go's ``net.SplitHostPort``, with its error texts."""
    if hostport.startswith("["):
        end = hostport.find("]")
        if end == -1:
            raise AuthError("address %s: missing ']' in address" % (hostport,))
        host, rest = hostport[1:end], hostport[end + 1 :]
        if not rest.startswith(":"):
            raise AuthError("address %s: missing port in address" % (hostport,))
        return host, rest[1:]
    host, colon, port = hostport.rpartition(":")
    if not colon:
        raise AuthError("address %s: missing port in address" % (hostport,))
    if ":" in host:
        raise AuthError("address %s: too many colons in address" % (hostport,))
    return host, port


def https_endpoint(endpoint: str, body: bytes) -> str:
    """
    Go ``http_api``'s answer to a 403 from a plain-HTTP URL: the same URL
    with scheme ``https`` and the port from the body's ``{"https_port":
    N}`` (0 when absent), where the request is tried once more.

    :raises AuthError: if the body is not such JSON or the URL names no
        port.
    """
    try:
        document = json.loads(body.decode("utf-8", "replace"), parse_float=_Number)
    except ValueError as error:
        raise AuthError("invalid JSON in 403 response: %s" % (error,))
    port = 0
    if isinstance(document, dict):
        for key, value in document.items():
            if key == "https_port" or _fold_equal(key, "https_port"):
                if value is None:
                    continue
                if not isinstance(value, int) or isinstance(value, bool):
                    raise _unmarshal_error(value, ".https_port", "int")
                port = value
    elif document is not None:
        raise AuthError(
            "json: cannot unmarshal %s into Go value of type struct { HTTPSPort int "
            '"json:\\"https_port\\"" }' % (_json_kind(document),)
        )
    parts = urlsplit(endpoint)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    host, _ = _split_host_port(hostport)
    if ":" in host:
        host = "[%s]" % (host,)
    netloc = "%s%s%s:%d" % (userinfo, at, host, port)
    return urlunsplit(("https", netloc, parts.path, parts.query, parts.fragment))
