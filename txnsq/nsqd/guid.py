# -*- test-case-name: tests.test_guid -*-
"""
Message IDs in Go nsqd's snowflake layout.

An ID is a 63-bit integer written as 16 lowercase hex digits (the 16-byte
message ID on the wire)::

    (ts - TWEPOCH) << 22 | node_id << 12 | sequence

where ``ts`` is the time in "pseudo-milliseconds" (nanoseconds >> 20, as Go
nsqd v1.x), ``node_id`` is ``--node-id`` (10 bits) and ``sequence`` counts
IDs made within one ``ts`` (12 bits).

Go returns an error (and its caller sleeps and retries) when the sequence
runs out or the clock goes backwards.  Here neither stops the broker: the
factory borrows the next ``ts`` instead, so IDs stay unique and strictly
increasing and catch up with the clock once it passes them.
"""

from __future__ import annotations

from typing import Any, Optional

from twisted.internet.interfaces import IReactorTime

from txnsq.protocol.message_id import NODE_ID_BITS, SEQUENCE_BITS, TWEPOCH

__all__ = [
    "GUIDFactory",
    "NODE_ID_BITS",
    "SEQUENCE_BITS",
    "TWEPOCH",
    "guid_node_id",
    "guid_timestamp",
]

_NODE_ID_SHIFT = SEQUENCE_BITS
_TIMESTAMP_SHIFT = SEQUENCE_BITS + NODE_ID_BITS
_SEQUENCE_MASK = (1 << SEQUENCE_BITS) - 1
_MAX_NODE_ID = (1 << NODE_ID_BITS) - 1


class GUIDFactory:
    """
    Makes unique, increasing message IDs for one nsqd.

    :param node_id: ``--node-id``, 0 to 1023.
    :param clock: where the time comes from.
    :raises ValueError: ``node_id`` does not fit in 10 bits.
    """

    __slots__ = ("node_id", "_clock", "_node_bits", "_last_ts", "_sequence")

    def __init__(self, node_id: int, clock: IReactorTime) -> None:
        if not 0 <= node_id <= _MAX_NODE_ID:
            raise ValueError(
                "node_id %r out of range 0-%d" % (node_id, _MAX_NODE_ID)
            )
        self.node_id = node_id
        # Any: calls on zope Interface types only type-check with mypy-zope.
        self._clock: Any = clock
        self._node_bits = node_id << _NODE_ID_SHIFT
        self._last_ts = -1
        self._sequence = 0

    def new_guid(self, now: Optional[float] = None) -> int:
        """
        The next ID as an integer.

        :param now: the time in seconds, when the caller already read the
            clock; the clock is read otherwise.
        """
        if now is None:
            now = self._clock.seconds()
        # Times before Go's epoch only happen with test clocks; they count
        # as the epoch itself.
        ts = (int(now * 1e9) >> 20) - TWEPOCH
        if ts < 0:
            ts = 0
        last = self._last_ts
        if ts > last:
            self._last_ts = ts
            self._sequence = 0
            return (ts << _TIMESTAMP_SHIFT) | self._node_bits
        # Same pseudo-millisecond, or the clock went back: keep counting on
        # from the last ID, moving to the next pseudo-millisecond when the
        # sequence is used up.
        sequence = self._sequence + 1
        if sequence > _SEQUENCE_MASK:
            last += 1
            self._last_ts = last
            sequence = 0
        self._sequence = sequence
        return (last << _TIMESTAMP_SHIFT) | self._node_bits | sequence

    def new_id(self, now: Optional[float] = None) -> bytes:
        """
        The next ID as the 16 ASCII hex digits used on the wire.

        :param now: as for :meth:`new_guid`.
        """
        return b"%016x" % (self.new_guid(now),)


def guid_timestamp(msg_id: bytes) -> int:
    """The pseudo-millisecond timestamp (nanoseconds >> 20) in an ID."""
    return (int(msg_id, 16) >> _TIMESTAMP_SHIFT) + TWEPOCH


def guid_node_id(msg_id: bytes) -> int:
    """The node ID in an ID."""
    return (int(msg_id, 16) >> _NODE_ID_SHIFT) & _MAX_NODE_ID
