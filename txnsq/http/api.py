# -*- test-case-name: tests.test_http,tests.test_nsqlookupd_http -*-
"""
The request and reply half of Go's ``internal/http_api``.

A handler returns data or raises :class:`APIError <txnsq.protocol.http_params.APIError>`
and its route's *style* renders it: ``v1`` (Go's ``RespondV1``:
``X-NSQ-Content-Type: nsq; version=1.0``, text for strings, JSON otherwise,
``{"message": ...}`` for errors) or ``text`` (Go's ``PlainText``).  Every
reply carries a ``Content-Length``, as Go's do, and no header Go would not
send.  :class:`APIBase` holds these and the request readers the handlers
share; Go's ``http_api.Log`` line is written here too.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from twisted.logger import Logger
from twisted.web.iweb import IRequest

from txnsq.protocol.go_values import format_duration
from txnsq.protocol.go_json import go_json
from txnsq.protocol.http_params import APIError, parse_query

__all__ = [
    "APIBase",
    "HTML_CONTENT_TYPE",
    "JSON_CONTENT_TYPE",
    "NSQ_CONTENT_TYPE",
    "TEXT_CONTENT_TYPE",
    "raw_query",
]

JSON_CONTENT_TYPE = b"application/json; charset=utf-8"
TEXT_CONTENT_TYPE = b"text/plain; charset=utf-8"
HTML_CONTENT_TYPE = b"text/html; charset=utf-8"
NSQ_CONTENT_TYPE = b"nsq; version=1.0"


def raw_query(request: IRequest) -> Tuple[bytes, bool]:
    """The request target's raw query (a ``#`` is part of it) and whether it had a ``?``."""
    uri: bytes = request.uri
    if b"?" not in uri:
        return b"", False
    return uri.split(b"?", 1)[1], True


class APIBase:
    """
    Replies in Go's styles, Go's request log line and the request readers
    of a daemon's HTTP API.  A subclass says which clock times requests
    (:meth:`_seconds`) and where they are logged (``_log``).
    """

    _log: Logger

    def _seconds(self) -> float:
        """
        Now, by the clock requests are timed with (the daemon's).

        :raises NotImplementedError: the subclass has not said.
        """
        raise NotImplementedError("%s does not say which clock times requests" % (type(self),))

    def _begin(self, request: IRequest) -> None:
        """Headers Go would not send go; nothing gets a default type."""
        request.defaultContentType = None  # type: ignore[attr-defined]
        request.responseHeaders.removeHeader(b"server")

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
            elapsed=format_duration(max(0.0, self._seconds() - started)),
        )

    # -- reading requests ------------------------------------------------

    def _query(self, request: IRequest) -> Dict[str, List[str]]:
        """The query values; ``400 INVALID_REQUEST`` when Go cannot parse them."""
        values, error = parse_query(raw_query(request)[0])
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
