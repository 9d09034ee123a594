# -*- test-case-name: tests.test_auth -*-
"""
nsqd's AUTH support: authorization records, the auth server's reply, and the
HTTP query that fetches it.

Go nsqd (``internal/auth/authorizations.go``) asks the servers named by
``--auth-http-address`` whether a client's ``AUTH`` secret grants it
anything.  The reply is JSON::

    {"ttl": 3600, "identity": "user", "identity_url": "http://...",
     "authorizations": [{"permissions": ["subscribe", "publish"],
                         "topic": ".*", "channels": [".*"]}]}

and every ``PUB``/``MPUB``/``DPUB``/``SUB`` is then checked against it
(publishing is the check with channel ``""``), asking again once the TTL has
run out.

The pure parts (:class:`Authorization`, :class:`AuthState`,
:func:`parse_auth_response`, :func:`auth_query_url`) do no I/O;
:class:`AuthClient` runs the query with Twisted's ``Agent`` and never blocks
the reactor.  Nothing here logs, and no error text contains the secret or a
URL carrying it: Go's ``net/http`` errors print the whole URL, which leaked
secrets into nsqd's log (nsqio/nsq#1486).
"""

from __future__ import annotations

import json
import random
import re
from typing import (
    Any,
    Callable,
    Dict,
    List,
    Optional,
    Pattern,
    Sequence,
    Tuple,
    Union,
)
from urllib.parse import quote_plus, urlsplit, urlunsplit

from twisted.internet.defer import Deferred, succeed
from twisted.internet.error import ConnectError
from twisted.internet.interfaces import IConsumer, IReactorTime
from twisted.python.failure import Failure
from twisted.web.client import (
    Agent,
    BrowserLikePolicyForHTTPS,
    HTTPConnectionPool,
    PartialDownloadError,
    ResponseFailed,
    _HTTP11ClientFactory,
    readBody,
)
from twisted.web.http_headers import Headers
from twisted.web.iweb import IBodyProducer, IPolicyForHTTPS, IResponse
from zope.interface import implementer

from txnsq import __version__
from txnsq.protocol.errors import go_quote
from txnsq.protocol.go_json import go_json, go_string

__all__ = [
    "AuthClient",
    "AuthError",
    "AuthState",
    "Authorization",
    "GoRegexpError",
    "PERMISSION_PUBLISH",
    "PERMISSION_SUBSCRIBE",
    "auth_query_url",
    "auth_response_body",
    "compile_go_regexp",
    "has_authorizations",
    "https_endpoint",
    "parse_auth_response",
    "unauthorized_description",
]

PERMISSION_SUBSCRIBE = "subscribe"
PERMISSION_PUBLISH = "publish"
_PERMISSIONS = frozenset([PERMISSION_SUBSCRIBE, PERMISSION_PUBLISH])

#: What Go's ``http_api`` client sends with every request.
_ACCEPT = b"application/vnd.nsq; version=1.0"


class AuthError(Exception):
    """
    An auth server could not be asked, or its answer was unusable.

    The text is Go's (``invalid TTL 0 (must be >0)``, ``failed to auth
    against HOST - ...``); it is for nsqd's log only, since Go tells the
    client no more than ``E_AUTH_FAILED AUTH failed``.
    """


# -- Go regular expressions ------------------------------------------------


class GoRegexpError(ValueError):
    """A pattern Go's ``regexp.Compile`` refuses (or this translation cannot run)."""


_GO_REPEAT = re.compile(r"\{(\d+)(,(\d*))?\}")
_GO_CAPTURE_NAME = re.compile(r"[A-Za-z0-9_]+\Z")
_GO_MAX_REPEAT = 1000
_OCTAL = "01234567"
_HEX = "0123456789abcdefABCDEF"

