# -*- test-case-name: tests.test_protocol_v2 -*-
"""
The server side of NSQ's V2 command stream, sans-IO.

Commands are lines ``NAME param param\\n`` (one ``\\r`` before the ``\\n``
is dropped; parameters are split on single spaces, as Go's
``bytes.Split``).  IDENTIFY, AUTH, PUB, DPUB and MPUB are followed by a
4-byte big-endian signed size and a body.  The parser makes Go nsqd's
framing checks in Go's order with Go's error texts, so that a client sees
the same error for the same bytes, at the same moment (a check is made as
soon as the bytes it needs have arrived, as Go's blocking reads do).
Checks that depend on the connection's state belong to the caller, which
gets two hooks for those Go makes before it reads a body.

MPUB's messages are read as a stream, as Go's ``readMPUB`` does: the
declared body size is checked but does not bound the parse, so a count
smaller than the body leaves bytes that are read as the next command, and a
larger one takes bytes from the next command.

Line commands (SUB, RDY, FIN, REQ, TOUCH, NOP, CLS, unknown ones) are
returned unvalidated; :func:`parse_sub`, :func:`parse_rdy`,
:func:`parse_fin`, :func:`parse_req` and :func:`parse_touch` validate their
parameters with Go's texts once the caller has made its state checks.
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from txnsq.speedups import load as load_compiled
from txnsq.protocol.errors import LineTooLong, ProtocolError, go_quote, protocol_error
from txnsq.protocol.message import MESSAGE_ID_LENGTH
from txnsq.protocol.names import is_valid_name

__all__ = [
    "BODY_COMMANDS",
    "Command",
    "CompiledV2CommandParser",
    "LineTooLong",
    "MAX_LINE_LENGTH",
    "Precheck",
    "PureV2CommandParser",
    "V2CommandParser",
    "compiled",
    "parse_base10",
    "parse_fin",
    "parse_rdy",
    "parse_req",
    "parse_sub",
    "parse_touch",
]

#: Go nsqd reads commands through a 16 KiB ``bufio.Reader``; ``ReadSlice``
#: fails when the buffer is full without a newline, so a line *with* its
#: newline must fit: at most 16383 bytes before the ``\n``.
MAX_LINE_LENGTH = 16 * 1024

#: The commands followed by a size and a body.
BODY_COMMANDS = frozenset([b"IDENTIFY", b"AUTH", b"PUB", b"DPUB", b"MPUB"])

#: ``hook(name, params)``; may raise :class:`ProtocolError`.  A precheck
#: may also return ``False`` to hold the command before its body (see
#: :class:`V2CommandParser`); any other return value lets the parser go on.
Precheck = Callable[[bytes, List[bytes]], Optional[bool]]

_INT32 = struct.Struct(">i")
_unpack_int32 = _INT32.unpack_from

_UINT64_MASK = (1 << 64) - 1
_NS_PER_MS = 1000000

# What a pending body command waits for.
_SIZE = 1  # IDENTIFY, AUTH, PUB, DPUB: the body size
_BODY = 2  # ... and then the body
_MPUB_SIZE = 3  # MPUB: the (checked, otherwise unused) body size
_MPUB_COUNT = 4  # the message count
_MSG_SIZE = 5  # one message's size
_MSG_BODY = 6  # one message's body

# Copying through a memoryview saves a copy; worth its set-up cost only for
# larger bodies.
_VIEW_THRESHOLD = 4096


def _extract(buf: bytearray, start: int, stop: int) -> bytes:
    """``bytes(buf[start:stop])`` with a single copy for large slices."""
    if stop - start < _VIEW_THRESHOLD:
        return bytes(buf[start:stop])
    # Views are released explicitly: a live export would forbid resizing
    # the buffer, and PyPy does not release them promptly by itself.
    view = memoryview(buf)
    try:
        part = view[start:stop]
        try:
            return part.tobytes()
        finally:
            part.release()
    finally:
        view.release()


#: ``"FIN "`` and a message id.
_FIN_LINE_LENGTH = 4 + 16


class Command:
    """
    One parsed command.

    :ivar name: the command, e.g. ``b"PUB"`` (case-sensitive, any bytes).
    :ivar params: the parameters after the name (split on single spaces, so
        empty parameters are possible).
    :ivar body: the body of IDENTIFY, AUTH, PUB and DPUB (``bytes``), the
        list of message bodies of MPUB, ``None`` for line commands.
    :ivar defer_ms: DPUB's validated defer in milliseconds (``params[1]``
        keeps the raw text); 0 for the other commands.
    """

    __slots__ = ("name", "params", "body", "defer_ms")

    def __init__(
        self,
        name: bytes,
        params: List[bytes],
        body: Union[bytes, List[bytes], None] = None,
        defer_ms: int = 0,
    ) -> None:
        self.name = name
        self.params = params
        self.body = body
        self.defer_ms = defer_ms

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Command):
            return NotImplemented
        return (
            self.name == other.name
            and self.params == other.params
            and self.body == other.body
            and self.defer_ms == other.defer_ms
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        body = self.body
        if isinstance(body, list) and len(body) > 5:
            shown = "[%d bodies]" % (len(body),)
        else:
            shown = repr(body)
        return "Command(%r, %r, %s, defer_ms=%d)" % (self.name, self.params, shown, self.defer_ms)


# ---------------------------------------------------------------------------
# Go's number parsing


def parse_base10(text: bytes) -> Optional[int]:
    """
    Go nsqd's ``protocol.ByteToBase10``: decimal digits only (no sign, no
    space), the empty string is 0, overflow wraps at 64 bits (uint64).

    :return: the value, or None when a byte is not an ASCII digit.
    """
    if not text:
        return 0
    # bytes.isdigit() is ASCII-only, as Go's '0' <= d <= '9'.
    if not text.isdigit():
        return None
    return int(text) & _UINT64_MASK


def _int64(value: int) -> int:
    """``value`` wrapped to a signed 64-bit integer, as Go's conversions do."""
    value &= _UINT64_MASK
    return value - (1 << 64) if value >= 1 << 63 else value


