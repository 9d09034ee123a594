# -*- test-case-name: tests.test_storage -*-
"""
The storage interfaces: a queue of encoded messages (``IBackendQueue``, the
counterpart of Go nsqd's ``BackendQueue``) and the plugin that opens such
queues by name (``IStorageBackend``).

A queue holds opaque ``bytes`` (encoded messages, see
:mod:`txnsq.protocol.message`); it never looks inside them.  Queues are used
from the reactor thread only, so they need no locking.
"""

from __future__ import annotations

from zope.interface import Attribute, Interface

__all__ = ["IBackendQueue", "IBatchQueue", "IDeferredStore", "IStorageBackend"]


class IBackendQueue(Interface):
    """
    A FIFO of encoded messages backing one topic or one channel.
    """

    limit = Attribute(
        """
        ``int`` or ``None``: how many messages the queue is meant to hold.

        The queue itself does not enforce it; the topic refuses a publish
        that would take a destination queue past its limit.  ``None`` means
        publishes are never refused on this queue's account.
        """
    )

    error = Attribute(
        """
        ``str`` or ``None``: why the queue cannot store messages right now
        (a failed disk write), or ``None`` while it is healthy.

        While it is set the topic refuses publishes to the queue (E_PUB_FAILED)
        and nsqd reports itself unhealthy; the queue still keeps, in memory,
        any message put into it, and clears ``error`` once it can store
        again.
        """
    )

    def put(data: bytes) -> None:
        """
        Append one encoded message at the end of the queue.

        A backend may drop the message (the ephemeral backend drops
        overflow) but must not raise for a full queue.
        """

    def read() -> "bytes | None":
        """
        Remove and return the oldest message, or ``None`` when empty.
        """

    def depth() -> int:
        """
        The number of messages that :meth:`read` would still return.
        """

    def empty() -> None:
        """
        Discard every message in the queue; the queue stays usable.
        """

    def close() -> None:
        """
        Stop using the queue, keeping what a persistent backend can keep
        (a later ``open_queue`` of the same name gets it back).
        """

    def delete() -> None:
        """
        Stop using the queue and remove its messages and any files for good.
        """


class IBatchQueue(Interface):
    """
    Optionally provided by an ``IBackendQueue`` that takes a run of
    messages for less than one ``put`` each (the disk backend frames their
    records in one go).  A channel hands it the messages of an ``MPUB``
    that none of its consumers can take now.
    """

    def put_many(messages: "list[bytes]") -> None:
        """
        Append these encoded messages at the end of the queue, in order:
        exactly what ``put`` of each, one after the other, would do.
        """


class IDeferredStore(Interface):
    """
    Optionally provided by an ``IBackendQueue`` that can keep deferred
    messages across a restart with their deferral.

    Each item is ``(when, data)``: ``when`` is an integer whose meaning
    belongs to the queue's owner (a channel stores the due time in
    nanoseconds since the epoch, a topic the delay not yet started); the
    queue only keeps it with the message.
    """

    def save_deferred(items: "list[tuple[int, bytes]]") -> None:
        """
        Keep these deferred messages; called once, just before ``close``.

        The messages must also remain readable as plain messages by any
        reader that does not know about deferral (go-diskqueue readers).
        """

    def load_deferred() -> "list[tuple[int, bytes]]":
        """
        The deferred messages saved by the previous ``save_deferred`` of
        this queue, once: they are forgotten by the queue when returned,
        and their plain copies are no longer returned by ``read``.
        """


class IStorageBackend(Interface):
    """
    A storage backend, registered as a Twisted plugin
    (``twisted/plugins/txnsq_storage.py``) and chosen with ``--storage NAME``.
    """

    name = Attribute("``str``: the name ``--storage`` selects the backend by.")

    description = Attribute("``str``: one line saying what the backend does.")

    durable = Attribute(
        """
        ``bool``: queues outlive the process.  nsqd keeps its list of
        topics and channels (``nsqd.dat``) and locks ``--data-path`` only
        for a durable backend.
        """
    )

    def open_queue(name: str, options: object, clock: object) -> IBackendQueue:
        """
        Open (or create) the queue called ``name``.

        :param name: ``"topic"`` for a topic's queue, ``"topic:channel"``
            for a channel's (Go nsqd's backend names).
        :param options: the daemon's settings (``NSQDOptions``); backends
            read what they need, e.g. ``mem_queue_size``, ``data_path``.
        :param clock: an ``IReactorTime`` for any timer the backend needs
            (for example a periodic fsync).
        """
