# -*- test-case-name: tests.test_protocol_mirror -*-
"""
The records mirrored topics exchange between txnsq nodes, over a NATS
route, on internal subjects that only txnsq peers are sent
(``$NSQ.mirror.*``; a nats-server peer never sees them).

A data payload (subject :data:`SUBJECT_DATA`) is a sequence number and a
run of records, each::

    op (1 byte) | topic length (1) | topic | channel length (1) | channel
    | count (4, big-endian) | count item lengths (4 each) | the items

with these ops and items:

- ``M`` messages published (items: NSQ-encoded messages -- timestamp,
  attempts, id, body -- as the channels hold them);
- ``D`` deferred messages (items: delay in ms (4) + encoded message);
- ``F`` FINs on a channel (items: 16-byte message ids);
- ``R`` REQs on a channel (items: delay in ms (4) + message id);
- ``C``, ``X``, ``E``, ``P``, ``U``: channel created, deleted, emptied,
  paused, unpaused (no items).

When two nodes route to each other again (a restarted node, or the two
sides of a partition), each sends the other an exchange (subject
:data:`SUBJECT_EXCHANGE`, the same layout, sequence number 0) before the
returning side delivers:

- ``G`` (items: one epoch): the ``T`` records after it, up to the next
  ``G``, are of the receiver's process of that epoch;
- ``T`` taken over (items: message ids): the sender took these messages
  of the receiver over and delivers them now: the receiver drops them;
- ``Y`` (no items): the sender's list is complete;
- ``A`` finished apart (items: message ids), in the answer: of the
  messages the sender of the ``T`` took over, the answerer (the same
  process they were taken from) finished these while the two were apart;
- ``K`` (no items): the answer is complete (the ``T`` list was applied).

An ack (subject :data:`SUBJECT_ACK`) is the 8-byte sequence number of the
last data payload the peer has applied.  Sans-IO: bytes in, values out.
"""

from __future__ import annotations

import struct
from itertools import accumulate
from typing import Iterator, List, Sequence, Tuple, Union, overload

__all__ = [
    "INTERNAL_PREFIX",
    "MirrorDecodeError",
    "PackedItems",
    "Record",
    "RecordBuilder",
    "SUBJECT_ACK",
    "SUBJECT_DATA",
    "SUBJECT_EXCHANGE",
    "SUBJECT_PING",
    "decode_ack",
    "decode_records",
    "encode_ack",
]

#: Subjects under this prefix are txnsq's own and never go to nats-server.
INTERNAL_PREFIX = "$NSQ."
SUBJECT_DATA = "$NSQ.mirror.data"
SUBJECT_ACK = "$NSQ.mirror.ack"
SUBJECT_EXCHANGE = "$NSQ.mirror.exchange"
#: A heartbeat (empty payload): the sender is alive and reading.
SUBJECT_PING = "$NSQ.mirror.ping"

OP_MESSAGES = b"M"
OP_DEFERRED = b"D"
OP_FIN = b"F"
OP_REQ = b"R"
OP_CHANNEL_CREATE = b"C"
OP_CHANNEL_DELETE = b"X"
OP_CHANNEL_EMPTY = b"E"
OP_CHANNEL_PAUSE = b"P"
OP_CHANNEL_UNPAUSE = b"U"
OP_GROUP = b"G"
OP_TAKEN = b"T"
OP_LIST_END = b"Y"
OP_FINISHED_APART = b"A"
OP_ANSWER_END = b"K"
_OPS = frozenset(b"MDFRCXEPUGTYAK")

_SEQ = struct.Struct(">Q")
_LEN = struct.Struct(">I")
_pack_len = _LEN.pack
_unpack_len = _LEN.unpack_from

#: A decoded record: (op, topic, channel, items); the items a list, or
#: :class:`PackedItems` from ``decode_records(payload, packed=True)``.
Record = Tuple[bytes, str, str, Sequence[bytes]]


class MirrorDecodeError(ValueError):
    """A mirror payload is malformed."""


class PackedItems(Sequence[bytes]):
    """
    A record's items left where they are in the payload: its item
    lengths at ``lengths_at``, then ``number`` items from ``start`` to
    ``end``.  Made without touching an item (no slice per message); they
    are cut out when asked for (:meth:`unpack`), all at once.  Holds the
    payload while it lives.
    """

    __slots__ = ("payload", "lengths_at", "number", "start", "end")

    def __init__(self, payload: bytes, lengths_at: int, number: int, start: int, end: int) -> None:
        self.payload = payload
        self.lengths_at = lengths_at
        self.number = number
        self.start = start
        self.end = end

    def __len__(self) -> int:
        return self.number

    def size(self) -> int:
        """Bytes of items."""
        return self.end - self.start

    def _lengths(self) -> Tuple[int, ...]:
        return struct.unpack_from(">%dI" % (self.number,), self.payload, self.lengths_at)

    def unpack(self) -> Sequence[bytes]:
        """The items, cut out of the payload."""
        count = self.number
        if not count:
            return ()
        lengths = self._lengths()
        size = lengths[0]
        if lengths.count(size) == count:
            # Fixed layout (messages of one size, ids): one struct call
            # cuts them all, several times faster than a slice each.
            return struct.unpack_from("%ds" % (size,) * count, self.payload, self.start)
        payload = self.payload
        offsets = list(accumulate(lengths, initial=self.start))
        return [payload[begin:stop] for begin, stop in zip(offsets, offsets[1:])]

    def message_ids(self) -> Sequence[bytes]:
        """The ids of the items, NSQ-encoded messages (bytes 10 to 26 of each)."""
        count = self.number
        if not count:
            return ()
        lengths = self._lengths()
        size = lengths[0]
        if size >= 26 and lengths.count(size) == count:
            return struct.unpack_from(
                "10x16s%dx" % (size - 26,) * count, self.payload, self.start
            )
        return [data[10:26] for data in self.unpack()]

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.unpack())

    @overload
    def __getitem__(self, index: int) -> bytes: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[bytes]: ...

    def __getitem__(self, index: Union[int, slice]) -> Union[bytes, Sequence[bytes]]:
        return self.unpack()[index]

    def __repr__(self) -> str:
        return "PackedItems(%d items, %d bytes)" % (self.number, self.end - self.start)


