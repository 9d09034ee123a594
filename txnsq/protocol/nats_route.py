# -*- test-case-name: tests.test_protocol_nats_route -*-
"""
The NATS server cluster (route) protocol, sans-IO: what NATS servers say
to each other on their cluster port, both directions.

Every operation is one line ended by CRLF; the operation name is matched
without regard to case and fields are split on runs of spaces or tabs::

    INFO {json}                      a server describes itself (and gossips others: "ip")
    CONNECT {json}                   the dialing side opens the route
    RS+ <account> <subject> [<queue> <weight>]
    RS- <account> <subject> [<queue>]
    RMSG <account> <subject> [<reply>] <#bytes>\\r\\n<payload>\\r\\n
    RMSG <account> <subject> | <queue>... <#bytes>\\r\\n<payload>\\r\\n
    RMSG <account> <subject> + <reply> <queue>... <#bytes>\\r\\n<payload>\\r\\n
    HMSG <account> <subject> [<reply>] <#header bytes> <#total bytes>\\r\\n<headers><payload>\\r\\n
    HMSG <account> <subject> | <queue>... <#hdr> <#total>\\r\\n...    (and the + form)
    PING / PONG / +OK
    -ERR '<text>'

:class:`RouteParser` turns bytes into the operations below and raises
:class:`RouteProtocolError` (carrying the text nats-server sends in its
``-ERR``) for bad input; after an error the connection must be closed.
The ``encode_*`` functions build the operations.  A message's payload is
handed on as one ``bytes`` slice of what was received; a payload arriving
in many chunks is joined once; the arguments of a message line seen
lately are not parsed again (bulk traffic repeats one subject and size).

Facts the seed leaves open follow nats-server (``server/parser.go``,
``server/route.go``): the argument forms of RMSG and HMSG, the
``MAX_CONTROL_LINE_SIZE`` of 4096, the error texts.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

__all__ = [
    "CRLF",
    "Connect",
    "ERR_AUTHORIZATION",
    "ERR_MAX_CONTROL_LINE",
    "ERR_MAX_PAYLOAD",
    "ERR_STALE_CONNECTION",
    "ERR_UNKNOWN_OP",
    "Err",
    "Info",
    "MAX_CONTROL_LINE_SIZE",
    "Ok",
    "Ping",
    "Pong",
    "RouteMessage",
    "RouteMessages",
    "RouteOp",
    "RouteParser",
    "RouteProtocolError",
    "RouteSub",
    "RouteUnsub",
    "cluster_name_error",
    "encode_connect",
    "encode_err",
    "encode_hmsg_head",
    "encode_info",
    "encode_rmsg_head",
    "encode_rs_minus",
    "encode_rs_plus",
    "headers_of",
    "PING",
    "PONG",
]

CRLF = b"\r\n"
PING = b"PING\r\n"
PONG = b"PONG\r\n"

#: nats-server's ``MAX_CONTROL_LINE_SIZE``: the longest operation line.
MAX_CONTROL_LINE_SIZE = 4096

#: Message lines whose parse is remembered (see ``RouteParser``).
LINE_CACHE_SIZE = 256

#: nats-server's texts for ``-ERR``.
ERR_UNKNOWN_OP = "Unknown Protocol Operation"
ERR_MAX_PAYLOAD = "Maximum Payload Violation"
ERR_MAX_CONTROL_LINE = "Maximum Control Line Exceeded"
ERR_AUTHORIZATION = "Authorization Violation"
ERR_STALE_CONNECTION = "Stale Connection"


def cluster_name_error(theirs: str, ours: str) -> str:
    """nats-server's ``-ERR`` text for a CONNECT naming another cluster."""
    return "Rejecting connection, cluster name %s does not match %s" % (
        json.dumps(theirs),
        json.dumps(ours),
    )


class RouteProtocolError(Exception):
    """
    Bad input on a route.  ``text`` is what nats-server sends back in
    ``-ERR '<text>'`` before it closes the connection.
    """

    def __init__(self, text: str, detail: str = "") -> None:
        super().__init__(text if not detail else "%s: %s" % (text, detail))
        self.text = text
        self.detail = detail


class Info(NamedTuple):
    """``INFO {json}``: the peer server's description (``fields``)."""

    fields: Dict[str, Any]


class Connect(NamedTuple):
    """``CONNECT {json}``: the dialing server opens the route."""

    fields: Dict[str, Any]


class RouteSub(NamedTuple):
    """
    ``RS+``: interest in ``subject`` of ``account``; ``queue`` and
    ``weight`` (the number of members there) for a queue group.
    """

    account: str
    subject: str
    queue: Optional[str] = None
    weight: int = 1


