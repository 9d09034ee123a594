"""
Tests for lab.disk_faults: damaging files byte for byte, tmpfs mounts that
fill up, finding nsqd's files in a data path, and what a real nsqd does
when its data path is full.
"""

from __future__ import annotations

import errno
import os
import random
import time
from typing import List, Tuple

from twisted.internet.task import Clock
from twisted.trial.unittest import SkipTest, TestCase

from lab.disk_faults import (
    DiskFaultError,
    diskqueue_meta,
    diskqueue_segments,
    fill,
    flip_byte,
    free_bytes,
    log_indexes,
    log_segments,
    mount_small_tmpfs,
    mounts_under,
    truncate_tail,
    unfill,
    unmount,
)
from lab.tests.nsqd_process import NSQD, consume, nsqd_environment
from txnsq.storage.disk import DiskQueue
from txnsq.storage.diskqueue_format import RECORD_HEADER, segment_file_name
from txnsq.storage.log_format import index_file_name
from txnsq.storage.log_format import segment_file_name as log_segment_file_name
from txnsq.storage.topic_log import TopicLog

# An nsqd message on disk: 8-byte timestamp, 2-byte attempts, 16-byte id.
_MESSAGE_HEADER = 26


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _need_root() -> None:
    if os.geteuid() != 0:
        raise SkipTest("mounting a tmpfs needs root")


class DamageTests(TestCase):
    """flip_byte and truncate_tail change exactly the bytes they say."""

    def setUp(self) -> None:
        self.path = os.path.abspath(self.mktemp())
        _write(self.path, b"\x00\x01\x02\x03")

    def test_flip_at_offset(self) -> None:
        """Every bit of the byte at the offset is flipped, nothing else."""
        self.assertEqual(flip_byte(self.path, 1, random.Random(0)), 1)
        self.assertEqual(_read(self.path), b"\x00\xfe\x02\x03")

    def test_flip_mask(self) -> None:
        """A mask flips only its bits; flipping twice puts the byte back."""
        flip_byte(self.path, 3, random.Random(0), mask=0x80)
        self.assertEqual(_read(self.path), b"\x00\x01\x02\x83")
        flip_byte(self.path, 3, random.Random(0), mask=0x80)
        self.assertEqual(_read(self.path), b"\x00\x01\x02\x03")

    def test_flip_random_offset(self) -> None:
        """Without an offset the generator picks one inside the file."""
        expected = random.Random(42).randrange(4)
        offset = flip_byte(self.path, None, random.Random(42))
        self.assertEqual(offset, expected)
        data = bytearray(b"\x00\x01\x02\x03")
        data[offset] ^= 0xFF
        self.assertEqual(_read(self.path), bytes(data))

    def test_flip_refused(self) -> None:
        """An offset outside the file, an empty file and an empty mask are refused."""
        self.assertRaises(DiskFaultError, flip_byte, self.path, 4, random.Random(0))
        self.assertRaises(DiskFaultError, flip_byte, self.path, -1, random.Random(0))
        self.assertRaises(DiskFaultError, flip_byte, self.path, 0, random.Random(0), 0)
        empty = os.path.abspath(self.mktemp())
        _write(empty, b"")
        self.assertRaises(DiskFaultError, flip_byte, empty, None, random.Random(0))
        self.assertRaises(DiskFaultError, flip_byte, empty + ".missing", 0, random.Random(0))

    def test_truncate_tail(self) -> None:
        """The last bytes are cut; asking for more than there is cuts all."""
        self.assertEqual(truncate_tail(self.path, 1), 1)
        self.assertEqual(_read(self.path), b"\x00\x01\x02")
        self.assertEqual(truncate_tail(self.path, 0), 0)
        self.assertEqual(truncate_tail(self.path, 10), 3)
        self.assertEqual(_read(self.path), b"")
        self.assertRaises(DiskFaultError, truncate_tail, self.path, -1)


