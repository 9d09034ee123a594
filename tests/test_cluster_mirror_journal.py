"""
Tests for :mod:`txnsq.mirror.journal`: a standby's copies kept in
its data path, read back by a restarted standby; on the two-node set-up
of :mod:`tests.test_cluster_mirror`.
"""

from __future__ import annotations

import os

from tests.core_fakes import FakeConsumer
from tests.test_cluster_mirror import MirrorTestCase, Side
from txnsq.mirror import journal as mirror_journal
from txnsq.mirror.journal import CopyJournal


class JournalTestCase(MirrorTestCase):
    """b keeps its copies in a directory."""

    def setUp(self) -> None:
        self.directory = self.mktemp()
        os.makedirs(self.directory)
        MirrorTestCase.setUp(self)
        self.cut()
        self.b = self.journaled_b()
        self.clock.advance(1)
        self.connect()

    def journaled_b(self) -> Side:
        return Side(
            self.clock, "node-b", 7001, topics="^m", failover_timeout=5.0,
            journal=CopyJournal(self.directory),
        )

    def publish(self) -> None:
        topic = self.a.broker.get_topic("mt")
        channel = topic.get_channel("c")
        topic.publish_many([b"one", b"two", b"three"])
        consumer = FakeConsumer(ready_count=1)
        channel.add_consumer(consumer)
        channel.consumer_ready(consumer)
        channel.finish(consumer, consumer.take()[0].id)
        channel.remove_consumer(consumer)
        self.pump()


class CopyJournalTests(JournalTestCase):
    """What the journal keeps and gives back."""

    def test_read_back(self) -> None:
        """A new journal on the same directory reads back the copy: same node, epoch and messages."""
        self.publish()
        [copy] = CopyJournal(self.directory).load()
        self.assertEqual((copy.node_id, copy.epoch), ("node-a", self.a.mirror.epoch))
        self.assertEqual(
            sorted(copy.topics["mt"].channels["c"]),
            sorted(self.b.mirror.copies["node-a"].topics["mt"].channels["c"]),
        )
        self.assertEqual(copy.count(), 2)

    def test_restarted_standby_takes_over(self) -> None:
        """A standby restarted while its primary is gone delivers the kept copy after the timeout."""
        self.publish()
        self.cut()
        self.b.mirror.stop()
        self.b = self.journaled_b()
        self.assertEqual(self.b.mirror.copies["node-a"].count(), 2)
        self.clock.advance(5)
        channel = self.b.broker.topics["mt"].channels["c"]
        self.assertEqual(channel.depth(), 2)
        self.assertEqual(os.listdir(self.directory), [])

    def test_compaction(self) -> None:
        """A file past the size bound is rewritten as a snapshot that reads back the same."""
        self.patch(mirror_journal, "COMPACT_BYTES", 100)
        self.publish()
        topic = self.a.broker.topics["mt"]
        for _ in range(5):
            topic.publish(b"x" * 200)
            self.pump()
            topic.channels["c"].empty()
            self.pump()
        # An empty copy is not given back.
        self.assertEqual(CopyJournal(self.directory).load(), [])
        topic.publish(b"kept")
        self.pump()
        [copy] = CopyJournal(self.directory).load()
        self.assertEqual(copy.count(), 1)
        path = os.path.join(self.directory, "mirror-copy-node-a.log")
        self.assertLess(os.path.getsize(path), 2000)

    def test_damaged_tail(self) -> None:
        """A file cut in the middle of an entry reads back what precedes the cut."""
        self.publish()
        path = os.path.join(self.directory, "mirror-copy-node-a.log")
        with open(path, "ab") as stream:
            stream.write(b"\x00\x00\x10\x00P")
        [copy] = CopyJournal(self.directory).load()
        self.assertEqual(copy.count(), 2)

    def test_write_failure_drops_file(self) -> None:
        """A failed write (a full disk) removes the file and stops writing it; the copy in memory goes on."""
        self.publish()
        journal = self.b.mirror.journal

        def full(*args: object) -> None:
            raise OSError(28, "No space left on device")

        self.patch(journal, "_append", full)
        self.a.broker.topics["mt"].publish(b"four")
        self.pump()
        self.assertEqual(os.listdir(self.directory), [])
        self.assertEqual(self.b.mirror.copies["node-a"].count(), 3)
        self.assertIn("node-a", journal.failed)
        self.flushLoggedErrors()


class JournalDurabilityTests(JournalTestCase):
    """The journal is synced as the disk backend syncs, and compaction keeps delays."""

    def journaled_b(self) -> Side:
        self.journal = CopyJournal(self.directory, self.clock, sync_every=4, sync_timeout=2.0)
        return Side(
            self.clock, "node-b", 7001, topics="^m", failover_timeout=5.0, journal=self.journal
        )

    def test_sync_every(self) -> None:
        """Past ``sync_every`` messages written, the file is fsynced at once."""
        syncs = self.journal.syncs
        topic = self.a.broker.get_topic("mt")
        topic.publish_many([b"1", b"2", b"3", b"4"])
        self.pump()
        self.assertEqual(self.journal.syncs, syncs + 1)
        self.assertEqual(self.journal.unsynced, 0)

    def test_sync_timeout(self) -> None:
        """A write not yet synced is fsynced ``sync_timeout`` seconds later."""
        self.journal.sync()
        syncs = self.journal.syncs
        self.a.broker.get_topic("mt").publish(b"1")
        self.pump()
        self.assertEqual(self.journal.syncs, syncs)
        self.clock.advance(2.0)
        self.assertEqual(self.journal.syncs, syncs + 1)

    def test_compaction_keeps_remaining_delay(self) -> None:
        """
        A deferred message in a compacted file read back by a restarted
        standby is deferred, when taken over, for what was left of its delay.
        """
        self.patch(mirror_journal, "COMPACT_BYTES", 100)
        topic = self.a.broker.get_topic("mt")
        topic.get_channel("c")
        published_at = self.clock.seconds()
        topic.publish_deferred(b"later", 30)
        topic.publish(b"now")
        self.pump()
        self.clock.advance(10)
        for _ in range(3):
            topic.publish(b"x" * 200)
            self.pump()
        copy = self.b.mirror.copies["node-a"]
        self.journal.compact(copy)
        [kept] = CopyJournal(self.directory).load()
        self.assertEqual(
            list(kept.topics["mt"].delays.values()), [int((published_at + 30) * 1000)]
        )
        self.cut()
        self.b.mirror.stop()
        self.b = Side(
            self.clock, "node-b", 7001, topics="^m", failover_timeout=5.0,
            journal=CopyJournal(self.directory, self.clock),
        )
        self.clock.advance(5)
        channel = self.b.broker.topics["mt"].channels["c"]
        self.assertEqual((channel.depth(), channel.deferred_count), (4, 1))
        # Taken over 15 s after the DPUB of 30 s: due 15 s later, not 30.
        self.clock.advance(14.9)
        self.assertEqual(channel.deferred_count, 1)
        self.clock.advance(0.2)
        self.assertEqual((channel.depth(), channel.deferred_count), (5, 0))
