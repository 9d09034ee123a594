# -*- test-case-name: tests.test_http_site -*-
"""
The HTTP listener's ``twisted.web.server.Site``, answering bytes that are not HTTP as Go's
net/http does.

Go reads a request head line by line (a bare ``\\n`` ends a line too), up to
1 MiB + 4 KiB, and answers a head it cannot parse with a fixed
``400 Bad Request`` (or ``431``) before it closes the connection: a V2 client
dialling the HTTP port gets ``400 Bad Request`` once its first line ends.
Go logs API requests itself, so the site keeps no access log.
"""

from __future__ import annotations

from typing import Any

from twisted.web.http import HTTPChannel
from twisted.web.server import Site

__all__ = [
    "GoHTTPChannel",
    "GoSite",
]


def _go_error_reply(status: bytes) -> bytes:
    """The bytes net/http writes for a request it cannot parse."""
    return (
        b"HTTP/1.1 %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
        b"Connection: close\r\n\r\n%s" % (status, status)
    )


class GoHTTPChannel(HTTPChannel):
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


class GoSite(Site):
    """A quiet ``Site`` speaking through :class:`GoHTTPChannel`."""

    protocol = GoHTTPChannel  # type: ignore[assignment]
    noisy = False

    def __init__(self, resource: Any, *args: Any, **kwargs: Any) -> None:
        """Serve ``resource`` (an ``IResource``); the rest as ``Site`` takes it."""
        Site.__init__(self, resource, *args, **kwargs)

    def log(self, request: Any) -> None:
        """Go logs API requests itself (``http_api.Log``); no access log."""
