"""
Tests for txnsq.nsqd.metadata: nsqd.dat's bytes as Go nsqd 1.3 writes
them, loading it back (invalid names, invalid files, orphaned queue
files), coalesced atomic writes, and the data-path lock.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from typing import Any, Dict, List, cast

from twisted.internet.task import Clock
from twisted.logger import ILogObserver, formatEvent, globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase

from tests.core_fakes import make_broker
from txnsq.nsqd.broker import Broker
from txnsq.nsqd.data_path_lock import DataPathError, DataPathInUse, DataPathLock
from txnsq.nsqd.metadata import MetadataStore, snapshot
from txnsq.nsqd.metadata_format import (
    ChannelMetadata,
    MetadataError,
    Skipped,
    TopicMetadata,
    decode_metadata,
    encode_metadata,
)

#: nsqd.dat as Go nsqd 1.3 writes it for the topology of GO_TOPICS.
GO_FILE = (
    b'{"topics":['
    b'{"name":"orders","paused":true,"channels":['
    b'{"name":"billing","paused":false},{"name":"audit","paused":true}]},'
    b'{"name":"events","paused":false,"channels":null}'
    b'],"version":"1.3.0"}'
)

GO_TOPICS = [
    TopicMetadata(
        "orders",
        True,
        [ChannelMetadata("billing", False), ChannelMetadata("audit", True)],
    ),
    TopicMetadata("events", False, []),
]


def build_go_topology(broker: Broker) -> None:
    """Give ``broker`` GO_TOPICS plus ephemeral topics and channels."""
    orders = broker.get_topic("orders")
    orders.get_channel("billing")
    orders.get_channel("audit").pause()
    orders.get_channel("tail#ephemeral")
    orders.pause()
    broker.get_topic("events")
    broker.get_topic("scratch#ephemeral").get_channel("c")


def capture_logs(case: SynchronousTestCase) -> List[str]:
    """
    Collect the text of every event logged by the metadata module during
    ``case`` (the returned list fills as events arrive).
    """
    texts: List[str] = []

    def record(event: Dict[str, Any]) -> None:
        if event.get("log_namespace", "").startswith("txnsq.nsqd.metadata"):
            texts.append(formatEvent(event))

    observe = cast(ILogObserver, record)
    globalLogPublisher.addObserver(observe)
    case.addCleanup(globalLogPublisher.removeObserver, observe)
    return texts


def topology(broker: Broker) -> List[Any]:
    """The broker's topics and channels with their paused flags."""
    return [
        (
            topic.name,
            topic.paused,
            [(channel.name, channel.paused) for channel in topic.channels.values()],
        )
        for topic in broker.topics.values()
    ]


class EncodeTests(SynchronousTestCase):
    """encode_metadata."""

    def test_go_bytes(self) -> None:
        """The topology is written byte for byte as Go's json.Marshal of nsqd's Metadata."""
        self.assertEqual(encode_metadata(GO_TOPICS, "1.3.0"), GO_FILE)

    def test_no_topics(self) -> None:
        """No topic is written as Go writes a nil slice: null."""
        self.assertEqual(encode_metadata([], "1.3.0"), b'{"topics":null,"version":"1.3.0"}')

    def test_go_string_escapes(self) -> None:
        """Strings are escaped as Go's encoder does: HTML characters and U+2028/9 as \\u escapes."""
        self.assertEqual(
            encode_metadata([], '<a&b>"\\\n\u2028\u2029\u00e9'),
            b'{"topics":null,"version":"\\u003ca\\u0026b\\u003e\\"\\\\\\n\\u2028\\u2029'
            + "\u00e9".encode("utf-8")
            + b'"}',
        )

    def test_round_trip(self) -> None:
        """Decoding encoded metadata gives the same topics and skips nothing."""
        self.assertEqual(decode_metadata(encode_metadata(GO_TOPICS, "x")), (GO_TOPICS, []))


