"""
Tests for the ``disk`` storage backend (txnsq.storage.disk) and
go-diskqueue's file format (txnsq.storage.diskqueue_format).
"""

from __future__ import annotations

import errno
import os
import struct
from types import SimpleNamespace
from typing import Any, Dict, List, Optional

from twisted.internet.task import Clock
from twisted.logger import globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

from tests.test_storage import BackendQueueConformance, message
from txnsq.files import write_file_atomically
from txnsq.storage.committer import Committer
from txnsq.storage.disk import DiskQueue, DiskStorage
from txnsq.storage.diskqueue_format import (
    CopyRun,
    DeferredState,
    DiskFormatError,
    QueueState,
    decode_deferred,
    decode_meta,
    encode_deferred,
    encode_meta,
    parse_segment_file_name,
    segment_file_name,
)
from txnsq.storage.flight_log import flight_file_name
from txnsq.storage.interfaces import IDeferredStore
from txnsq.storage.plugins import get_storage_backend
from txnsq.storage.sync_worker import SyncWorker


def record(data: bytes) -> bytes:
    """One go-diskqueue record."""
    return struct.pack(">I", len(data)) + data


class DiskConformanceMixin(BackendQueueConformance):
    """The conformance suite on a fresh data directory."""

    persistent = True
    takes_runs = True

    def make_backend(self) -> DiskStorage:
        return DiskStorage()

    def make_options(self) -> Any:
        options = BackendQueueConformance.make_options(self)
        options.data_path = self.mktemp()  # type: ignore[attr-defined]
        os.makedirs(options.data_path)
        return options


class DiskStorageTests(DiskConformanceMixin, SynchronousTestCase):
    """The disk backend with a memory front of 100 messages."""

    def test_name(self) -> None:
        """The backend is called disk, is durable and is found by name."""
        self.assertEqual(self.backend.name, "disk")
        self.assertTrue(self.backend.durable)
        self.assertIsInstance(get_storage_backend("disk"), DiskStorage)

    def test_queue_provides_deferred_store(self) -> None:
        """A disk queue can keep deferred messages across a restart."""
        self.assertTrue(verifyObject(IDeferredStore, self.open()))


class DiskOnlyStorageTests(DiskConformanceMixin, SynchronousTestCase):
    """The disk backend with --mem-queue-size=0: every message on disk."""

    mem_queue_size = 0

    def test_up_to_mem_queue_size(self) -> None:
        """Nothing is held in memory: one message goes straight to a file."""
        queue = self.open()
        queue.put(message(1))
        queue.sync()
        path = os.path.join(self.options.data_path, "topic:channel.diskqueue.000000.dat")
        with open(path, "rb") as segment:
            self.assertEqual(segment.read(), record(message(1)))


class FormatTests(SynchronousTestCase):
    """go-diskqueue's names and meta file, and txnsq's deferred file."""

    def test_segment_file_name(self) -> None:
        """Segments are NAME.diskqueue.%06d.dat."""
        self.assertEqual(segment_file_name("t:c", 7), "t:c.diskqueue.000007.dat")
        self.assertEqual(parse_segment_file_name("t:c.diskqueue.000007.dat"), ("t:c", 7))
        self.assertIsNone(parse_segment_file_name("t.diskqueue.meta.dat"))
        self.assertIsNone(parse_segment_file_name("t.diskqueue.000001.dat.bad"))

    def test_meta_bytes(self) -> None:
        """The meta file is go-diskqueue's "%d\\n%d,%d\\n%d,%d\\n"."""
        self.assertEqual(encode_meta(QueueState(3, 1, 20, 2, 1024)), b"3\n1,20\n2,1024\n")
        self.assertEqual(decode_meta(b"3\n1,20\n2,1024\n"), QueueState(3, 1, 20, 2, 1024))

    def test_meta_garbage(self) -> None:
        """Anything else in a meta file is a DiskFormatError."""
        for data in (b"", b"x\n", b"3\n1,20\n", b"3\n1,-2\n3,4\n", b"1\n2,0\n1,0\n"):
            self.assertRaises(DiskFormatError, decode_meta, data)

    def test_deferred_round_trip(self) -> None:
        """A deferred file gives back its state, runs of copies and messages."""
        state = DeferredState(
            QueueState(3, 0, 0, 1, 90), (CopyRun(0, 45, 2), CopyRun(1, 0, 1))
        )
        items = [(1234567890123, message(5)), (-7, message(6))]
        self.assertEqual(decode_deferred(encode_deferred(state, items)), (state, items))

    def test_deferred_truncated(self) -> None:
        """A truncated deferred file, or more messages than copies, is a DiskFormatError."""
        state = DeferredState(QueueState(2, 0, 0, 0, 90), (CopyRun(0, 45, 1),))
        data = encode_deferred(state, [(1, message(5))])
        self.assertRaises(DiskFormatError, decode_deferred, data[:-1])
        self.assertRaises(DiskFormatError, decode_deferred, data[:30])
        self.assertRaises(DiskFormatError, decode_deferred, b"garbage")
        self.assertRaises(
            DiskFormatError, decode_deferred, encode_deferred(state, [(1, message(5))] * 2)
        )