class TmpfsTests(TestCase):
    """Small tmpfs mounts fill up, and are found and removed at teardown."""

    def setUp(self) -> None:
        _need_root()
        self.top = os.path.abspath(self.mktemp())
        self.mount = os.path.join(self.top, "disk")
        mount_small_tmpfs(self.mount, 1 << 20)
        self.addCleanup(self._unmount_all)

    def _unmount_all(self) -> None:
        for point in mounts_under(self.top):
            unmount(point)

    def test_fill_until_enospc(self) -> None:
        """fill takes every free block (a write then fails with ENOSPC); unfill gives them back."""
        before = free_bytes(self.mount)
        self.assertGreaterEqual(before, (1 << 20) - 4096)
        filler = fill(self.mount)
        self.assertEqual(free_bytes(self.mount), 0)
        with open(os.path.join(self.mount, "more"), "wb", buffering=0) as f:
            error = self.assertRaises(OSError, f.write, b"x" * 4096)
        self.assertEqual(error.errno, errno.ENOSPC)
        unfill(filler)
        self.assertEqual(free_bytes(self.mount), before)
        with open(os.path.join(self.mount, "more"), "wb") as f:
            f.write(b"x" * 4096)

    def test_fill_leaving_room(self) -> None:
        """fill can leave some room, to within a block."""
        filler = fill(self.mount, leave_bytes=200_000)
        self.assertApproximates(free_bytes(self.mount), 200_000, 4096)
        self.assertRaises(DiskFaultError, unfill, os.path.join(self.mount, "not-a-filler"))
        unfill(filler)

    def test_mounts_under(self) -> None:
        """mounts_under lists the lab's mounts deepest first, and forgets unmounted ones."""
        inner = os.path.join(self.mount, "inner")
        mount_small_tmpfs(inner, 65536)
        self.assertEqual(mounts_under(self.top), [os.path.realpath(inner), os.path.realpath(self.mount)])
        self.assertEqual(mounts_under(inner), [os.path.realpath(inner)])
        unmount(inner)
        self.assertEqual(mounts_under(self.top), [os.path.realpath(self.mount)])

    def test_busy_unmount(self) -> None:
        """A mount with a file still open is detached all the same."""
        busy = open(os.path.join(self.mount, "open"), "wb")
        self.addCleanup(busy.close)
        unmount(self.mount)
        self.assertEqual(mounts_under(self.top), [])

    def test_refusals(self) -> None:
        """Mounting twice on one path, a size of 0, and unmounting a plain directory are refused."""
        self.assertRaises(DiskFaultError, mount_small_tmpfs, self.mount, 1 << 20)
        self.assertRaises(DiskFaultError, mount_small_tmpfs, os.path.join(self.top, "zero"), 0)
        self.assertRaises(DiskFaultError, unmount, self.top)


class TargetTests(TestCase):
    """The finders name exactly the files txnsq's storage writes."""

    def setUp(self) -> None:
        self.data = os.path.abspath(self.mktemp())
        os.makedirs(self.data)
        self.clock = Clock()

    def _queue(self, name: str, count: int) -> None:
        queue = DiskQueue(
            name,
            self.data,
            self.clock,
            mem_limit=0,
            max_bytes_per_file=300,
            max_msg_size=1024,
            sync_every=1,
            sync_timeout=2.0,
        )
        for n in range(count):
            queue.put(b"%-40d" % (n,))
            self.clock.advance(0)
        queue.close()

    def test_diskqueue_segments(self) -> None:
        """A topic's and a channel's segments, oldest first, not another
        topic's, not a segment set aside as .bad."""
        self._queue("t", 15)
        self._queue("t:c", 7)
        self._queue("t2", 7)
        _write(os.path.join(self.data, segment_file_name("t", 9) + ".bad"), b"")
        # 300-byte segments of 44-byte records: 6 records each.
        self.assertEqual(
            diskqueue_segments(self.data, "t"),
            [os.path.join(self.data, segment_file_name("t", n)) for n in range(3)],
        )
        self.assertEqual(
            diskqueue_segments(self.data, "t", "c"),
            [os.path.join(self.data, segment_file_name("t:c", n)) for n in range(2)],
        )
        self.assertEqual(diskqueue_segments(self.data, "nope"), [])
        self.assertTrue(os.path.exists(diskqueue_meta(self.data, "t", "c")))
        self.assertEqual(os.path.basename(diskqueue_meta(self.data, "t")), "t.diskqueue.meta.dat")

    def test_log_files(self) -> None:
        """A retained topic's segments and indexes, by partition then base
        offset; not those of a topic whose name extends it."""
        retained = os.path.join(self.data, "retained")
        log = TopicLog(retained, "t", 2, self.clock, segment_bytes=400, index_interval=100, sync_every=1)
        other = TopicLog(retained, "t-1", 1, self.clock, segment_bytes=400, sync_every=1)
        for n in range(20):
            log.append(b"%08d" % (n,), 0, b"x" * 60, n)
            other.append(b"%08d" % (n,), 0, b"y" * 60, n)
        log.close()
        other.close()
        expected_segments: List[str] = []
        expected_indexes: List[str] = []
        for partition in (0, 1):
            directory = os.path.join(retained, "t-%d" % (partition,))
            bases = sorted(int(name[:-4]) for name in os.listdir(directory) if name.endswith(".log"))
            self.assertGreater(len(bases), 1)
            expected_segments += [os.path.join(directory, log_segment_file_name(b)) for b in bases]
            expected_indexes += [os.path.join(directory, index_file_name(b)) for b in bases]
        bad = os.path.join(retained, "t-0", log_segment_file_name(0) + ".5.bad")
        _write(bad, b"")
        self.assertEqual(log_segments(self.data, "t"), expected_segments)
        self.assertEqual(log_indexes(self.data, "t"), expected_indexes)
        self.assertTrue(all("/t-1-0/" in p for p in log_segments(self.data, "t-1")))
        self.assertEqual(log_segments(self.data, "absent"), [])
        self.assertEqual(log_segments(os.path.join(self.data, "nothing-here"), "t"), [])


