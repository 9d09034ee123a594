"""
Tests for the retained log (txnsq.storage.log) and its file format
(txnsq.storage.log_format).
"""

from __future__ import annotations

import errno
import os
import signal
import struct
import subprocess
import sys
import zlib
from typing import Any, Dict, List, Optional, Tuple

from twisted.internet.task import Clock
from twisted.logger import capturedLogs, formatEvent
from twisted.trial.unittest import SynchronousTestCase

from txnsq.storage import log as log_module
from txnsq.storage.diskqueue_format import DiskFormatError
from txnsq.files import write_file_atomically
from txnsq.storage.log import DamagedRecord, OffsetOutOfRange, PartitionLog, RecordTooLarge
from txnsq.storage.topic_log import TopicLog
from txnsq.storage.log_format import (
    ATTRIBUTE_FLAG,
    INDEX_ENTRY,
    Seal,
    checksum,
    crc32,
    decode_index,
    encode_batch,
    encode_record,
    encode_seal,
    index_file_name,
    iter_records,
    nsq_message_id,
    parse_segment_file_name,
    raw_message_id,
    segment_file_name,
    with_attribute,
)
from txnsq.storage.sync_worker import SyncWorker


def msg_id(number: int) -> bytes:
    """An 8-byte message id."""
    return struct.pack(">q", number)


def body(number: int, size: int = 20) -> bytes:
    """A payload that says which message it is."""
    return (b"%08d" % (number,)).ljust(size, b".")


class LogFormatTests(SynchronousTestCase):
    """MetaQ's record layout, names and the index format."""

    def test_seed_record_without_attribute(self) -> None:
        """The seed's first get example (payload FFFF, no attribute) is one record."""
        expected = (
            b"\x00\x00\x00\x04\x52\xb0\x25\xa9\xb4\x1a\xda\x94\xd0\x00\x00\x00"
            b"\x00\x00\x00\x00FFFF"
        )
        self.assertEqual(encode_record(b"\xb4\x1a\xda\x94\xd0\x00\x00\x00", 0, b"FFFF"), expected)

    def test_seed_record_with_attribute(self) -> None:
        """The seed's second get example (attribute AAA, payload FFFF) is one record."""
        expected = (
            b"\x00\x00\x00\x0b\x55\x17\x9a\x47\xb4\x1a\xdc\x98\x86\xc0\x00\x00"
            b"\x00\x00\x00\x01\x00\x00\x00\x03AAAFFFF"
        )
        data = with_attribute(b"AAA", b"FFFF")
        record = encode_record(b"\xb4\x1a\xdc\x98\x86\xc0\x00\x00", ATTRIBUTE_FLAG, data)
        self.assertEqual(record, expected)
        (decoded,) = iter_records(record, 512)
        self.assertEqual(decoded, (512, b"\xb4\x1a\xdc\x98\x86\xc0\x00\x00", 1, data))

    def test_nsq_message_id(self) -> None:
        """An NSQ message id is the hex of the record's 8-byte id, and back."""
        self.assertEqual(nsq_message_id(b"\xb4\x1a\xda\x94\xd0\x00\x00\x00"), b"b41ada94d0000000")
        self.assertEqual(raw_message_id(b"b41ada94d0000000"), b"\xb4\x1a\xda\x94\xd0\x00\x00\x00")
        self.assertRaises(ValueError, raw_message_id, b"not-hex-at-all!!")

    def test_file_names(self) -> None:
        """Segments and indexes are named by their base offset in 20 digits."""
        self.assertEqual(segment_file_name(1024), "00000000000000001024.log")
        self.assertEqual(index_file_name(1024), "00000000000000001024.index")
        self.assertEqual(parse_segment_file_name("00000000000000001024.log"), 1024)
        self.assertIsNone(parse_segment_file_name("00000000000000001024.log.bad"))
        self.assertIsNone(parse_segment_file_name("00000000000000001024.index"))

    def test_index_round_trip(self) -> None:
        """An index gives back its entries and its seal."""
        entries = INDEX_ENTRY.pack(0, 5) + INDEX_ENTRY.pack(4096, 9)
        data = entries + encode_seal(Seal(11, 5000, 77), zlib.crc32(entries))
        self.assertEqual(decode_index(data), ([(0, 5), (4096, 9)], Seal(11, 5000, 77)))

    def test_index_damaged(self) -> None:
        """A partial entry, entries out of order, part of a seal or a wrong index checksum is a DiskFormatError."""
        for data in (
            INDEX_ENTRY.pack(0, 5)[:-1],
            INDEX_ENTRY.pack(0, 5) + INDEX_ENTRY.pack(0, 6),
            INDEX_ENTRY.pack(0, 5) + INDEX_ENTRY.pack(10, 4),
            INDEX_ENTRY.pack(0, 5) + encode_seal(Seal(1, 2, 3), 0)[12:],
            INDEX_ENTRY.pack(0, 5) + encode_seal(Seal(1, 2, 3), 0),
            INDEX_ENTRY.pack(8, 5),
        ):
            self.assertRaises(DiskFormatError, decode_index, data)

    def test_batch_is_records_back_to_back(self) -> None:
        """A batch's bytes are its records' bytes, joined."""
        records = [(msg_id(n), n % 2, body(n, n)) for n in range(50)]
        self.assertEqual(encode_batch(records), b"".join(encode_record(*r) for r in records))
        self.assertRaises(struct.error, encode_batch, records + [(b"1234567", 0, b"x")])
        self.assertRaises(struct.error, encode_batch, [(b"123456789", 0, b"x")] + records)

    def test_crc32_is_zlibs(self) -> None:
        """The CRC32 used (ISA-L's when installed) is zlib's, incrementally too."""
        data = bytes(range(256)) * 41
        self.assertEqual(crc32(data), zlib.crc32(data))
        self.assertEqual(crc32(data[1000:], crc32(data[:1000])), zlib.crc32(data))
        self.assertEqual(checksum(b"FFFF"), 0x52B025A9)

    def test_iter_records_damaged(self) -> None:
        """Decoding a slice with a flipped byte or a partial record fails."""
        record = bytearray(encode_record(msg_id(1), 0, b"hello"))
        self.assertRaises(DiskFormatError, list, iter_records(bytes(record[:-1])))
        record[-1] ^= 0x01
        self.assertRaises(DiskFormatError, list, iter_records(bytes(record)))


