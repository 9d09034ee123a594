# -*- test-case-name: tests.test_metadata -*-
"""
nsqd's topology file and data-path lock, byte-compatible with Go nsqd 1.3.

``<data-path>/nsqd.dat`` lists the durable topics and channels and whether
each is paused, so that a restarted nsqd (Go's or this one) gets them back::

    {"topics":[{"name":"t","paused":false,"channels":[{"name":"c",
    "paused":true}]}],"version":"1.3.0"}

It is Go's ``json.Marshal`` of nsqd's ``Metadata`` struct: keys in struct
order, no spaces, no trailing newline, and ``null`` for an empty list (a Go
nil slice).  It is replaced atomically (``nsqd.dat.<n>.tmp``, fsync,
rename) whenever the topology changes, and at shutdown.

Where Go refuses to start, txnsq starts: an unparsable ``nsqd.dat`` is moved
aside to ``nsqd.dat.bad`` (never deleted), and topics and channels whose
queue files (``NAME.diskqueue.meta.dat``) are in the data path but not in
``nsqd.dat`` are recreated, so queued messages are never dropped.

The data path is locked as Go's ``internal/dirlock`` does it, with
``flock`` on the directory itself, so a Go nsqd and a txnsq nsqd never share
one.
"""

from __future__ import annotations

import errno
import json
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from txnsq.files import write_file_atomically
from txnsq.version import NSQ_VERSION
from txnsq.nsqd.broker import Broker
from txnsq.nsqd.topic import Topic
from txnsq.protocol.names import is_ephemeral, is_valid_channel_name, is_valid_topic_name

if sys.platform != "win32":
    import fcntl

__all__ = [
    "METADATA_FILE_NAME",
    "ChannelMetadata",
    "DataPathError",
    "DataPathInUse",
    "DataPathLock",
    "MetadataError",
    "MetadataStore",
    "Skipped",
    "TopicMetadata",
    "decode_metadata",
    "encode_metadata",
    "snapshot",
]

#: The topology file in the data path (Go nsqd 1.x since 1.0).
METADATA_FILE_NAME = "nsqd.dat"

#: go-diskqueue's state file for a queue ``NAME`` (a topic ``t`` or a
#: channel ``t:c``): its presence means the queue may hold messages.
_QUEUE_META_SUFFIX = ".diskqueue.meta.dat"

#: A queue's flight log (``--mem-queue-size=0``): a channel whose messages
#: all went straight to its consumers may have only this file.
_QUEUE_FLIGHT_SUFFIX = ".diskqueue.flight.dat"

class DataPathError(Exception):
    """The data path cannot be locked: ``str()`` says why."""


class DataPathInUse(DataPathError):
    """
    Another process (a Go or txnsq nsqd) holds the data path's lock.
    ``str()`` is Go nsqd's message.
    """


class MetadataError(Exception):
    """``nsqd.dat`` cannot be read, or is not a Go nsqd metadata file."""


# -- data-path lock ----------------------------------------------------


