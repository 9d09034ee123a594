# -*- test-case-name: tests.test_nsqd_http -*-
"""
nsqd's HTTP API, served with Klein.

The app is a class attribute so every :class:`NSQDHTTPAPI` instance serves
its own broker.
"""

from __future__ import annotations

import json
import socket
from typing import TYPE_CHECKING, Any, Callable, Dict

from klein import Klein
from twisted.web.iweb import IRequest

from txnsq import __version__

if TYPE_CHECKING:
    from txnsq.nsqd.broker import Broker

_JSON_CONTENT_TYPE = b"application/json; charset=utf-8"
_TEXT_CONTENT_TYPE = b"text/plain; charset=utf-8"


class NSQDHTTPAPI:
    """
    The HTTP endpoints of one nsqd.

    ``ports`` is called to learn the bound TCP and HTTP ports, which are
    only known once the listeners are up.
    """

    app = Klein()

    def __init__(
        self,
        broker: Broker,
        start_time: float,
        ports: Callable[[], Dict[str, int]],
    ) -> None:
        self.broker = broker
        self.start_time = start_time
        self._ports = ports

    def _json(self, request: IRequest, value: Any) -> bytes:
        request.setHeader(b"Content-Type", _JSON_CONTENT_TYPE)
        request.setHeader(b"X-NSQ-Content-Type", b"nsq; version=1.0")
        return json.dumps(value, separators=(",", ":")).encode("utf-8")

    @app.route("/ping", methods=["GET"])
    def ping(self, request: IRequest) -> bytes:
        """
        Answer ``OK`` while the broker is healthy; else 500 with Go's
        ``NOK - <reason>`` (a queue failing to write, say).
        """
        request.setHeader(b"Content-Type", _TEXT_CONTENT_TYPE)
        error = self.broker.storage_error()
        if error is not None:
            request.setResponseCode(500)
            return ("NOK - %s" % (error,)).encode("utf-8")
        return b"OK"

    @app.route("/info", methods=["GET"])
    def info(self, request: IRequest) -> bytes:
        """Describe this nsqd: version, addresses, ports and limits."""
        options = self.broker.options
        ports = self._ports()
        nanoseconds = 1000000000
        return self._json(
            request,
            {
                "version": __version__,
                "broadcast_address": options.broadcast_address,
                "hostname": socket.gethostname(),
                "http_port": ports.get("HTTP", 0),
                "tcp_port": ports.get("TCP", 0),
                "start_time": int(self.start_time),
                "max_heartbeat_interval": int(
                    round(options.max_heartbeat_interval * nanoseconds)
                ),
                "max_output_buffer_size": options.max_output_buffer_size,
                "max_output_buffer_timeout": int(
                    round(options.max_output_buffer_timeout * nanoseconds)
                ),
                "max_deflate_level": options.max_deflate_level,
            },
        )
