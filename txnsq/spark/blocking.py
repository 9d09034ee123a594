# -*- test-case-name: tests.integration.test_spark_blocking -*-
"""
A small blocking NSQ client (one socket, no reactor) for Spark's driver and
executors, which run plain Python and must not start a Twisted reactor.

It speaks the V2 protocol through the same sans-IO codecs and handshake as
the Twisted client (:mod:`txnsq.protocol.v2_client`,
:class:`FrameParser <txnsq.protocol.frames.FrameParser>`, :mod:`txnsq.protocol.message`,
:class:`ClientHandshake <txnsq.protocol.handshake.ClientHandshake>`): magic and IDENTIFY,
then TLS (the ``ssl`` module), snappy or deflate, AUTH; then
SUB/RDY/FIN/TOUCH/REQ or PUB/MPUB.  Heartbeats are answered with
NOP by whoever reads frames.

One thread may read (:meth:`BlockingConnection.read_frames`) while others
write (:meth:`BlockingConnection.send`): one lock keeps a read and a write
from using the socket (and its TLS and compression state) at once.
"""

from __future__ import annotations

import select
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from txnsq.protocol.host_port import split_host_port
from txnsq.protocol import v2_client as codec
from txnsq.protocol.compression import CompressionError
from txnsq.protocol.frames import FRAME_TYPE_ERROR, FRAME_TYPE_RESPONSE, FrameError, FrameParser
from txnsq.protocol.handshake import ClientHandshake, HandshakeError, Ready, Send, StartCompression, StartTLS
from txnsq.protocol.v2_client import HEARTBEAT, NSQError
from txnsq.spark.settings import DEFAULT_MAX_BODY_SIZE, DEFAULT_MAX_MSG_SIZE, ClientSettings

__all__ = [
    "DEFAULT_MAX_BODY_SIZE",
    "DEFAULT_MAX_MSG_SIZE",
    "BlockingConnection",
    "ClientSettings",
    "NSQConnectionFailed",
    "NSQError",
    "lookup_nsqd_addresses",
]

#: The largest handshake frame accepted (IDENTIFY and AUTH replies are small).
_MAX_HANDSHAKE_FRAME = 1024 * 1024
_RECV_SIZE = 256 * 1024


class NSQConnectionFailed(ConnectionError):
    """An nsqd could not be reached, or the connection to it broke."""


Frame = Tuple[int, bytes]