class LogTestCase(SynchronousTestCase):
    """Helpers: a data directory, an injected clock, logs opened in it."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.directory = self.mktemp()
        os.makedirs(self.directory)

    def open(self, **kwargs: Any) -> PartitionLog:
        kwargs.setdefault("segment_bytes", 1000)
        kwargs.setdefault("index_interval", 100)
        log = PartitionLog(self.directory, self.clock, name="t-0", **kwargs)
        self.addCleanup(log.close)
        return log

    def crash(self, log: PartitionLog) -> None:
        """Forget ``log`` as a killed process would: no close, files left as they are."""
        log._closed = True
        log._close_writers()
        if log._sync_call is not None:
            log._sync_call.cancel()
            log._sync_call = None

    def path(self, filename: str) -> str:
        return os.path.join(self.directory, filename)

    def read_file(self, filename: str) -> bytes:
        with open(self.path(filename), "rb") as f:
            return f.read()

    def write_file(self, filename: str, data: bytes) -> None:
        with open(self.path(filename), "wb") as f:
            f.write(data)

    def files(self) -> List[str]:
        return sorted(os.listdir(self.directory))

    def fill(self, log: PartitionLog, count: int, start: int = 0, size: int = 20) -> List[int]:
        return [
            log.append(msg_id(number), 0, body(number, size), number * 1000)
            for number in range(start, start + count)
        ]

    def read_all(self, log: PartitionLog, offset: Optional[int] = None, max_size: int = 300) -> List[Tuple[int, bytes]]:
        """Every record from ``offset`` (default: the first), skipping missing segments."""
        offset = log.first_offset if offset is None else offset
        out = []
        while True:
            try:
                data, following = log.read(offset, max_size)
            except OffsetOutOfRange as error:
                self.assertGreater(error.nearest, offset)
                offset = error.nearest
                continue
            if not data:
                return out
            out.extend((record.offset, record.data) for record in iter_records(data, offset))
            offset = following


class PartitionLogTests(LogTestCase):
    """Appending, reading, segments and reopening."""

    def test_round_trip(self) -> None:
        """Records appended are read back with their ids, flags and data."""
        log = self.open()
        first = log.append(msg_id(7), 0, b"hello", 1)
        second = log.append(msg_id(8), ATTRIBUTE_FLAG, with_attribute(b"k=v", b"world"), 2)
        data, following = log.read(first, 1024)
        self.assertEqual(
            list(iter_records(data)),
            [
                (0, msg_id(7), 0, b"hello"),
                (second, msg_id(8), ATTRIBUTE_FLAG, with_attribute(b"k=v", b"world")),
            ],
        )
        self.assertEqual(following, log.next_offset)

    def test_append_same_as_append_many(self) -> None:
        """One append per record writes the same segments, indexes and seals as one-record append_many calls."""
        one = PartitionLog(os.path.join(self.directory, "a"), self.clock, segment_bytes=1000, index_interval=100)
        many = PartitionLog(os.path.join(self.directory, "b"), self.clock, segment_bytes=1000, index_interval=100)
        for number in range(300):
            data = body(number, 5 + number % 40)
            self.assertEqual(
                one.append(msg_id(number), number % 2, data, number * 1000),
                many.append_many([(msg_id(number), number % 2, data)], number * 1000),
            )
        self.assertEqual(one.segments(), many.segments())
        one.close()
        many.close()
        self.assertEqual(os.listdir(one.directory), os.listdir(many.directory))
        for name in os.listdir(one.directory):
            with open(os.path.join(one.directory, name), "rb") as a, open(os.path.join(many.directory, name), "rb") as b:
                self.assertEqual(a.read(), b.read(), name)
        other = self.open()
        self.assertRaises(struct.error, other.append, b"short", 0, b"x", 1)
        self.assertEqual(other.next_offset, 0)

    def test_offsets_are_byte_positions(self) -> None:
        """A record's offset is its byte position; the segment is the records back to back."""
        log = self.open()
        records = [(msg_id(n), 0, body(n, n + 1)) for n in range(5)]
        self.assertEqual(log.append_many(records, 5), 0)
        encoded = [encode_record(*record) for record in records]
        offsets = [record.offset for record in iter_records(log.read(0, 1000)[0])]
        self.assertEqual(offsets, [sum(len(e) for e in encoded[:n]) for n in range(5)])
        self.assertEqual(log.next_offset, sum(len(e) for e in encoded))
        self.assertEqual(self.read_file("00000000000000000000.log"), b"".join(encoded))
        self.assertEqual(log.append(msg_id(9), 0, b"x", 6), log.next_offset - 21)

    def test_read_is_whole_records(self) -> None:
        """A read returns the whole records that fit in max_size and where to go on."""
        log = self.open()
        offsets = self.fill(log, 10)
        size = offsets[1] - offsets[0]
        data, following = log.read(offsets[2], 3 * size + size - 1)
        self.assertEqual(data, self.read_file("00000000000000000000.log")[offsets[2] : offsets[5]])
        self.assertEqual(following, offsets[5])
        last = self.read_file("00000000000000000000.log")[offsets[9] :]
        self.assertEqual(log.read(offsets[9], 10 * size), (last, log.next_offset))

    def test_read_at_end(self) -> None:
        """At next_offset a read is empty (nothing new yet)."""
        log = self.open()
        self.fill(log, 2)
        self.assertEqual(log.read(log.next_offset, 100), (b"", log.next_offset))

    def test_record_too_large(self) -> None:
        """A first record larger than max_size is reported with its size."""
        log = self.open()
        offset = log.append(msg_id(1), 0, b"x" * 50, 1)
        error = self.assertRaises(RecordTooLarge, log.read, offset, 69)
        self.assertEqual((error.offset, error.size), (0, 70))
        self.assertEqual(len(log.read(offset, 70)[0]), 70)

    def test_out_of_range(self) -> None:
        """An offset inside a record or past the end is refused with the nearest valid one."""
        log = self.open()
        offsets = self.fill(log, 20)
        inside = self.assertRaises(OffsetOutOfRange, log.read, offsets[13] + 3, 100)
        self.assertEqual(inside.nearest, offsets[13])
        past = self.assertRaises(OffsetOutOfRange, log.read, log.next_offset + 1, 100)
        self.assertEqual(past.nearest, log.next_offset)
        self.assertEqual(log.nearest_offset(offsets[13] + 3), offsets[13])
        self.assertEqual(log.nearest_offset(-5), 0)
        self.assertEqual(log.nearest_offset(10**9), log.next_offset)

    def test_roll_over(self) -> None:
        """A segment is full at segment_bytes; the next is named by its base offset."""
        log = self.open(segment_bytes=200)
        offsets = self.fill(log, 12)  # 40-byte records: 5 per segment
        self.assertEqual([s.base for s in log.segments()], [0, 200, 400])
        self.assertEqual([s.bytes for s in log.segments()], [200, 200, 80])
        self.assertEqual(
            self.files(),
            [name % base for base in (0, 200, 400) for name in ("%020d.index", "%020d.log")],
        )
        # A read stops at the end of a segment; the next goes on in the next one.
        data, following = log.read(offsets[3], 1000)
        self.assertEqual((len(data), following), (80, 200))
        self.assertEqual([o for o, _ in self.read_all(log)], offsets)
        self.assertEqual([s.sealed for s in log.segments()], [True, True, False])

    def test_batch_in_one_write(self) -> None:
        """A batch is written with one write, into one segment."""
        log = self.open(segment_bytes=200)
        self.fill(log, 3)
        writes: List[int] = []

        def write(fd: int, data: Any) -> int:
            writes.append(len(data))
            return os.write(fd, data)

        log.os_write = write
        offset = log.append_many([(msg_id(n), 0, body(n)) for n in range(6)], 9)
        self.assertEqual(writes, [240])
        self.assertEqual(offset, 120)
        self.assertEqual([s.bytes for s in log.segments()], [120, 240])

    def test_batch_index(self) -> None:
        """A short batch is indexed at its first record; a long one also every interval."""
        log = self.open(index_interval=100, segment_bytes=10000)
        log.append_many([(msg_id(n), 0, body(n, 20)) for n in range(5)], 7)  # 200 bytes
        log.append_many([(msg_id(n), 0, body(n, 20)) for n in range(5)], 8)  # 200 bytes
        log.append_many([(msg_id(n), 0, body(n, 20)) for n in range(15)], 9)  # 600 bytes
        log.sync()
        entries, _ = decode_index(self.read_file("00000000000000000000.index"))
        self.assertEqual(entries, [(0, 7), (200, 8), (400, 9), (520, 9), (640, 9), (760, 9), (880, 9)])
        self.assertEqual(len(self.read_all(log, max_size=50)), 25)

    def test_reopen(self) -> None:
        """A log closed and opened again has its records and offsets and writes on."""
        log = self.open(segment_bytes=200)
        offsets = self.fill(log, 12)
        log.close()
        again = self.open(segment_bytes=200)
        self.assertEqual((again.first_offset, again.next_offset), (0, 480))
        self.assertEqual(again.segments()[-1].newest, 11000)
        offsets += self.fill(again, 3, start=12)
        self.assertEqual(
            self.read_all(again), [(o, body(n)) for n, o in enumerate(offsets)]
        )

    def test_write_failure(self) -> None:
        """A failed write raises OSError and leaves the log as it was."""
        log = self.open()
        self.fill(log, 2)

        def full(fd: int, data: Any) -> int:
            os.write(fd, bytes(data[:7]))
            raise OSError(28, "No space left on device")

        log.os_write = full
        with capturedLogs() as events:
            self.assertRaises(OSError, log.append, msg_id(3), 0, b"lost", 3)
        self.assertIn("failed to write", formatEvent(events[0]))
        log.os_write = os.write
        offset = log.append(msg_id(4), 0, body(4), 4)
        self.assertEqual(offset, 80)
        self.assertEqual(len(self.read_file("00000000000000000000.log")), 120)
        self.assertEqual([d for _, d in self.read_all(log)], [body(0), body(1), body(4)])

    def test_bad_message_id(self) -> None:
        """A message id that is not 8 bytes is refused before anything is written."""
        log = self.open()
        self.assertRaises(struct.error, log.append, b"short", 0, b"x", 1)
        self.assertEqual(log.next_offset, 0)