# RE2's ASCII classes, as the inside of a Python character class.
_POSIX_CLASSES: Dict[str, str] = {
    "alnum": "0-9A-Za-z",
    "alpha": "A-Za-z",
    "ascii": "\\x00-\\x7f",
    "blank": "\\t ",
    "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9",
    "graph": "!-~",
    "lower": "a-z",
    "print": " -~",
    "punct": "!-/:-@\\[-`{-~",
    "space": "\\t\\n\\v\\f\\r ",
    "upper": "A-Z",
    "word": "0-9A-Za-z_",
    "xdigit": "0-9A-Fa-f",
}
# RE2's \s is [\t\n\f\r ]; Python's ASCII \s also matches \v.
_GO_SPACE = "\\t\\n\\f\\r "


def _go_error(code: str, expr: str) -> GoRegexpError:
    return GoRegexpError("error parsing regexp: %s: `%s`" % (code, expr))


class _GoRegexpTranslator:
    """
    One pass over an RE2 pattern, writing the Python pattern that matches
    the same strings (see :func:`compile_go_regexp`).
    """

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self.out: List[str] = []
        # One entry per open group: the scoped-flag groups ("(?i:") opened
        # inside it by a Go "(?i)", closed at "|" and ")" and reopened
        # after "|" -- Go's flags last to the end of the enclosing group.
        self.scopes: List[List[str]] = [[]]
        # 0: no repetition just written; 1: a greedy one (a "?" may follow
        # to make it lazy); 2: a lazy one.
        self.repeated = 0

    def translate(self) -> str:
        pattern = self.pattern
        index = 0
        while index < len(pattern):
            char = pattern[index]
            if char == "\\":
                text, index = self._escape(index, in_class=False)
                self.out.append(text)
                self.repeated = 0
            elif char == "[":
                text, index = self._char_class(index)
                self.out.append(text)
                self.repeated = 0
            elif char == "(":
                index = self._open_group(index)
            elif char == ")":
                if len(self.scopes) == 1:
                    raise _go_error("unexpected )", pattern)
                opened = self.scopes.pop()
                self.out.append(")" * len(opened) + ")")
                self.repeated = 0
                index += 1
            elif char == "|":
                opened = self.scopes[-1]
                self.out.append(")" * len(opened) + "|" + "".join(opened))
                self.repeated = 0
                index += 1
            elif char in "*+?":
                self._repeat(char, char)
                index += 1
            elif char == "{":
                match = _GO_REPEAT.match(pattern, index)
                if match is None:
                    # Go takes a "{" that starts no repetition literally;
                    # Python would read "{,5}" as one.
                    self.out.append("\\{")
                    self.repeated = 0
                else:
                    low = int(match.group(1))
                    high = low if match.group(2) is None else (
                        int(match.group(3)) if match.group(3) else -1
                    )
                    if (
                        low > _GO_MAX_REPEAT
                        or high > _GO_MAX_REPEAT
                        or (high >= 0 and high < low)
                    ):
                        raise _go_error("invalid repeat count", match.group())
                    self._repeat(match.group(), match.group())
                    index = match.end()
                    continue
                index += 1
            elif char == "}":
                self.out.append("\\}")
                self.repeated = 0
                index += 1
            else:
                self.out.append(char)
                self.repeated = 0
                index += 1
        if len(self.scopes) > 1:
            raise _go_error("missing closing )", pattern)
        self.out.append(")" * len(self.scopes[0]))
        return "".join(self.out)

    def _repeat(self, operator: str, text: str) -> None:
        if self.repeated == 1 and operator == "?":
            self.out.append("?")
            self.repeated = 2
            return
        if self.repeated:
            # Go refuses "a**" and "a*+"; Python 3.11 reads the latter as
            # a possessive repetition, which may match differently.
            raise _go_error("invalid nested repetition operator", operator)
        self.out.append(text)
        self.repeated = 1

    def _open_group(self, index: int) -> int:
        pattern = self.pattern
        self.repeated = 0
        if not pattern.startswith("(?", index):
            self.out.append("(")
            self.scopes.append([])
            return index + 1
        rest = index + 2
        if pattern.startswith("P<", rest) or (
            pattern.startswith("<", rest)
            and not pattern.startswith("<=", rest)
            and not pattern.startswith("<!", rest)
        ):
            start = rest + (2 if pattern[rest] == "P" else 1)
            end = pattern.find(">", start)
            if end == -1:
                raise _go_error("invalid named capture", pattern[index:])
            name = pattern[start:end]
            if not _GO_CAPTURE_NAME.match(name):
                raise _go_error("invalid named capture", pattern[index : end + 1])
            self.out.append("(?P<%s>" % (name,))
            self.scopes.append([])
            return end + 1
        if pattern.startswith("P", rest):
            # (?P=name) and (?P>name): Python back-references and calls.
            raise _go_error("invalid named capture", pattern[index : rest + 2])
        on: List[str] = []
        off: List[str] = []
        negated = False
        saw_flag = False
        cursor = rest
        while cursor < len(pattern):
            char = pattern[cursor]
            if char in "imsU":
                (off if negated else on).append(char)
                saw_flag = True
            elif char == "-" and not negated:
                negated = True
                saw_flag = False
            elif char in ":)" and (saw_flag or not negated):
                break
            else:
                # Lookarounds, comments, conditionals, atomic groups,
                # Python's other flags: none of them is RE2.
                raise _go_error(
                    "invalid or unsupported Perl syntax", pattern[index : cursor + 1]
                )
            cursor += 1
        else:
            raise _go_error("missing closing )", pattern[index:])
        # Laziness never changes whether a search finds a match, so Go's U
        # (ungreedy) flag can be dropped; a flag both set and cleared ends
        # cleared, as in Go.
        flags_on = "".join(sorted(set(on) - set(off) - {"U"}))
        flags_off = "".join(sorted(set(off) - {"U"}))
        scoped = "(?" + flags_on + ("-" + flags_off if flags_off else "") + ":"
        if pattern[cursor] == ":":
            self.out.append(scoped)
            self.scopes.append([])
        elif flags_on or flags_off:
            # Python allows global flags only at the very start; a scoped
            # group that lasts to the end of the enclosing group is Go's
            # meaning anywhere.
            self.out.append(scoped)
            self.scopes[-1].append(scoped)
        return cursor + 1

    def _escape(self, index: int, in_class: bool) -> Tuple[str, int]:
        pattern = self.pattern
        if index + 1 >= len(pattern):
            raise _go_error("trailing backslash at end of expression", "")
        char = pattern[index + 1]
        after = index + 2
        if char in "1234567" and not (after < len(pattern) and pattern[after] in _OCTAL):
            # A single digit is a back-reference, which RE2 does not have.
            raise _go_error("invalid escape sequence", pattern[index:after])
        if char in _OCTAL:
            value = int(char)
            for _ in range(2):
                if after < len(pattern) and pattern[after] in _OCTAL:
                    value = value * 8 + int(pattern[after])
                    after += 1
            return re.escape(chr(value)), after
        if char == "x":
            if pattern.startswith("{", after):
                end = pattern.find("}", after)
                digits = pattern[after + 1 : end] if end != -1 else ""
                if not digits or any(d not in _HEX for d in digits) or int(digits, 16) > 0x10FFFF:
                    raise _go_error(
                        "invalid escape sequence",
                        pattern[index : end + 1 if end != -1 else len(pattern)],
                    )
                return re.escape(chr(int(digits, 16))), end + 1
            digits = pattern[after : after + 2]
            if len(digits) != 2 or any(d not in _HEX for d in digits):
                raise _go_error("invalid escape sequence", pattern[index : after + 2])
            return re.escape(chr(int(digits, 16))), after + 2
        if char in "afnrtvdDwW":
            return "\\" + char, after
        if char == "s":
            return (_GO_SPACE if in_class else "[" + _GO_SPACE + "]"), after
        if char == "S":
            # Inside a class Python's \S differs from Go's only on \v.
            return ("\\S" if in_class else "[^" + _GO_SPACE + "]"), after
        if char in "pP":
            raise _go_error(
                "invalid escape sequence (Unicode classes are not supported)",
                pattern[index:after],
            )
        if not in_class:
            if char in "AbB":
                return "\\" + char, after
            if char == "z":
                return "\\Z", after
            if char == "Q":
                end = pattern.find("\\E", after)
                if end == -1:
                    return re.escape(pattern[after:]), len(pattern)
                return re.escape(pattern[after:end]), end + 2
        if ord(char) < 0x80 and not char.isalnum():
            return "\\" + char, after
        raise _go_error("invalid escape sequence", pattern[index:after])

    def _char_class(self, index: int) -> Tuple[str, int]:
        pattern = self.pattern
        out = ["["]
        cursor = index + 1
        if pattern.startswith("^", cursor):
            out.append("^")
            cursor += 1
        first = True
        while True:
            if cursor >= len(pattern):
                raise _go_error("missing closing ]", pattern[index:])
            char = pattern[cursor]
            if char == "]" and not first:
                out.append("]")
                return "".join(out), cursor + 1
            first = False
            if pattern.startswith("[:", cursor):
                end = pattern.find(":]", cursor + 2)
                if end != -1:
                    name = pattern[cursor + 2 : end]
                    posix = _POSIX_CLASSES.get(name)
                    if posix is None and name[1:] in _POSIX_CLASSES and name[0] == "^":
                        # Valid in Go, but a Python class cannot hold the
                        # complement of a class next to other members.
                        raise _go_error(
                            "invalid character class range (negated POSIX classes"
                            " are not supported)",
                            pattern[cursor : end + 2],
                        )
                    if posix is None:
                        raise _go_error(
                            "invalid character class range", pattern[cursor : end + 2]
                        )
                    out.append(posix)
                    cursor = end + 2
                    continue
            if char == "\\":
                text, cursor = self._escape(cursor, in_class=True)
                out.append(text)
                continue
            if char in "[&~|":
                # Literal in Go; Python warns about future set operations.
                out.append("\\" + char)
            else:
                out.append(char)
            cursor += 1