class DiskQueueTests(SynchronousTestCase):
    """The disk queue's files, recovery and failures."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.directory = self.mktemp()
        os.makedirs(self.directory)
        self.queues: List[DiskQueue] = []

    def open(
        self,
        name: str = "t:c",
        mem: int = 0,
        max_bytes: int = 1024 * 1024,
        sync_every: int = 2500,
        sync_timeout: float = 2.0,
    ) -> DiskQueue:
        queue = DiskQueue(
            name,
            self.directory,
            self.clock,
            mem_limit=mem,
            max_bytes_per_file=max_bytes,
            max_msg_size=1024 * 1024 + 26,
            sync_every=sync_every,
            sync_timeout=sync_timeout,
        )
        self.queues.append(queue)
        self.addCleanup(queue.close)
        return queue

    def path(self, filename: str) -> str:
        return os.path.join(self.directory, filename)

    def read_file(self, filename: str) -> bytes:
        with open(self.path(filename), "rb") as f:
            return f.read()

    def write_file(self, filename: str, data: bytes) -> None:
        with open(self.path(filename), "wb") as f:
            f.write(data)

    def drain(self, queue: DiskQueue) -> List[bytes]:
        out = []
        data = queue.read()
        while data is not None:
            out.append(data)
            data = queue.read()
        return out

    def files(self) -> List[str]:
        return sorted(os.listdir(self.directory))

    def test_file_layout(self) -> None:
        """Records are length-prefixed in segment 0 and the meta file is Go's."""
        queue = self.open()
        sent = [message(i) for i in range(3)]
        for data in sent:
            queue.put(data)
        queue.sync()
        self.assertEqual(self.read_file("t:c.diskqueue.000000.dat"), b"".join(map(record, sent)))
        self.assertEqual(self.read_file("t:c.diskqueue.meta.dat"), b"3\n0,0\n0,132\n")

    def test_batched_write(self) -> None:
        """Records are written at the end of the reactor turn, in one go."""
        queue = self.open()
        queue.put(message(1))
        queue.put(message(2))
        self.assertFalse(os.path.exists(self.path("t:c.diskqueue.000000.dat")))
        self.clock.advance(0)
        self.assertEqual(
            self.read_file("t:c.diskqueue.000000.dat"), record(message(1)) + record(message(2))
        )

    def test_read_before_write(self) -> None:
        """A consumer that catches up reads records not yet written."""
        queue = self.open()
        queue.put(message(1))
        self.assertEqual(queue.read(), message(1))
        queue.put(message(2))
        self.assertEqual(queue.depth(), 1)
        self.clock.advance(0)
        self.assertEqual(queue.read(), message(2))
        self.assertIsNone(queue.read())

    def test_memory_front_then_disk(self) -> None:
        """The first mem_limit messages stay in memory, the rest spill, order kept."""
        queue = self.open(mem=5)
        sent = [message(i) for i in range(20)]
        for data in sent:
            queue.put(data)
        queue.sync()
        self.assertEqual(
            self.read_file("t:c.diskqueue.000000.dat"), b"".join(map(record, sent[5:]))
        )
        self.assertEqual(queue.depth(), 20)
        # Room in memory again does not let new messages overtake the disk.
        self.assertEqual(queue.read(), sent[0])
        queue.put(message(20))
        self.assertEqual(self.drain(queue), sent[1:] + [message(20)])

    def test_roll_over(self) -> None:
        """A record that would pass max_bytes_per_file starts the next segment."""
        queue = self.open(max_bytes=200)
        sent = [message(i, 60) for i in range(7)]  # 64-byte records
        for data in sent:
            queue.put(data)
        queue.sync()
        self.assertEqual(
            self.read_file("t:c.diskqueue.000000.dat"), b"".join(map(record, sent[:3]))
        )
        self.assertEqual(
            self.read_file("t:c.diskqueue.000001.dat"), b"".join(map(record, sent[3:6]))
        )
        self.assertEqual(self.read_file("t:c.diskqueue.000002.dat"), record(sent[6]))
        self.assertEqual(self.read_file("t:c.diskqueue.meta.dat"), b"7\n0,0\n2,64\n")

    def test_read_files_deleted(self) -> None:
        """A segment read to its end is deleted and the meta file follows."""
        queue = self.open(max_bytes=200)
        sent = [message(i, 60) for i in range(7)]
        for data in sent:
            queue.put(data)
        self.assertEqual([queue.read() for _ in range(4)], sent[:4])
        self.clock.advance(0)
        self.assertNotIn("t:c.diskqueue.000000.dat", self.files())
        self.assertIn("t:c.diskqueue.000001.dat", self.files())
        self.assertEqual(self.read_file("t:c.diskqueue.meta.dat"), b"3\n1,64\n2,64\n")

    def test_oversized_record(self) -> None:
        """A record larger than a segment gets a segment of its own."""
        queue = self.open(max_bytes=100)
        big = message(1, 300)
        queue.put(message(0))
        queue.put(big)
        queue.put(message(2))
        queue.sync()
        self.assertEqual(self.read_file("t:c.diskqueue.000001.dat"), record(big))
        self.assertEqual(self.drain(queue), [message(0), big, message(2)])

    def test_resume_from_meta(self) -> None:
        """A reopened queue continues from the read and write positions."""
        queue = self.open(max_bytes=200)
        sent = [message(i, 60) for i in range(10)]
        for data in sent[:6]:
            queue.put(data)
        self.assertEqual([queue.read(), queue.read()], sent[:2])
        queue.close()
        again = self.open(max_bytes=200)
        self.assertEqual(again.depth(), 4)
        self.assertEqual(again.read(), sent[2])
        for data in sent[6:]:
            again.put(data)
        again.close()
        third = self.open(max_bytes=200)
        self.assertEqual(self.drain(third), sent[3:])

    def test_close_writes_memory_front(self) -> None:
        """At close the messages held in memory are written to disk."""
        queue = self.open(mem=100)
        sent = [message(i) for i in range(10)]
        for data in sent:
            queue.put(data)
        self.assertEqual(self.files(), [])
        queue.close()
        self.assertEqual(self.read_file("t:c.diskqueue.meta.dat"), b"10\n0,0\n0,440\n")
        self.assertEqual(self.drain(self.open(mem=100)), sent)

    def test_bad_length(self) -> None:
        """A record with an impossible length sets its segment aside as .bad."""
        queue = self.open(max_bytes=200)
        sent = [message(i, 60) for i in range(6)]
        for data in sent:
            queue.put(data)
        queue.close()
        segment = bytearray(self.read_file("t:c.diskqueue.000000.dat"))
        segment[64:68] = struct.pack(">I", 3)
        self.write_file("t:c.diskqueue.000000.dat", bytes(segment))
        again = self.open(max_bytes=200)
        self.assertEqual(self.drain(again), [sent[0]] + sent[3:])
        self.assertIn("t:c.diskqueue.000000.dat.bad", self.files())
        self.assertEqual(self.read_file("t:c.diskqueue.000000.dat.bad"), bytes(segment))
        self.assertEqual(again.depth(), 0)

    def test_truncated_segment(self) -> None:
        """A segment cut in the middle of a record is set aside; later ones are read."""
        queue = self.open(max_bytes=200)
        sent = [message(i, 60) for i in range(6)]
        for data in sent:
            queue.put(data)
        queue.close()
        segment = self.read_file("t:c.diskqueue.000000.dat")
        # Keep the meta's idea of the segment (a complete one) but cut it.
        self.write_file("t:c.diskqueue.000000.dat", segment[:100])
        again = self.open(max_bytes=200)
        self.assertEqual(self.drain(again), [sent[0]] + sent[3:])
        self.assertIn("t:c.diskqueue.000000.dat.bad", self.files())

    def test_missing_segment(self) -> None:
        """A segment removed by hand is skipped."""
        queue = self.open(max_bytes=200)
        sent = [message(i, 60) for i in range(6)]
        for data in sent:
            queue.put(data)
        queue.close()
        os.unlink(self.path("t:c.diskqueue.000000.dat"))
        self.assertEqual(self.drain(self.open(max_bytes=200)), sent[3:])

    def test_missing_meta(self) -> None:
        """Without a meta file the segments found are read (and not overwritten)."""
        sent = [message(i) for i in range(4)]
        self.write_file("t:c.diskqueue.000003.dat", b"".join(map(record, sent[:2])))
        self.write_file("t:c.diskqueue.000004.dat", b"".join(map(record, sent[2:])))
        queue = self.open()
        self.assertEqual(queue.depth(), 4)
        queue.put(message(9))
        self.assertEqual(self.drain(queue), sent + [message(9)])

    def test_missing_meta_empty_segment(self) -> None:
        """Without a meta file, a segment cut to 0 bytes (a power loss) is removed and counts nothing: depth is exact."""
        self.write_file("t:c.diskqueue.000000.dat", b"")
        queue = self.open()
        self.assertEqual(queue.depth(), 0)
        self.assertFalse(os.path.exists(self.path("t:c.diskqueue.000000.dat")))
        queue.put(message(1))
        queue.put(message(2))
        self.assertEqual(queue.depth(), 2)
        self.clock.advance(0)
        self.assertEqual(self.drain(queue), [message(1), message(2)])
        self.assertEqual(queue.depth(), 0)
        queue.close()
        self.assertEqual(self.open().depth(), 0)

    def test_missing_meta_empty_segment_first(self) -> None:
        """Without a meta file, an empty first segment is skipped and the records after it are counted exactly."""
        sent = [message(i) for i in range(3)]
        self.write_file("t:c.diskqueue.000000.dat", b"")
        self.write_file("t:c.diskqueue.000001.dat", b"".join(map(record, sent)))
        queue = self.open()
        self.assertEqual(queue.depth(), 3)
        self.assertEqual(self.drain(queue), sent)
        self.assertEqual(queue.depth(), 0)

    def test_stale_temp_meta_removed(self) -> None:
        """Temporary files of meta, deferred and flight-log writes cut short by a kill are removed at open; others are left alone."""
        sent = [message(i) for i in range(2)]
        queue = self.open()
        for data in sent:
            queue.put(data)
        queue.close()
        stale = [
            "t:c.diskqueue.meta.dat.123456789.tmp",
            "t:c.diskqueue.deferred.dat.42.tmp",
            flight_file_name("t:c") + ".7.tmp",
        ]
        kept = [
            "t:c.diskqueue.meta.dat.x.tmp",
            "t:c2.diskqueue.meta.dat.5.tmp",
            "t.diskqueue.meta.dat.5.tmp",
        ]
        for filename in stale + kept:
            self.write_file(filename, b"")
        events: List[Dict[str, Any]] = []
        globalLogPublisher.addObserver(events.append)
        self.addCleanup(globalLogPublisher.removeObserver, events.append)
        queue = self.open()
        for filename in stale:
            self.assertFalse(os.path.exists(self.path(filename)), filename)
        for filename in kept:
            self.assertTrue(os.path.exists(self.path(filename)), filename)
        self.assertEqual(self.drain(queue), sent)
        removals = [e for e in events if "interrupted write" in e.get("log_format", "")]
        self.assertEqual(len(removals), 1)
        self.assertEqual(removals[0]["count"], 3)

    def test_garbage_meta(self) -> None:
        """An unreadable meta file is kept as .bad and the segments are recovered."""
        sent = [message(i) for i in range(2)]
        self.write_file("t:c.diskqueue.000000.dat", b"".join(map(record, sent)))
        self.write_file("t:c.diskqueue.meta.dat", b"not a meta file")
        queue = self.open()
        self.assertEqual(self.drain(queue), sent)
        self.assertEqual(self.read_file("t:c.diskqueue.meta.dat.bad"), b"not a meta file")

    def test_unsynced_records_recovered(self) -> None:
        """Records written after the last sync (a crash) are read after a restart."""
        queue = self.open()
        queue.put(message(1))
        queue.sync()
        queue.put(message(2))
        queue.put(message(3))
        self.clock.advance(0)  # written, not synced: the meta says one
        self.assertEqual(self.read_file("t:c.diskqueue.meta.dat"), b"1\n0,0\n0,44\n")
        again = self.open()  # the process died; a new one opens the files
        self.assertEqual(again.depth(), 3)
        again.put(message(4))
        self.assertEqual(self.drain(again), [message(i) for i in (1, 2, 3, 4)])
        queue._closed = True  # the dead process's queue never closes

    def test_sync_every(self) -> None:
        """With sync_every=1 each turn's writes are synced at its end."""
        queue = self.open(sync_every=1)
        queue.put(message(1))
        self.clock.advance(0)
        self.assertEqual(self.read_file("t:c.diskqueue.meta.dat"), b"1\n0,0\n0,44\n")
        self.assertEqual(queue.read(), message(1))
        self.clock.advance(0)
        self.assertEqual(self.read_file("t:c.diskqueue.meta.dat"), b"0\n0,44\n0,44\n")

    def test_sync_timeout(self) -> None:
        """Fewer than sync_every operations are synced after sync_timeout."""
        queue = self.open(sync_every=100, sync_timeout=2.0)
        queue.put(message(1))
        self.clock.advance(0)
        self.assertFalse(os.path.exists(self.path("t:c.diskqueue.meta.dat")))
        self.clock.advance(2.0)
        self.assertEqual(self.read_file("t:c.diskqueue.meta.dat"), b"1\n0,0\n0,44\n")
        self.assertEqual(list(self.clock.getDelayedCalls()), [])

    def test_write_failure_keeps_messages(self) -> None:
        """A failed write keeps the messages in memory, sets error, and retries."""
        queue = self.open()
        queue.put(message(1))
        self.clock.advance(0)

        def full(fd: int, data: Any) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        queue.os_write = full
        queue.put(message(2))
        queue.put(message(3))
        self.clock.advance(0)
        self.assertIsNotNone(queue.error)
        self.assertIn("No space left on device", queue.error or "")
        queue.put(message(4))
        self.assertEqual(queue.depth(), 4)
        self.clock.advance(1.0)
        self.assertIsNotNone(queue.error)
        queue.os_write = os.write
        self.clock.advance(1.0)
        self.assertIsNone(queue.error)
        self.assertEqual(self.drain(queue), [message(i) for i in (1, 2, 3, 4)])

    def test_partial_write_cut_back(self) -> None:
        """A write that fails half-way leaves no half record behind."""
        queue = self.open()
        queue.put(message(1))
        self.clock.advance(0)
        calls = []

        def half(fd: int, data: Any) -> int:
            calls.append(len(data))
            if len(calls) == 1:
                return os.write(fd, bytes(data[:10]))
            raise OSError(errno.ENOSPC, "No space left on device")

        queue.os_write = half
        queue.put(message(2))
        self.clock.advance(0)
        self.assertEqual(self.read_file("t:c.diskqueue.000000.dat"), record(message(1)))
        queue.os_write = os.write
        self.clock.advance(1.0)
        queue.close()
        self.assertEqual(self.drain(self.open()), [message(1), message(2)])

    def test_close_retries_failed_writes(self) -> None:
        """Messages held after a failed write are written at close if the disk works."""
        queue = self.open()
        queue.os_write = lambda fd, data: (_ for _ in ()).throw(OSError(errno.EIO, "I/O error"))
        queue.put(message(1))
        self.clock.advance(0)
        self.assertIsNotNone(queue.error)
        queue.os_write = os.write
        queue.close()
        self.assertEqual(self.drain(self.open()), [message(1)])

    def test_empty_removes_files(self) -> None:
        """empty() removes the segments; new messages start a new one."""
        queue = self.open(max_bytes=200)
        for i in range(7):
            queue.put(message(i, 60))
        queue.sync()
        queue.empty()
        self.assertEqual(queue.depth(), 0)
        self.assertEqual(self.files(), ["t:c.diskqueue.meta.dat"])
        queue.put(message(9))
        queue.close()
        self.assertEqual(self.drain(self.open(max_bytes=200)), [message(9)])

    def test_delete_removes_files(self) -> None:
        """delete() removes segments and meta file, keeping .bad files."""
        self.write_file("t:c.diskqueue.000000.dat.bad", b"junk")
        queue = self.open()
        queue.put(message(1))
        queue.sync()
        queue.delete()
        self.assertEqual(self.files(), ["t:c.diskqueue.000000.dat.bad"])

    def test_deferred_kept(self) -> None:
        """Deferred messages saved at close come back from load_deferred, once."""
        queue = self.open(mem=10)
        queue.put(message(1))
        queue.save_deferred([(111, message(2)), (222, message(3))])
        queue.close()
        again = self.open(mem=10)
        self.assertEqual(again.load_deferred(), [(111, message(2)), (222, message(3))])
        self.assertEqual(again.depth(), 1)
        self.assertEqual(self.drain(again), [message(1)])
        self.assertEqual(again.load_deferred(), [])
        self.assertNotIn("t:c.diskqueue.deferred.dat", self.files())

    def test_deferred_readable_as_plain(self) -> None:
        """Go's reader (or a queue not asked for them) sees deferred messages as plain ones."""
        queue = self.open()
        queue.put(message(1))
        queue.save_deferred([(111, message(2))])
        queue.close()
        segment = self.read_file("t:c.diskqueue.000000.dat")
        self.assertEqual(segment, record(message(1)) + record(message(2)))
        self.assertEqual(self.read_file("t:c.diskqueue.meta.dat"), b"2\n0,0\n0,88\n")
        self.assertEqual(self.drain(self.open()), [message(1), message(2)])

    def test_deferred_stale(self) -> None:
        """A deferred file that no longer matches the queue is dropped; messages stay."""
        queue = self.open()
        queue.put(message(1))
        queue.save_deferred([(111, message(2))])
        queue.close()
        # Someone else (Go nsqd) read one message and synced.
        self.write_file("t:c.diskqueue.meta.dat", b"1\n0,44\n0,88\n")
        again = self.open()
        self.assertEqual(again.load_deferred(), [])
        self.assertEqual(self.drain(again), [message(2)])

    def test_deferred_restarted_twice(self) -> None:
        """Deferred messages still deferred at a second shutdown get no second copy."""
        queue = self.open(mem=10)
        queue.put(message(1))
        queue.save_deferred([(111, message(2)), (222, message(3))])
        queue.close()
        again = self.open(mem=10)
        items = again.load_deferred()
        again.save_deferred(items + [(333, message(4))])
        again.close()
        # Two copies of messages 2 and 3 would be two deliveries by Go too.
        segment = self.read_file("t:c.diskqueue.000000.dat")
        self.assertEqual(segment, b"".join(map(record, [message(i) for i in (1, 2, 3, 4)])))
        third = self.open(mem=10)
        self.assertEqual(
            third.load_deferred(), [(111, message(2)), (222, message(3)), (333, message(4))]
        )
        self.assertEqual(third.depth(), 1)
        self.assertEqual(self.drain(third), [message(1)])

    def test_deferred_partly_delivered_between_restarts(self) -> None:
        """Copies of deferred messages delivered since the last start stay skipped."""
        queue = self.open(mem=10)
        queue.put(message(1))
        queue.save_deferred([(111, message(2)), (222, message(3))])
        queue.close()
        again = self.open(mem=10)
        again.load_deferred()
        self.assertEqual(again.read(), message(1))
        # Message 2 fell due and was delivered; 3 is still deferred.
        again.save_deferred([(222, message(3))])
        again.close()
        third = self.open(mem=10)
        self.assertEqual(third.load_deferred(), [(222, message(3))])
        self.assertEqual((third.depth(), self.drain(third)), (0, []))
        third.put(message(5))
        self.assertEqual(self.drain(third), [message(5)])

    def test_deferred_copies_partly_read(self) -> None:
        """Copies skipped before a restart are not skipped again (the run moves on)."""
        queue = self.open(mem=0)
        queue.save_deferred([(111, message(2)), (222, message(3))])
        queue.close()
        again = self.open(mem=0)
        again.load_deferred()
        again.put(message(4))
        self.clock.advance(0)
        self.assertEqual(again.read(), message(4))  # both copies skipped on the way
        again.save_deferred([(111, message(2)), (222, message(3))])
        again.close()
        # A reader that knows nothing of deferral (Go) sees each message once.
        plain = self.open(mem=0)
        self.assertEqual(self.drain(plain), [message(2), message(3)])

    def test_no_timers_after_close(self) -> None:
        """A closed queue leaves no timer, even after a failed write."""
        queue = self.open()
        queue.os_write = lambda fd, data: (_ for _ in ()).throw(OSError(errno.EIO, "I/O error"))
        queue.put(message(1))
        self.clock.advance(0)
        queue.close()
        self.assertEqual(list(self.clock.getDelayedCalls()), [])