class DecodeTests(SynchronousTestCase):
    """decode_metadata."""

    def test_go_file(self) -> None:
        """Go nsqd 1.3's file decodes to its topics, channels and paused flags."""
        self.assertEqual(decode_metadata(GO_FILE), (GO_TOPICS, []))

    def test_older_go_file(self) -> None:
        """The file of Go nsqd 1.0/1.1 (sorted keys, empty lists as []) decodes too."""
        data = (
            b'{"topics":[{"channels":[],"name":"a","paused":false},'
            b'{"channels":[{"name":"c","paused":true}],"name":"b","paused":true}],'
            b'"version":"1.0.0-compat"}'
        )
        self.assertEqual(
            decode_metadata(data),
            (
                [
                    TopicMetadata("a", False, []),
                    TopicMetadata("b", True, [ChannelMetadata("c", True)]),
                ],
                [],
            ),
        )

    def test_invalid_names_skipped(self) -> None:
        """Invalid topic and channel names are skipped and reported; an invalid topic's channels are not looked at."""
        data = (
            b'{"topics":[{"name":"ok","paused":false,"channels":null},'
            b'{"name":"bad name","paused":false,"channels":[{"name":"c","paused":false}]},'
            b'{"name":"ok2","paused":true,"channels":['
            b'{"name":"good","paused":false},{"name":"bad!","paused":true}]}],'
            b'"version":"1.3.0"}'
        )
        self.assertEqual(
            decode_metadata(data),
            (
                [
                    TopicMetadata("ok", False, []),
                    TopicMetadata("ok2", True, [ChannelMetadata("good", False)]),
                ],
                [Skipped("topic", "bad name"), Skipped("channel", "bad!")],
            ),
        )

    def test_null_entries(self) -> None:
        """A null topic or channel is Go's zero value: an invalid empty name, skipped."""
        data = b'{"topics":[null,{"name":"t","channels":[null]}]}'
        self.assertEqual(
            decode_metadata(data),
            ([TopicMetadata("t", False, [])], [Skipped("topic", ""), Skipped("channel", "")]),
        )

    def test_empty_documents(self) -> None:
        """null, {} and null lists are files with no topic, as for Go."""
        for data in [b"null", b"{}", b' {"topics":null} \r\n', b'{"topics":[]}']:
            self.assertEqual(decode_metadata(data), ([], []), data)

    def test_go_field_matching(self) -> None:
        """Keys match fields ignoring case (Go's folding, long s included); unknown keys are ignored."""
        data = (
            '{"TOPICS":[{"Name":"t","PAUSED":true,"extra":{"a":[1,{}]},'
            '"channelſ":[{"nAmE":"c"}]}],"other":1e999,"Version":"v"}'
        ).encode("utf-8")
        self.assertEqual(
            decode_metadata(data),
            ([TopicMetadata("t", True, [ChannelMetadata("c", False)])], []),
        )

    def test_duplicate_keys(self) -> None:
        """The last duplicate key wins, and null leaves a name or flag as it was (Go)."""
        data = b'{"topics":[{"name":"a","name":"b","paused":true,"paused":null}]}'
        self.assertEqual(decode_metadata(data), ([TopicMetadata("b", True, [])], []))

    def test_structural_errors(self) -> None:
        """Anything that is not JSON shaped like Go's Metadata struct is a MetadataError."""
        for data in [
            b"",
            b"not json",
            b'{"topics":[',
            b"[]",
            b'"topics"',
            b'{"topics":{}}',
            b'{"topics":"t"}',
            b'{"topics":[1]}',
            b'{"topics":[{"name":5}]}',
            b'{"topics":[{"name":"t","paused":"true"}]}',
            b'{"topics":[{"name":"t","paused":1}]}',
            b'{"topics":[{"name":"t","channels":{}}]}',
            b'{"topics":[{"name":"t","channels":[{"name":"c","paused":0}]}]}',
            b'{"version":1}',
            b'{"topics":null} {}',
            b'{"topics":[],"x":NaN}',
            b'\xef\xbb\xbf{"topics":null}',
            b'\xff{"topics":null}',
            b"[" * 100000,
        ]:
            self.assertRaises(MetadataError, decode_metadata, data)

    def test_type_error_names_field(self) -> None:
        """A wrongly typed field is named in the error, in Go's wording."""
        error = self.assertRaises(MetadataError, decode_metadata, b'{"topics":[{"name":5}]}')
        self.assertEqual(
            str(error),
            "json: cannot unmarshal number into Go struct field TopicMetadata.name of type string",
        )