def compile_go_regexp(pattern: str) -> Pattern[str]:
    """
    Compile an RE2 (Go ``regexp``) pattern into a Python pattern that
    matches the same strings with :meth:`re.Pattern.search` (Go's
    ``MatchString`` is an unanchored search too).

    Translated: ``\\z`` (Python's ``\\Z``), ``\\Q...\\E``, ``\\x{...}``,
    octal escapes, POSIX classes (``[[:alpha:]]``), ``(?<name>...)``, flag
    groups anywhere in the pattern (``a(?i)b``, which Python allows only at
    the start), Go's ``U`` flag (dropped: laziness cannot change whether a
    search matches), a literal ``{`` that starts no repetition, and ``\\s``
    (RE2's has no ``\\v``).  The pattern is compiled with :data:`re.ASCII`,
    since RE2's ``\\d``, ``\\w``, ``\\s`` and ``\\b`` are ASCII.

    Refused, as Go refuses them: back-references, lookarounds, atomic and
    possessive forms, conditionals, comments, flags other than ``imsU``,
    nested repetitions, repeat counts over 1000.

    Refused although Go accepts them (the check fails closed): Unicode
    classes (``\\pL``, ``\\p{Greek}``), negated POSIX classes
    (``[[:^alpha:]]``), ``\\C`` and capture names that are not Python
    identifiers.  Left as Python has them: ``$`` without ``(?m)`` also
    matches before a final newline, and ``(?i)`` folds ASCII letters only.
    Neither matters for NSQ topic and channel names, which are ASCII with
    no newline.

    :raises GoRegexpError: for a pattern refused as above, or one Python
        cannot compile; the text starts ``error parsing regexp:`` as Go's.
    """
    translated = _GoRegexpTranslator(pattern).translate()
    try:
        return re.compile(translated, re.ASCII)
    except re.error as error:
        raise GoRegexpError("error parsing regexp: %s: `%s`" % (error.msg, pattern))


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


