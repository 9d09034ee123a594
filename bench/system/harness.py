"""
What the benchmarks in ``bench/system/`` share: an ``nsqd`` child process
and a blocking NSQ V2 client socket.

No reactor and no Twisted: a benchmark must not measure a client
framework, and the same script drives any nsqd given with ``--nsqd``
(Go's included). The client side speaks through txnsq's own sans-IO codec
(:mod:`txnsq.protocol`: the commands of :mod:`~txnsq.protocol.v2_client`,
:class:`~txnsq.protocol.frames.FrameParser`, the handshake machine
:class:`~txnsq.protocol.handshake.ClientHandshake` and the compression
codecs), so that the benchmarks exercise the codec the client library
uses, and no third V2 client is kept in step with it by hand.

:class:`NSQDChild` starts nsqd with its listeners on ``127.0.0.1:0`` and
reads the bound ports from its ``TCP: listening on HOST:PORT`` line, as
``tests/integration/nsqd_process.py`` does under the reactor.
:class:`V2Connection` is a blocking socket around the codec: commands
out, frames in, heartbeats answered with ``NOP``, and with ``features``
the IDENTIFY upgrades in NSQ's order (TLS over memory BIOs, so that the
bytes on the wire can be counted, then snappy or deflate).

For the load generators, which must never be the bottleneck, a connection
can hand its socket over (:meth:`V2Connection.release_socket`) to a
:class:`MessageStream`, which parses message frames in place in one
reusable buffer and answers them with one write of ``FIN``\\s per read:
the one place frames are cut here without :class:`FrameParser`, because
that copies every frame out and the loop must cost a small fraction of
what the same messages cost nsqd. :func:`create_channel` makes a channel
before publishing, :func:`http_post` sends nsqd's HTTP commands
(``/topic/create``, ``/channel/create``) with ``urllib``, and
:data:`SEQUENCE` with :func:`filler` make bodies a consumer can check.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import ssl
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import deque
from typing import IO, Any, Deque, Dict, List, Mapping, Optional, Sequence, Tuple

from txnsq.protocol.compression import CompressionError, Decoder, Encoder
from txnsq.protocol.frames import (
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    FrameError,
    FrameParser,
    encode_message_frame_header,
)
from txnsq.protocol.handshake import ClientHandshake, HandshakeError, Ready, Send, StartCompression, StartTLS
from txnsq.protocol.message import MESSAGE_HEADER_LENGTH
from txnsq.protocol.v2_client import HEARTBEAT, MAGIC_V2, OK, NSQError, fin, nop, parse_error
from txnsq.protocol.v2_client import sub as v2_sub

__all__ = [
    "BenchError",
    "MessageStream",
    "NSQDChild",
    "NSQDError",
    "NSQDStartError",
    "ProtocolError",
    "SEQUENCE",
    "V2Connection",
    "create_channel",
    "describe_frame",
    "directory_size",
    "filler",
    "free_ports",
    "http_post",
    "nsqd_command",
]

#: How long nsqd may take to print its TCP listening line.
START_TIMEOUT = 20.0

#: How long nsqd may take to exit after SIGTERM (a disk backend flushes).
STOP_TIMEOUT = 30.0

_LISTENING = re.compile(rb"(TCP|HTTP|HTTPS|MetaQ): listening on (\S+):([0-9]+)")
_FRAME_HEADER = struct.Struct(">ii")

#: The 8-byte big-endian sequence number that starts a checked body, so
#: that a consumer can tell a lost or duplicated message from an intact one.
SEQUENCE = struct.Struct(">Q")
#: ``FIN`` for a 16-byte ID, as :func:`~txnsq.protocol.v2_client.fin`
#: writes it, and its part before the ID.
_FIN_TEMPLATE = fin(bytes(16))
_FIN_HEAD = _FIN_TEMPLATE[:-17]
_RECV_SIZE = 256 * 1024
#: The least free room a MessageStream reads into: below it, it first moves
#: the unparsed tail to the buffer's start, or grows the buffer.
_MIN_RECV = 64 * 1024


class NSQDError(Exception):
    """Base of the harness's errors."""