class RecoveryTests(LogTestCase):
    """What opening finds after a crash or damage."""

    def test_tail_truncated_mid_record(self) -> None:
        """A last segment cut mid-record is cut back to its last whole record and written on."""
        log = self.open()
        offsets = self.fill(log, 10)
        self.crash(log)
        segment = self.read_file("00000000000000000000.log")
        self.write_file("00000000000000000000.log", segment[: offsets[7] + 25])
        with capturedLogs() as events:
            again = self.open()
        self.assertEqual(again.next_offset, offsets[7])
        self.assertIn("truncating the segment", formatEvent(events[0]))
        self.assertEqual(self.read_file("00000000000000000000.log.%d.bad" % (offsets[7],)), segment[offsets[7] : offsets[7] + 25])
        self.assertEqual(again.append(msg_id(99), 0, b"next", 99), offsets[7])
        self.assertEqual(
            [d for _, d in self.read_all(again)], [body(n) for n in range(7)] + [b"next"]
        )

    def test_tail_bad_checksum(self) -> None:
        """A record of the last segment that fails its checksum ends the segment there."""
        log = self.open()
        offsets = self.fill(log, 10)
        self.crash(log)
        segment = bytearray(self.read_file("00000000000000000000.log"))
        segment[offsets[4] + 22] ^= 0xFF
        self.write_file("00000000000000000000.log", bytes(segment))
        again = self.open()
        self.assertEqual(again.next_offset, offsets[4])

    def test_unsynced_index_rebuilt(self) -> None:
        """Index entries never written (a crash) are rebuilt from the records."""
        log = self.open(sync_every=0)
        offsets = self.fill(log, 10)
        self.crash(log)
        self.assertEqual(self.read_file("00000000000000000000.index"), b"")
        self.clock.advance(50)
        again = self.open()
        self.assertEqual(again.next_offset, log.next_offset)
        self.assertEqual([o for o, _ in self.read_all(again)], offsets)
        # Their times are unknown: taken as "now", so a rewind includes them.
        self.assertEqual(again.offset_for_timestamp(5000), 0)

    def test_flipped_byte_in_middle_segment(self) -> None:
        """A middle segment failing its checksum is set aside as .bad, logged, and skipped."""
        log = self.open(segment_bytes=200)
        offsets = self.fill(log, 15)
        log.close()
        segment = bytearray(self.read_file("00000000000000000200.log"))
        segment[70] ^= 0x10
        self.write_file("00000000000000000200.log", bytes(segment))
        with capturedLogs() as events:
            again = self.open(segment_bytes=200)
        text = " ".join(formatEvent(event) for event in events)
        self.assertIn("checksum mismatch at offset 240", text)
        self.assertIn("00000000000000000200.log.bad", text)
        self.assertIn("00000000000000000200.log.bad", self.files())
        self.assertIn("00000000000000000200.index.bad", self.files())
        self.assertEqual(self.read_file("00000000000000000200.log.bad"), bytes(segment))
        with capturedLogs() as events:
            error = self.assertRaises(OffsetOutOfRange, again.read, 200, 1000)
        self.assertEqual(error.nearest, 400)
        self.assertIn("offsets 200-400 are missing", formatEvent(events[0]))
        self.assertEqual(
            [d for _, d in self.read_all(again)],
            [body(n) for n in range(5)] + [body(n) for n in range(10, 15)],
        )
        self.assertEqual(again.nearest_offset(250), 400)
        self.assertEqual(again.next_offset, offsets[-1] + 40)

    def test_flipped_id_in_sealed_segment_logged(self) -> None:
        """
        A message id byte flipped in a sealed segment passes the records'
        checksums (data only) but not the seal's CRC32: logged as an error
        at each open, not sealed again, and served with the other id.
        """
        log = self.open(segment_bytes=200)
        self.fill(log, 12)
        log.close()
        segment = bytearray(self.read_file("00000000000000000000.log"))
        segment[40 + 15] ^= 0x01  # record 1's id
        self.write_file("00000000000000000000.log", bytes(segment))
        index = self.read_file("00000000000000000000.index")
        for attempt in range(2):
            with capturedLogs() as events:
                again = self.open(segment_bytes=200)
            text = " ".join(formatEvent(event) for event in events)
            self.assertIn("fails its seal's CRC32 though every record passes its checksum", text)
            self.assertEqual(self.read_file("00000000000000000000.index"), index)
            records = list(iter_records(again.read(0, 1000)[0]))
            self.assertEqual((records[1].msg_id, records[1].data), (msg_id(1 ^ 1), body(1)))
            again.close()

    def test_first_segment_damaged(self) -> None:
        """A damaged first segment moves the first offset to the next segment."""
        log = self.open(segment_bytes=200)
        self.fill(log, 12)
        log.close()
        segment = bytearray(self.read_file("00000000000000000000.log"))
        segment[25] ^= 0x01
        self.write_file("00000000000000000000.log", bytes(segment))
        again = self.open(segment_bytes=200)
        self.assertEqual(again.first_offset, 200)
        self.assertEqual(self.assertRaises(OffsetOutOfRange, again.read, 0, 100).nearest, 200)

    def test_missing_seal_checked_by_records(self) -> None:
        """A middle segment whose seal was lost is checked record by record and sealed again."""
        log = self.open(segment_bytes=200)
        self.fill(log, 12)
        log.close()
        index = self.read_file("00000000000000000000.index")
        self.write_file("00000000000000000000.index", index[:-36])
        self.clock.advance(5)
        with capturedLogs() as events:
            again = self.open(segment_bytes=200)
        self.assertIn("checked 200 bytes record by record", formatEvent(events[0]))
        entries, seal = decode_index(self.read_file("00000000000000000000.index"))
        self.assertEqual(entries, decode_index(index)[0])
        # The newest time is no longer known: "now" is taken.
        self.assertEqual(seal, decode_index(index)[1]._replace(newest=5 * 10**9))
        self.assertEqual(len(self.read_all(again)), 12)

    def test_damaged_index_rebuilt(self) -> None:
        """A flipped byte in a sealed segment's index is caught by the seal; the index is rebuilt."""
        log = self.open(segment_bytes=200, index_interval=50)
        offsets = self.fill(log, 12)
        log.close()
        index = bytearray(self.read_file("00000000000000000000.index"))
        self.assertEqual(index[12:16], b"\x00\x00\x00\x50")  # the entry of record 2 (80)
        index[15] = 0x51  # now points inside that record
        self.write_file("00000000000000000000.index", bytes(index))
        with capturedLogs() as events:
            again = self.open(segment_bytes=200, index_interval=50)
        self.assertIn("index checksum mismatch", formatEvent(events[0]))
        self.assertEqual([o for o, _ in self.read_all(again, max_size=50)], offsets)
        entries, seal = decode_index(self.read_file("00000000000000000000.index"))
        self.assertEqual([pos for pos, _ in entries], [0, 80, 160])
        self.assertIsNotNone(seal)

    def test_sealed_segment_not_read_by_record(self) -> None:
        """A middle segment with a matching seal is trusted after one CRC pass (no record walk)."""
        log = self.open(segment_bytes=200)
        self.fill(log, 12)
        log.close()
        scanned: List[int] = []
        real = log_module.scan_records

        def scan(data: Any, start: int, end: int, interval: int, last: int) -> Any:
            scanned.append(len(data))
            return real(data, start, end, interval, last)

        self.patch(log_module, "scan_records", scan)
        self.open(segment_bytes=200)
        self.assertEqual(scanned, [80])  # the last segment only