class BlockingConnection:
    """
    A connected, identified (and upgraded, authenticated) V2 connection to
    one nsqd over a blocking socket.

    :ivar address: ``host:port`` of the nsqd.
    :ivar identify_response: nsqd's IDENTIFY reply (empty for a bare OK).
    :ivar msg_timeout: the in-flight timeout nsqd applies to this client's
        messages, in seconds.
    :ivar max_msg_size: the largest message body nsqd accepts: the IDENTIFY
        reply's ``max_msg_size`` when a server sends one, else the value
        given to the constructor.
    :ivar max_body_size: the same for a whole MPUB body.
    """

    def __init__(
        self,
        address: str,
        settings: Optional[ClientSettings] = None,
        max_msg_size: int = DEFAULT_MAX_MSG_SIZE,
        max_body_size: int = DEFAULT_MAX_BODY_SIZE,
    ) -> None:
        """
        Connect to ``address`` and finish the handshake.

        :raises NSQConnectionFailed: nsqd unreachable, silent, or the
            handshake broke (TLS refused, malformed frames).
        :raises NSQError: nsqd refused IDENTIFY or AUTH.
        :raises ValueError: ``address`` is not ``host:port``.
        """
        self.address = address
        self.settings = settings if settings is not None else ClientSettings()
        self.identify_response: Dict[str, Any] = {}
        self.auth_response: Dict[str, Any] = {}
        self.msg_timeout = 60.0
        self.max_msg_size = max_msg_size
        self.max_body_size = max_body_size
        self._write_lock = threading.Lock()
        self._parser = FrameParser()
        self._encoder: Any = None
        self._decoder: Any = None
        self._closed = False
        host, port = split_host_port(address)
        timeout = self.settings.connect_timeout
        try:
            raw = socket.create_connection((host, port), timeout=timeout)
        except OSError as error:
            raise NSQConnectionFailed("cannot connect to nsqd %s: %s" % (address, error)) from None
        self._sock: Union[socket.socket, ssl.SSLSocket] = raw
        try:
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._handshake(host)
        except BaseException:
            self._sock.close()
            raise
        # After the handshake reads block; callers pass their own deadlines.
        self._sock.settimeout(None)

    # -- handshake ---------------------------------------------------------

    def _handshake(self, host: str) -> None:
        """Drive the handshake machine over the blocking socket until ready."""
        settings = self.settings
        shake = ClientHandshake(
            settings.identify_body(),
            settings.auth_secret,
            require_tls=settings.tls,
            max_frame_size=_MAX_HANDSHAKE_FRAME,
        )
        self._sock.sendall(shake.initiate())
        while True:
            chunk = self._decode(self._recv())
            try:
                steps = shake.receive(chunk)
            except HandshakeError as error:
                raise NSQConnectionFailed("nsqd %s: %s" % (self.address, error)) from None
            except CompressionError as error:
                raise NSQConnectionFailed("corrupt compressed data from nsqd %s: %s" % (self.address, error)) from None
            for step in steps:
                if isinstance(step, Send):
                    self._write(step.data)
                elif isinstance(step, StartTLS):
                    self._start_tls(host)
                elif isinstance(step, StartCompression):
                    self._encoder, self._decoder = step.encoder, step.decoder
                elif isinstance(step, Ready):
                    self.auth_response = shake.auth_response or {}
                    self._identified(shake.identify_response)
                    if step.rest:
                        self._parser.feed(step.rest)
                    return

    def _start_tls(self, host: str) -> None:
        """nsqd granted TLS: wrap the socket (the TLS handshake runs now)."""
        context = self.settings.ssl_context()
        try:
            self._sock = context.wrap_socket(self._sock, server_hostname=self.settings.tls_server_name or host)
        except (ssl.SSLError, OSError) as error:
            raise NSQConnectionFailed("TLS with nsqd %s failed: %s" % (self.address, error)) from None

    def _identified(self, response: Dict[str, Any]) -> None:
        """Keep what IDENTIFY's reply says of nsqd's limits."""
        self.identify_response = response
        timeout = response.get("msg_timeout")
        if isinstance(timeout, int) and timeout > 0:
            self.msg_timeout = timeout / 1000.0
        for key in ("max_msg_size", "max_body_size"):
            value = response.get(key)
            if isinstance(value, int) and value > 0:
                setattr(self, key, value)

    # -- IO ------------------------------------------------------------------

    def _recv(self) -> bytes:
        try:
            chunk = self._sock.recv(_RECV_SIZE)
        except socket.timeout:
            raise NSQConnectionFailed("nsqd %s did not answer in time" % (self.address,)) from None
        except OSError as error:
            raise NSQConnectionFailed("connection to nsqd %s broke: %s" % (self.address, error)) from None
        if not chunk:
            raise NSQConnectionFailed("nsqd %s closed the connection" % (self.address,))
        return chunk

    def _decode(self, data: bytes) -> bytes:
        if self._decoder is None or not data:
            return data
        try:
            decoded: bytes = self._decoder.decode(data)
        except CompressionError as error:
            raise NSQConnectionFailed("corrupt compressed data from nsqd %s: %s" % (self.address, error)) from None
        return decoded

    def _write(self, data: bytes) -> None:
        if self._encoder is not None:
            data = self._encoder.encode(data)
        try:
            self._sock.sendall(data)
        except OSError as error:
            raise NSQConnectionFailed("cannot write to nsqd %s: %s" % (self.address, error)) from None

    def send(self, data: bytes) -> None:
        """
        Write encoded commands (thread-safe).

        :raises NSQConnectionFailed: the connection is closed or broken.
        """
        with self._write_lock:
            if self._closed:
                raise NSQConnectionFailed("connection to nsqd %s is closed" % (self.address,))
            self._write(data)

    def read_frames(self, timeout: Optional[float]) -> List[Frame]:
        """
        The frames received within ``timeout`` seconds (``None``: wait for
        at least one); heartbeats are answered with NOP and left out, so the
        list may be empty.

        :raises NSQConnectionFailed: the connection broke or nsqd sent
            something that is not a frame.
        """
        sock = self._sock
        # Reads and writes never overlap (one lock), because an SSL object
        # must not be used by two threads at once; select waits outside it.
        pending = isinstance(sock, ssl.SSLSocket) and sock.pending()
        if not pending:
            try:
                readable, _, _ = select.select([sock], [], [], timeout)
            except (OSError, ValueError) as error:
                raise NSQConnectionFailed("connection to nsqd %s broke: %s" % (self.address, error)) from None
            if not readable:
                return []
        with self._write_lock:
            if self._closed:
                raise NSQConnectionFailed("connection to nsqd %s is closed" % (self.address,))
            try:
                chunk = sock.recv(_RECV_SIZE)
            except ssl.SSLWantReadError:
                return []
            except OSError as error:
                raise NSQConnectionFailed("connection to nsqd %s broke: %s" % (self.address, error)) from None
        if not chunk:
            raise NSQConnectionFailed("nsqd %s closed the connection" % (self.address,))
        try:
            frames = self._parser.feed(self._decode(chunk))
        except FrameError as error:
            raise NSQConnectionFailed("malformed frame from nsqd %s: %s" % (self.address, error)) from None
        out = []
        for frame in frames:
            if frame[0] == FRAME_TYPE_RESPONSE and frame[1] == HEARTBEAT:
                self.send(codec.nop())
            else:
                out.append(frame)
        return out

    def _response(self, timeout: float) -> bytes:
        """
        The data of the next response frame (for PUB/MPUB/SUB).

        :raises NSQError: an error frame came instead.
        :raises NSQConnectionFailed: none came within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise NSQConnectionFailed("nsqd %s did not answer in %gs" % (self.address, timeout))
            for frame_type, data in self.read_frames(remaining):
                if frame_type == FRAME_TYPE_ERROR:
                    raise codec.parse_error(data)
                if frame_type == FRAME_TYPE_RESPONSE:
                    return data
                raise NSQConnectionFailed("nsqd %s sent a message to a publisher" % (self.address,))

    # -- commands ------------------------------------------------------------

    def subscribe(self, topic: str, channel: str, timeout: float = 10.0) -> None:
        """
        SUB and wait for its OK (RDY is left at 0).

        :raises NSQError: invalid names or nsqd's refusal.
        """
        codec.check_topic("SUB", topic)
        codec.check_channel("SUB", channel)
        self.send(codec.sub(topic, channel))
        self._response(timeout)

    def publish(self, topic: str, body: bytes, timeout: float = 30.0) -> None:
        """
        PUB one message and wait for OK.

        :raises NSQError: nsqd refused it (``E_BAD_MESSAGE`` for a body too big).
        """
        codec.check_topic("PUB", topic)
        self.send(codec.pub(topic, body))
        self._response(timeout)

    def mpublish(self, topic: str, bodies: Sequence[bytes], timeout: float = 30.0) -> None:
        """
        MPUB the bodies as one command and wait for OK (one message is sent
        as PUB, which older servers need for a single body).

        :raises NSQError: nsqd refused them (``E_BAD_BODY``, ``E_BAD_MESSAGE``).
        """
        if len(bodies) == 1:
            self.publish(topic, bodies[0], timeout)
            return
        codec.check_topic("MPUB", topic)
        self.send(codec.mpub(topic, bodies))
        self._response(timeout)

    def ready(self, count: int) -> None:
        """RDY ``count``."""
        self.send(codec.rdy(count))

    def finish(self, msg_ids: Iterable[bytes]) -> None:
        """FIN each id (one write)."""
        self.send(b"".join(codec.fin(msg_id) for msg_id in msg_ids))

    def touch(self, msg_ids: Iterable[bytes]) -> None:
        """TOUCH each id (one write)."""
        data = b"".join(codec.touch(msg_id) for msg_id in msg_ids)
        if data:
            self.send(data)

    def requeue(self, msg_ids: Iterable[bytes], delay_ms: int = 0) -> None:
        """REQ each id with ``delay_ms``."""
        data = b"".join(codec.req(msg_id, delay_ms) for msg_id in msg_ids)
        if data:
            self.send(data)

    def close_wait(self, timeout: float = 10.0) -> None:
        """
        CLS, and wait for nsqd's CLOSE_WAIT: every command sent before has
        then been handled.  Messages still arriving are left unfinished.

        :raises NSQConnectionFailed: no CLOSE_WAIT within ``timeout`` seconds.
        """
        self.send(codec.cls())
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise NSQConnectionFailed("nsqd %s did not answer CLS in %gs" % (self.address, timeout))
            for frame_type, data in self.read_frames(remaining):
                if frame_type == FRAME_TYPE_RESPONSE and data == codec.CLOSE_WAIT:
                    return

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def close(self) -> None:
        """Close the socket; messages not finished are requeued by nsqd."""
        with self._write_lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()


def lookup_nsqd_addresses(lookupd_addresses: Sequence[str], topic: str, timeout: float = 5.0) -> List[str]:
    """
    The ``host:port`` of every nsqd that the lookupds (HTTP ``host:port`` or
    URLs) list as a producer of ``topic``, without duplicates.

    :raises NSQConnectionFailed: no lookupd answered.
    """
    from txnsq.client.discovery import LookupdError, lookup_url, parse_lookup_response

    found: List[str] = []
    errors = []
    for address in lookupd_addresses:
        url = lookup_url(address, topic)
        try:
            with urllib.request.urlopen(url, timeout=timeout) as reply:
                body = reply.read()
        except urllib.error.HTTPError as error:
            if error.code == 404:
                # Go lookupd answers 404 TOPIC_NOT_FOUND: no producers yet.
                continue
            errors.append("%s: HTTP %d" % (url, error.code))
            continue
        except OSError as error:
            errors.append("%s: %s" % (url, error))
            continue
        try:
            addresses = parse_lookup_response(body)
        except LookupdError as error:
            errors.append("%s: %s" % (url, error))
            continue
        for nsqd in addresses:
            if nsqd not in found:
                found.append(nsqd)
    if errors and len(errors) == len(lookupd_addresses):
        raise NSQConnectionFailed("no lookupd answered: " + "; ".join(errors))
    return found