class DataPathLock:
    """
    An exclusive lock on a data directory, the one Go nsqd takes (an
    ``flock(LOCK_EX|LOCK_NB)`` on a descriptor of the directory itself).

    ``flock`` locks belong to an open file description, so two locks on
    one directory exclude each other even within one process.  As in Go,
    there is no lock on Windows.

    :param path: the data path; ``""`` is the current directory, as in Go.
    :ivar path: the locked directory (the current one resolved).
    """

    def __init__(self, path: str) -> None:
        self.path = path if path else os.getcwd()
        self._fd: Optional[int] = None

    def __repr__(self) -> str:
        return "<DataPathLock %s%s>" % (self.path, " locked" if self.locked else "")

    @property
    def locked(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def acquire(self) -> None:
        """
        Take the lock, without waiting.  Does nothing if already held.

        :raises DataPathInUse: another holder has it.
        :raises DataPathError: the directory cannot be opened (it is
            missing, say) or locked.
        """
        if self._fd is not None or sys.platform == "win32":
            return
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        except OSError as e:
            raise DataPathError(
                "cannot open --data-path=%s - %s" % (self.path, e.strerror or e)
            ) from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise DataPathInUse(
                    "--data-path=%s in use (possibly by another instance of nsqd)"
                    % (self.path,)
                ) from e
            # Go's dirlock wording, for a lock that cannot be taken at all
            # (ENOLCK on some network filesystems).
            raise DataPathError(
                "cannot lock directory %s - %s" % (self.path, e.strerror or e)
            ) from e
        self._fd = fd

    def release(self) -> None:
        """Drop the lock (closing the descriptor).  Does nothing if not held."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError:
            pass  # closing the descriptor releases it anyway
        finally:
            os.close(fd)


# -- the file format ---------------------------------------------------


@dataclass
class ChannelMetadata:
    """A durable channel as listed in ``nsqd.dat``."""

    name: str
    paused: bool = False


@dataclass
class TopicMetadata:
    """A durable topic as listed in ``nsqd.dat``, with its durable channels."""

    name: str
    paused: bool = False
    channels: List[ChannelMetadata] = field(default_factory=list)
    #: txnsq's retention settings (``RetentionSettings.to_json()``), or
    #: ``None``; written as an extra ``"retention"`` key, which Go ignores.
    retention: Optional[Dict[str, Any]] = None


class Skipped(NamedTuple):
    """
    An entry of ``nsqd.dat`` with an invalid name, which Go and txnsq
    skip: ``kind`` is ``"topic"`` (its channels are skipped with it) or
    ``"channel"``.
    """

    kind: str
    name: str


# What Go's encoder escapes beyond what json.dumps does (HTML-safe output
# and the JavaScript line separators).
_GO_EXTRA_ESCAPES = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}
_GO_EXTRA = re.compile("[<>&\u2028\u2029]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _go_string(value: str) -> str:
    """A JSON string literal as Go's ``encoding/json`` writes it."""
    # Go writes invalid UTF-8 as U+FFFD; a lone surrogate is its analogue.
    value = _SURROGATE.sub("\ufffd", value)
    text = json.dumps(value, ensure_ascii=False)
    return _GO_EXTRA.sub(lambda match: _GO_EXTRA_ESCAPES[match.group()], text)


def _bool(value: bool) -> str:
    return "true" if value else "false"


def encode_metadata(topics: Sequence[TopicMetadata], version: str) -> bytes:
    """
    The bytes of ``nsqd.dat`` listing ``topics``, exactly as Go nsqd 1.3's
    ``json.Marshal(Metadata)`` writes them: keys in struct order
    (``topics``, ``version``; ``name``, ``paused``, ``channels``), compact,
    no trailing newline, an empty list written ``null``.
    """
    topic_parts = []
    for topic in topics:
        if topic.channels:
            channels = "[%s]" % ",".join(
                '{"name":%s,"paused":%s}' % (_go_string(channel.name), _bool(channel.paused))
                for channel in topic.channels
            )
        else:
            channels = "null"
        retention = ""
        if topic.retention is not None:
            retention = ',"retention":%s' % (
                json.dumps(topic.retention, separators=(",", ":"), sort_keys=True),
            )
        topic_parts.append(
            '{"name":%s,"paused":%s,"channels":%s%s}'
            % (_go_string(topic.name), _bool(topic.paused), channels, retention)
        )
    listed = "[%s]" % ",".join(topic_parts) if topic_parts else "null"
    return ('{"topics":%s,"version":%s}' % (listed, _go_string(version))).encode("utf-8")


class _Object:
    """A decoded JSON object: its members in order, duplicates kept."""

    __slots__ = ("pairs",)

    def __init__(self, pairs: List[Tuple[str, Any]]) -> None:
        self.pairs = pairs


def _reject_constant(name: str) -> Any:
    raise ValueError("invalid JSON value %s" % (name,))


# Go matches JSON keys to struct fields ignoring case, by Unicode simple
# folding: besides ASCII, only U+017F (long s) and U+212A (Kelvin sign) fold
# to the ASCII letters of the field names.
_FOLD = {**{c: c + 32 for c in range(ord("A"), ord("Z") + 1)}, 0x017F: ord("s"), 0x212A: ord("k")}


def _json_type(value: Any) -> str:
    """The JSON type of a decoded value, as Go's errors name it."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _struct(value: Any, struct: str, fields: Dict[str, type]) -> Dict[str, Any]:
    """
    Decode ``value`` as Go decodes a JSON object into a struct with
    ``fields`` (name to Python type): keys matched ignoring case, unknown
    keys ignored, the last duplicate winning; ``null`` leaves a string or a
    bool as it was and empties a list.  Absent fields are missing from the
    result.

    :raises MetadataError: ``value`` is not an object, or a field has the
        wrong type.
    """
    if not isinstance(value, _Object):
        raise MetadataError(
            "json: cannot unmarshal %s into Go value of type nsqd.%s" % (_json_type(value), struct)
        )
    found: Dict[str, Any] = {}
    for key, member in value.pairs:
        name = key.translate(_FOLD)
        kind = fields.get(name)
        if kind is None:
            continue
        if member is None:
            if kind is list:
                found[name] = []
            continue
        if type(member) is not kind:
            raise MetadataError(
                "json: cannot unmarshal %s into Go struct field %s.%s of type %s"
                % (_json_type(member), struct, name, _GO_TYPES[struct][name])
            )
        found[name] = member
    return found


_GO_TYPES = {
    "Metadata": {"topics": "[]nsqd.TopicMetadata", "version": "string"},
    "TopicMetadata": {
        "name": "string",
        "paused": "bool",
        "channels": "[]nsqd.ChannelMetadata",
    },
    "ChannelMetadata": {"name": "string", "paused": "bool"},
}
_METADATA_FIELDS: Dict[str, type] = {"topics": list, "version": str}
_TOPIC_FIELDS: Dict[str, type] = {"name": str, "paused": bool, "channels": list}
_CHANNEL_FIELDS: Dict[str, type] = {"name": str, "paused": bool}


def decode_metadata(data: bytes) -> Tuple[List[TopicMetadata], List[Skipped]]:
    """
    Parse ``nsqd.dat`` as Go nsqd does: the topics and their channels, in
    file order, and the entries left out for their invalid names (a topic's
    channels are not looked at when the topic is skipped).  A ``null`` entry
    is Go's zero value: a topic or channel with the invalid name ``""``.
    Unknown keys (``version``, say) are ignored; so is key case.

    :raises MetadataError: ``data`` is not JSON, or not shaped like Go's
        ``Metadata`` struct (a field of the wrong type, say); Go nsqd
        refuses to start on such a file.
    """
    # Go reads bytes: invalid UTF-8 inside a string becomes U+FFFD, and
    # anywhere else is a syntax error either way.  Decoding here also keeps
    # json from guessing UTF-16, which Go does not accept.
    text = data.decode("utf-8", "replace")
    try:
        document = json.loads(
            text, object_pairs_hook=_Object, parse_constant=_reject_constant
        )
    except RecursionError:
        raise MetadataError("json: exceeded max depth") from None
    except ValueError as e:
        raise MetadataError(str(e)) from None
    if document is None:
        return [], []
    fields = _struct(document, "Metadata", _METADATA_FIELDS)
    # Nothing is created from the file before all of it has parsed (Go
    # unmarshals first), so names are checked in the same pass.
    topics: List[TopicMetadata] = []
    skipped: List[Skipped] = []
    for topic_value in fields.get("topics", []):
        if topic_value is None:
            topic_value = _Object([])
        topic_fields = _struct(topic_value, "TopicMetadata", _TOPIC_FIELDS)
        topic_name = topic_fields.get("name", "")
        channels: List[ChannelMetadata] = []
        channel_skips: List[Skipped] = []
        for channel_value in topic_fields.get("channels", []):
            if channel_value is None:
                channel_value = _Object([])
            channel_fields = _struct(channel_value, "ChannelMetadata", _CHANNEL_FIELDS)
            channel_name = channel_fields.get("name", "")
            if is_valid_channel_name(channel_name):
                channels.append(ChannelMetadata(channel_name, channel_fields.get("paused", False)))
            else:
                channel_skips.append(Skipped("channel", channel_name))
        if is_valid_topic_name(topic_name):
            topics.append(
                TopicMetadata(
                    topic_name,
                    topic_fields.get("paused", False),
                    channels,
                    _retention_of(topic_value),
                )
            )
            skipped.extend(channel_skips)
        else:
            # Go skips the topic without looking at its channels.
            skipped.append(Skipped("topic", topic_name))
    return topics, skipped


def _retention_of(value: _Object) -> Optional[Dict[str, Any]]:
    """A topic entry's txnsq ``"retention"`` object as a dict (the last one), or ``None``."""
    found: Optional[Dict[str, Any]] = None
    for key, member in value.pairs:
        if key == "retention" and isinstance(member, _Object):
            found = {k: v for k, v in member.pairs}
    return found


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
