"""
Tests for :mod:`txnsq.mirror.journal`: a standby's copy kept on disk and
read back; the journal alone, on a temporary directory and a Clock, fed
payloads made with the record builder (the two-node tests are in
:mod:`tests.test_cluster_mirror_journal`).
"""

from __future__ import annotations

import os
from typing import List

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from tests.core_fakes import START
from tests.mirror_fakes import message
from txnsq.mirror import journal as mirror_journal
from txnsq.mirror.journal import CopyJournal
from txnsq.mirror.standby import StandbyCopy
from txnsq.protocol.mirror import OP_CHANNEL_CREATE, OP_FIN, OP_MESSAGES, RecordBuilder, decode_records


class JournalTests(SynchronousTestCase):
    """A journal of ``node-a``'s copy: channel ``mt:c``, messages added and finished by payload."""

    def setUp(self) -> None:
        self.directory = self.mktemp()
        os.makedirs(self.directory)
        self.clock = Clock()
        self.clock.advance(START)
        self.journal = CopyJournal(self.directory, self.clock, sync_every=4, sync_timeout=2.0)
        self.copy = StandbyCopy("node-a", "epoch-a")
        self.journal.started(self.copy)
        self.seq = 0
        self.apply((OP_CHANNEL_CREATE, "mt", "c", []))

    def apply(self, *records: tuple) -> None:
        """One payload of ``records``, applied to the copy and kept."""
        builder = RecordBuilder()
        for op, topic, channel, items in records:
            builder.add(op, topic, channel, items)
        self.seq += 1
        payload = builder.encode(self.seq)
        _, decoded = decode_records(payload, packed=True)
        self.copy.apply(self.seq, decoded, self.clock.seconds())
        self.journal.applied(self.copy, payload, sum(len(r[3]) for r in records) or 1)

    def ids(self, copy: StandbyCopy) -> List[bytes]:
        return list(copy.topics["mt"].channels["c"])

    def path(self) -> str:
        return os.path.join(self.directory, "mirror-copy-node-a.log")

    def test_read_back(self) -> None:
        """Another journal on the directory reads the copy back: same node, epoch and messages."""
        self.apply((OP_MESSAGES, "mt", "", [message(1), message(2), message(3)]))
        self.apply((OP_FIN, "mt", "c", [b"%016d" % (2,)]))
        [copy] = CopyJournal(self.directory).load()
        self.assertEqual((copy.node_id, copy.epoch), ("node-a", "epoch-a"))
        self.assertEqual(self.ids(copy), [b"%016d" % (1,), b"%016d" % (3,)])

    def test_empty_not_given_back(self) -> None:
        """A copy holding nothing is not read back."""
        self.assertEqual(CopyJournal(self.directory).load(), [])

    def test_sync_every(self) -> None:
        """Past ``sync_every`` messages written, the file is fsynced at once."""
        self.journal.sync()
        syncs = self.journal.syncs
        self.apply((OP_MESSAGES, "mt", "", [message(n) for n in range(4)]))
        self.assertEqual((self.journal.syncs, self.journal.unsynced), (syncs + 1, 0))

    def test_sync_timeout(self) -> None:
        """A write not yet synced is fsynced ``sync_timeout`` seconds later."""
        self.journal.sync()
        syncs = self.journal.syncs
        self.apply((OP_MESSAGES, "mt", "", [message(1)]))
        self.clock.advance(1.9)
        self.assertEqual(self.journal.syncs, syncs)
        self.clock.advance(0.1)
        self.assertEqual(self.journal.syncs, syncs + 1)

    def test_compaction(self) -> None:
        """Past the size bound and four times the copy, the file is rewritten as a snapshot that reads back the same."""
        self.patch(mirror_journal, "COMPACT_BYTES", 100)
        for n in range(5):
            self.apply((OP_MESSAGES, "mt", "", [message(n, b"x" * 200)]))
            self.apply((OP_FIN, "mt", "c", [b"%016d" % (n,)]))
        # Brought up to date (as /stats does): the copy's size is known.
        self.copy.count()
        self.apply((OP_MESSAGES, "mt", "", [message(9)]))
        self.assertLess(os.path.getsize(self.path()), 1000)
        [copy] = CopyJournal(self.directory).load()
        self.assertEqual(self.ids(copy), [b"%016d" % (9,)])

    def test_damaged_tail(self) -> None:
        """A file cut in the middle of an entry reads back what precedes the cut."""
        self.apply((OP_MESSAGES, "mt", "", [message(1)]))
        with open(self.path(), "ab") as stream:
            stream.write(b"\x00\x00\x10\x00Q")
        [copy] = CopyJournal(self.directory).load()
        self.assertEqual(self.ids(copy), [b"%016d" % (1,)])
        self.flushLoggedErrors()

    def test_discard(self) -> None:
        """A copy taken over is discarded: its file goes."""
        self.journal.discard("node-a")
        self.assertEqual(os.listdir(self.directory), [])

    def test_write_failure(self) -> None:
        """A failed write drops the file and stops writing it; the next copy of that node starts a new one."""

        def full(*args: object) -> None:
            raise OSError(28, "No space left on device")

        self.patch(self.journal, "_append", full)
        self.apply((OP_MESSAGES, "mt", "", [message(1)]))
        self.assertEqual(os.listdir(self.directory), [])
        self.assertIn("node-a", self.journal.failed)
        self.flushLoggedErrors()