class FullDataPathTests(TestCase):
    """A real nsqd with --mem-queue-size=0 on a 2 MiB tmpfs that fills up."""

    BODY = b"x" * 10000

    def setUp(self) -> None:
        _need_root()
        top = os.path.abspath(self.mktemp())
        self.data = os.path.join(top, "data")
        mount_small_tmpfs(self.data, 2 << 20)
        self.addCleanup(unmount, self.data)
        self.nsqd = NSQD(self.data, os.path.join(top, "nsqd.log"), ["--mem-queue-size=0"], nsqd_environment())
        self.addCleanup(self.nsqd.kill)
        self.log_path = os.path.join(top, "nsqd.log")
        # The topic (and nsqd.dat) first, so the filler leaves room for messages only.
        self.assertEqual(self.nsqd.request("POST", "/topic/create?topic=t")[0], 200)

    def publish_until_refused(self) -> Tuple[List[bytes], Tuple[int, bytes]]:
        """Publish 10 kB messages until one is refused: the ones answered OK and the refusal."""
        accepted: List[bytes] = []
        for n in range(200):
            body = b"%05d" % (n,) + self.BODY
            answer = self.nsqd.request("POST", "/pub?topic=t", body)
            if answer != (200, b"OK"):
                return accepted, answer
            accepted.append(body)
        self.fail("nsqd took 2 MB on a 2 MiB tmpfs")

    def test_full_then_free(self) -> None:
        """Publishing to a full data path is refused (503 EXITING), nsqd
        says it is unhealthy but keeps serving, and once there is room
        again it writes what it held and takes publishes."""
        filler = fill(self.data, leave_bytes=100_000)
        accepted, refusal = self.publish_until_refused()
        self.assertGreater(len(accepted), 0)
        self.assertEqual(refusal, (503, b'{"message":"EXITING"}'))
        self.assertEqual(
            self.nsqd.request("GET", "/ping"),
            (500, b"NOK - failed to write to diskqueue t - [Errno 28] No space left on device"),
        )
        self.assertIsNone(self.nsqd.proc.poll())
        unfill(filler)
        # The queue tries its write again every second (RETRY_DELAY).
        deadline = time.monotonic() + 15
        while self.nsqd.request("POST", "/pub?topic=t", b"after") != (200, b"OK"):
            self.assertLess(time.monotonic(), deadline, "publishing still fails after unfill")
            time.sleep(0.1)
        self.assertEqual(self.nsqd.request("GET", "/ping"), (200, b"OK"))
        expected = accepted + [b"after"]
        self.assertEqual(consume(self.nsqd.tcp, "t", len(expected)), expected)

    def test_ok_means_on_disk(self) -> None:
        """With --mem-queue-size=0, every message answered OK is in a
        segment file when the disk fills (so a crash keeps it)."""
        fill(self.data, leave_bytes=100_000)
        accepted, _ = self.publish_until_refused()
        records = b"".join(_read(path) for path in diskqueue_segments(self.data, "t"))
        bodies = []
        while records:
            (size,) = RECORD_HEADER.unpack_from(records, 0)
            bodies.append(records[RECORD_HEADER.size + _MESSAGE_HEADER : RECORD_HEADER.size + size])
            records = records[RECORD_HEADER.size + size :]
        # Messages by number (their first 5 bytes), so a failure reads well.
        self.assertEqual([b[:5] for b in bodies], [b[:5] for b in accepted])
        self.assertEqual(bodies, accepted)

    test_ok_means_on_disk.todo = (  # type: ignore[attr-defined]
        "nsqd answers OK for the message whose write hit ENOSPC: it is held in memory "
        "(http.py and tcp.py send OK after the barrier whatever the write did); "
        "a crash before the disk has room again loses it"
    )
