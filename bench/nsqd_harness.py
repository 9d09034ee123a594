"""
What the hand-run benchmarks in ``bench/`` share: an ``nsqd`` child process
and a blocking NSQ V2 client socket.

Standard library only, no reactor and no ``txnsq`` import: a benchmark must
not measure the client's framework, and the same script can drive any nsqd
given with ``--nsqd``.

:class:`NSQDChild` starts nsqd with its listeners on ``127.0.0.1:0`` and
reads the bound ports from its ``TCP: listening on HOST:PORT`` line, as
``tests/integration/nsqd_process.py`` does under the reactor.
:class:`V2Connection` speaks the V2 protocol: commands out, frames in
(``u32 size | i32 type | data``), heartbeats answered with ``NOP``.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import struct
import subprocess
import sys
import time
from collections import deque
from typing import IO, Deque, Dict, List, Optional, Sequence, Tuple

__all__ = [
    "FRAME_ERROR",
    "FRAME_MESSAGE",
    "FRAME_RESPONSE",
    "MESSAGE_HEADER_SIZE",
    "NSQDChild",
    "NSQDError",
    "NSQDStartError",
    "ProtocolError",
    "V2Connection",
    "directory_size",
    "mpub_command",
    "nsqd_command",
    "pub_command",
]

#: How long nsqd may take to print its TCP listening line.
START_TIMEOUT = 20.0

#: How long nsqd may take to exit after SIGTERM (a disk backend flushes).
STOP_TIMEOUT = 30.0

FRAME_RESPONSE = 0
FRAME_ERROR = 1
FRAME_MESSAGE = 2

#: A message frame's data: 8-byte timestamp, 2-byte attempts, 16-byte ID,
#: then the body.
MESSAGE_HEADER_SIZE = 26

_LISTENING = re.compile(rb"(TCP|HTTP|HTTPS): listening on (\S+):([0-9]+)")
_HEARTBEAT = b"_heartbeat_"
_FRAME_HEADER = struct.Struct(">ii")
_U32 = struct.Struct(">I")
_MPUB_HEADER = struct.Struct(">II")
_RECV_SIZE = 256 * 1024


class NSQDError(Exception):
    """Base of the harness's errors."""


class NSQDStartError(NSQDError):
    """nsqd exited or stayed silent instead of listening; carries its output."""


class ProtocolError(NSQDError):
    """nsqd answered with an error frame, or broke the V2 framing."""


def nsqd_command(override: Optional[str] = None) -> List[str]:
    """
    The command that runs nsqd.

    ``override`` (a shell-quoted command line, split with :func:`shlex.split`)
    when given; else the ``nsqd`` console script installed next to the
    running interpreter; else ``python -m txnsq.nsqd``.
    """
    if override:
        return shlex.split(override)
    script = os.path.join(os.path.dirname(sys.executable), "nsqd")
    if os.path.isfile(script) and os.access(script, os.X_OK):
        return [script]
    return [sys.executable, "-m", "txnsq.nsqd"]


def directory_size(path: str) -> int:
    """The sum of the sizes of the regular files under ``path``."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except FileNotFoundError:  # a file rotated away meanwhile
                pass
    return total


def pub_command(topic: bytes, body: bytes) -> bytes:
    """``PUB <topic>\\n`` + 4-byte size + body."""
    return b"PUB " + topic + b"\n" + _U32.pack(len(body)) + body


def mpub_command(topic: bytes, bodies: Sequence[bytes]) -> bytes:
    """``MPUB <topic>\\n`` + 4-byte size + 4-byte count + (4-byte size + body)*."""
    pack = _U32.pack
    parts = [pack(len(body)) + body for body in bodies]
    size = 4 + sum(len(part) for part in parts)
    return b"".join(
        [b"MPUB ", topic, b"\n", _MPUB_HEADER.pack(size, len(bodies))] + parts
    )


class NSQDChild:
    """
    One nsqd child process, its stdout and stderr going to ``log_path``.

    A file rather than a pipe: nsqd logs as it runs, and a pipe nobody
    drains would block it mid-benchmark.

    :param args: nsqd's flags.
    :param command: the command before the flags (:func:`nsqd_command`).
    :param log_path: where its output goes; read back by :meth:`output`.
    """

    def __init__(self, args: Sequence[str], command: Sequence[str], log_path: str) -> None:
        self.argv = list(command) + list(args)
        self.log_path = log_path
        self.ports: Dict[str, int] = {}
        self.host = "127.0.0.1"
        self._process: Optional["subprocess.Popen[bytes]"] = None
        self._log: Optional[IO[bytes]] = None

    def __enter__(self) -> "NSQDChild":
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def tcp_address(self) -> Tuple[str, int]:
        """Where its V2 TCP listener is."""
        return (self.host, self.ports["TCP"])

    @property
    def pid(self) -> int:
        """The child's process ID."""
        assert self._process is not None
        return self._process.pid

    def output(self) -> str:
        """Everything it printed so far."""
        try:
            with open(self.log_path, "rb") as log:
                return log.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def _describe(self, message: str) -> str:
        return "%s\ncommand: %s\n--- nsqd output ---\n%s--- end ---" % (
            message,
            " ".join(shlex.quote(arg) for arg in self.argv),
            self.output(),
        )

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """
        Spawn it and wait for its TCP listening line.

        :raises NSQDStartError: it could not be run, exited first, or did
            not listen within ``timeout`` seconds (it is killed then); the
            message holds the command and its output.
        """
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"  # log lines arrive as they are printed
        self._log = open(self.log_path, "wb")
        try:
            self._process = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        except OSError as error:
            self._log.close()
            raise NSQDStartError(self._describe("cannot run nsqd: %s" % (error,)))
        deadline = time.monotonic() + timeout
        while True:
            if self._scan():
                return
            code = self._process.poll()
            if code is not None:
                self._scan()  # a last line may have come with the exit
                if "TCP" in self.ports:
                    return
                raise NSQDStartError(
                    self._describe("nsqd exited with status %d before listening" % (code,))
                )
            if time.monotonic() > deadline:
                self._process.kill()
                self._process.wait()
                raise NSQDStartError(
                    self._describe("nsqd printed no TCP listening line within %s s" % (timeout,))
                )
            time.sleep(0.02)

    def _scan(self) -> bool:
        """Record the listening lines printed so far; True once TCP is known."""
        with open(self.log_path, "rb") as log:
            text = log.read()
        for found in _LISTENING.finditer(text):
            label = found.group(1).decode("ascii")
            self.ports[label] = int(found.group(3))
            if label == "TCP":
                self.host = found.group(2).decode("ascii").strip("[]")
        return "TCP" in self.ports

    def running(self) -> bool:
        """Whether it still runs."""
        return self._process is not None and self._process.poll() is None

    def describe_exit(self) -> str:
        """How it stands, with its output: for errors raised mid-run."""
        if self._process is None:
            return self._describe("nsqd was not started")
        code = self._process.poll()
        state = "still running" if code is None else "exited with status %d" % (code,)
        return self._describe("nsqd %s" % (state,))

    def stop(self, timeout: float = STOP_TIMEOUT) -> Optional[int]:
        """
        SIGTERM it and wait; SIGKILL it after ``timeout`` seconds.

        :return: its exit status (negative: the signal that ended it), or
            ``None`` if it was never started.
        """
        process = self._process
        if process is None:
            return None
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._log is not None:
            self._log.close()
        return process.returncode


