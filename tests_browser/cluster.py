"""
A real cluster for the browser tests: txnsq's nsqlookupd, one nsqd
registered with it and nsqadmin over the lookupd, each its console script
spawned on 127.0.0.1 port 0 (ports read from the listening lines, as in
``tests.integration.nsqd_process``), and small blocking helpers the
browser thread uses to publish and to read nsqd's ``/stats``.
"""

from __future__ import annotations

import json
import socket
import struct
import urllib.error
import urllib.request
from typing import Any, Dict, List, Optional, Sequence, Tuple

from twisted.internet.defer import inlineCallbacks

from tests.integration.nsqd_process import NSQDProcess, NSQLookupdProcess, daemon_command

__all__ = ["Cluster", "NSQAdminProcess", "V2Consumer", "http"]


class NSQAdminProcess(NSQDProcess):
    """One spawned ``nsqadmin``: only an HTTP listening line to wait for."""

    def __init__(self, args: Sequence[str], reactor: Any = None, cwd: Optional[str] = None) -> None:
        NSQDProcess.__init__(self, args, reactor, cwd, command=daemon_command("nsqadmin"))

    def _scan(self) -> bool:
        NSQDProcess._scan(self)
        return "HTTP" in self.ports


def http(
    method: str, url: str, body: Optional[bytes] = None, headers: Optional[Dict[str, str]] = None
) -> Tuple[int, bytes]:
    """One blocking request (for the browser thread); ``(status, body)``."""
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


class V2Consumer:
    """
    A bare V2 TCP consumer (blocking, for the browser thread): IDENTIFY with
    the given client id, hostname and user agent, SUB, RDY.
    """

    def __init__(self, port: int, topic: str, channel: str, identify: Dict[str, Any]) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.sendall(b"  V2")
        body = json.dumps(identify).encode("utf-8")
        self.sock.sendall(b"IDENTIFY\n" + struct.pack(">I", len(body)) + body)
        self._frame()
        self.sock.sendall(("SUB %s %s\n" % (topic, channel)).encode("ascii"))
        self._frame()
        self.sock.sendall(b"RDY 1\n")

    def _frame(self) -> bytes:
        size = struct.unpack(">I", self._exactly(4))[0]
        return self._exactly(size)

    def _exactly(self, count: int) -> bytes:
        data = b""
        while len(data) < count:
            more = self.sock.recv(count - len(data))
            if not more:
                raise ConnectionError("nsqd closed the connection")
            data += more
        return data

    def read_message(self) -> bytes:
        """The body of the next message (answering heartbeats), FINished."""
        while True:
            frame = self._frame()
            kind = struct.unpack(">I", frame[:4])[0]
            if kind == 2:
                message_id = frame[14:30]
                self.sock.sendall(b"FIN " + message_id + b"\n")
                return frame[30:]
            if frame[4:] == b"_heartbeat_":
                self.sock.sendall(b"NOP\n")
                continue
            raise AssertionError("unexpected frame %r" % (frame,))

    def close(self) -> None:
        """Say CLS and close."""
        try:
            self.sock.sendall(b"CLS\n")
        finally:
            self.sock.close()


class Cluster:
    """
    nsqlookupd, nsqd and nsqadmin processes.

    :param notify_topic: when given, nsqadmin's admin notifications are
        published to this topic on the nsqd.
    :param nsqd_args: more nsqd flags.
    :ivar admin_url: nsqadmin's base URL.
    :ivar nsqd_url: nsqd's HTTP base URL.
    """

    def __init__(
        self,
        data_path: str,
        admin_args: Sequence[str] = (),
        notify_topic: str = "",
        nsqd_args: Sequence[str] = (),
    ) -> None:
        self.data_path = data_path
        self.nsqd_args = list(nsqd_args)
        self.admin_args = list(admin_args)
        self.notify_topic = notify_topic
        self.processes: List[NSQDProcess] = []
        self.admin_url = self.nsqd_url = ""
        self.nsqd_tcp_port = 0

    @inlineCallbacks
    def start(self) -> Any:
        """Start the three daemons; fires once all listen."""
        lookupd = NSQLookupdProcess(["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0"])
        self.processes.append(lookupd)
        yield lookupd.start()
        nsqd = NSQDProcess(
            [
                "--tcp-address=127.0.0.1:0",
                "--http-address=127.0.0.1:0",
                "--broadcast-address=127.0.0.1",
                "--lookupd-tcp-address=127.0.0.1:%d" % (lookupd.tcp_port,),
                "--data-path=%s" % (self.data_path,),
            ]
            + self.nsqd_args
        )
        self.processes.append(nsqd)
        yield nsqd.start()
        notify = []
        if self.notify_topic:
            # Go's docs' suggestion: admin actions as a stream on nsqd.
            notify = [
                "--notification-http-endpoint=http://127.0.0.1:%d/pub?topic=%s"
                % (nsqd.http_port, self.notify_topic)
            ]
        admin = NSQAdminProcess(
            [
                "--http-address=127.0.0.1:0",
                "--lookupd-http-address=127.0.0.1:%d" % (lookupd.http_port,),
            ]
            + self.admin_args
            + notify
        )
        self.processes.append(admin)
        yield admin.start()
        self.admin_url = "http://127.0.0.1:%d" % (admin.http_port,)
        self.nsqd_url = "http://127.0.0.1:%d" % (nsqd.http_port,)
        self.nsqd_tcp_port = nsqd.tcp_port

    @inlineCallbacks
    def stop(self) -> Any:
        """Stop every daemon, newest first."""
        for process in reversed(self.processes):
            yield process.stop()

    # -- blocking helpers for the browser thread ---------------------------------

    def publish(self, topic: str, count: int = 1) -> None:
        """Publish ``count`` messages to nsqd over HTTP."""
        body = b"\n".join(b"message %d" % (i,) for i in range(count))
        status, reply = http("POST", "%s/mpub?topic=%s" % (self.nsqd_url, topic), body)
        assert status == 200, (status, reply)

    def create_channel(self, topic: str, channel: str) -> None:
        """Create the topic and the channel on nsqd."""
        status, reply = http("POST", "%s/topic/create?topic=%s" % (self.nsqd_url, topic))
        assert status == 200, (status, reply)
        status, reply = http(
            "POST", "%s/channel/create?topic=%s&channel=%s" % (self.nsqd_url, topic, channel)
        )
        assert status == 200, (status, reply)

    def channel_stats(self, topic: str, channel: str) -> Dict[str, Any]:
        """nsqd's ``/stats`` for one channel."""
        status, reply = http(
            "GET", "%s/stats?format=json&topic=%s&channel=%s" % (self.nsqd_url, topic, channel)
        )
        assert status == 200, (status, reply)
        for found in json.loads(reply)["topics"]:
            for stats in found["channels"]:
                if stats["channel_name"] == channel:
                    return dict(stats)
        raise AssertionError("no channel %s/%s in nsqd's stats" % (topic, channel))