class GoLayoutTests(SynchronousTestCase):
    """A queue directory exactly as go-diskqueue writes it is read."""

    def test_go_written_queue(self) -> None:
        """Two messages Go nsqd spilled (bytes spelled out) are read back."""
        directory = self.mktemp()
        os.makedirs(directory)
        # Message 1: timestamp 1700000000000000000 ns, 0 attempts, ID
        # "0a1b2c3d4e5f6789", body "hello"; message 2 the same with ID
        # ...678a, 3 attempts, body "world!".
        segment = bytes.fromhex(
            "0000001f"  # record length 31
            "17979cfe362a0000"  # timestamp
            "0000"  # attempts
            "30613162326333643465356636373839"  # ID
            "68656c6c6f"  # body
            "00000020"  # record length 32
            "17979cfe362a0000"
            "0003"
            "30613162326333643465356636373861"
            "776f726c6421"
        )
        with open(os.path.join(directory, "events:archive.diskqueue.000000.dat"), "wb") as f:
            f.write(segment)
        with open(os.path.join(directory, "events:archive.diskqueue.meta.dat"), "wb") as f:
            f.write(b"2\n0,0\n0,71\n")
        options = SimpleNamespace(
            mem_queue_size=10000,
            data_path=directory,
            max_bytes_per_file=104857600,
            sync_every=2500,
            sync_timeout=2.0,
            max_msg_size=1048576,
        )
        queue = DiskStorage().open_queue("events:archive", options, Clock())
        self.addCleanup(queue.close)
        self.assertEqual(queue.depth(), 2)
        first: Optional[bytes] = queue.read()
        second: Optional[bytes] = queue.read()
        assert first is not None and second is not None
        self.assertEqual(first[10:26], b"0a1b2c3d4e5f6789")
        self.assertEqual(first[26:], b"hello")
        self.assertEqual(struct.unpack(">qH", first[:10]), (1700000000000000000, 0))
        self.assertEqual(second[8:10], b"\x00\x03")
        self.assertEqual(second[26:], b"world!")