class SnapshotTests(SynchronousTestCase):
    """snapshot."""

    def test_durable_topology(self) -> None:
        """Topics and channels in creation order with paused flags; #ephemeral ones are left out."""
        broker = make_broker()
        build_go_topology(broker)
        self.assertEqual(snapshot(broker), GO_TOPICS)

    def test_empty(self) -> None:
        """A broker with no topic has an empty snapshot."""
        self.assertEqual(snapshot(make_broker()), [])


class StoreTestCase(SynchronousTestCase):
    """A broker, a Clock and a data directory."""

    def setUp(self) -> None:
        self.dir = self.mktemp()
        os.mkdir(self.dir)
        self.path = os.path.join(self.dir, "nsqd.dat")
        self.clock = Clock()
        self.broker = make_broker()
        self.logs = capture_logs(self)

    def store(self, broker: Any = None) -> MetadataStore:
        """A store on ``broker`` (default: self.broker) writing version 1.3.0."""
        return MetadataStore(
            self.broker if broker is None else broker, self.dir, self.clock, version="1.3.0"
        )

    def write(self, data: bytes, name: str = "nsqd.dat") -> None:
        """Put a file in the data directory."""
        with open(os.path.join(self.dir, name), "wb") as f:
            f.write(data)

    def read(self, name: str = "nsqd.dat") -> bytes:
        """A file of the data directory."""
        with open(os.path.join(self.dir, name), "rb") as f:
            return f.read()


class PersistTests(StoreTestCase):
    """MetadataStore.persist, schedule and close."""

    def test_installs_hook(self) -> None:
        """The store installs its schedule method as the broker's on_topology_change."""
        store = self.store()
        self.assertEqual(getattr(self.broker, "on_topology_change"), store.schedule)

    def test_persist_go_bytes(self) -> None:
        """persist writes Go's bytes for the durable topology and logs Go's line."""
        build_go_topology(self.broker)
        self.store().persist()
        self.assertEqual(self.read(), GO_FILE)
        self.assertEqual(os.listdir(self.dir), ["nsqd.dat"])
        self.assertEqual(
            self.logs, ["NSQ: persisting topic/channel metadata to %s" % (self.path,)]
        )

    def test_schedule_coalesces(self) -> None:
        """Several changes before the next reactor turn make one write."""
        store = self.store()
        self.broker.get_topic("a")
        store.schedule()
        self.broker.get_topic("b").get_channel("c")
        store.schedule()
        store.schedule()
        self.assertEqual(len(self.clock.getDelayedCalls()), 1)
        self.assertFalse(os.path.exists(self.path))
        self.clock.advance(0)
        self.assertEqual(len(self.logs), 1)
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.assertEqual(
            decode_metadata(self.read())[0],
            [TopicMetadata("a"), TopicMetadata("b", False, [ChannelMetadata("c")])],
        )
        store.schedule()
        self.assertEqual(len(self.clock.getDelayedCalls()), 1)

    def test_persist_cancels_scheduled(self) -> None:
        """persist writes at once and cancels the pending scheduled write."""
        store = self.store()
        store.schedule()
        store.persist()
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.assertEqual(self.read(), b'{"topics":null,"version":"1.3.0"}')

    def test_scheduled_failure_logged(self) -> None:
        """A scheduled write that fails is logged, not raised, and later writes still happen."""
        store = MetadataStore(self.broker, os.path.join(self.dir, "missing"), self.clock)
        store.schedule()
        self.clock.advance(0)
        self.assertTrue(self.logs[-1].startswith("failed to persist metadata - "), self.logs)
        store.schedule()
        self.assertEqual(len(self.clock.getDelayedCalls()), 1)

    def test_persist_failure_raises(self) -> None:
        """A direct persist that fails raises OSError."""
        store = MetadataStore(self.broker, os.path.join(self.dir, "missing"), self.clock)
        self.assertRaises(OSError, store.persist)

    def test_no_tmp_files_left(self) -> None:
        """Repeated writes leave only nsqd.dat in the data path."""
        store = self.store()
        for name in ["a", "b", "c"]:
            self.broker.get_topic(name)
            store.schedule()
            self.clock.advance(0)
        self.assertEqual(os.listdir(self.dir), ["nsqd.dat"])
        self.assertEqual(len(self.logs), 3)

    def test_close(self) -> None:
        """close writes synchronously, cancels the pending write, unhooks, and ignores later changes."""
        store = self.store()
        self.broker.get_topic("t")
        store.schedule()
        store.close()
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.assertEqual(decode_metadata(self.read())[0], [TopicMetadata("t")])
        self.assertIsNone(getattr(self.broker, "on_topology_change"))
        store.schedule()
        self.assertEqual(self.clock.getDelayedCalls(), [])
        store.close()
        self.assertEqual(len(self.logs), 1)

    def test_close_failure_logged(self) -> None:
        """A failed final write at close is logged, not raised."""
        store = MetadataStore(self.broker, os.path.join(self.dir, "missing"), self.clock)
        store.close()
        self.assertTrue(self.logs[-1].startswith("failed to persist metadata - "), self.logs)

    def test_current_directory(self) -> None:
        """An empty data path is the current directory, as in Go."""
        cwd = os.getcwd()
        self.addCleanup(os.chdir, cwd)
        os.chdir(self.dir)
        store = MetadataStore(self.broker, "", self.clock)
        self.assertEqual(store.path, "nsqd.dat")
        store.persist()
        self.assertEqual(os.listdir("."), ["nsqd.dat"])