class V2Connection:
    """
    A blocking NSQ V2 client connection.

    Sends the ``"  V2"`` magic on connect.  Reads come as parsed frames;
    ``_heartbeat_`` responses are answered with ``NOP`` and never returned.

    :param address: nsqd's TCP ``(host, port)``.
    :param timeout: seconds a connect or a single ``recv`` may block.
    """

    def __init__(self, address: Tuple[str, int], timeout: float = 30.0) -> None:
        self._timeout = timeout
        self._sock = socket.create_connection(address, timeout)
        # Publishing is request/response: Nagle would hold each command.
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buffer = bytearray()
        self._pending: Deque[Tuple[int, bytes]] = deque()
        self._sock.sendall(b"  V2")

    def close(self) -> None:
        """Close the socket."""
        self._sock.close()

    def __enter__(self) -> "V2Connection":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def send(self, data: bytes) -> None:
        """Write ``data`` (one or more whole commands)."""
        self._sock.sendall(data)

    def frames(self, deadline: Optional[float] = None) -> List[Tuple[int, bytes]]:
        """
        Every complete frame received so far, as ``(frame type, data)``;
        blocks until there is at least one that is not a heartbeat.

        :param deadline: a :func:`time.monotonic` time; waiting past it
            with no frame but heartbeats raises :class:`TimeoutError`.
        :raises ConnectionError: nsqd closed the connection.
        :raises ProtocolError: a frame's size is impossible.
        :raises socket.timeout: with no ``deadline``, one ``recv`` waited
            longer than the connection's timeout.
        """
        if self._pending:
            frames = list(self._pending)
            self._pending.clear()
            return frames
        while True:
            frames = self._parse()
            if frames:
                return frames
            chunk = self._recv(deadline)
            if not chunk:
                raise ConnectionError("nsqd closed the connection")
            self._buffer += chunk

    def _recv(self, deadline: Optional[float]) -> bytes:
        """One ``recv``, given up at ``deadline`` (then TimeoutError)."""
        if deadline is None:
            return self._sock.recv(_RECV_SIZE)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("no frame but heartbeats before the deadline")
        self._sock.settimeout(remaining)
        try:
            return self._sock.recv(_RECV_SIZE)
        except socket.timeout:
            raise TimeoutError("no frame before the deadline")
        finally:
            self._sock.settimeout(self._timeout)

    def _parse(self) -> List[Tuple[int, bytes]]:
        """Take the complete frames off the buffer, answering heartbeats."""
        buffer = self._buffer
        end = len(buffer)
        offset = 0
        frames: List[Tuple[int, bytes]] = []
        unpack = _FRAME_HEADER.unpack_from
        while end - offset >= 8:
            size, frame_type = unpack(buffer, offset)
            if size < 4:
                raise ProtocolError("impossible frame size %d" % (size,))
            stop = offset + 4 + size
            if stop > end:
                break
            data = bytes(buffer[offset + 8 : stop])
            offset = stop
            if frame_type == FRAME_RESPONSE and data == _HEARTBEAT:
                self._sock.sendall(b"NOP\n")
            else:
                frames.append((frame_type, data))
        del buffer[:offset]
        return frames

    def read_frame(self) -> Tuple[int, bytes]:
        """The next frame that is not a heartbeat."""
        if not self._pending:
            self._pending.extend(self.frames())
        return self._pending.popleft()

    def expect(self, response: bytes = b"OK") -> None:
        """
        Read one frame and check it is the response ``response``.

        :raises ProtocolError: it is an error frame, a message, or another
            response.
        """
        frame_type, data = self.read_frame()
        if frame_type != FRAME_RESPONSE or data != response:
            kind = {FRAME_ERROR: "error", FRAME_MESSAGE: "message"}.get(
                frame_type, "response"
            )
            raise ProtocolError(
                "expected %r, got %s frame %r" % (response, kind, data[:200])
            )