class ReadCheckTests(LogTestCase):
    """Reads check every record they serve: a record damaged while the log is open is never served."""

    def flip(self, filename: str, position: int, mask: int = 0x10) -> None:
        """Flip bits of one byte of a file, in place (the open log's fds see it)."""
        with open(self.path(filename), "r+b") as f:
            f.seek(position)
            byte = f.read(1)
            f.seek(position)
            f.write(bytes([byte[0] ^ mask]))

    def test_records_before_a_damaged_one_served(self) -> None:
        """A read stops before the first record failing its checksum; the records before it are served."""
        log = self.open()
        offsets = self.fill(log, 10)
        self.flip("00000000000000000000.log", offsets[3] + 25)
        data, following = log.read(0, 1000)
        self.assertEqual(following, offsets[3])
        self.assertEqual([r.data for r in iter_records(data, 0)], [body(n) for n in range(3)])

    def test_damaged_record_moved_past(self) -> None:
        """
        A read at a record failing its checksum (data, or the checksum
        itself) raises DamagedRecord, an OffsetOutOfRange whose nearest
        is the next record; logged once per offset.
        """
        log = self.open()
        offsets = self.fill(log, 10)
        self.flip("00000000000000000000.log", offsets[3] + 25)
        self.flip("00000000000000000000.log", offsets[6] + 5)
        with capturedLogs() as events:
            error = self.assertRaises(DamagedRecord, log.read, offsets[3], 1000)
            self.assertRaises(DamagedRecord, log.read, offsets[3], 50)
        self.assertIsInstance(error, OffsetOutOfRange)
        self.assertEqual(error.nearest, offsets[4])
        self.assertEqual(error.problem, "checksum mismatch")
        self.assertEqual(len(events), 1)
        self.assertIn("checksum mismatch in the record at offset 120", formatEvent(events[0]))
        self.assertIn("not served, reads there move to 160", formatEvent(events[0]))
        self.assertEqual(
            [d for _, d in self.read_all(log)],
            [body(n) for n in range(10) if n not in (3, 6)],
        )

    def test_damaged_length_moved_to_next_indexed(self) -> None:
        """
        A record whose length was damaged (the records after it no longer
        lead to the next indexed one) is moved past to the next indexed
        record; one that claims more than a read allows is not taken for
        a large record.
        """
        log = self.open(index_interval=100)
        offsets = self.fill(log, 10)
        self.assertEqual(list(log._segments[0].positions), [0, 120, 240, 360])
        self.flip("00000000000000000000.log", offsets[1] + 3, 0x04)  # length 20 -> 16
        self.flip("00000000000000000000.log", offsets[7] + 1, 0x01)  # length 20 -> 65556
        self.assertEqual(self.assertRaises(DamagedRecord, log.read, offsets[1], 1000).nearest, 120)
        error = self.assertRaises(DamagedRecord, log.read, offsets[7], 50)
        self.assertEqual((error.nearest, error.problem), (360, "record cut short (data length 65556)"))
        self.assertEqual(
            [d for _, d in self.read_all(log)],
            [body(n) for n in range(10) if n not in (1, 2, 7, 8)],
        )

    def test_damaged_last_record_moves_to_the_end(self) -> None:
        """The last record damaged: a read there moves to the end of the log."""
        log = self.open()
        offsets = self.fill(log, 3)
        self.flip("00000000000000000000.log", offsets[2] + 30)
        self.assertEqual(self.assertRaises(DamagedRecord, log.read, offsets[2], 1000).nearest, log.next_offset)
        self.assertEqual(log.read(log.next_offset, 1000), (b"", log.next_offset))

    def test_damaged_sealed_segment_read(self) -> None:
        """A record of a sealed segment damaged while open is not served either; appends go on."""
        log = self.open(segment_bytes=200)
        offsets = self.fill(log, 12)
        self.flip("00000000000000000200.log", 45)
        self.fill(log, 1, start=12)
        self.assertEqual(self.assertRaises(DamagedRecord, log.read, 240, 1000).nearest, 280)
        self.assertEqual(log.read(200, 1000)[1], 240)
        self.assertEqual(len(self.read_all(log)), 12)
        self.assertEqual(offsets[6], 240)

    def test_large_record_still_too_large(self) -> None:
        """A whole record larger than the read is RecordTooLarge, as before."""
        log = self.open(index_interval=100)
        log.append(msg_id(1), 0, b"x" * 80, 1)
        self.assertEqual(self.assertRaises(RecordTooLarge, log.read, 0, 50).size, 100)


