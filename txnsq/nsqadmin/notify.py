# -*- test-case-name: tests.test_nsqadmin_notify -*-
"""
Admin action notifications (``--notification-http-endpoint``).

Every admin action is POSTed to the endpoint as the JSON the NSQ docs
describe (Go's ``AdminAction``): ``action``, ``topic``, ``channel`` and
``node`` (left out when empty), ``timestamp`` (Unix seconds), ``user``
(left out when unknown), ``remote_ip``, ``user_agent``, ``url`` and
``via`` (this host's name).  ``user`` is the name the ACL header carries,
else the HTTP basic auth user.  Sending never delays the action's reply;
a failed notification is logged.
"""

from __future__ import annotations

import base64
import socket
from typing import Any, Callable, Dict, Optional

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.web.iweb import IRequest

from txnsq.addresses import go_address
from txnsq.http_client import describe_failure
from txnsq.nsqadmin.actions import acting_user
from txnsq.protocol.go_json import go_json

__all__ = ["Notifier", "admin_action", "basic_auth_user"]

Post = Callable[[str, str, Optional[bytes]], "Deferred[Any]"]


def basic_auth_user(request: IRequest) -> str:
    """The user of an ``Authorization: Basic`` header, or ''."""
    header = request.getHeader(b"authorization")
    if not header:
        return ""
    scheme, _, encoded = header.partition(b" ")
    if scheme != b"Basic":
        return ""
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return ""
    user, colon, _ = decoded.partition(":")
    return user if colon else ""


def _request_url(request: IRequest) -> str:
    scheme = "https" if request.isSecure() or request.getHeader(b"x-scheme") == b"https" else "http"
    host = (request.getHeader(b"host") or b"").decode("latin-1")
    return "%s://%s%s" % (scheme, host, request.uri.decode("latin-1"))


def admin_action(
    action: str,
    topic: str,
    channel: str,
    node: str,
    request: IRequest,
    now: float,
    acl_http_header: str,
    via: str,
) -> Dict[str, Any]:
    """The notification of one action, in Go's field order."""
    doc: Dict[str, Any] = {"action": action, "topic": topic}
    if channel:
        doc["channel"] = channel
    if node:
        doc["node"] = node
    doc["timestamp"] = int(now)
    user = acting_user(request, acl_http_header) or basic_auth_user(request)
    if user:
        doc["user"] = user
    doc["remote_ip"] = go_address(request.getClientAddress())[0]
    doc["user_agent"] = (request.getHeader(b"user-agent") or b"").decode("latin-1")
    doc["url"] = _request_url(request)
    doc["via"] = via
    return doc


class Notifier:
    """
    Sends admin action notifications to ``endpoint`` (none when empty).

    :param post: sends one request (``GoHTTPClient.request``).
    :param clock: gives the timestamps.
    """

    _log = Logger()

    def __init__(
        self,
        post: Post,
        endpoint: str,
        clock: IReactorTime,
        acl_http_header: str = "X-Forwarded-User",
        via: Optional[str] = None,
    ) -> None:
        self._post = post
        self.endpoint = endpoint
        self._clock = clock
        self._acl_http_header = acl_http_header
        self.via = via if via is not None else socket.gethostname()

    def notify(self, action: str, topic: str, channel: str, node: str, request: IRequest) -> None:
        """POST the notification of one action, without waiting for the answer."""
        if not self.endpoint:
            return
        doc = admin_action(
            action,
            topic,
            channel,
            node,
            request,
            self._clock.seconds(),
            self._acl_http_header,
            self.via,
        )
        try:
            sent = self._post("POST", self.endpoint, go_json(doc))
        except Exception as error:
            self._log.error("failed to send admin notification - {error}", error=error)
            return

        def answered(reply: Any) -> None:
            code = reply[0]
            if code != 200:
                self._log.error("admin notification answered {code}", code=code)

        def failed(failure: Any) -> None:
            self._log.error(
                "failed to send admin notification - {error}",
                error=describe_failure(failure.value),
            )

        sent.addCallbacks(answered, failed)
