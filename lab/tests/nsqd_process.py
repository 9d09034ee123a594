"""
A real nsqd for the lab's tests: started as a process (``python -m
txnsq.nsqd`` on ``127.0.0.1:0``), spoken to over HTTP and NSQ's V2
protocol with blocking sockets.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Dict, List, Optional, Tuple

__all__ = ["NSQD", "REPOSITORY", "consume", "nsqd_environment"]

#: The repository's root (the lab is not installed: it runs from here).
REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def nsqd_environment(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """This process's environment, with the repository on PYTHONPATH and ``extra`` added."""
    env = dict(os.environ)
    env["PYTHONPATH"] = REPOSITORY + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra or {})
    return env


class NSQD:
    """
    An nsqd process and its addresses (``tcp``, ``http``: ``(host, port)``).

    :param flags: flags besides the listen addresses and ``--data-path``.
    :param env: its whole environment.
    :raises AssertionError: it did not say it listens within a minute (the
        end of its log is in the message).
    """

    def __init__(self, data_path: str, log_path: str, flags: List[str], env: Dict[str, str]) -> None:
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "txnsq.nsqd",
                    "--tcp-address=127.0.0.1:0",
                    "--http-address=127.0.0.1:0",
                    "--data-path=" + data_path,
                ]
                + flags,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=REPOSITORY,
            )
        self.tcp = self._address("TCP")
        self.http = self._address("HTTP")

    def _address(self, label: str) -> Tuple[str, int]:
        needle = "%s: listening on " % (label,)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    if needle in line:
                        host, port = line.split(needle)[1].split()[0].rsplit(":", 1)
                        return host, int(port)
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.kill()
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            raise AssertionError("nsqd did not start:\n" + f.read()[-3000:])

    def request(self, method: str, path: str, body: Optional[bytes] = None) -> Tuple[int, bytes]:
        """An HTTP request; (status, body), also for error statuses."""
        url = "http://%s:%d%s" % (self.http[0], self.http[1], path)
        req = urllib.request.Request(url, data=body, method=method)
        try:
            with urllib.request.urlopen(req, timeout=30) as answer:
                return answer.status, answer.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    def depth(self, topic: str) -> int:
        """The topic's depth in /stats (0 for a topic nsqd does not know)."""
        status, body = self.request("GET", "/stats?format=json&topic=" + topic)
        assert status == 200, body
        topics = json.loads(body)["topics"] or []
        return sum(t["depth"] for t in topics if t["topic_name"] == topic)

    def kill(self) -> None:
        """SIGKILL it (if still running) and reap it."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        """SIGTERM it and wait for a clean exit (SIGKILL after 30 s)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


def consume(address: Tuple[str, int], topic: str, count: int) -> List[bytes]:
    """Take ``count`` messages of ``topic`` over NSQ's V2 protocol, FINning each."""
    sock = socket.create_connection(address, timeout=30)
    buffer = b""

    def frame() -> Tuple[int, bytes]:
        nonlocal buffer
        while True:
            if len(buffer) >= 8:
                size, kind = struct.unpack(">ii", buffer[:8])
                if len(buffer) >= 4 + size:
                    data = buffer[8 : 4 + size]
                    buffer = buffer[4 + size :]
                    return kind, data
            more = sock.recv(65536)
            if not more:
                raise AssertionError("nsqd closed the connection")
            buffer += more

    try:
        sock.sendall(b"  V2SUB %s lab\n" % (topic.encode(),))
        assert frame() == (0, b"OK")
        bodies: List[bytes] = []
        ready = 0
        while len(bodies) < count:
            if ready == 0:
                # nsqd takes at most --max-rdy-count (2500) at a time.
                ready = min(count - len(bodies), 2500)
                sock.sendall(b"RDY %d\n" % (ready,))
            kind, data = frame()
            if kind == 0 and data == b"_heartbeat_":
                sock.sendall(b"NOP\n")
            elif kind == 2:
                sock.sendall(b"FIN " + data[10:26] + b"\n")
                bodies.append(data[26:])
                ready -= 1
            else:
                raise AssertionError("unexpected frame %r" % ((kind, data),))
        return bodies
    finally:
        sock.close()