class LoadTests(StoreTestCase):
    """MetadataStore.load."""

    def test_round_trip(self) -> None:
        """A persisted topology is restored by a new nsqd: topics, channels, paused flags."""
        build_go_topology(self.broker)
        self.store().persist()
        broker = make_broker()
        self.store(broker).load()
        self.assertEqual(
            topology(broker),
            [
                ("orders", True, [("billing", False), ("audit", True)]),
                ("events", False, []),
            ],
        )

    def test_go_file(self) -> None:
        """A file written by Go nsqd is loaded."""
        self.write(GO_FILE)
        self.store().load()
        self.assertEqual(
            topology(self.broker),
            [
                ("orders", True, [("billing", False), ("audit", True)]),
                ("events", False, []),
            ],
        )
        self.assertEqual(self.logs, [])

    def test_missing_file(self) -> None:
        """No nsqd.dat is a fresh start: no topic, no file written."""
        self.store().load()
        self.assertEqual(self.broker.topics, {})
        self.assertEqual(os.listdir(self.dir), [])

    def test_load_does_not_persist(self) -> None:
        """Topology changes made while loading schedule no write."""
        store = self.store()
        original = self.broker.get_topic

        def get_topic(name: str) -> Any:
            topic = original(name)
            getattr(self.broker, "on_topology_change")()
            return topic

        self.broker.get_topic = get_topic  # type: ignore[method-assign]
        self.write(GO_FILE)
        store.load()
        self.assertEqual(len(self.broker.topics), 2)
        self.assertEqual(self.clock.getDelayedCalls(), [])
        store.schedule()
        self.assertEqual(len(self.clock.getDelayedCalls()), 1)

    def test_held_messages_reach_every_channel(self) -> None:
        """Messages a topic kept go to all its loaded channels, as Go starts the topic after them."""
        self.broker.get_topic("events").publish(b"kept")
        self.write(
            b'{"topics":[{"name":"events","paused":false,"channels":['
            b'{"name":"a","paused":false},{"name":"b","paused":false}]}],"version":"1.3.0"}'
        )
        self.store().load()
        topic = self.broker.topics["events"]
        self.assertFalse(topic.paused)
        self.assertEqual(topic.depth(), 0)
        self.assertEqual([c.depth() for c in topic.channels.values()], [1, 1])

    def test_paused_topic_keeps_messages(self) -> None:
        """A topic loaded paused keeps its messages."""
        self.broker.get_topic("events").publish(b"kept")
        self.write(
            b'{"topics":[{"name":"events","paused":true,"channels":['
            b'{"name":"a","paused":false}]}],"version":"1.3.0"}'
        )
        self.store().load()
        topic = self.broker.topics["events"]
        self.assertTrue(topic.paused)
        self.assertEqual(topic.depth(), 1)
        self.assertEqual(topic.channels["a"].depth(), 0)

    def test_invalid_names_skipped(self) -> None:
        """Invalid names are skipped with Go's warning; the rest is loaded."""
        self.write(
            b'{"topics":[{"name":"bad name","paused":false,"channels":null},'
            b'{"name":"t","paused":false,"channels":[{"name":"c!","paused":false},'
            b'{"name":"c","paused":true}]}],"version":"1.3.0"}'
        )
        self.store().load()
        self.assertEqual(topology(self.broker), [("t", False, [("c", True)])])
        self.assertEqual(
            self.logs,
            [
                "skipping creation of invalid topic bad name",
                "skipping creation of invalid channel c!",
            ],
        )

    def test_invalid_file_moved_aside(self) -> None:
        """An unparsable nsqd.dat is logged and renamed to nsqd.dat.bad, and nsqd starts anyway."""
        self.write(b'{"topics":[')
        store = self.store()
        store.load()
        self.assertEqual(self.broker.topics, {})
        self.assertEqual(sorted(os.listdir(self.dir)), ["nsqd.dat.bad"])
        self.assertEqual(self.read("nsqd.dat.bad"), b'{"topics":[')
        self.assertTrue(
            self.logs[0].startswith("failed to parse metadata in %s - " % (self.path,)), self.logs
        )
        self.assertEqual(
            self.logs[1],
            "NSQ: moved invalid metadata file %s to %s.bad; starting without it"
            % (self.path, self.path),
        )
        self.broker.get_topic("t")
        store.persist()
        self.assertEqual(decode_metadata(self.read())[0], [TopicMetadata("t")])

    def test_wrong_shape_moved_aside(self) -> None:
        """A JSON file not shaped like Go's is moved aside too."""
        self.write(b'{"topics":[{"name":"t","paused":"no"}]}')
        self.store().load()
        self.assertEqual(self.broker.topics, {})
        self.assertEqual(os.listdir(self.dir), ["nsqd.dat.bad"])

    def test_bad_names_never_overwritten(self) -> None:
        """With nsqd.dat.bad and .bad.1 taken, the invalid file becomes nsqd.dat.bad.2."""
        self.write(b"first", "nsqd.dat.bad")
        self.write(b"second", "nsqd.dat.bad.1")
        self.write(b"third")
        self.store().load()
        self.assertEqual(
            sorted(os.listdir(self.dir)), ["nsqd.dat.bad", "nsqd.dat.bad.1", "nsqd.dat.bad.2"]
        )
        self.assertEqual(
            [self.read(name) for name in ["nsqd.dat.bad", "nsqd.dat.bad.1", "nsqd.dat.bad.2"]],
            [b"first", b"second", b"third"],
        )

    def test_unreadable_file(self) -> None:
        """An nsqd.dat that cannot be read is a MetadataError (Go refuses to start too)."""
        os.mkdir(self.path)
        self.assertRaises(MetadataError, self.store().load)

    def make_orphans(self) -> None:
        """Queue files in the data path, some not nsqd's."""
        for name in [
            "t1.diskqueue.meta.dat",
            "t1:c1.diskqueue.meta.dat",
            "t1.diskqueue.000000.dat",
            "t2:c2.diskqueue.meta.dat",
            "bad name.diskqueue.meta.dat",
            "a:b:c.diskqueue.meta.dat",
            "e#ephemeral.diskqueue.meta.dat",
            "t3:c#ephemeral.diskqueue.meta.dat",
        ]:
            self.write(b"0\n0,0\n0,0\n", name)

    def test_orphans_recovered_without_file(self) -> None:
        """Without nsqd.dat, topics and channels are recovered from their queue files, and logged."""
        self.make_orphans()
        self.store().load()
        self.assertEqual(
            topology(self.broker), [("t1", False, [("c1", False)]), ("t2", False, [("c2", False)])]
        )
        self.assertEqual(
            self.logs,
            [
                "NSQ: skipping orphaned queue file a:b:c.diskqueue.meta.dat - invalid name",
                "NSQ: skipping orphaned queue file bad name.diskqueue.meta.dat - invalid name",
                "NSQ: recovering topic t1 from orphaned queue file t1.diskqueue.meta.dat",
                "NSQ: recovering channel t1:c1 from orphaned queue file t1:c1.diskqueue.meta.dat",
                "NSQ: recovering topic t2 from orphaned queue file t2:c2.diskqueue.meta.dat",
                "NSQ: recovering channel t2:c2 from orphaned queue file t2:c2.diskqueue.meta.dat",
            ],
        )

    def test_orphan_flight_log_recovered(self) -> None:
        """A channel known only by its flight log (its messages all went straight to consumers) is recreated."""
        self.write(b"TXNSQFL1", "t9:c9.diskqueue.flight.dat")
        self.store().load()
        self.assertEqual(topology(self.broker), [("t9", False, [("c9", False)])])

    def test_orphans_recovered_after_invalid_file(self) -> None:
        """After moving an invalid nsqd.dat aside, topics and channels are recovered from queue files."""
        self.make_orphans()
        self.write(b"garbage")
        self.store().load()
        self.assertTrue(os.path.exists(self.path + ".bad"))
        self.assertEqual(
            topology(self.broker), [("t1", False, [("c1", False)]), ("t2", False, [("c2", False)])]
        )

    def test_orphans_added_to_valid_file(self) -> None:
        """Queue files not listed in a valid nsqd.dat are recovered; listed state is kept."""
        self.make_orphans()
        self.write(
            b'{"topics":[{"name":"t1","paused":true,"channels":[{"name":"c0","paused":true}]}],'
            b'"version":"1.3.0"}'
        )
        self.store().load()
        self.assertEqual(
            topology(self.broker),
            [("t1", True, [("c0", True), ("c1", False)]), ("t2", False, [("c2", False)])],
        )
        recovered = [line for line in self.logs if "recovering" in line]
        self.assertEqual(
            recovered,
            [
                "NSQ: recovering channel t1:c1 from orphaned queue file t1:c1.diskqueue.meta.dat",
                "NSQ: recovering topic t2 from orphaned queue file t2:c2.diskqueue.meta.dat",
                "NSQ: recovering channel t2:c2 from orphaned queue file t2:c2.diskqueue.meta.dat",
            ],
        )