def _duration_ns(milliseconds: int) -> int:
    """Go's ``time.Duration(ms) * time.Millisecond``, int64 overflow included."""
    return _int64(milliseconds * _NS_PER_MS)


# ---------------------------------------------------------------------------
# Line commands


def _message_id(params: List[bytes], verb: str) -> bytes:
    """The 16-byte message id that FIN, REQ and TOUCH start with."""
    if not params:
        raise protocol_error("E_INVALID", "%s insufficient number of params" % (verb,))
    msg_id = params[0]
    if len(msg_id) != MESSAGE_ID_LENGTH:
        raise protocol_error("E_INVALID", "invalid message ID")
    return msg_id


def parse_sub(params: List[bytes]) -> Tuple[str, str]:
    """
    SUB's ``topic channel`` (extra parameters are ignored, as Go does).

    Call it after the state checks Go makes first (subscribed already,
    heartbeats disabled), and make the auth check after it.

    :raises ProtocolError: E_INVALID for fewer than two parameters,
        E_BAD_TOPIC / E_BAD_CHANNEL (name Go-quoted) for invalid names.
    """
    if len(params) < 2:
        raise protocol_error("E_INVALID", "SUB insufficient number of parameters")
    topic, channel = params[0], params[1]
    if not is_valid_name(topic):
        raise protocol_error("E_BAD_TOPIC", "SUB topic name %s is not valid" % (go_quote(topic),))
    if not is_valid_name(channel):
        raise protocol_error("E_BAD_CHANNEL", "SUB channel name %s is not valid" % (go_quote(channel),))
    # Valid names are ASCII.
    return topic.decode("ascii"), channel.decode("ascii")


def parse_rdy(params: List[bytes], max_rdy_count: int) -> int:
    """
    RDY's count; ``RDY`` alone means 1.

    :raises ProtocolError: E_INVALID when the count is not a (non-negative)
        number or outside ``0..max_rdy_count``.
    """
    if not params:
        return 1
    value = parse_base10(params[0])
    if value is None:
        raise protocol_error("E_INVALID", b"RDY could not parse count " + params[0])
    count = _int64(value)
    if count < 0 or count > max_rdy_count:
        raise protocol_error("E_INVALID", "RDY count %d out of range 0-%d" % (count, max_rdy_count))
    return count


def parse_fin(params: List[bytes]) -> bytes:
    """
    FIN's message id.

    :raises ProtocolError: E_INVALID when missing or not 16 bytes.
    """
    return _message_id(params, "FIN")


def parse_touch(params: List[bytes]) -> bytes:
    """
    TOUCH's message id.

    :raises ProtocolError: E_INVALID when missing or not 16 bytes.
    """
    return _message_id(params, "TOUCH")


