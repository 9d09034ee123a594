# -*- test-case-name: tests.test_nsqd_mirror -*-
"""
The copy a standby node keeps of another node's mirrored topics (no IO):
the messages not finished there, until it finishes them -- or fails over
and this node delivers them itself (:meth:`StandbyCopy.take_over`).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from txnsq.protocol.mirror import (
    OP_CHANNEL_CREATE,
    OP_CHANNEL_DELETE,
    OP_CHANNEL_EMPTY,
    OP_CHANNEL_PAUSE,
    OP_CHANNEL_UNPAUSE,
    OP_DEFERRED,
    OP_FIN,
    OP_MESSAGES,
    OP_REQ,
    PackedItems,
    Record,
    decode_delay_item,
)

__all__ = ["SETTLE_REMOVALS", "StandbyCopy", "TopicCopy"]

#: FINs and REQs a :class:`TopicCopy` logs, at least, before it applies
#: its log unasked.
SETTLE_REMOVALS = 4096


class TopicCopy:
    """
    A standby's copy of one topic of another node: the messages not yet
    finished there, per channel (id -> encoded message; a dict keeps
    their order), and those held by the topic itself (no channel yet).
    Delays (DPUB, REQ) are kept apart, by ``(channel, id)`` (``""`` for
    the topic's own), as few messages have one: as the time each is due,
    in ms (the ``now`` it was applied at, plus its delay), so that a
    takeover defers it only for what is left.

    Records are not applied as they come: they are kept in a log as
    received (with :class:`PackedItems <txnsq.protocol.mirror.PackedItems>`, the
    payload itself, not a slice per message), and applied in order, all
    at once, when something reads the copy (:meth:`count`, ``held``,
    ``channels``, ``paused``, ``delays``: ``/stats``, a takeover, the
    journal's compaction), or when the log holds :data:`SETTLE_REMOVALS`
    FINs and REQs and at least as many as the copy held when last
    brought up to date (so that a copy whose messages are being
    finished holds at most about twice what it would, and the work of
    applying stays in proportion).  A standby nobody asks does no work
    per message: the copy's dicts are made when they are needed.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._held: Dict[bytes, bytes] = {}
        self._channels: Dict[str, Dict[bytes, bytes]] = {}
        self._paused: Dict[str, bool] = {}
        self._delays: Dict[Tuple[str, bytes], int] = {}
        # Records not applied yet: (op, channel, items, now_ms).
        self._log: List[Tuple[bytes, str, Sequence[bytes], int]] = []
        # FIN and REQ items in the log, and bytes of messages in it.
        self._log_removals = 0
        self._log_bytes = 0
        # Messages held when last brought up to date, and their bytes
        # (None: not counted since).
        self._settled_count = 0
        self._bytes: Optional[int] = 0

    @property
    def held(self) -> Dict[bytes, bytes]:
        """What the topic holds itself (no channel yet, or paused): id -> message."""
        self.settle()
        return self._held

    @property
    def channels(self) -> Dict[str, Dict[bytes, bytes]]:
        """Per channel, its unfinished messages in order: id -> message."""
        self.settle()
        return self._channels

    @property
    def paused(self) -> Dict[str, bool]:
        """The paused channels (``""``: the topic)."""
        self.settle()
        return self._paused

    @property
    def delays(self) -> Dict[Tuple[str, bytes], int]:
        """When each deferred message is due (ms since the epoch), by ``(channel, id)``."""
        self.settle()
        return self._delays

    def pending(self) -> int:
        """Records received and not applied yet."""
        return len(self._log)

    def count(self) -> int:
        """Messages held in the copy (a message in two channels counts twice)."""
        self.settle()
        return len(self._held) + sum(len(messages) for messages in self._channels.values())

    def size(self) -> int:
        """
        Bytes of messages held, about: those received since the copy was
        last brought up to date count, finished or not (not applied yet).
        """
        if self._bytes is None:
            total = sum(map(len, self._held.values()))
            for messages in self._channels.values():
                total += sum(map(len, messages.values()))
            self._bytes = total
        return self._bytes + self._log_bytes

    def apply(self, op: bytes, channel: str, items: Sequence[bytes], now_ms: int = 0) -> None:
        """Take one record, received at ``now_ms`` (ms since the epoch): logged, applied later."""
        self._log.append((op, channel, items, now_ms))
        if op == OP_MESSAGES or op == OP_DEFERRED:
            self._log_bytes += (
                items.size() if type(items) is PackedItems else sum(map(len, items))
            )
        elif op == OP_FIN or op == OP_REQ:
            removals = self._log_removals + len(items)
            self._log_removals = removals
            if removals >= SETTLE_REMOVALS and removals >= self._settled_count:
                self.settle()

    def settle(self) -> None:
        """Apply the records logged, in order: the copy's dicts are up to date."""
        log = self._log
        if not log:
            return
        self._log = []
        self._log_removals = 0
        self._log_bytes = 0
        self._bytes = None
        apply = self._apply
        for op, channel, items, now_ms in log:
            if type(items) is PackedItems:
                if op == OP_MESSAGES:
                    # Messages cut out with their ids, no slice each.
                    if channel:
                        self._put_channel(channel, items.unpack(), items.message_ids())
                    else:
                        self._add(items.unpack(), None, items.message_ids())
                    continue
                items = items.unpack()
            apply(op, channel, items, now_ms)
        self._settled_count = len(self._held) + sum(
            len(messages) for messages in self._channels.values()
        )

    def _apply(self, op: bytes, channel: str, items: Sequence[bytes], now_ms: int) -> None:
        """Apply one record, received at ``now_ms`` (ms since the epoch), to the dicts."""
        if op == OP_MESSAGES:
            if channel:
                self._put_channel(channel, items, [data[10:26] for data in items])
            else:
                self._add(items, None)
        elif op == OP_FIN:
            # A FIN of the topic's own (channel "") is a message dropped
            # there by a fail-back exchange.
            messages = self._channels.get(channel) if channel else self._held
            if messages is not None:
                pop = messages.pop
                for msg_id in items:
                    pop(msg_id, None)
                delays = self._delays
                if delays:
                    for msg_id in items:
                        delays.pop((channel, msg_id), None)
        elif op == OP_DEFERRED:
            found = [decode_delay_item(item) for item in items if len(item) >= 4]
            self._add(
                [data for _, data in found],
                [now_ms + delay if delay > 0 else 0 for delay, _ in found],
            )
        elif op == OP_REQ:
            messages = self._channels.get(channel)
            if messages is not None:
                for item in items:
                    if len(item) < 4:
                        continue
                    delay_ms, msg_id = decode_delay_item(item)
                    data = messages.pop(msg_id, None)
                    if data is not None:
                        # Back at the end of the queue, as on the node.
                        messages[msg_id] = data
                        if delay_ms > 0:
                            self._delays[(channel, msg_id)] = now_ms + delay_ms
                        else:
                            self._delays.pop((channel, msg_id), None)
        elif op == OP_CHANNEL_CREATE:
            if channel not in self._channels:
                # A paused topic keeps what it holds (as nsqd's does).
                first = not self._channels and not self._paused.get("")
                self._channels[channel] = self._held if first else {}
                if first:
                    self._held = {}
                    self._rename_delays("", channel)
        elif op == OP_CHANNEL_EMPTY and not channel:
            # The topic emptied: what it held itself (channels keep theirs).
            self._held = {}
            self._rename_delays("", None)
        elif op == OP_CHANNEL_DELETE or op == OP_CHANNEL_EMPTY:
            if channel in self._channels:
                if op == OP_CHANNEL_DELETE:
                    del self._channels[channel]
                    self._paused.pop(channel, None)
                else:
                    self._channels[channel] = {}
                self._rename_delays(channel, None)
        elif op == OP_CHANNEL_PAUSE:
            # Channel "": the topic itself was paused.
            self._paused[channel] = True
        elif op == OP_CHANNEL_UNPAUSE:
            self._paused.pop(channel, None)
            if not channel and self._held and self._channels:
                self._release_held()

    def _put_channel(self, channel: str, items: Sequence[bytes], ids: Sequence[bytes]) -> None:
        """Messages of one channel only (a catch-up, or a copy taken over and sent on)."""
        messages = self._channels.get(channel)
        if messages is None:
            messages = self._channels[channel] = {}
        messages.update(zip(ids, items))

    def _release_held(self) -> None:
        """The topic was unpaused: what it held goes to every channel, delays with it."""
        held, self._held = self._held, {}
        delays = self._delays
        for name, messages in self._channels.items():
            messages.update(held)
            if delays:
                for msg_id in held:
                    delay = delays.get(("", msg_id))
                    if delay is not None:
                        delays[(name, msg_id)] = delay
        self._rename_delays("", None)

    def _rename_delays(self, old: str, new: Optional[str]) -> None:
        """Move ``old``'s delays to ``new`` (``None``: drop them)."""
        delays = self._delays
        if not delays:
            return
        moved = [key for key in delays if key[0] == old]
        for key in moved:
            delay = delays.pop(key)
            if new is not None:
                delays[(new, key[1])] = delay

    def _add(
        self,
        items: Sequence[bytes],
        delays: Optional[List[int]],
        ids: Optional[Sequence[bytes]] = None,
    ) -> None:
        if ids is None:
            ids = [data[10:26] for data in items]
        channels = self._channels
        if self._paused.get(""):
            # A paused topic holds its publishes.
            self._held.update(zip(ids, items))
            names: List[str] = [""]
        elif len(channels) == 1:
            # The common case: no dict of pairs made first.
            for messages in channels.values():
                messages.update(zip(ids, items))
            names = list(channels)
        elif channels:
            pairs = dict(zip(ids, items))
            for messages in channels.values():
                messages.update(pairs)
            names = list(channels)
        else:
            self._held.update(zip(ids, items))
            names = [""]
        if delays is not None:
            for name in names:
                for msg_id, delay in zip(ids, delays):
                    if delay > 0:
                        self._delays[(name, msg_id)] = delay

    def take_over(
        self,
        broker: Any,
        taken: Optional[Dict[Tuple[str, str], List[bytes]]] = None,
        now_ms: int = 0,
    ) -> int:
        """
        Hand every message of the copy to ``broker``'s topic of the same
        name, into the same channels (created if need be), in order; how
        many were handed over.  A deferred message is deferred for what is
        left of its delay at ``now_ms``.  A mirrored topic's recorder is told of
        them, per channel, so that this node's own standbys copy them.
        The ids handed over are added to ``taken``, by ``(topic,
        channel)`` (``""``: the topic's own), for the fail-back exchange.
        """
        self.settle()
        topic = broker.get_topic(self.name)
        recorder = topic.mirror
        delays = self._delays
        moved = 0
        for name, messages in self._channels.items():
            channel = topic.get_channel(name)
            if self._paused.get(name) and not channel.paused:
                channel.pause()
            for msg_id, data in messages.items():
                delay_ms = delays.get((name, msg_id), 0) - now_ms if delays else 0
                if delay_ms > 0:
                    channel.put_deferred(data, delay_ms / 1000.0)
                else:
                    channel.put(data)
                moved += 1
            if recorder is not None and messages:
                recorder.handed_over(self.name, name, list(messages.values()))
            if taken is not None and messages:
                taken.setdefault((self.name, name), []).extend(messages)
        if self._paused.get("") and not topic.paused:
            topic.pause()
        held = list(self._held.items())
        for msg_id, data in held:
            delay_ms = delays.get(("", msg_id), 0) - now_ms if delays else 0
            topic.put_encoded(data, max(0, delay_ms) / 1000.0)
            moved += 1
        if recorder is not None and held:
            recorder.published_many(self.name, [data for _, data in held])
        if taken is not None and held:
            taken.setdefault((self.name, ""), []).extend(msg_id for msg_id, _ in held)
        self._channels = {}
        self._held = {}
        self._delays = {}
        self._settled_count = 0
        self._bytes = 0
        return moved


class StandbyCopy:
    """
    Everything a standby keeps of one other node (its mirror ``node_id``,
    in its process ``epoch``): a :class:`TopicCopy` per topic.

    :ivar applied: the sequence number of the last payload applied.
    """

    def __init__(self, node_id: str, epoch: str) -> None:
        self.node_id = node_id
        self.epoch = epoch
        self.topics: Dict[str, TopicCopy] = {}
        self.applied = 0
        self.records = 0

    def apply(self, seq: int, records: List[Record], now: float = 0.0) -> None:
        """Apply one payload's records, in order, received at ``now`` (seconds)."""
        topics = self.topics
        now_ms = int(now * 1000)
        for op, topic, channel, items in records:
            found = topics.get(topic)
            if found is None:
                found = topics[topic] = TopicCopy(topic)
            found.apply(op, channel, items, now_ms)
        self.records += len(records)
        self.applied = seq

    def count(self) -> int:
        """Messages held, over every topic."""
        return sum(topic.count() for topic in self.topics.values())

    def take_over(
        self,
        broker: Any,
        taken: Optional[Dict[Tuple[str, str], List[bytes]]] = None,
        now: float = 0.0,
    ) -> int:
        """Hand every topic's messages to ``broker`` (:meth:`TopicCopy.take_over`) at ``now``."""
        moved = 0
        now_ms = int(now * 1000)
        for topic in self.topics.values():
            moved += topic.take_over(broker, taken, now_ms)
        self.topics = {}
        return moved

    def stats(self) -> Dict[str, Any]:
        """This copy in /stats."""
        return {
            "node_id": self.node_id,
            "epoch": self.epoch,
            "applied_seq": self.applied,
            "topics": {
                name: {
                    "held": len(topic.held),
                    "channels": {c: len(m) for c, m in topic.channels.items()},
                }
                for name, topic in sorted(self.topics.items())
            },
        }
