# -*- test-case-name: tests.test_nsqd_mirror -*-
"""
What a mirrored topic's publishes, FINs, REQs and channel changes become
on the node where they happen (no IO): records, gathered while a reactor
turn runs and sent to the peers in one payload by the mirror's gate
(:mod:`txnsq.mirror.gate`), so that the per-message cost is a list
append.

A topic is mirrored when its ``mirror`` attribute is a
:class:`MirrorRecorder`; its channels tell the recorder of FINs and REQs.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional

from txnsq.nsqd.topic import PublishError
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
    RecordBuilder,
    encode_delay_item,
)

__all__ = ["CHANNEL_OPS", "FLUSH_SIZE", "MirrorRecorder", "StandbysUnavailable", "recorder_of"]

#: Records held before they are sent at once rather than at the turn's end.
FLUSH_SIZE = 256 * 1024


class StandbysUnavailable(PublishError):
    """
    A publish to a mirrored topic was refused before anything was stored:
    fewer standbys are live than ``--mirror-min-standbys`` asks for.
    ``str()`` names the cause (``mirror: 0 of 1 required standbys live``).
    """


class MirrorRecorder:
    """
    Gathers the records of every mirrored topic of one node.

    :param schedule: called when the first record after a send is added
        (the sender sends at the end of the reactor turn).
    :param full: called when :data:`FLUSH_SIZE` bytes are held (the sender
        sends them now).

    :ivar live: some peer takes the records; while none does, nothing is
        gathered.
    :ivar builder: the records not sent yet.
    :ivar refusing: while not ``None``, why publishes to mirrored topics
        are refused (fewer live standbys than ``--mirror-min-standbys``):
        a topic asks before it stores anything (:meth:`refuse`).
    :ivar refused: the publishes refused so far.
    """

    __slots__ = ("builder", "live", "refusing", "refused", "_schedule", "_full")

    def __init__(self, schedule: Callable[[], None], full: Callable[[], None]) -> None:
        self.builder = RecordBuilder()
        self.live = False
        self.refusing: Optional[str] = None
        self.refused = 0
        self._schedule = schedule
        self._full = full

    def refuse(self) -> None:
        """
        Refuse a publish while :attr:`refusing` is set (called by the
        topic before it stores anything); counted.

        :raises StandbysUnavailable: always, with :attr:`refusing`'s text.
        """
        self.refused += 1
        raise StandbysUnavailable(self.refusing or "mirror: standbys unavailable")

    def _added(self, was_empty: bool) -> None:
        if was_empty:
            self._schedule()
        elif self.builder.size >= FLUSH_SIZE:
            self._full()

    def published(self, topic: str, data: bytes) -> None:
        """One message (encoded as the channels hold it) was published to ``topic``."""
        if self.live:
            builder = self.builder
            was_empty = not builder
            builder.add_one(OP_MESSAGES, topic, "", data)
            self._added(was_empty)

    def published_many(self, topic: str, messages: List[bytes]) -> None:
        """Several messages were published to ``topic``, in this order."""
        if self.live:
            builder = self.builder
            was_empty = not builder
            builder.add(OP_MESSAGES, topic, "", messages)
            self._added(was_empty)

    def published_deferred(self, topic: str, data: bytes, delay: float) -> None:
        """A message was published to ``topic`` to be delivered ``delay`` s later."""
        if self.live:
            builder = self.builder
            was_empty = not builder
            builder.add_one(OP_DEFERRED, topic, "", encode_delay_item(int(delay * 1000), data))
            self._added(was_empty)

    def finished(self, topic: str, channel: str, msg_id: bytes) -> None:
        """A message of ``topic:channel`` was finished."""
        if self.live:
            builder = self.builder
            was_empty = not builder
            builder.add_one(OP_FIN, topic, channel, msg_id)
            self._added(was_empty)

    def requeued(self, topic: str, channel: str, msg_id: bytes, delay: float) -> None:
        """A message of ``topic:channel`` was requeued with ``delay`` seconds."""
        if self.live:
            builder = self.builder
            was_empty = not builder
            builder.add_one(OP_REQ, topic, channel, encode_delay_item(int(delay * 1000), msg_id))
            self._added(was_empty)

    def handed_over(self, topic: str, channel: str, messages: List[bytes]) -> None:
        """Messages of another node's copy were put in ``topic:channel`` here."""
        if self.live:
            builder = self.builder
            was_empty = not builder
            builder.add(OP_MESSAGES, topic, channel, messages)
            self._added(was_empty)

    def dropped(self, topic: str, channel: str, ids: List[bytes]) -> None:
        """
        Messages of ``topic:channel`` (``""``: the topic's own) were
        dropped here by a fail-back exchange: for the peers, as FINs.
        """
        if self.live and ids:
            builder = self.builder
            was_empty = not builder
            builder.add(OP_FIN, topic, channel, ids)
            self._added(was_empty)

    def channel_changed(self, op: bytes, topic: str, channel: str) -> None:
        """``topic:channel`` was created, deleted, emptied, paused or unpaused (``op``)."""
        if self.live:
            builder = self.builder
            was_empty = not builder
            builder.add(op, topic, channel, [])
            self._added(was_empty)


#: Channel ops by the topology event or channel call that sends them.
CHANNEL_OPS = {
    "create": OP_CHANNEL_CREATE,
    "delete": OP_CHANNEL_DELETE,
    "empty": OP_CHANNEL_EMPTY,
    "pause": OP_CHANNEL_PAUSE,
    "unpause": OP_CHANNEL_UNPAUSE,
}


def recorder_of(topic: Any) -> Optional[MirrorRecorder]:
    """``topic``'s recorder when it is mirrored, else ``None``."""
    return getattr(topic, "mirror", None)