class DataPathLockTests(SynchronousTestCase):
    """DataPathLock."""

    def setUp(self) -> None:
        self.dir = self.mktemp()
        os.mkdir(self.dir)

    def test_excludes_second_holder(self) -> None:
        """A second lock on the directory fails with Go's message until the first is released."""
        first = DataPathLock(self.dir)
        first.acquire()
        self.addCleanup(first.release)
        second = DataPathLock(self.dir)
        error = self.assertRaises(DataPathInUse, second.acquire)
        self.assertEqual(
            str(error), "--data-path=%s in use (possibly by another instance of nsqd)" % (self.dir,)
        )
        self.assertIsInstance(error, DataPathError)
        self.assertFalse(second.locked)
        first.release()
        self.assertFalse(first.locked)
        second.acquire()
        self.assertTrue(second.locked)
        second.release()

    def test_excludes_other_process(self) -> None:
        """The lock is flock on the directory, as Go's dirlock: another process cannot take it."""
        script = (
            "import fcntl, os, sys\n"
            "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
            "try:\n"
            "    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
            "except OSError:\n"
            "    sys.exit(3)\n"
        )
        lock = DataPathLock(self.dir)
        lock.acquire()
        self.assertEqual(subprocess.call([sys.executable, "-c", script, self.dir]), 3)
        lock.release()
        self.assertEqual(subprocess.call([sys.executable, "-c", script, self.dir]), 0)

    def test_acquire_and_release_idempotent(self) -> None:
        """Acquiring a held lock or releasing a free one does nothing."""
        lock = DataPathLock(self.dir)
        lock.release()
        lock.acquire()
        lock.acquire()
        self.assertTrue(lock.locked)
        lock.release()
        lock.release()
        self.assertFalse(lock.locked)

    def test_missing_directory(self) -> None:
        """A missing data path is a DataPathError naming it, not 'in use'."""
        path = os.path.join(self.dir, "missing")
        error = self.assertRaises(DataPathError, DataPathLock(path).acquire)
        self.assertNotIsInstance(error, DataPathInUse)
        self.assertEqual(
            str(error), "cannot open --data-path=%s - No such file or directory" % (path,)
        )

    def test_current_directory(self) -> None:
        """An empty data path locks the current directory, as in Go."""
        self.assertEqual(DataPathLock("").path, os.getcwd())