class RecordBuilder:
    """
    Records waiting to be sent, in order.  Consecutive records of the same
    op for the same topic and channel are merged into one.

    :ivar size: bytes of items held (an estimate of the payload's size).
    :ivar count: items held.
    """

    __slots__ = ("_records", "_last", "size", "count")

    def __init__(self) -> None:
        self._records: List[Tuple[bytes, str, str, List[bytes]]] = []
        self._last: Tuple[bytes, str, str] = (b"", "", "")
        self.size = 0
        self.count = 0

    def __bool__(self) -> bool:
        return bool(self._records)

    def add(self, op: bytes, topic: str, channel: str, items: List[bytes]) -> None:
        """Append ``items`` under ``op`` for ``topic`` (and ``channel``)."""
        key = (op, topic, channel)
        if self._last == key and items:
            self._records[-1][3].extend(items)
        else:
            self._records.append((op, topic, channel, list(items)))
            self._last = key
        self.count += len(items)
        self.size += sum(map(len, items)) + 4 * len(items)

    def add_one(self, op: bytes, topic: str, channel: str, item: bytes) -> None:
        """Append one item (the per-message path: no list made)."""
        if self._last == (op, topic, channel):
            self._records[-1][3].append(item)
        else:
            self._records.append((op, topic, channel, [item]))
            self._last = (op, topic, channel)
        self.count += 1
        self.size += len(item) + 4

    def encode(self, seq: int) -> bytes:
        """The payload of everything held, numbered ``seq``; the builder is emptied."""
        parts: List[bytes] = [_SEQ.pack(seq)]
        append = parts.append
        for op, topic, channel, items in self._records:
            raw_topic = topic.encode("ascii")
            raw_channel = channel.encode("ascii")
            count = len(items)
            append(
                op
                + bytes((len(raw_topic),))
                + raw_topic
                + bytes((len(raw_channel),))
                + raw_channel
                + _pack_len(count)
            )
            if count:
                # Lengths together, then items together: two joins, no
                # per-item pack.
                append(struct.pack(">%dI" % count, *map(len, items)))
                append(b"".join(items))
        self._records = []
        self._last = (b"", "", "")
        self.size = 0
        self.count = 0
        return b"".join(parts)


def decode_records(payload: bytes, packed: bool = False) -> Tuple[int, List[Record]]:
    """
    ``(seq, records)`` of a data payload; with ``packed``, each record's
    items are :class:`PackedItems` (checked to lie within the payload,
    not cut out: a standby keeping them as received does no work per
    message), else lists.

    :raises MirrorDecodeError: the payload is truncated or names an unknown op.
    """
    end = len(payload)
    if end < 8:
        raise MirrorDecodeError("mirror payload shorter than its sequence number")
    seq = _SEQ.unpack_from(payload, 0)[0]
    records: List[Record] = []
    pos = 8
    try:
        while pos < end:
            op = payload[pos : pos + 1]
            if op[0] not in _OPS:
                raise MirrorDecodeError("unknown mirror op %r" % (op,))
            size = payload[pos + 1]
            topic = payload[pos + 2 : pos + 2 + size].decode("ascii")
            pos += 2 + size
            size = payload[pos]
            channel = payload[pos + 1 : pos + 1 + size].decode("ascii")
            pos += 1 + size
            count = _unpack_len(payload, pos)[0]
            pos += 4
            items: Sequence[bytes]
            if count:
                if pos + 4 * count > end:
                    raise MirrorDecodeError("mirror item lengths past the end of the payload")
                lengths = struct.unpack_from(">%dI" % count, payload, pos)
                lengths_at = pos
                pos += 4 * count
                stop = pos + sum(lengths)
                if stop > end:
                    raise MirrorDecodeError("mirror item past the end of the payload")
                packed_items = PackedItems(payload, lengths_at, count, pos, stop)
                items = packed_items if packed else list(packed_items.unpack())
                pos = stop
            else:
                items = []
            records.append((op, topic, channel, items))
    except (IndexError, struct.error, UnicodeDecodeError) as error:
        raise MirrorDecodeError("truncated mirror payload (%s)" % (error,))
    return seq, records


def encode_ack(seq: int) -> bytes:
    """An ack payload: data payloads up to ``seq`` are applied."""
    return _SEQ.pack(seq)


def decode_ack(payload: bytes) -> int:
    """
    The sequence number of an ack payload.

    :raises MirrorDecodeError: not 8 bytes.
    """
    if len(payload) != 8:
        raise MirrorDecodeError("mirror ack of %d bytes" % (len(payload),))
    return int(_SEQ.unpack(payload)[0])


def encode_delay_item(delay_ms: int, data: bytes) -> bytes:
    """A ``D`` or ``R`` item: the delay in ms, then the message or id."""
    return _pack_len(max(0, min(delay_ms, 0xFFFFFFFF))) + data


def decode_delay_item(item: bytes) -> Tuple[int, bytes]:
    """``(delay_ms, rest)`` of a ``D`` or ``R`` item."""
    if len(item) < 4:
        raise MirrorDecodeError("delayed mirror item shorter than its delay")
    return _unpack_len(item, 0)[0], item[4:]