def parse_req(params: List[bytes], max_req_timeout_ms: int) -> Tuple[bytes, int]:
    """
    REQ's ``id timeout``; the timeout (ms) is clamped to
    ``0..max_req_timeout_ms`` without a word, as Go does.

    :raises ProtocolError: E_INVALID for fewer than two parameters, an id
        that is not 16 bytes, a timeout that is not a number.
    """
    if len(params) < 2:
        raise protocol_error("E_INVALID", "REQ insufficient number of params")
    msg_id = _message_id(params, "REQ")
    value = parse_base10(params[1])
    if value is None:
        raise protocol_error("E_INVALID", b"REQ could not parse timeout " + params[1])
    timeout_ns = _duration_ns(value)
    if timeout_ns < 0:
        timeout_ns = 0
    elif timeout_ns > max_req_timeout_ms * _NS_PER_MS:
        timeout_ns = max_req_timeout_ms * _NS_PER_MS
    return msg_id, timeout_ns // _NS_PER_MS


# ---------------------------------------------------------------------------
# The stream parser


#: Topic names known to be valid, so that a stream of PUBs to many topics
#: does not run the name check each time.  Shared and bounded: when full,
#: the oldest name is dropped (one at a time, never the whole cache, so a
#: working set near the bound does not pay the check on every PUB).  At
#: most 16,384 names of at most 64 bytes: about 3 MiB.
_VALID_TOPICS: "OrderedDict[bytes, bool]" = OrderedDict()
_VALID_TOPICS_MAX = 16384


def _valid_topic(topic: bytes) -> bool:
    """is_valid_name, remembering valid names."""
    if topic in _VALID_TOPICS:
        return True
    if not is_valid_name(topic):
        return False
    if len(_VALID_TOPICS) >= _VALID_TOPICS_MAX:
        _VALID_TOPICS.popitem(last=False)
    _VALID_TOPICS[topic] = True
    return True


def _check_topic(verb: str, params: List[bytes], minimum: int) -> None:
    """The parameter count and topic name checks PUB, DPUB and MPUB start with."""
    if len(params) < minimum:
        raise protocol_error("E_INVALID", "%s insufficient number of parameters" % (verb,))
    topic = params[0]
    if not _valid_topic(topic):
        description = "%s topic name %s is not valid" % (verb, go_quote(topic))
        if verb == "MPUB":
            # Go nsqd's MPUB repeats the code in its description.
            description = "E_BAD_TOPIC " + description
        raise protocol_error("E_BAD_TOPIC", description)