class RouteUnsub(NamedTuple):
    """``RS-``: interest in ``subject`` (or its queue group) is gone."""

    account: str
    subject: str
    queue: Optional[str] = None


class RouteMessage(NamedTuple):
    """
    ``RMSG`` or ``HMSG``: a message for ``subject`` of ``account``.
    ``queues`` names the queue groups that must get it (empty: none);
    ``headers`` is the raw header block of an HMSG (``NATS/1.0\\r\\n...``),
    ``None`` for an RMSG; ``payload`` is the body without the headers.
    """

    account: str
    subject: str
    reply: Optional[str]
    queues: Tuple[str, ...]
    headers: Optional[bytes]
    payload: bytes


class RouteMessages(NamedTuple):
    """
    Several messages for ``subject`` of ``account`` with the same reply
    and queues: their ``payloads`` in order (a run of RMSGs, from a
    :class:`RouteParser` in batch mode), and ``headers`` (each message's
    header block) for HMSGs, ``None`` for RMSGs.
    """

    account: str
    subject: str
    reply: Optional[str]
    queues: Tuple[str, ...]
    payloads: List[bytes]
    headers: Optional[List[bytes]] = None


class Ping(NamedTuple):
    """``PING``: answer with ``PONG``."""


class Pong(NamedTuple):
    """``PONG``: the answer to our ``PING``."""


class Ok(NamedTuple):
    """``+OK`` (only sent in verbose mode)."""


class Err(NamedTuple):
    """``-ERR '<text>'``: the peer reports an error (``text`` unquoted)."""

    text: str


RouteOp = Union[
    Info, Connect, RouteSub, RouteUnsub, RouteMessage, RouteMessages, Ping, Pong, Ok, Err
]

_PING = Ping()
_PONG = Pong()
_OK = Ok()


def _size(token: bytes) -> int:
    """A decimal size field, or -1 when it is not one (nats' parseSize)."""
    if not token or len(token) > 9 or not token.isdigit():
        return -1
    return int(token)


