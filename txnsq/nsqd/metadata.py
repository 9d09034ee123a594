# -*- test-case-name: tests.test_metadata -*-
"""
nsqd's topology file, byte-compatible with Go nsqd 1.3: kept in step with
the broker (:class:`MetadataStore`).

``<data-path>/nsqd.dat`` lists the durable topics and channels and whether
each is paused, so that a restarted nsqd (Go's or this one) gets them back::

    {"topics":[{"name":"t","paused":false,"channels":[{"name":"c",
    "paused":true}]}],"version":"1.3.0"}

It is Go's ``json.Marshal`` of nsqd's ``Metadata`` struct: keys in struct
order, no spaces, no trailing newline, and ``null`` for an empty list (a Go
nil slice); :mod:`txnsq.nsqd.metadata_format` writes and reads it.  It is
replaced atomically (``nsqd.dat.<n>.tmp``, fsync,
rename) whenever the topology changes, and at shutdown.

Where Go refuses to start, txnsq starts: an unparsable ``nsqd.dat`` is moved
aside to ``nsqd.dat.bad`` (never deleted), and topics and channels whose
queue files (``NAME.diskqueue.meta.dat``) are in the data path but not in
``nsqd.dat`` are recreated, so queued messages are never dropped.

The data path is locked first (:mod:`txnsq.nsqd.data_path_lock`).
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional

from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from txnsq.files import write_file_atomically
from txnsq.version import NSQ_VERSION
from txnsq.nsqd.broker import Broker
from txnsq.nsqd.metadata_format import (
    ChannelMetadata,
    MetadataError,
    TopicMetadata,
    decode_metadata,
    encode_metadata,
)
from txnsq.nsqd.topic import Topic
from txnsq.protocol.names import is_ephemeral, is_valid_channel_name, is_valid_topic_name

__all__ = ["METADATA_FILE_NAME", "MetadataStore", "snapshot"]

#: The topology file in the data path (Go nsqd 1.x since 1.0).
METADATA_FILE_NAME = "nsqd.dat"

#: go-diskqueue's state file for a queue ``NAME`` (a topic ``t`` or a
#: channel ``t:c``): its presence means the queue may hold messages.
_QUEUE_META_SUFFIX = ".diskqueue.meta.dat"

#: A queue's flight log (``--mem-queue-size=0``): a channel whose messages
#: all went straight to its consumers may have only this file.
_QUEUE_FLIGHT_SUFFIX = ".diskqueue.flight.dat"

def snapshot(broker: Broker) -> List[TopicMetadata]:
    """
    The broker's durable topology, in creation order: every topic and
    channel but the ``#ephemeral`` ones, as Go nsqd persists it.
    """
    return [
        TopicMetadata(
            topic.name,
            topic.paused,
            [
                ChannelMetadata(channel.name, channel.paused)
                for channel in topic.channels.values()
                if not channel.ephemeral
            ],
            topic.retention.settings.to_json() if topic.retention is not None else None,
        )
        for topic in broker.topics.values()
        if not topic.ephemeral
    ]


# -- writing -----------------------------------------------------------


# -- the store ---------------------------------------------------------


class MetadataStore:
    """
    Keeps ``<data_path>/nsqd.dat`` in step with a broker's topology.

    Made at startup after the data path is locked: :meth:`load` recreates
    the topics and channels; the caller should then :meth:`persist` at
    once, as Go nsqd does.  The store installs :meth:`schedule` as the
    broker's ``on_topology_change`` hook, so every topic or channel
    created, deleted, paused or unpaused leads to one write, on the next
    reactor turn.  :meth:`close` writes the file a last time.

    :param broker: the broker whose topology is kept.
    :param data_path: nsqd's ``--data-path``; ``""`` is the current
        directory, as in Go.
    :param clock: schedules writes (the reactor, or a ``Clock``).
    :param version: written as the file's ``version``.
    :ivar path: the metadata file's path.
    """

    _log = Logger()

    def __init__(
        self,
        broker: Broker,
        data_path: str,
        clock: IReactorTime,
        version: str = NSQ_VERSION,
    ) -> None:
        self.broker = broker
        self.data_path = data_path
        # Interface-typed values are held as Any: calls on zope Interface
        # types only type-check with the mypy-zope plugin.
        self.clock: Any = clock
        self.version = version
        self.path = os.path.normpath(os.path.join(data_path, METADATA_FILE_NAME))
        self._pending: Optional[IDelayedCall] = None
        self._loading = False
        self._closed = False
        broker.on_topology_change = self.schedule

    def __repr__(self) -> str:
        return "<MetadataStore %s>" % (self.path,)

    # -- loading -----------------------------------------------------------

    def load(self) -> None:
        """
        Recreate the topics and channels of ``nsqd.dat``, paused as they
        were, then those of orphaned queue files; nothing is persisted
        meanwhile.

        A missing file is a fresh start.  A file that is not Go's format is
        logged and moved aside to ``nsqd.dat.bad`` (``.bad.1``, ... if
        taken).  Entries with invalid names are logged and skipped.  Each
        ``NAME.diskqueue.meta.dat`` (or flight log,
        ``NAME.diskqueue.flight.dat``) in the data path whose topic or
        channel was not listed is recreated (and logged): its messages are
        kept.

        As Go starts a loaded topic's message pump only once its channels
        exist, topics are held (paused) while loading, so each channel
        created gets the messages the topic kept.

        :raises MetadataError: the file exists but cannot be read, or an
            invalid one cannot be moved aside (Go would not start either).
        """
        self._loading = True
        # Topic name -> whether it stays paused once loaded.
        held: Dict[str, bool] = {}
        try:
            for listed in self._read():
                topic = self._hold(listed.name, held)
                self._retain(topic, listed.retention)
                if listed.paused:
                    held[listed.name] = True
                for channel_meta in listed.channels:
                    channel = topic.get_channel(channel_meta.name)
                    if channel_meta.paused:
                        channel.pause()
            self._recover_orphans(held)
        finally:
            try:
                for name, paused in held.items():
                    loaded = self.broker.topics.get(name)
                    if loaded is not None and not paused:
                        loaded.unpause()
            finally:
                self._loading = False

    def _retain(self, topic: Topic, value: Optional[Dict[str, Any]]) -> None:
        """Turn on the retention ``nsqd.dat`` lists for ``topic`` (failures are logged)."""
        from txnsq.nsqd.retention import RetentionSettings

        settings = RetentionSettings.from_json(value)
        if settings is None:
            if value is not None:
                self._log.warn(
                    "ignoring invalid retention {value!r} of topic {topic}",
                    value=value,
                    topic=topic.name,
                )
            return
        try:
            topic.set_retention(settings)
        except (OSError, ValueError) as e:
            self._log.error(
                "cannot open the retained log of topic {topic} - {error}",
                topic=topic.name,
                error=e,
            )

    def _hold(self, name: str, held: Dict[str, bool]) -> Topic:
        """The topic ``name``, created if need be and paused until loaded."""
        topic = self.broker.get_topic(name)
        if name not in held:
            held[name] = topic.paused
            if not topic.paused:
                topic.pause()
        return topic

    def _read(self) -> List[TopicMetadata]:
        """
        The valid entries of ``nsqd.dat`` (none if it is missing or
        invalid, in which case it is moved aside).
        """
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return []
        except OSError as e:
            raise MetadataError(
                "failed to read metadata from %s - %s" % (self.path, e.strerror or e)
            ) from e
        try:
            topics, skipped = decode_metadata(data)
        except MetadataError as e:
            self._log.error(
                "failed to parse metadata in {path} - {error}", path=self.path, error=e
            )
            bad = self._move_aside()
            self._log.warn(
                "NSQ: moved invalid metadata file {path} to {bad}; starting without it",
                path=self.path,
                bad=bad,
            )
            return []
        for entry in skipped:
            self._log.warn(
                "skipping creation of invalid {kind} {name}", kind=entry.kind, name=entry.name
            )
        return topics

    def _move_aside(self) -> str:
        """
        Rename the invalid metadata file to the first free name of
        ``nsqd.dat.bad``, ``nsqd.dat.bad.1``, ...; return that name.
        (The data path is locked, so no one else takes the name meanwhile.)

        :raises MetadataError: the file cannot be renamed.
        """
        bad = self.path + ".bad"
        number = 0
        while os.path.lexists(bad):
            number += 1
            bad = "%s.bad.%d" % (self.path, number)
        try:
            os.rename(self.path, bad)
        except OSError as e:
            raise MetadataError(
                "failed to move invalid metadata %s aside to %s - %s"
                % (self.path, bad, e.strerror or e)
            ) from e
        return bad

    def _recover_orphans(self, held: Dict[str, bool]) -> None:
        """Recreate the topics and channels whose queue files are not listed."""
        directory = self.data_path or "."
        try:
            filenames = sorted(os.listdir(directory))
        except OSError as e:
            self._log.error(
                "NSQ: failed to scan {directory} for orphaned queue files - {error}",
                directory=directory,
                error=e.strerror or e,
            )
            return
        for filename in filenames:
            for suffix in (_QUEUE_META_SUFFIX, _QUEUE_FLIGHT_SUFFIX):
                if filename.endswith(suffix):
                    break
            else:
                continue
            queue_name = filename[: -len(suffix)]
            topic_name, colon, channel_name = queue_name.partition(":")
            if not is_valid_topic_name(topic_name) or (
                colon and not is_valid_channel_name(channel_name)
            ):
                self._log.warn(
                    "NSQ: skipping orphaned queue file {file} - invalid name", file=filename
                )
                continue
            if is_ephemeral(topic_name) or is_ephemeral(channel_name):
                # Ephemeral queues are never on disk; such a file is not
                # nsqd's, and recreating the queue would not read it.
                continue
            if topic_name not in self.broker.topics:
                self._log.warn(
                    "NSQ: recovering topic {topic} from orphaned queue file {file}",
                    topic=topic_name,
                    file=filename,
                )
            topic = self._hold(topic_name, held)
            if colon and channel_name not in topic.channels:
                self._log.warn(
                    "NSQ: recovering channel {topic}:{channel} from orphaned queue file {file}",
                    topic=topic_name,
                    channel=channel_name,
                    file=filename,
                )
                topic.get_channel(channel_name)

    # -- persisting ------------------------------------------------------

    def schedule(self) -> None:
        """
        The topology changed: write the file on the next reactor turn.
        Changes made before then share that one write.  Ignored while
        loading and once closed.
        """
        if self._loading or self._closed:
            return
        if self._pending is not None and self._pending.active():
            return
        self._pending = self.clock.callLater(0, self._persist_scheduled)

    def _persist_scheduled(self) -> None:
        """The scheduled write: failures are logged, not raised."""
        self._pending = None
        try:
            self.persist()
        except OSError as e:
            self._log.error("failed to persist metadata - {error}", error=e)
        except Exception:
            self._log.failure("failed to persist metadata")

    def persist(self) -> None:
        """
        Write the file now (a scheduled write is then cancelled).

        :raises OSError: it could not be written.
        """
        self._cancel_pending()
        self._log.info("NSQ: persisting topic/channel metadata to {path}", path=self.path)
        write_file_atomically(self.path, encode_metadata(snapshot(self.broker), self.version))

    def close(self) -> None:
        """
        Write the file a last time, synchronously (a failure is logged, as
        Go's exit does), and stop: the broker's hook is removed and later
        changes are not written.
        """
        if self._closed:
            return
        self._closed = True
        self._cancel_pending()
        if getattr(self.broker, "on_topology_change", None) == self.schedule:
            self.broker.on_topology_change = None
        try:
            self.persist()
        except OSError as e:
            self._log.error("failed to persist metadata - {error}", error=e)

    def _cancel_pending(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None and pending.active():
            pending.cancel()