class V2CommandParser:
    """
    Incremental parser of the commands a V2 client sends (after the magic).

    Add bytes with :meth:`feed`, then call :meth:`next_command` until it
    returns None (more bytes needed).  Commands come one at a time so that
    the caller's state is current when the hooks run for the next one.

    A :class:`ProtocolError` (always fatal) or :class:`LineTooLong` from
    :meth:`next_command` leaves the parser dead: it ignores input and
    returns None from then on.

    Hooks, for the checks Go makes before it reads a body; each is called
    once per body command and may raise :class:`ProtocolError`:

    - ``early_check(name, params)``: before any check of the command line.
      Go's place for its TLS-required policy (every command but IDENTIFY).
    - ``precheck(name, params)``: where Go makes the command's state or auth
      check, always before the size is read: for AUTH before its parameter
      check (Go's AUTH state check comes first), for the others after the
      line checks (parameter count, topic name, DPUB's defer).  Go's place
      for IDENTIFY's and AUTH's state checks and for MPUB's auth check.
      (PUB and DPUB check auth after reading the body: do that when
      handling them.)  A precheck that returns ``False`` holds the command
      before its body: :meth:`next_command` returns None, its bytes stay
      unread, and a later call reads on from there without running the
      hooks again -- for an auth check that must ask the auth server first.
    """

    __slots__ = (
        "max_msg_size",
        "max_body_size",
        "max_req_timeout_ms",
        "_precheck",
        "_early_check",
        "_buf",
        "_pos",
        "_dead",
        "_cmd",
        "_stage",
        "_need",
        "_count",
        "_hint",
    )

    def __init__(
        self,
        max_msg_size: int,
        max_body_size: int,
        max_req_timeout_ms: int,
        precheck: Optional[Precheck] = None,
        early_check: Optional[Precheck] = None,
    ) -> None:
        """
        :param max_msg_size: ``--max-msg-size``: largest PUB/DPUB body and
            MPUB message.
        :param max_body_size: ``--max-body-size``: largest IDENTIFY, AUTH
            and MPUB body; also bounds MPUB's message count.
        :param max_req_timeout_ms: ``--max-req-timeout`` in ms: DPUB's range.
        """
        self.max_msg_size = max_msg_size
        self.max_body_size = max_body_size
        self.max_req_timeout_ms = max_req_timeout_ms
        self._precheck = precheck
        self._early_check = early_check
        self._buf = bytearray()
        # Everything before _pos has been parsed (and is dropped now and then).
        self._pos = 0
        self._dead = False
        # The body command being received, what it waits for, and how much.
        self._cmd: Optional[Command] = None
        self._stage = 0
        self._need = 0
        self._count = 0
        # MPUB: how many bytes of its declared body are still to come.
        self._hint = 0

    @property
    def dead(self) -> bool:
        """Whether a fatal error stopped the parser."""
        return self._dead

    def feed(self, data: bytes) -> None:
        """Add received bytes (ignored once the parser is dead)."""
        if self._dead:
            return
        buf = self._buf
        pos = self._pos
        if pos:
            # Drop parsed bytes now and then rather than after each command.
            if pos == len(buf):
                del buf[:]
                self._pos = 0
            elif pos > 65536:
                del buf[:pos]
                self._pos = 0
        buf += data

    def buffered(self) -> int:
        """Bytes received and not yet consumed by a returned command."""
        return len(self._buf) - self._pos

    def _die(self) -> None:
        self._dead = True
        self._cmd = None
        self._buf = bytearray()
        self._pos = 0

    def _fail(self, code: str, description: Union[str, bytes]) -> ProtocolError:
        """Stop the parser; return the error for the caller to raise."""
        self._die()
        return protocol_error(code, description)

    def next_fin_ids(self) -> List[bytes]:
        """
        The ids of the plain ``FIN <16-byte id>`` lines that come next, all
        consumed; empty when the next command is anything else (which is
        then for :meth:`next_command`, which also makes every check).

        A consumer sends one FIN per message: this is the cheapest way
        through the parser for the most frequent command of all, one call
        per run of FINs (callgrind: ~2,100 fewer instructions per FIN than
        a call per FIN line).
        """
        if self._cmd is not None or self._dead:
            return []
        buf = self._buf
        size = len(buf)
        pos = self._pos
        ids = []
        while True:
            end = pos + _FIN_LINE_LENGTH
            if (
                size > end
                and buf[end] == 10
                and buf.startswith(b"FIN ", pos)
                and buf[end - 1] != 13
                and buf.count(b" ", pos, end) == 1
            ):
                ids.append(bytes(buf[pos + 4:end]))
                pos = end + 1
            else:
                break
        self._pos = pos
        return ids

    def next_command(self) -> Optional[Command]:
        """
        The next complete command, or None until more bytes arrive (or
        while a precheck holds a body command: call again once it may go on).

        :raises ProtocolError: a framing error (Go's code and text; fatal).
        :raises LineTooLong: 16 KiB without a newline: close the connection
            without an error frame.
        """
        if self._cmd is not None:
            return self._resume()
        if self._dead:
            return None
        buf = self._buf
        pos = self._pos
        newline = buf.find(b"\n", pos, pos + MAX_LINE_LENGTH)
        if newline < 0:
            if len(buf) - pos >= MAX_LINE_LENGTH:
                self._die()
                raise LineTooLong("no newline in %d bytes" % (MAX_LINE_LENGTH,))
            return None
        end = newline
        if end > pos and buf[end - 1] == 13:
            end -= 1
        parts = bytes(buf[pos:end]).split(b" ")
        pos = self._pos = newline + 1
        name = parts[0]
        if name in BODY_COMMANDS:
            if name == b"PUB" and len(parts) > 1 and self._early_check is None and parts[1] in _VALID_TOPICS:
                # The common case, a well-formed PUB that is all here, in
                # one go.  Anything else takes the general path, which
                # makes every check in Go's order (nothing has been done
                # here that it would repeat: precheck runs once).
                start = pos + 4
                if start <= len(buf):
                    body_size = _unpack_int32(buf, pos)[0]
                    stop = start + body_size
                    if 0 < body_size <= self.max_msg_size and stop <= len(buf):
                        del parts[0]
                        if self._precheck is not None:
                            try:
                                go_on = self._precheck(name, parts)
                            except ProtocolError:
                                self._die()
                                raise
                            if go_on is False:
                                self._hold(Command(name, parts), _SIZE)
                                return None
                        self._pos = stop
                        if body_size < _VIEW_THRESHOLD:
                            return Command(name, parts, bytes(buf[start:stop]))
                        return Command(name, parts, _extract(buf, start, stop))
            return self._begin(name, parts[1:])
        del parts[0]
        return Command(name, parts)

    def _begin(self, name: bytes, params: List[bytes]) -> Optional[Command]:
        """Check a body command's line, in Go's order, then read its body."""
        defer_ms = 0
        precheck = self._precheck
        go_on: Optional[bool] = True
        try:
            if self._early_check is not None:
                self._early_check(name, params)
            if name == b"AUTH":
                # Go checks AUTH's state before its parameters.
                if precheck is not None:
                    go_on = precheck(name, params)
                    precheck = None
                if params:
                    raise protocol_error("E_INVALID", "AUTH invalid number of parameters")
                stage = _SIZE
            elif name == b"PUB":
                _check_topic("PUB", params, 1)
                stage = _SIZE
            elif name == b"MPUB":
                _check_topic("MPUB", params, 1)
                stage = _MPUB_SIZE
            elif name == b"DPUB":
                _check_topic("DPUB", params, 2)
                value = parse_base10(params[1])
                if value is None:
                    raise protocol_error("E_INVALID", b"DPUB could not parse timeout " + params[1])
                defer_ns = _duration_ns(value)
                if defer_ns < 0 or defer_ns > self.max_req_timeout_ms * _NS_PER_MS:
                    # Go prints the number as parsed (uint64), not the duration.
                    raise protocol_error(
                        "E_INVALID",
                        "DPUB timeout %d out of range 0-%d" % (value, self.max_req_timeout_ms),
                    )
                defer_ms = defer_ns // _NS_PER_MS
                stage = _SIZE
            else:  # IDENTIFY: no line checks
                stage = _SIZE
            if precheck is not None:
                go_on = precheck(name, params)
        except ProtocolError:
            self._die()
            raise
        command = Command(name, params, None, defer_ms)
        if go_on is False:
            self._hold(command, stage)
            return None
        self._cmd = command
        self._stage = stage
        return self._resume()

    def _hold(self, command: Command, stage: int) -> None:
        """A precheck held ``command``: its body is read on a later call."""
        self._cmd = command
        self._stage = stage

    def _resume(self) -> Optional[Command]:
        """Go on reading the pending body command as far as the bytes allow."""
        cmd = self._cmd
        assert cmd is not None
        buf = self._buf
        pos = self._pos
        end = len(buf)
        stage = self._stage
        if stage == _SIZE:
            if end - pos < 4:
                return None
            size = _unpack_int32(buf, pos)[0]
            pos += 4
            self._check_size(cmd.name, size)
            self._pos = pos
            self._need = size
            self._stage = stage = _BODY
        if stage == _BODY:
            stop = pos + self._need
            if stop > end:
                return None
            cmd.body = _extract(buf, pos, stop)
            self._pos = stop
            self._cmd = None
            return cmd
        if stage == _MPUB_SIZE:
            if end - pos < 4:
                return None
            size = _unpack_int32(buf, pos)[0]
            if size <= 0:
                raise self._fail("E_BAD_BODY", "MPUB invalid body size %d" % (size,))
            if size > self.max_body_size:
                raise self._fail("E_BAD_BODY", "MPUB body too big %d > %d" % (size, self.max_body_size))
            pos += 4
            self._pos = pos
            self._hint = size
            self._stage = stage = _MPUB_COUNT
        if stage == _MPUB_COUNT:
            if end - pos < 4:
                return None
            count = _unpack_int32(buf, pos)[0]
            # 4 bytes of count, then at least 5 per message (size + 1 byte);
            # Go's int64 division truncates toward zero.
            spare = self.max_body_size - 4
            max_messages = spare // 5 if spare >= 0 else -((-spare) // 5)
            if count <= 0 or count > max_messages:
                raise self._fail("E_BAD_BODY", "MPUB invalid message count %d" % (count,))
            pos += 4
            self._pos = pos
            self._hint -= 4
            self._count = count
            cmd.body = []
            self._stage = stage = _MSG_SIZE
        return self._mpub_messages(cmd, buf, pos, end, stage)

    def _check_size(self, name: bytes, size: int) -> None:
        """Go's checks of a body size, in Go's order for each command."""
        if name == b"PUB" or name == b"DPUB":
            if size <= 0:
                raise self._fail("E_BAD_MESSAGE", "%s invalid message body size %d" % (name.decode(), size))
            if size > self.max_msg_size:
                raise self._fail(
                    "E_BAD_MESSAGE",
                    "%s message too big %d > %d" % (name.decode(), size, self.max_msg_size),
                )
        else:  # IDENTIFY, AUTH
            if size > self.max_body_size:
                raise self._fail(
                    "E_BAD_BODY",
                    "%s body too big %d > %d" % (name.decode(), size, self.max_body_size),
                )
            if size <= 0:
                raise self._fail("E_BAD_BODY", "%s invalid body size %d" % (name.decode(), size))

    def _mpub_messages(self, cmd: Command, buf: bytearray, pos: int, end: int, stage: int) -> Optional[Command]:
        """
        Read MPUB's messages from where the last call stopped: a large MPUB
        arriving in many reads is parsed once, not once per read.
        """
        bodies = cmd.body
        assert isinstance(bodies, list)
        append = bodies.append
        remaining = self._count - len(bodies)
        if stage == _MSG_BODY:
            # The size of this message came with an earlier read.
            stop = pos + self._need
            if stop > end:
                return None
            append(_extract(buf, pos, stop))
            self._hint -= stop - pos
            pos = stop
            remaining -= 1
        max_msg_size = self.max_msg_size
        required = 0
        while remaining:
            avail = end - pos
            if avail < 4:
                self._pos = pos
                self._stage = _MSG_SIZE
                return None
            # Copy a window of what has arrived once, then take bytes
            # slices of it: cheaper than a bytearray slice plus a bytes()
            # copy per message.  The window is what the MPUB announced, so
            # commands pipelined after it are not copied again and again.
            length = self._hint
            if length < 4:
                # More messages than announced: Go reads on regardless.
                length = _VIEW_THRESHOLD
            if length < required:
                length = required
            if length > avail:
                length = avail
            data = _extract(buf, pos, pos + length)
            offset = 0
            while remaining:
                if length - offset < 4:
                    break
                need = _unpack_int32(data, offset)[0]
                if need <= 0 or need > max_msg_size:
                    if need <= 0:
                        raise self._fail(
                            "E_BAD_MESSAGE",
                            "MPUB invalid message(%d) body size %d" % (len(bodies), need),
                        )
                    raise self._fail("E_BAD_MESSAGE", "MPUB message too big %d > %d" % (need, max_msg_size))
                start = offset + 4
                stop = start + need
                if stop > length:
                    if pos + stop <= end:
                        # Beyond the window but here: take a wider window.
                        required = stop - offset
                        break
                    self._pos = pos + start
                    self._hint -= start
                    self._stage = _MSG_BODY
                    self._need = need
                    return None
                append(data[start:stop])
                offset = stop
                remaining -= 1
            pos += offset
            self._hint -= offset
        self._pos = pos
        self._cmd = None
        return cmd

    def eof_error(self) -> Optional[ProtocolError]:
        """
        The error Go nsqd would send if the client's stream ended now.

        Go reports a body command cut short (its ``io.ReadFull`` fails) with
        these texts; a partial command line ends the connection silently
        (None).  Only a half-closed connection can still receive the frame.
        The parser is dead afterwards.
        """
        cmd = self._cmd
        if cmd is None or self._dead:
            self._die()
            return None
        verb = cmd.name.decode("ascii")
        stage = self._stage
        if verb == "MPUB":
            if stage == _MPUB_SIZE:
                error = protocol_error("E_BAD_BODY", "MPUB failed to read body size")
            elif stage == _MPUB_COUNT:
                error = protocol_error("E_BAD_BODY", "MPUB failed to read message count")
            elif stage == _MSG_SIZE:
                bodies = cmd.body
                index = len(bodies) if isinstance(bodies, list) else 0
                error = protocol_error("E_BAD_MESSAGE", "MPUB failed to read message(%d) body size" % (index,))
            else:
                error = protocol_error("E_BAD_MESSAGE", "MPUB failed to read message body")
        elif verb in ("PUB", "DPUB"):
            what = "message body size" if stage == _SIZE else "message body"
            error = protocol_error("E_BAD_MESSAGE", "%s failed to read %s" % (verb, what))
        else:
            what = "body size" if stage == _SIZE else "body"
            error = protocol_error("E_BAD_BODY", "%s failed to read %s" % (verb, what))
        self._die()
        return error