class SyncTests(LogTestCase):
    """The fsync policy, shared with the disk backend."""

    def counted(self, log: PartitionLog) -> List[int]:
        synced: List[int] = []

        def fsync(fd: int) -> None:
            synced.append(fd)
            os.fsync(fd)

        log.os_fsync = fsync
        return synced

    def test_sync_every_one(self) -> None:
        """
        With sync_every=1 each append's segment is fsynced before it
        returns (one fsync per batch); its index entries are written, and
        synced at close.
        """
        log = self.open(sync_every=1, index_interval=10**6)
        synced = self.counted(log)
        segment_fd = log._write_fd
        log.append(msg_id(1), 0, b"a", 1)
        self.assertEqual(synced, [segment_fd])
        self.assertEqual(self.read_file("00000000000000000000.index"), INDEX_ENTRY.pack(0, 1))
        log.append(msg_id(2), 0, b"b", 2)
        log.append_many([(msg_id(3), 0, b"c"), (msg_id(4), 0, b"d")], 3)
        self.assertEqual(synced, [segment_fd] * 3)
        self.assertEqual(list(self.clock.getDelayedCalls()), [])
        index_fd = log._index_fd
        log.close()
        self.assertEqual(synced, [segment_fd] * 4 + [index_fd])

    def test_failed_sync_fails_the_append(self) -> None:
        """
        With sync_every=1 a failed fsync of the segment is a failed
        append: OSError, logged, the record cut off, the log unchanged;
        the next append (its fsync working) is stored where it would have been.
        """
        log = self.open(sync_every=1)
        self.fill(log, 2)

        def failing(fd: int) -> None:
            raise OSError(errno.EIO, "Input/output error")

        log.os_fsync = failing
        with capturedLogs() as events:
            self.assertRaises(OSError, log.append, msg_id(2), 0, body(2), 2000)
            self.assertRaises(OSError, log.append_many, [(msg_id(3), 0, body(3))], 3000)
        self.assertIn("failed to sync - [Errno 5] Input/output error", formatEvent(events[0]))
        self.assertEqual(log.next_offset, 80)
        self.assertEqual(len(self.read_file("00000000000000000000.log")), 80)
        log.os_fsync = os.fsync
        self.assertEqual(log.append(msg_id(4), 0, body(4), 4000), 80)
        self.assertEqual([d for _, d in self.read_all(log)], [body(0), body(1), body(4)])

    def test_index_synced_at_roll(self) -> None:
        """A sealed segment's index is fsynced with it, whatever the periodic syncs left."""
        log = self.open(sync_every=1, segment_bytes=60, index_interval=10**6)
        synced = self.counted(log)
        segment_fd, index_fd = log._write_fd, log._index_fd
        log.append(msg_id(1), 0, b"a" * 30, 1)
        self.assertEqual(synced, [segment_fd])
        log.append(msg_id(2), 0, b"b" * 30, 2)
        self.assertEqual(synced[1:3], [segment_fd, index_fd])

    def test_sync_every_n(self) -> None:
        """With sync_every=N the records are fsynced once N were appended."""
        log = self.open(sync_every=3, index_interval=10**6)
        synced = self.counted(log)
        log.append(msg_id(1), 0, b"a", 1)
        log.append(msg_id(2), 0, b"b", 2)
        self.assertEqual(synced, [])
        log.append(msg_id(3), 0, b"c", 3)
        self.assertEqual(synced, [log._write_fd])
        self.assertEqual(self.read_file("00000000000000000000.index"), INDEX_ENTRY.pack(0, 1))

    def test_sync_timeout(self) -> None:
        """Fewer than sync_every records are fsynced sync_timeout seconds later."""
        log = self.open(sync_every=100, sync_timeout=2.0)
        synced = self.counted(log)
        log.append(msg_id(1), 0, b"a", 1)
        self.clock.advance(1.9)
        self.assertEqual(synced, [])
        self.clock.advance(0.1)
        self.assertEqual(synced, [log._write_fd])
        self.assertEqual(list(self.clock.getDelayedCalls()), [])

    def test_sync_worker(self) -> None:
        """Periodic syncs run on the disk backend's sync thread, not inline."""
        worker = SyncWorker(write_file_atomically)
        log = self.open(sync_every=2, sync_worker=worker)
        synced = self.counted(log)
        log.append(msg_id(1), 0, b"a", 1)
        log.append(msg_id(2), 0, b"b", 2)
        worker.wait(log)
        self.assertEqual(synced, [])
        self.assertEqual(self.read_file("00000000000000000000.index"), INDEX_ENTRY.pack(0, 1))


