"""
A real txnsq ``nsqd`` child process for blocking tests (Spark's and the
blocking client's): started on ``127.0.0.1:0``, its ports read from its
``TCP: listening on`` / ``HTTP: listening on`` lines.  No pyspark here.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import subprocess
import tempfile
import threading
import time
import urllib.request
from typing import Any, Dict, List, Optional

from tests.integration.nsqd_process import daemon_command

__all__ = ["NSQDProcess", "shared_nsqd", "unique_topic", "wait_until"]

START_TIMEOUT = 30.0
_LISTENING = re.compile(r"(TCP|HTTP): listening on (\S+):([0-9]+)")


def wait_until(predicate: Any, timeout: float, what: str, interval: float = 0.05) -> Any:
    """
    Poll ``predicate`` until it returns a true value (returned) or
    ``timeout`` seconds pass.

    :raises AssertionError: naming ``what`` on timeout.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %gs waiting for %s" % (timeout, what))
        time.sleep(interval)


class NSQDProcess:
    """
    One nsqd child process.

    :ivar tcp_address: ``127.0.0.1:PORT`` of its V2 listener.
    :ivar http_address: ``127.0.0.1:PORT`` of its HTTP API.
    """

    def __init__(self, *args: str, program: str = "nsqd") -> None:
        """
        :param args: more flags.
        :param program: ``nsqd``, or ``nsqlookupd`` (same listening lines).
        """
        command = daemon_command(program) + ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0"]
        if program == "nsqd":
            self.data_path = tempfile.mkdtemp(prefix="nsqd-spark-")
            command.append("--data-path=" + self.data_path)
        command += list(args)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env
        )
        self.output: List[str] = []
        self._ports: Dict[str, str] = {}
        self._ready = threading.Event()
        threading.Thread(target=self._pump, daemon=True).start()
        if not self._ready.wait(START_TIMEOUT):
            self.stop()
            raise AssertionError(program + " did not start:\n" + "".join(self.output))
        self.tcp_address = self._ports["TCP"]
        self.http_address = self._ports["HTTP"]

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            line = raw.decode("utf-8", "replace")
            self.output.append(line)
            match = _LISTENING.search(line)
            if match:
                self._ports[match.group(1)] = "%s:%s" % (match.group(2), match.group(3))
                if "TCP" in self._ports and "HTTP" in self._ports:
                    self._ready.set()
        self._ready.set()

    def http(self, method: str, path: str, body: Optional[bytes] = None) -> bytes:
        """The body of nsqd's answer to ``method path``."""
        request = urllib.request.Request("http://%s%s" % (self.http_address, path), data=body, method=method)
        with urllib.request.urlopen(request, timeout=10) as reply:
            data: bytes = reply.read()
            return data

    def create_channel(self, topic: str, channel: str) -> None:
        """Create ``topic`` and its ``channel``, so that messages published from now on reach it."""
        self.http("POST", "/topic/create?topic=%s" % (topic,), b"")
        self.http("POST", "/channel/create?topic=%s&channel=%s" % (topic, channel), b"")

    def channel_stats(self, topic: str, channel: str) -> Dict[str, Any]:
        """The channel's ``/stats`` entry (``depth``, ``in_flight_count``, ...), or ``{}``."""
        stats = json.loads(self.http("GET", "/stats?format=json&topic=%s&channel=%s" % (topic, channel)))
        stats = stats.get("data", stats)
        for t in stats.get("topics", []):
            if t.get("topic_name") == topic:
                for c in t.get("channels", []):
                    if c.get("channel_name") == channel:
                        found: Dict[str, Any] = c
                        return found
        return {}

    def stop(self) -> None:
        """Terminate nsqd and wait for it."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        if self.process.stdout is not None:
            self.process.stdout.close()


_shared: Dict[str, NSQDProcess] = {}
_topics = [0]


def shared_nsqd(name: str = "default", *args: str) -> NSQDProcess:
    """
    An nsqd shared by every test of this run that asks for ``name`` (each
    test uses its own topics); stopped when the test process exits.
    """
    nsqd = _shared.get(name)
    if nsqd is None or nsqd.process.poll() is not None:
        nsqd = _shared[name] = NSQDProcess(*args)
        atexit.register(nsqd.stop)
    return nsqd


def unique_topic(prefix: str = "t") -> str:
    """A topic name no other test of this run uses."""
    _topics[0] += 1
    return "%s_%d_%d" % (prefix, os.getpid(), _topics[0])