# ---------------------------------------------------------------------------
# The compiled path

#: The pure-Python parser: the reference the compiled one is tested
#: against, and what PyPy (or CPython without the extension) runs.
PureV2CommandParser = V2CommandParser

#: The compiled kernels (``txnsq/protocol/_v2.c``), or ``None`` (pure Python).
compiled: Any = load_compiled("txnsq.protocol._v2")

_fin_ids: Any = compiled.fin_ids if compiled is not None else None
_split_line: Any = compiled.split_line if compiled is not None else None
_pub_body: Any = compiled.pub_body if compiled is not None else None
_mpub_bodies: Any = compiled.mpub_bodies if compiled is not None else None

# What _mpub_bodies stopped at (see _v2.c).
_MPUB_DONE = 0
_MPUB_NEED_SIZE = 1
_MPUB_NEED_BODY = 2


class CompiledV2CommandParser(PureV2CommandParser):
    """
    :class:`PureV2CommandParser` with its per-command and per-message loops
    in C (a line split on spaces, a run of FIN lines, a PUB's body, an
    MPUB's bodies); every check, hook call and error text stays in the
    Python of the pure parser, in the same order.  Only usable when
    :data:`compiled` is not ``None``; :data:`V2CommandParser` is this
    class then.
    """

    __slots__ = ()

    def next_fin_ids(self) -> List[bytes]:
        """As :meth:`PureV2CommandParser.next_fin_ids`."""
        if self._cmd is not None or self._dead:
            return []
        ids: List[bytes]
        ids, self._pos = _fin_ids(self._buf, self._pos)
        return ids

    def next_command(self) -> Optional[Command]:
        """As :meth:`PureV2CommandParser.next_command`."""
        if self._cmd is not None:
            return self._resume()
        if self._dead:
            return None
        line = _split_line(self._buf, self._pos)
        if line is None:
            if len(self._buf) - self._pos >= MAX_LINE_LENGTH:
                self._die()
                raise LineTooLong("no newline in %d bytes" % (MAX_LINE_LENGTH,))
            return None
        name: bytes
        params: List[bytes]
        name, params, pos = line
        self._pos = pos
        if name in BODY_COMMANDS:
            if name == b"PUB" and params and self._early_check is None and params[0] in _VALID_TOPICS:
                # The pure parser's fast path: a well-formed PUB all here.
                found = _pub_body(self._buf, pos, self.max_msg_size)
                if found is not None:
                    if self._precheck is not None:
                        try:
                            go_on = self._precheck(name, params)
                        except ProtocolError:
                            self._die()
                            raise
                        if go_on is False:
                            self._hold(Command(name, params), _SIZE)
                            return None
                    body, self._pos = found
                    return Command(name, params, body)
            return self._begin(name, params)
        return Command(name, params)

    def _mpub_messages(self, cmd: Command, buf: bytearray, pos: int, end: int, stage: int) -> Optional[Command]:
        """As :meth:`PureV2CommandParser._mpub_messages`."""
        bodies = cmd.body
        assert isinstance(bodies, list)
        if stage == _MSG_BODY:
            stop = pos + self._need
            if stop > end:
                return None
            bodies.append(_extract(buf, pos, stop))
            self._hint -= stop - pos
            pos = stop
        status, stopped, value = _mpub_bodies(buf, pos, self._count - len(bodies), self.max_msg_size, bodies)
        self._hint -= stopped - pos
        if status == _MPUB_DONE:
            self._pos = stopped
            self._cmd = None
            return cmd
        if status == _MPUB_NEED_SIZE:
            self._pos = stopped
            self._stage = _MSG_SIZE
            return None
        if status == _MPUB_NEED_BODY:
            self._pos = stopped
            self._stage = _MSG_BODY
            self._need = value
            return None
        if value <= 0:
            raise self._fail(
                "E_BAD_MESSAGE",
                "MPUB invalid message(%d) body size %d" % (len(bodies), value),
            )
        raise self._fail("E_BAD_MESSAGE", "MPUB message too big %d > %d" % (value, self.max_msg_size))


if compiled is not None:
    V2CommandParser = CompiledV2CommandParser  # type: ignore[misc]