class BenchError(NSQDError):
    """A benchmark's run could not finish; the message says where (with nsqd's output)."""


class NSQDStartError(NSQDError):
    """nsqd exited or stayed silent instead of listening; carries its output."""


class ProtocolError(NSQDError):
    """nsqd answered with an error frame, or broke the V2 framing."""


def free_ports(count: int) -> List[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (free when asked: another process may take one)."""
    sockets = []
    for _ in range(count):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sockets.append(sock)
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


def http_post(address: Tuple[str, int], path: str, timeout: float = START_TIMEOUT) -> bytes:
    """
    ``POST http://HOST:PORT/path`` with an empty body, as ``curl -X POST``
    does (``/topic/create?topic=...``, say); the reply's body.

    Connections refused are retried until ``timeout`` seconds have passed:
    nsqd may print its TCP line before its HTTP listener is up.

    :raises urllib.error.HTTPError: nsqd answered with an error status.
    :raises urllib.error.URLError: nothing listened within ``timeout``.
    """
    url = "http://%s:%d%s" % (address[0], address[1], path)
    deadline = time.monotonic() + timeout
    while True:
        request = urllib.request.Request(url, data=b"", method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as reply:
                return reply.read()  # type: ignore[no-any-return]
        except urllib.error.HTTPError:
            raise
        except urllib.error.URLError as error:
            if not isinstance(error.reason, ConnectionRefusedError) or time.monotonic() > deadline:
                raise
        time.sleep(0.05)


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


def filler(size: int) -> bytes:
    """
    What follows a checked body's :data:`SEQUENCE` number: ``size - 8``
    fixed bytes (none when ``size`` is 8 or less).
    """
    pattern = b"0123456789abcdefghijklmnopqrstuvwxyz"
    length = max(0, size - SEQUENCE.size)
    return (pattern * (length // len(pattern) + 1))[:length]


def create_channel(address: Tuple[str, int], topic: bytes, channel: bytes) -> None:
    """
    Create ``topic`` and its ``channel`` before publishing, so that every
    message published goes to the channel's queue.

    A ``SUB`` on a connection that then closes: a channel without
    ``#ephemeral`` stays when its last subscriber leaves.

    :raises ProtocolError: nsqd refused the ``SUB``.
    """
    with V2Connection(address) as connection:
        connection.send(v2_sub(topic, channel))
        connection.expect(OK)


class NSQDChild:
    """
    One nsqd child process, its stdout and stderr going to ``log_path``.

    A file rather than a pipe: nsqd logs as it runs, and a pipe nobody
    drains would block it mid-benchmark.

    :param args: nsqd's flags.
    :param command: the command before the flags (:func:`nsqd_command`).
    :param log_path: where its output goes; read back by :meth:`output`.
    :param env: variables to set in its environment, on top of this
        process's (``GOMAXPROCS`` for Go's nsqd, say).
    """

    def __init__(
        self,
        args: Sequence[str],
        command: Sequence[str],
        log_path: str,
        env: Optional[Mapping[str, str]] = None,
    ) -> None:
        self.argv = list(command) + list(args)
        self.log_path = log_path
        self.env = dict(env or {})
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
        env.update(self.env)
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
    A blocking NSQ V2 client connection, speaking through txnsq's own
    sans-IO codec: the handshake is :class:`ClientHandshake`, frames are
    cut by :class:`FrameParser`, error frames read by
    :func:`~txnsq.protocol.v2_client.parse_error`, and the codecs are
    those of :mod:`txnsq.protocol.compression` (nsqd's own).

    Sends the ``"  V2"`` magic on connect; with ``features``, also
    ``IDENTIFY`` with them, and then takes the upgrades nsqd grants, in
    NSQ's order: TLS (an :class:`ssl.SSLObject` over memory BIOs, so that
    the bytes counted are the encrypted ones), then snappy or deflate.
    ``_heartbeat_`` responses are answered with ``NOP`` and never
    returned. ``bytes_sent`` and ``bytes_received`` count what crossed the
    socket, after compression and TLS.

    :param address: nsqd's TCP ``(host, port)``.
    :param timeout: seconds a connect or a single ``recv`` may block.
    :param features: the IDENTIFY body; ``None`` sends no IDENTIFY.
    :param tls: the context for TLS, when ``features`` asks for ``tls_v1``.
    :param server_hostname: the name TLS checks the certificate against.
    :ivar identify_response: what nsqd agreed to (``{}`` after a bare
        ``OK``, or without ``features``).
    :ivar compression: ``"snappy"``, ``"deflate"`` or ``None``.
    :raises ProtocolError: nsqd refused the IDENTIFY or broke the
        handshake, or granted TLS without a ``tls`` context here.
    :raises ssl.SSLError: the TLS handshake failed.
    :raises ConnectionError: nsqd closed the connection mid-handshake.
    """

    def __init__(
        self,
        address: Tuple[str, int],
        timeout: float = 30.0,
        features: Optional[Mapping[str, Any]] = None,
        tls: Optional[ssl.SSLContext] = None,
        server_hostname: Optional[str] = None,
    ) -> None:
        self._timeout = timeout
        self._sock = socket.create_connection(address, timeout)
        # Publishing is request/response: Nagle would hold each command.
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._parser = FrameParser()
        self._pending: Deque[Tuple[int, bytes]] = deque()
        self.bytes_sent = 0
        self.bytes_received = 0
        self._tls: Optional[ssl.SSLObject] = None
        self._tls_in = ssl.MemoryBIO()
        self._tls_out = ssl.MemoryBIO()
        self._encoder: Optional[Encoder] = None
        self._decoder: Optional[Decoder] = None
        self.identify_response: Dict[str, Any] = {}
        self.compression: Optional[str] = None
        try:
            if features is None:
                self._send_raw(MAGIC_V2)
            else:
                self._handshake(features, tls, server_hostname)
        except BaseException:
            self._sock.close()
            raise

    def close(self) -> None:
        """Close the socket."""
        self._sock.close()

    def __enter__(self) -> "V2Connection":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _handshake(
        self, features: Mapping[str, Any], context: Optional[ssl.SSLContext], server_hostname: Optional[str]
    ) -> None:
        """Drive :class:`ClientHandshake` over the socket until it is ready."""
        shake = ClientHandshake(features)
        self._send_raw(shake.initiate())
        while True:
            chunk = self._recv(None)
            if not chunk:
                raise ConnectionError("nsqd closed the connection during the handshake")
            try:
                steps = shake.receive(chunk)
            except NSQError as error:
                raise ProtocolError("nsqd refused the handshake: %s" % (error,)) from None
            except (HandshakeError, CompressionError) as error:
                raise ProtocolError("nsqd broke the handshake: %s" % (error,)) from None
            for step in steps:
                if isinstance(step, Send):
                    self.send(step.data)
                elif isinstance(step, StartTLS):
                    if context is None:
                        raise ProtocolError("nsqd granted TLS, and no TLS context was given")
                    self._start_tls(context, server_hostname)
                elif isinstance(step, StartCompression):
                    self._encoder, self._decoder = step.encoder, step.decoder
                    self.compression = step.name
                elif isinstance(step, Ready):
                    self.identify_response = shake.identify_response
                    if step.rest:
                        self._pending.extend(self._frames_of(step.rest))
                    return

    def _start_tls(self, context: ssl.SSLContext, server_hostname: Optional[str]) -> None:
        """Run the TLS handshake over the memory BIOs; from then on everything goes through TLS."""
        tls = context.wrap_bio(self._tls_in, self._tls_out, server_hostname=server_hostname)
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._flush_tls()
                chunk = self._recv_raw(None)
                if not chunk:
                    raise ConnectionError("nsqd closed the connection during the TLS handshake")
                self._tls_in.write(chunk)
        self._flush_tls()
        self._tls = tls

    def _send_raw(self, data: bytes) -> None:
        self._sock.sendall(data)
        self.bytes_sent += len(data)

    def release_socket(self) -> socket.socket:
        """
        Hand the blocking socket over to a hot loop (a
        :class:`MessageStream`, say); this object must not be used after.

        :raises ProtocolError: bytes were received and not yet read, or TLS
            or a codec is in use: those cannot be carried over to a raw
            socket.
        """
        if self._parser.buffered() or self._pending:
            raise ProtocolError("%d bytes and %d frames unread on the connection"
                                % (self._parser.buffered(), len(self._pending)))
        if self._tls is not None or self._encoder is not None:
            raise ProtocolError("a connection with TLS or a codec cannot be released")
        return self._sock

    def encode(self, data: bytes) -> bytes:
        """
        ``data`` through the connection's compression (itself if none),
        for :meth:`send_encoded`.

        Encoding ahead of sending keeps the client's compression out of a
        timed loop, but a stream codec has state: send the results in the
        order they were encoded, and send nothing else in between (no
        heartbeats: IDENTIFY with ``"heartbeat_interval": -1``).
        """
        encoder = self._encoder
        return data if encoder is None else encoder.encode(data)

    def send_encoded(self, data: bytes) -> None:
        """Write bytes :meth:`encode` gave, through TLS if it was started."""
        tls = self._tls
        if tls is None:
            self._send_raw(data)
            return
        view = memoryview(data)
        while view:
            written = tls.write(view)
            view = view[written:]
            self._flush_tls()

    def send(self, data: bytes) -> None:
        """Write ``data`` (one or more whole commands, :mod:`txnsq.protocol.v2_client`'s)."""
        self.send_encoded(self.encode(data))

    def _flush_tls(self) -> None:
        """Send what the TLS object wrote to its outgoing BIO."""
        pending = self._tls_out.read()
        if pending:
            self._send_raw(pending)

    def tls_description(self) -> str:
        """The TLS version and cipher in use, or ``""`` without TLS."""
        if self._tls is None:
            return ""
        cipher = self._tls.cipher()
        return "%s %s" % (self._tls.version(), cipher[0] if cipher else "?")

    def frames(self, deadline: Optional[float] = None) -> List[Tuple[int, bytes]]:
        """
        Every complete frame received so far, as ``(frame type, data)``;
        blocks until there is at least one that is not a heartbeat.

        :param deadline: a :func:`time.monotonic` time; waiting past it
            with no frame but heartbeats raises :class:`TimeoutError`.
        :raises ConnectionError: nsqd closed the connection.
        :raises ProtocolError: a frame's size is impossible, or the
            compressed stream is corrupt.
        :raises socket.timeout: with no ``deadline``, one ``recv`` waited
            longer than the connection's timeout.
        """
        if self._pending:
            frames = list(self._pending)
            self._pending.clear()
            return frames
        while True:
            chunk = self._recv(deadline)
            if not chunk:
                raise ConnectionError("nsqd closed the connection")
            frames = self._frames_of(chunk)
            if frames:
                return frames

    def _frames_of(self, data: bytes) -> List[Tuple[int, bytes]]:
        """The frames ``data`` completes, heartbeats answered and left out."""
        try:
            frames = self._parser.feed(data)
        except FrameError as error:
            raise ProtocolError(str(error)) from None
        beats = 0
        for frame_type, body in frames:
            if frame_type == FRAME_TYPE_RESPONSE and body == HEARTBEAT:
                beats += 1
        if beats:
            self.send(nop() * beats)
            frames = [frame for frame in frames if frame[0] != FRAME_TYPE_RESPONSE or frame[1] != HEARTBEAT]
        return frames

    def _recv(self, deadline: Optional[float]) -> bytes:
        """
        The next plain bytes, through TLS and the codec: never empty but at
        the end of the stream.

        :raises ProtocolError: the compressed stream is corrupt.
        """
        tls = self._tls
        while True:
            chunk = self._recv_raw(deadline)
            if not chunk:
                return b""  # closed; a truncated TLS record or block is lost
            if tls is not None:
                self._tls_in.write(chunk)
                plain = self._read_tls()
                if plain is None:  # a record not yet complete
                    continue
                if not plain:  # close_notify
                    return b""
                chunk = plain
            decoder = self._decoder
            if decoder is not None:
                try:
                    chunk = decoder.decode(chunk)
                except CompressionError as error:
                    raise ProtocolError(str(error)) from None
                if not chunk:  # a compressed block not yet complete
                    continue
            return chunk

    def _read_tls(self) -> Optional[bytes]:
        """What TLS decrypted so far; ``b""`` at its end, ``None`` if nothing yet."""
        tls = self._tls
        assert tls is not None
        pieces: List[bytes] = []
        while True:
            try:
                piece = tls.read(_RECV_SIZE)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                piece = b""
            if not piece:
                if pieces:
                    break
                return b""
            pieces.append(piece)
        # Reading may have produced records to send (a key update, say).
        self._flush_tls()
        return b"".join(pieces) if pieces else None

    def _recv_raw(self, deadline: Optional[float]) -> bytes:
        """One ``recv``, given up at ``deadline`` (then TimeoutError)."""
        if deadline is None:
            chunk = self._sock.recv(_RECV_SIZE)
        else:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no frame but heartbeats before the deadline")
            self._sock.settimeout(remaining)
            try:
                chunk = self._sock.recv(_RECV_SIZE)
            except socket.timeout:
                raise TimeoutError("no frame before the deadline")
            finally:
                self._sock.settimeout(self._timeout)
        self.bytes_received += len(chunk)
        return chunk

    def read_frame(self) -> Tuple[int, bytes]:
        """The next frame that is not a heartbeat."""
        if not self._pending:
            self._pending.extend(self.frames())
        return self._pending.popleft()

    def expect(self, response: bytes = OK) -> None:
        """
        Read one frame and check it is the response ``response``.

        :raises ProtocolError: it is an error frame (its code and text in
            the message), a message, or another response.
        """
        frame_type, data = self.read_frame()
        if frame_type != FRAME_TYPE_RESPONSE or data != response:
            raise ProtocolError("expected %r, got %s" % (response, describe_frame(frame_type, data)))