class TimeIndexTests(LogTestCase):
    """Rewind by publish time through the sparse index."""

    def test_offset_for_timestamp(self) -> None:
        """The offset found precedes every record at or after the time, by less than one index interval."""
        log = self.open(segment_bytes=400, index_interval=100)
        offsets = self.fill(log, 40)  # record n at time n * 1000
        for target in (0, 1, 5000, 12500, 20000, 39000):
            found = log.offset_for_timestamp(target)
            first_wanted = offsets[(target + 999) // 1000]
            self.assertLessEqual(found, first_wanted)
            self.assertLess(first_wanted - found, 100 + 40)
        self.assertEqual(log.offset_for_timestamp(39001), log.next_offset)

    def test_no_file_read(self) -> None:
        """Looking a time up reads no segment file."""
        log = self.open(segment_bytes=400, index_interval=100)
        offsets = self.fill(log, 40)
        log.close()
        again = self.open(segment_bytes=400, index_interval=100)

        def no_reads(*args: Any) -> bytes:
            raise AssertionError("a segment was read")

        self.patch(os, "pread", no_reads)
        self.patch(log_module.os, "pread", no_reads)
        found = again.offset_for_timestamp(25000)
        self.assertLessEqual(found, offsets[25])
        self.assertGreater(found, offsets[21])

    def test_out_of_order_times(self) -> None:
        """A record stamped earlier than the one before is still found (times are kept as running maxima)."""
        log = self.open(index_interval=1)
        a = log.append(msg_id(1), 0, b"a", 5000)
        log.append(msg_id(2), 0, b"b", 3000)
        self.assertEqual(log.offset_for_timestamp(3000), a)


class RetentionTests(LogTestCase):
    """Whole segments deleted, oldest first, by bytes and by age."""

    def topic(self, **kwargs: Any) -> TopicLog:
        kwargs.setdefault("segment_bytes", 400)
        kwargs.setdefault("index_interval", 100)
        topic = TopicLog(self.directory, "t", clock=self.clock, **kwargs)
        self.addCleanup(topic.close)
        return topic

    def test_bytes_limit_plus_one_segment(self) -> None:
        """A topic never holds more than its byte limit plus one segment, and keeps at least the limit."""
        topic = self.topic(partitions=1, retention_bytes=2000)
        for number in range(400):
            topic.append(msg_id(number), 0, body(number), number)
            self.assertLessEqual(topic.retained_bytes, 2000 + 400)
        self.assertGreaterEqual(topic.retained_bytes, 2000)
        (stats,) = topic.stats()
        self.assertEqual(stats.next_offset, 400 * 40)
        self.assertEqual(stats.first_offset, stats.next_offset - stats.bytes)
        names = os.listdir(os.path.join(self.directory, "t-0"))
        self.assertEqual(len(names), 2 * stats.segments)

    def test_bytes_over_partitions(self) -> None:
        """The byte limit holds for the topic as a whole across partitions."""
        topic = self.topic(partitions=3, retention_bytes=3000, segment_bytes=10**6)
        for number in range(600):
            topic.append_many([(msg_id(number), 0, body(number))], number)
            self.assertLessEqual(topic.retained_bytes, 3000 + 1000)
        self.assertEqual([s.next_offset for s in topic.stats()], [8000, 8000, 8000])

    def test_bytes_single_partition_log(self) -> None:
        """A PartitionLog with its own byte limit deletes its oldest segments."""
        log = self.open(segment_bytes=400, retention_bytes=1000)
        with capturedLogs() as events:
            self.fill(log, 100)
        self.assertLessEqual(log.retained_bytes, 1400)
        self.assertEqual(log.first_offset, log.segments()[0].base)
        self.assertIn("retention bytes 1000 exceeded", formatEvent(events[0]))
        self.assertRaises(OffsetOutOfRange, log.read, 0, 100)

    def test_age(self) -> None:
        """Segments whose newest record is older than the age are deleted by the injected clock."""
        topic = self.topic(partitions=1, retention_age=100.0, retention_check_interval=10.0)
        (log,) = topic.partitions
        for second in range(30):  # 10 records per segment, one per second
            log.append(msg_id(second), 0, body(second), second * 10**9)
            self.clock.advance(1)
        self.assertEqual(len(log.segments()), 3)
        self.clock.advance(100 - 30 + 10)  # now 110: the first segment (0-9 s) is out
        self.assertEqual([s.base for s in log.segments()], [400, 800])
        self.clock.advance(15)  # now 125: only the last segment's records (20-29 s) are left
        self.assertEqual([s.base for s in log.segments()], [800])
        self.clock.advance(15)  # now 140: every record is older than 100 s
        self.assertEqual([(s.base, s.bytes) for s in log.segments()], [(1200, 0)])
        self.assertEqual(log.read(log.first_offset, 100), (b"", 1200))
        self.assertEqual(log.append(msg_id(99), 0, b"new", 140 * 10**9), 1200)

    def test_age_at_open(self) -> None:
        """Opening a topic deletes what expired while it was closed."""
        topic = self.topic(partitions=1)
        for second in range(25):
            topic.append(msg_id(second), 0, body(second), second * 10**9)
        topic.close()
        self.clock.advance(122)  # records up to 21 s are out; 22-24 s (the last segment) stay
        again = self.topic(partitions=1, retention_age=100.0)
        self.assertEqual(again.stats()[0].first_offset, 800)

    def test_round_robin(self) -> None:
        """Appends go to the partitions in turn, in directories TOPIC-N."""
        topic = self.topic(partitions=2)
        self.assertEqual(topic.append(msg_id(1), 0, b"a", 1), (0, 0))
        self.assertEqual(topic.append(msg_id(2), 0, b"b", 1), (1, 0))
        self.assertEqual(topic.append_many([(msg_id(3), 0, b"c")], 1), (0, 21))
        self.assertEqual(sorted(os.listdir(self.directory)), ["t-0", "t-1"])


_CHILD = r"""
import os, struct, sys
from twisted.internet.task import Clock
from txnsq.storage.log import PartitionLog
log = PartitionLog(sys.argv[1], Clock(), segment_bytes=4096, sync_every=1)
number = 0
while True:
    offset = log.append_many(
        [(struct.pack(">q", number + i), 0, b"%08d" % (number + i) * 4) for i in range(3)], number
    )
    sys.stdout.write("%d %d\n" % (number, offset))
    sys.stdout.flush()
    number += 3
"""


class DurabilityTests(LogTestCase):
    """Acknowledged records survive the process being killed."""

    def test_sigkill(self) -> None:
        """Every batch a child acknowledged (sync_every=1) is there after SIGKILL, whole."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(sys.path)
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, self.directory],
            stdout=subprocess.PIPE,
            env=env,
        )
        # The first record of each acknowledged batch of three.
        acknowledged: Dict[int, int] = {}
        assert child.stdout is not None
        try:
            while len(acknowledged) < 400:  # past several segments
                line = child.stdout.readline()
                self.assertTrue(line, "the child died")
                number, offset = map(int, line.split())
                acknowledged[number] = offset
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
            child.stdout.close()
        log = self.open(segment_bytes=4096)
        records = {offset: data for offset, data in self.read_all(log, max_size=4096)}
        offsets = sorted(records)
        for number, offset in acknowledged.items():
            at = offsets.index(offset)
            for i in range(3):
                self.assertEqual(records[offsets[at + i]], b"%08d" % (number + i) * 4)
        self.assertGreaterEqual(len(records), 3 * len(acknowledged))