class RouteParser:
    """
    Bytes from a route, in any chunks, to :data:`RouteOp` values.

    :param max_payload: the largest payload (with headers) accepted; more
        is :data:`ERR_MAX_PAYLOAD`.  ``0``: no limit.
    :param batch: RMSGs (not HMSGs) become :class:`RouteMessages`, one per
        run of RMSGs whose lines are byte for byte the same (one subject,
        one size: bulk traffic) within what one ``feed`` completes, instead
        of a :class:`RouteMessage` each.
    """

    __slots__ = (
        "max_payload",
        "batch",
        "_chunks",
        "_held",
        "_need",
        "_pending",
        "_pending_line",
        "_lines",
    )

    def __init__(self, max_payload: int = 1048576, batch: bool = False) -> None:
        self.max_payload = max_payload
        self.batch = batch
        # Bytes received and not parsed yet, as received (joined only once
        # there is enough to go on: a large payload arriving in many
        # chunks is copied once, not once per chunk).
        self._chunks: List[bytes] = []
        self._held = 0
        # How many held bytes parsing needs to make progress (a pending
        # payload and its CRLF); 0: any new byte may end a line.
        self._need = 0
        # A message line parsed whose payload has not all arrived:
        # (account, subject, reply, queues, header size, total size).
        self._pending: Optional[Tuple[str, str, Optional[str], Tuple[str, ...], int, int]] = None
        # Its line as received, with the line end (batch mode).
        self._pending_line = b""
        # RMSG/HMSG lines seen lately and their parsed arguments: bulk
        # traffic repeats the same few lines (one subject, one size).
        self._lines: Dict[bytes, Tuple[str, str, Optional[str], Tuple[str, ...], int, int]] = {}

    def buffered(self) -> int:
        """Bytes received and not yet parsed."""
        return self._held

    def feed(self, data: bytes) -> List[RouteOp]:
        """
        Parse ``data`` after what came before; the operations completed.

        :raises RouteProtocolError: bad input (the operations before it in
            ``data`` are lost with the connection, which must be closed).
        """
        if self._chunks:
            self._chunks.append(data)
            self._held += len(data)
            if self._held < self._need:
                return []
            buf = b"".join(self._chunks)
            self._chunks = []
        else:
            buf = data
        ops: List[RouteOp] = []
        append = ops.append
        pos = 0
        end = len(buf)
        pending = self._pending
        full = self._pending_line
        find = buf.find
        startswith = buf.startswith
        lines = self._lines
        batch = self.batch
        while True:
            if pending is not None:
                account, subject, reply, queues, hsize, total = pending
                stop = pos + total
                if stop + 2 > end:
                    break
                if buf[stop] != 13 or buf[stop + 1] != 10:
                    raise RouteProtocolError(ERR_UNKNOWN_OP, "payload does not end with CRLF")
                if hsize < 0 and batch:
                    # The run of identical lines that follows, without
                    # parsing each again.
                    payloads = [buf[pos:stop]]
                    pos = stop + 2
                    step = len(full)
                    while startswith(full, pos):
                        start = pos + step
                        stop = start + total
                        if stop + 2 > end:
                            break
                        if buf[stop] != 13 or buf[stop + 1] != 10:
                            raise RouteProtocolError(
                                ERR_UNKNOWN_OP, "payload does not end with CRLF"
                            )
                        payloads.append(buf[start:stop])
                        pos = stop + 2
                    append(RouteMessages(account, subject, reply, queues, payloads))
                    pending = None
                    continue
                if hsize < 0:
                    append(RouteMessage(account, subject, reply, queues, None, buf[pos:stop]))
                else:
                    split = pos + hsize
                    append(
                        RouteMessage(
                            account, subject, reply, queues, buf[pos:split], buf[split:stop]
                        )
                    )
                pos = stop + 2
                pending = None
                continue
            nl = find(b"\n", pos)
            if nl < 0:
                if end - pos > MAX_CONTROL_LINE_SIZE:
                    raise RouteProtocolError(ERR_MAX_CONTROL_LINE)
                break
            if nl - pos > MAX_CONTROL_LINE_SIZE:
                raise RouteProtocolError(ERR_MAX_CONTROL_LINE)
            line = buf[pos:nl]
            if batch:
                full = buf[pos : nl + 1]
            pos = nl + 1
            if line[-1:] == b"\r":
                line = line[:-1]
            pending = lines.get(line)
            if pending is not None:
                continue
            fields = line.split()
            if not fields:
                raise RouteProtocolError(ERR_UNKNOWN_OP, "empty line")
            op = fields[0].upper()
            if op == b"RMSG" or op == b"HMSG":
                pending = self._message_args(fields, op == b"HMSG")
                if len(lines) >= LINE_CACHE_SIZE:
                    lines.clear()
                lines[line] = pending
            elif op == b"RS+":
                n = len(fields)
                if n == 3:
                    append(RouteSub(fields[1].decode(), fields[2].decode()))
                elif n == 5:
                    weight = _size(fields[4])
                    if weight < 0:
                        raise RouteProtocolError(ERR_UNKNOWN_OP, "bad queue weight")
                    append(
                        RouteSub(
                            fields[1].decode(), fields[2].decode(), fields[3].decode(), weight
                        )
                    )
                else:
                    raise RouteProtocolError(ERR_UNKNOWN_OP, "RS+ arguments")
            elif op == b"RS-":
                n = len(fields)
                if n == 3:
                    append(RouteUnsub(fields[1].decode(), fields[2].decode()))
                elif n == 4:
                    append(RouteUnsub(fields[1].decode(), fields[2].decode(), fields[3].decode()))
                else:
                    raise RouteProtocolError(ERR_UNKNOWN_OP, "RS- arguments")
            elif op == b"PING" and len(fields) == 1:
                append(_PING)
            elif op == b"PONG" and len(fields) == 1:
                append(_PONG)
            elif op == b"INFO" or op == b"CONNECT":
                rest = line.lstrip()[len(op) :].strip()
                try:
                    value = json.loads(rest)
                except ValueError:
                    raise RouteProtocolError(ERR_UNKNOWN_OP, "%s JSON" % (op.decode(),))
                if not isinstance(value, dict):
                    raise RouteProtocolError(ERR_UNKNOWN_OP, "%s JSON" % (op.decode(),))
                append(Info(value) if op == b"INFO" else Connect(value))
            elif op == b"+OK" and len(fields) == 1:
                append(_OK)
            elif op == b"-ERR":
                text = line.lstrip()[4:].strip().decode("utf-8", "replace")
                if len(text) >= 2 and text[0] == text[-1] == "'":
                    text = text[1:-1]
                append(Err(text))
            else:
                raise RouteProtocolError(ERR_UNKNOWN_OP, repr(line[:32]))
        self._pending = pending
        self._pending_line = full if pending is not None else b""
        if pos < end:
            rest = buf[pos:] if pos else buf
            self._chunks = [rest]
            self._held = len(rest)
            self._need = pending[5] + 2 if pending is not None else 0
        else:
            self._held = 0
            self._need = 0
        return ops

    def _message_args(
        self, fields: List[bytes], headers: bool
    ) -> Tuple[str, str, Optional[str], Tuple[str, ...], int, int]:
        """The fields of an RMSG (``headers`` false) or HMSG line."""
        sizes = 2 if headers else 1
        n = len(fields) - 1  # arguments after the op
        if n < 2 + sizes:
            raise RouteProtocolError(ERR_UNKNOWN_OP, "message arguments")
        account = fields[1].decode()
        subject = fields[2].decode()
        reply: Optional[str] = None
        queues: Tuple[str, ...] = ()
        extra = n - 2 - sizes  # between the subject and the sizes
        if extra == 1:
            reply = fields[3].decode()
        elif extra > 1:
            indicator = fields[3]
            if indicator == b"+":
                reply = fields[4].decode()
                queues = tuple(q.decode() for q in fields[5 : 1 + n - sizes])
            elif indicator == b"|":
                queues = tuple(q.decode() for q in fields[4 : 1 + n - sizes])
            else:
                raise RouteProtocolError(ERR_UNKNOWN_OP, "bad reply indicator")
        total = _size(fields[-1])
        if total < 0:
            raise RouteProtocolError(ERR_UNKNOWN_OP, "bad size")
        hsize = -1
        if headers:
            hsize = _size(fields[-2])
            if hsize < 0 or hsize > total:
                raise RouteProtocolError(ERR_UNKNOWN_OP, "bad header size")
        if self.max_payload and total > self.max_payload:
            raise RouteProtocolError(ERR_MAX_PAYLOAD)
        return account, subject, reply, queues, hsize, total