def describe_frame(frame_type: int, data: bytes) -> str:
    """A frame in words, for errors: an error frame's code and text, else its kind and first bytes."""
    if frame_type == FRAME_TYPE_ERROR:
        return "error %s" % (parse_error(data),)
    kind = "message" if frame_type == FRAME_TYPE_MESSAGE else "response"
    return "%s frame %r" % (kind, data[:200])


class MessageStream:
    """
    The frames nsqd sends one subscribed connection, parsed where they land.

    One fixed buffer takes every ``recv_into``; the frames are read in it
    with :meth:`struct.Struct.unpack_from`, and only each message's 16-byte
    ID is copied out, for the ``FIN`` that :meth:`take` returns with all the
    others of that read. This is the client side of a load generator: it
    must cost a small fraction of what the same messages cost nsqd.

    Heartbeats are answered (a ``NOP`` joins the ``FIN``\\s); other
    responses are ignored.

    :param sock: a connection that has sent ``SUB`` and read its ``OK``
        (:meth:`V2Connection.release_socket`).
    :param body_size: when given, messages whose body has another size are
        counted in :attr:`bad_size`.
    :param heads: when given, the first 8 bytes of every body are appended
        to it as a big-endian unsigned integer (a sequence number or a
        timestamp); bodies shorter than 8 bytes count in :attr:`bad_size`.
    :param buffer_size: the initial buffer; it grows when a frame nearly
        fills it.
    """

    __slots__ = ("sock", "body_size", "heads", "bad_size", "_buffer", "_view", "_start", "_end")

    def __init__(
        self,
        sock: socket.socket,
        body_size: Optional[int] = None,
        heads: Optional[List[int]] = None,
        buffer_size: int = 1 << 20,
    ) -> None:
        self.sock = sock
        self.body_size = body_size
        self.heads = heads
        self.bad_size = 0
        self._buffer = bytearray(buffer_size)
        self._view = memoryview(self._buffer)
        self._start = 0
        self._end = 0

    def receive(self) -> int:
        """
        One ``recv_into`` the free end of the buffer.

        :return: the number of bytes read; 0 when nsqd closed the connection.
        """
        if len(self._buffer) - self._end < _MIN_RECV:
            self._compact()
        count = self.sock.recv_into(self._view[self._end :])
        self._end += count
        return count

    def _compact(self) -> None:
        """
        Move the incomplete frame at the parse position to the buffer's
        start, and double the buffer if that still leaves too little room
        (a frame nearly as large as the buffer).
        """
        start = self._start
        end = self._end
        if start:
            self._buffer[: end - start] = self._buffer[start:end]
            self._start = 0
            self._end = end = end - start
        if len(self._buffer) - end < _MIN_RECV:
            old = self._buffer
            self._view.release()
            self._buffer = bytearray(2 * len(old))
            self._buffer[:end] = old[:end]
            self._view = memoryview(self._buffer)

    def take(self) -> Tuple[int, bytes]:
        """
        Parse the complete frames received so far.

        :return: ``(messages, reply)``: how many message frames there were,
            and the bytes to send back (a ``FIN`` per message and a ``NOP``
            per heartbeat, or ``b""``).
        :raises ProtocolError: nsqd sent an error frame, or a frame whose
            size is impossible.
        """
        uniform, fins = self._take_uniform()
        messages, reply = self._take_frames()
        if uniform:
            return uniform + messages, fins + reply
        return messages, reply

    def _take_uniform(self) -> Tuple[int, bytes]:
        """
        The fast path for a read that is a run of messages of ``body_size``:
        check every frame header and gather every ID with a few
        extended-slice copies (``buffer[start:stop:stride]``), at C speed,
        instead of a Python loop turn per message.

        Takes nothing unless every whole frame in the buffer (at the stride
        of such a message) has the header of one; the general loop then
        parses them.
        """
        if self.body_size is None or self.heads is not None:
            return 0, b""
        stride = 8 + MESSAGE_HEADER_LENGTH + self.body_size
        start = self._start
        count = (self._end - start) // stride
        if count < 2:
            return 0, b""
        stop = start + count * stride
        buffer = self._buffer
        header = encode_message_frame_header(MESSAGE_HEADER_LENGTH + self.body_size)
        for offset in range(8):
            if buffer[start + offset : stop : stride].count(header[offset]) != count:
                return 0, b""
        fins = bytearray(_FIN_TEMPLATE * count)
        id_start = start + 8 + 10  # frame header, timestamp, attempts
        for offset in range(16):
            fins[len(_FIN_HEAD) + offset :: len(_FIN_TEMPLATE)] = buffer[id_start + offset : stop : stride]
        self._start = stop
        return count, bytes(fins)

    def _take_frames(self) -> Tuple[int, bytes]:
        """The general loop of :meth:`take`: one turn per frame, any frame."""
        buffer = self._buffer
        unpack = _FRAME_HEADER.unpack_from
        position = self._start
        end = self._end
        ids: List[bytearray] = []
        append = ids.append
        nops = 0
        # A message frame's size field counts the type (4), the header (26)
        # and the body.
        expected = -1 if self.body_size is None else self.body_size + 4 + MESSAGE_HEADER_LENGTH
        heads = self.heads
        unpack_head = SEQUENCE.unpack_from
        bad = 0
        while end - position >= 8:
            size, frame_type = unpack(buffer, position)
            if size < 4:
                raise ProtocolError("impossible frame size %d" % (size,))
            stop = position + 4 + size
            if stop > end:
                break
            if frame_type == FRAME_TYPE_MESSAGE:
                # The data starts at +8: timestamp (8), attempts (2), the ID.
                append(buffer[position + 18 : position + 34])
                if expected >= 0 and size != expected:
                    bad += 1
                if heads is not None:
                    if size >= 4 + MESSAGE_HEADER_LENGTH + 8:
                        heads.append(unpack_head(buffer, position + 34)[0])
                    else:
                        bad += 1
            elif frame_type == FRAME_TYPE_RESPONSE:
                if buffer[position + 8 : stop] == HEARTBEAT:
                    nops += 1
            else:
                raise ProtocolError(
                    "nsqd sent %s" % (describe_frame(frame_type, bytes(buffer[position + 8 : stop])),)
                )
            position = stop
        if position == end:  # all parsed: the next recv starts at 0
            position = self._end = 0
        self._start = position
        self.bad_size += bad
        reply = nop() * nops
        if ids:
            # fin() for each ID, joined in one go.
            reply += _FIN_HEAD + (b"\n" + _FIN_HEAD).join(ids) + b"\n"
        return len(ids), reply