class SyncWorkerTests(SynchronousTestCase):
    """Periodic syncs on the sync thread."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.directory = self.mktemp()
        os.makedirs(self.directory)
        self.written: List[str] = []

        def write_meta(path: str, data: bytes) -> None:
            self.written.append(path)
            write_file_atomically(path, data)

        self.worker = SyncWorker(write_meta)

    def open(self, sync_every: int = 2) -> DiskQueue:
        queue = DiskQueue(
            "t:c",
            self.directory,
            self.clock,
            mem_limit=0,
            max_bytes_per_file=1024 * 1024,
            max_msg_size=1024 * 1024 + 26,
            sync_every=sync_every,
            sync_timeout=2.0,
            sync_worker=self.worker,
        )
        self.addCleanup(queue.close)
        return queue

    def meta(self) -> bytes:
        with open(os.path.join(self.directory, "t:c.diskqueue.meta.dat"), "rb") as f:
            return f.read()

    def test_sync_on_thread(self) -> None:
        """A periodic sync writes the meta file from the sync thread."""
        queue = self.open()
        queue.put(message(1))
        queue.put(message(2))
        self.clock.advance(0)
        self.worker.wait(queue)
        self.assertEqual(self.meta(), b"2\n0,0\n0,88\n")
        self.assertEqual(len(self.written), 1)

    def test_sync_every_one_inline(self) -> None:
        """With sync_every=1 the sync is done before the turn ends."""
        queue = self.open(sync_every=1)
        queue.put(message(1))
        self.clock.advance(0)
        self.assertEqual(self.meta(), b"1\n0,0\n0,44\n")
        self.assertEqual(self.written, [])

    def test_delete_waits(self) -> None:
        """delete() lets pending syncs finish, so no meta file comes back after it."""
        queue = self.open()
        queue.put(message(1))
        queue.put(message(2))
        self.clock.advance(0)
        queue.delete()
        self.assertEqual(os.listdir(self.directory), [])

    def test_failure_reported(self) -> None:
        """A failed sync on the thread is handed back to the queue."""

        def broken(path: str, data: bytes) -> None:
            raise OSError(errno.EIO, "I/O error")

        worker = SyncWorker(broken)
        owner = object()
        worker.submit(owner, None, "meta", b"0\n0,0\n0,0\n")
        worker.wait(owner)
        self.assertEqual(worker.failures(owner), ["[Errno 5] I/O error"])
        self.assertEqual(worker.failures(owner), [])


class _RecordingQueue:
    """Stands for a DiskQueue in a commit: records the steps taken on it."""

    def __init__(self, name: str, steps: List[str], unsynced: int = 1) -> None:
        self.name = name
        self.steps = steps
        self.unsynced = unsynced

    def write_records(self) -> bool:
        self.steps.append("write " + self.name)
        return True

    def fsync_records(self) -> None:
        if self.unsynced:
            self.steps.append("fsync " + self.name)

    def write_flight_log(self) -> None:
        self.steps.append("log " + self.name)

    def end_turn(self) -> None:
        self.steps.append("meta " + self.name)


class CommitterTests(SynchronousTestCase):
    """The end of a reactor turn for every queue with --mem-queue-size=0."""

    def test_order(self) -> None:
        """Records of every queue first (synced), then channels' flight logs, then topics', then the meta files."""
        steps: List[str] = []
        committer = Committer(Clock(), sync=True)
        for name in ("t", "t:c", "u:d"):
            committer.dirty(_RecordingQueue(name, steps))  # type: ignore[arg-type]
        committer.commit()
        self.assertEqual(
            steps,
            [
                "write t", "write t:c", "write u:d",
                "fsync t", "fsync t:c", "fsync u:d",
                "log t:c", "log u:d", "log t",
                "meta t", "meta t:c", "meta u:d",
            ],
        )

    def test_no_fsync_without_sync(self) -> None:
        """Without --sync-every=1 records are written, not fsynced, before the logs."""
        steps: List[str] = []
        committer = Committer(Clock(), sync=False)
        committer.dirty(_RecordingQueue("t:c", steps))  # type: ignore[arg-type]
        committer.commit()
        self.assertEqual(steps, ["write t:c", "log t:c", "meta t:c"])

    def test_once_per_turn(self) -> None:
        """Queues changed in one turn are committed together at its end, once; a commit before then does it early."""
        steps: List[str] = []
        clock = Clock()
        committer = Committer(clock, sync=False)
        queue = _RecordingQueue("t:c", steps)
        committer.dirty(queue)  # type: ignore[arg-type]
        committer.dirty(queue)  # type: ignore[arg-type]
        self.assertEqual(len(clock.getDelayedCalls()), 1)
        clock.advance(0)
        self.assertEqual(steps, ["write t:c", "log t:c", "meta t:c"])
        committer.dirty(queue)  # type: ignore[arg-type]
        committer.commit()
        self.assertEqual(clock.getDelayedCalls(), [])
        self.assertEqual(len(steps), 6)

    def test_durable_queues_share_a_committer(self) -> None:
        """With --mem-queue-size=0 the disk backend's queues keep flight logs and end their turns through one committer; otherwise not."""
        clock = Clock()
        storage = DiskStorage()
        options = SimpleNamespace(
            data_path=self.mktemp(), mem_queue_size=0, max_bytes_per_file=1024,
            max_msg_size=1024, sync_every=1, sync_timeout=2.0,
        )
        os.makedirs(options.data_path)
        topic = storage.open_queue("t", options, clock)
        channel = storage.open_queue("t:c", options, clock)
        self.addCleanup(topic.close)
        self.addCleanup(channel.close)
        self.assertTrue(topic.journaled and channel.journaled)
        self.assertIsNotNone(storage.barrier(options, clock))
        topic.put(message(1))
        channel.put(message(2))
        self.assertEqual(len(clock.getDelayedCalls()), 1)
        options.mem_queue_size = 10
        self.assertIsNone(storage.barrier(options, clock))
        other = storage.open_queue("u", options, clock)
        self.addCleanup(other.close)
        self.assertFalse(other.journaled)