def headers_of(block: bytes) -> Dict[str, List[str]]:
    """
    The header fields of an HMSG header block (``NATS/1.0[ status]\\r\\n``
    then ``Name: value`` lines): names as sent, values in order.
    """
    found: Dict[str, List[str]] = {}
    lines = block.split(b"\r\n")
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(b":")
        if sep:
            found.setdefault(name.decode("utf-8", "replace"), []).append(
                value.strip().decode("utf-8", "replace")
            )
    return found


def _json(fields: Dict[str, Any]) -> bytes:
    return json.dumps(fields, separators=(",", ":")).encode()


def encode_info(fields: Dict[str, Any]) -> bytes:
    """``INFO {json} \\r\\n`` (with nats-server's space before CRLF)."""
    return b"INFO " + _json(fields) + b" \r\n"


def encode_connect(fields: Dict[str, Any]) -> bytes:
    """``CONNECT {json}\\r\\n``."""
    return b"CONNECT " + _json(fields) + CRLF


def encode_err(text: str) -> bytes:
    """``-ERR '<text>'\\r\\n``."""
    return b"-ERR '" + text.encode() + b"'\r\n"


def encode_rs_plus(
    account: str, subject: str, queue: Optional[str] = None, weight: int = 1
) -> bytes:
    """``RS+ <account> <subject> [<queue> <weight>]\\r\\n``."""
    if queue is None:
        return ("RS+ %s %s\r\n" % (account, subject)).encode()
    return ("RS+ %s %s %s %d\r\n" % (account, subject, queue, weight)).encode()


def encode_rs_minus(account: str, subject: str, queue: Optional[str] = None) -> bytes:
    """``RS- <account> <subject> [<queue>]\\r\\n``."""
    if queue is None:
        return ("RS- %s %s\r\n" % (account, subject)).encode()
    return ("RS- %s %s %s\r\n" % (account, subject, queue)).encode()


def _middle(reply: Optional[str], queues: Sequence[str]) -> str:
    if queues:
        if reply is not None:
            return " + %s %s" % (reply, " ".join(queues))
        return " | " + " ".join(queues)
    if reply is not None:
        return " " + reply
    return ""


def encode_rmsg_head(
    account: str,
    subject: str,
    size: int,
    reply: Optional[str] = None,
    queues: Sequence[str] = (),
) -> bytes:
    """
    The line of an RMSG carrying ``size`` payload bytes (the payload and
    a CRLF follow it on the wire).
    """
    return ("RMSG %s %s%s %d\r\n" % (account, subject, _middle(reply, queues), size)).encode()


def encode_hmsg_head(
    account: str,
    subject: str,
    header_size: int,
    total_size: int,
    reply: Optional[str] = None,
    queues: Sequence[str] = (),
) -> bytes:
    """
    The line of an HMSG whose headers are ``header_size`` bytes of the
    ``total_size`` that follow (then a CRLF).
    """
    return (
        "HMSG %s %s%s %d %d\r\n"
        % (account, subject, _middle(reply, queues), header_size, total_size)
    ).encode()