@implementer(IBodyProducer)
class _BytesProducer:
    """A request body that is one ``bytes``."""

    def __init__(self, body: bytes) -> None:
        self._body = body
        self.length = len(body)

    def startProducing(self, consumer: IConsumer) -> Deferred[None]:
        consumer.write(self._body)
        return succeed(None)

    def pauseProducing(self) -> None:
        pass

    def resumeProducing(self) -> None:
        pass

    def stopProducing(self) -> None:
        pass


class _QuietHTTP11ClientFactory(_HTTP11ClientFactory):
    """The Agent's connection factory, without its start and stop log lines."""

    noisy = False


def _describe(error: Optional[BaseException]) -> str:
    """One line about a failed attempt; never the request URL."""
    if isinstance(error, AuthError):
        return str(error)
    if isinstance(error, ResponseFailed):
        return "; ".join(reason.getErrorMessage() for reason in error.reasons)
    if isinstance(error, ConnectError):
        return str(error)
    return "%s: %s" % (type(error).__name__, error)


class AuthClient:
    """
    Asks the ``--auth-http-address`` servers about a client's secret, as Go
    nsqd's ``QueryAnyAuthd``: the addresses are tried one at a time from a
    random starting point until one gives a usable reply.

    Each HTTP request may take ``request_timeout`` seconds from sending to
    the end of the body, connecting at most ``connect_timeout`` of those
    (Go's ``--http-client-request-timeout`` and
    ``--http-client-connect-timeout``).  Connections are not reused, as Go
    builds a new HTTP client for every query.  A 403 from a plain-HTTP URL
    is retried once over HTTPS at the port its JSON body names
    (``{"https_port": N}``), as Go's ``http_api`` client does.
    """

    def __init__(
        self,
        addresses: Sequence[str],
        reactor: Any,
        connect_timeout: float,
        request_timeout: float,
        method: str = "get",
        *,
        clock: Optional[IReactorTime] = None,
        tls_policy: Optional[IPolicyForHTTPS] = None,
        pick_start: Optional[Callable[[int], int]] = None,
    ) -> None:
        """
        :param addresses: ``host:port`` or full URLs, as the flag takes them.
        :param reactor: makes the connections (``IReactorTCP``,
            ``IReactorTime``, name resolution).
        :param method: ``"get"`` or ``"post"`` (``--auth-http-request-method``).
        :param clock: times the requests; the reactor when not given.
        :param tls_policy: checks the certificates of ``https`` servers
            (the default trusts the system's roots, as Go with no
            ``--tls-root-ca-file``).
        :param pick_start: ``pick_start(n)`` gives the index of the first
            address to try; random when not given.
        :raises ValueError: for no addresses or an unknown method.
        """
        if not addresses:
            raise ValueError("no auth addresses")
        if method not in ("get", "post"):
            raise ValueError("--auth-http-request-method must be post or get")
        self.addresses = list(addresses)
        self.method = method
        self.request_timeout = request_timeout
        self._clock: IReactorTime = clock if clock is not None else reactor
        self._pick_start = pick_start if pick_start is not None else random.randrange
        pool = HTTPConnectionPool(reactor, persistent=False)
        # Every query would otherwise log "Starting factory" and "Stopping
        # factory" lines; _factory is the pool's (long-standing) hook.
        pool._factory = _QuietHTTP11ClientFactory
        self._agent = Agent(
            reactor,
            contextFactory=tls_policy if tls_policy is not None else BrowserLikePolicyForHTTPS(),
            connectTimeout=connect_timeout,
            pool=pool,
        )

    def query(
        self, remote_ip: str, tls: bool, secret: Union[str, bytes], common_name: str
    ) -> Deferred[AuthState]:
        """
        Fetch the authorizations for ``secret`` from a client at
        ``remote_ip`` (``""`` for a Unix socket), connected with ``tls``
        and presenting a certificate for ``common_name`` (``""`` if none).

        Cancelling the result stops the request in progress and tries no
        other address.

        :return: a Deferred firing with the :class:`AuthState`, or failing
            with :class:`AuthError` whose text gathers Go's ``failed to auth
            against ADDRESS - REASON`` for every address, joined by ``; ``.
        """
        count = len(self.addresses)
        start = self._pick_start(count)
        failures: List[str] = []
        attempts: List[Deferred[AuthState]] = []
        cancelled: List[bool] = []

        def cancel(_: Deferred[AuthState]) -> None:
            # The Agent reports a cancelled request as one of its own
            # errors, not CancelledError; the flag tells the loop to stop.
            cancelled.append(True)
            if attempts:
                attempts[-1].cancel()

        result: Deferred[AuthState] = Deferred(cancel)

        def attempt(offset: int) -> None:
            if offset == count:
                result.errback(AuthError("; ".join(failures)))
                return
            address = self.addresses[(start + offset) % count]

            def succeeded(state: AuthState) -> None:
                if not cancelled:
                    result.callback(state)

            def failed(failure: Failure) -> None:
                if cancelled:
                    return
                failures.append(
                    "failed to auth against %s - %s" % (address, _describe(failure.value))
                )
                attempt(offset + 1)

            trying = Deferred.fromCoroutine(
                self._query_one(address, remote_ip, tls, secret, common_name)
            )
            attempts.append(trying)
            trying.addCallbacks(succeeded, failed)

        attempt(0)
        return result

    async def _query_one(
        self,
        address: str,
        remote_ip: str,
        tls: bool,
        secret: Union[str, bytes],
        common_name: str,
    ) -> AuthState:
        method, url, body = auth_query_url(
            address, remote_ip, tls, secret, common_name, self.method
        )
        code, phrase, content = await self._fetch(method, url, body)
        if code == 403 and not url.startswith("https"):
            url = https_endpoint(url, content)
            code, phrase, content = await self._fetch(method, url, body)
        if code != 200:
            raise AuthError(
                "got response %d %s %s"
                % (code, phrase.decode("latin-1"), go_quote(content))
            )
        return parse_auth_response(content, self._clock.seconds())

    async def _fetch(
        self, method: str, url: str, body: Optional[bytes]
    ) -> Tuple[int, bytes, bytes]:
        headers = Headers({b"Accept": [_ACCEPT], b"User-Agent": [b"txnsq/" + __version__.encode()]})
        producer = None
        if body is not None:
            headers.addRawHeader(b"Content-Type", b"application/json")
            producer = _BytesProducer(body)
        try:
            uri = url.encode("ascii")
        except UnicodeEncodeError:
            raise AuthError("invalid auth address (not ASCII)")
        requested = self._agent.request(
            method.encode("ascii"), uri, headers, producer
        ).addCallback(_read_response)
        timed_out = []

        def time_out() -> None:
            timed_out.append(True)
            requested.cancel()

        # Not Deferred.addTimeout: the Agent turns a cancelled connection
        # attempt into ConnectingCancelledError, which it would not see as
        # its own timeout.
        timer = self._clock.callLater(self.request_timeout, time_out)
        try:
            return await requested
        except Exception:
            if timed_out:
                raise AuthError(
                    "request timed out (Client.Timeout %gs exceeded)" % (self.request_timeout,)
                )
            raise
        finally:
            if timer.active():
                timer.cancel()


def _read_response(response: IResponse) -> Deferred[Tuple[int, bytes, bytes]]:
    def body_read(content: bytes) -> Tuple[int, bytes, bytes]:
        return response.code, response.phrase, content

    def cut_short(failure: Any) -> Tuple[int, bytes, bytes]:
        # A body ended by the server closing the connection is a whole body
        # to Go's io.ReadAll.
        failure.trap(PartialDownloadError)
        return response.code, response.phrase, failure.value.response or b""

    reading = readBody(response)
    return reading.addCallbacks(body_read, cut_short)
