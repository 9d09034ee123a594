"""Tests for txnsq.tools.file_logger."""

from __future__ import annotations

import gzip
import os
import time
from typing import List

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from txnsq.tools.file_logger import FileLogger, FileLoggerSettings
from txnsq.tools.filename import compute_filename_format

START = time.mktime((2024, 3, 5, 14, 0, 0, 0, 0, -1))


class FakeMessage:
    """A message that records how it was answered."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.is_async = False
        self.finished = 0

    def enable_async(self) -> None:
        self.is_async = True

    def finish(self) -> None:
        self.finished += 1


class FileLoggerTests(SynchronousTestCase):
    """Writing, batching, rotation, gzip and moving files."""

    def setUp(self) -> None:
        base = self.mktemp()
        self.out = os.path.join(base, "out")
        self.work = os.path.join(base, "work")
        os.makedirs(self.out)
        self.clock = Clock()
        self.clock.advance(START)
        self.starved = False

    def make(self, **kwargs: object) -> FileLogger:
        settings = FileLoggerSettings(output_dir=self.out, work_dir=self.out)
        for name, value in kwargs.items():
            setattr(settings, name, value)
        template = compute_filename_format(
            "<TOPIC>.<HOST><REV>.<DATETIME>.log",
            "events",
            gzip=settings.gzip,
            rotate_size=settings.rotate_size,
            rotate_interval=settings.rotate_interval,
            work_dir=settings.work_dir,
            output_dir=settings.output_dir,
            hostname="host",
            pid=1,
        )
        logger = FileLogger("events", settings, template, self.clock, lambda: self.starved)
        logger.start()
        return logger

    def send(self, logger: FileLogger, *bodies: bytes) -> List[FakeMessage]:
        messages = [FakeMessage(body) for body in bodies]
        for message in messages:
            logger.handle(message)
        return messages

    def read_all(self, directory: str) -> bytes:
        data = b""
        for name in sorted(os.listdir(directory)):
            with open(os.path.join(directory, name), "rb") as handle:
                raw = handle.read()
            data += gzip.decompress(raw) if name.endswith(".gz") else raw
        return data

    def test_write_then_finish_on_sync_interval(self) -> None:
        """
        Messages are written at once but FINished only when the sync timer
        syncs them (the first, which opened the file, is synced at once).
        """
        logger = self.make(sync_interval=30.0)
        messages = self.send(logger, b"a", b"b", b"c")
        self.assertTrue(all(m.is_async for m in messages))
        self.assertEqual([m.finished for m in messages], [1, 0, 0])
        self.assertEqual(logger.pending, 2)
        self.clock.advance(30)
        self.assertEqual([m.finished for m in messages], [1, 1, 1])
        self.assertEqual(logger.pending, 0)
        logger.close()
        self.assertEqual(os.listdir(self.out), ["events.host.2024-03-05_14.log"])
        self.assertEqual(self.read_all(self.out), b"a\nb\nc\n")

    def test_full_batch_synced(self) -> None:
        """A batch of --max-in-flight messages is synced and FINished at once."""
        logger = self.make(max_in_flight=3)
        self.send(logger, b"opens the file")
        first = self.send(logger, b"1", b"2")
        self.assertEqual([m.finished for m in first], [0, 0])
        third = self.send(logger, b"3")
        self.assertEqual([m.finished for m in first + third], [1, 1, 1])

    def test_starved_consumer_synced(self) -> None:
        """When the consumer is starved the batch is synced after the next message."""
        logger = self.make()
        self.starved = True
        (message,) = self.send(logger, b"x")
        self.assertEqual(message.finished, 1)

    def test_rotate_size(self) -> None:
        """A file grown past --rotate-size is closed and the next message opens the next revision."""
        logger = self.make(rotate_size=5)
        self.send(logger, b"abc", b"def", b"ghi")
        logger.close()
        self.assertEqual(
            sorted(os.listdir(self.out)),
            [
                "events.host-000000.2024-03-05_14.log",
                "events.host-000001.2024-03-05_14.log",
            ],
        )
        self.assertEqual(self.read_all(self.out), b"abc\ndef\nghi\n")

    def test_rotation_finishes_previous_file_messages(self) -> None:
        """Rotation syncs, so the messages of the closed file are FINished."""
        logger = self.make(rotate_size=1)
        first, second = self.send(logger, b"abc", b"def")
        self.assertEqual((first.finished, second.finished), (1, 1))

    def test_rotate_interval(self) -> None:
        """After --rotate-interval the sync timer opens the next file."""
        logger = self.make(rotate_interval=60.0, sync_interval=30.0)
        self.send(logger, b"a")
        self.clock.advance(30)
        self.clock.advance(30)
        self.send(logger, b"b")
        self.clock.advance(1)
        self.send(logger, b"c")
        logger.close()
        names = sorted(os.listdir(self.out))
        self.assertEqual(len(names), 2, names)
        self.assertEqual(self.read_all(self.out), b"a\nb\nc\n")

    def test_datetime_change_rotates(self) -> None:
        """A new hour gives a new file name and revision 0 again."""
        logger = self.make(rotate_size=100)
        self.send(logger, b"a")
        self.clock.advance(3600)
        self.send(logger, b"b")
        logger.close()
        self.assertEqual(
            sorted(os.listdir(self.out)),
            [
                "events.host-000000.2024-03-05_14.log",
                "events.host-000000.2024-03-05_15.log",
            ],
        )

    def test_gzip_members_per_sync(self) -> None:
        """With gzip each sync ends a gzip member; the file decompresses to every message."""
        logger = self.make(gzip=True, gzip_level=9, max_in_flight=2)
        # Synced: after "one" (the file was opened), "two three", at close;
        # the member begun by the last sync is closed empty, as in Go.
        self.send(logger, b"one", b"two", b"three", b"four")
        logger.close()
        (name,) = os.listdir(self.out)
        self.assertEqual(name, "events.host-000000.2024-03-05_14.log.gz")
        with open(os.path.join(self.out, name), "rb") as handle:
            raw = handle.read()
        self.assertEqual(raw.count(b"\x1f\x8b\x08"), 4)
        self.assertEqual(gzip.decompress(raw), b"one\ntwo\nthree\nfour\n")

    def test_gzip_size_counts_uncompressed_bytes(self) -> None:
        """--rotate-size counts the bytes written before compression, as Go does."""
        logger = self.make(gzip=True, rotate_size=10)
        self.send(logger, b"0123456789", b"x")
        logger.close()
        self.assertEqual(len(os.listdir(self.out)), 2)

    def test_work_dir_moved_on_close(self) -> None:
        """Files are written in --work-dir and moved to --output-dir when closed."""
        logger = self.make(work_dir=self.work, rotate_size=3)
        self.send(logger, b"abcd")
        self.assertEqual(len(os.listdir(self.work)), 1)
        self.assertEqual(os.listdir(self.out), [])
        self.send(logger, b"efgh")
        self.assertEqual(len(os.listdir(self.out)), 1)
        logger.close()
        self.assertEqual(os.listdir(self.work), [])
        self.assertEqual(self.read_all(self.out), b"abcd\nefgh\n")
        self.assertEqual(len(logger.files_written), 2)

    def test_existing_output_file_skipped(self) -> None:
        """A revision already present in the output dir is skipped when opening."""
        taken = os.path.join(self.out, "events.host-000000.2024-03-05_14.log")
        with open(taken, "wb") as handle:
            handle.write(b"old\n")
        logger = self.make(work_dir=self.work)
        self.send(logger, b"new")
        logger.close()
        with open(taken, "rb") as handle:
            self.assertEqual(handle.read(), b"old\n")
        with open(os.path.join(self.out, "events.host-000001.2024-03-05_14.log"), "rb") as handle:
            self.assertEqual(handle.read(), b"new\n")

    def test_clash_at_move_bumps_revision(self) -> None:
        """A destination created meanwhile is never overwritten: the next revision is used."""
        logger = self.make(work_dir=self.work)
        self.send(logger, b"new")
        taken = os.path.join(self.out, "events.host-000000.2024-03-05_14.log")
        with open(taken, "wb") as handle:
            handle.write(b"old\n")
        logger.close()
        self.assertEqual(
            sorted(os.listdir(self.out)),
            [
                "events.host-000000.2024-03-05_14.log",
                "events.host-000001.2024-03-05_14.log",
            ],
        )
        self.assertEqual(os.listdir(self.work), [])

    def test_existing_big_file_skipped(self) -> None:
        """An existing working file already past --rotate-size is not appended to."""
        big = os.path.join(self.out, "events.host-000000.2024-03-05_14.log")
        with open(big, "wb") as handle:
            handle.write(b"x" * 20)
        logger = self.make(rotate_size=10)
        self.send(logger, b"y")
        logger.close()
        with open(os.path.join(self.out, "events.host-000001.2024-03-05_14.log"), "rb") as handle:
            self.assertEqual(handle.read(), b"y\n")

    def test_append_without_rotation(self) -> None:
        """Without gzip or interval rotation an existing file is appended to."""
        name = os.path.join(self.out, "events.host.2024-03-05_14.log")
        with open(name, "wb") as handle:
            handle.write(b"old\n")
        logger = self.make()
        self.send(logger, b"new")
        logger.close()
        with open(name, "rb") as handle:
            self.assertEqual(handle.read(), b"old\nnew\n")

    def test_empty_file_created_by_timer(self) -> None:
        """Without --skip-empty-files the sync timer opens a file even with no messages."""
        logger = self.make(sync_interval=1.0)
        self.clock.advance(1)
        logger.close()
        self.assertEqual(len(os.listdir(self.out)), 1)

    def test_skip_empty_files(self) -> None:
        """With --skip-empty-files no file is created until a message arrives."""
        logger = self.make(sync_interval=1.0, skip_empty_files=True)
        self.clock.advance(1)
        self.clock.advance(1)
        self.assertEqual(os.listdir(self.out), [])
        self.send(logger, b"a")
        logger.close()
        self.assertEqual(self.read_all(self.out), b"a\n")

    def test_reopen(self) -> None:
        """SIGHUP syncs, FINishes and closes; the next message opens a new revision."""
        logger = self.make(work_dir=self.work)
        (message,) = self.send(logger, b"a")
        logger.reopen()
        self.assertEqual(message.finished, 1)
        self.assertEqual(os.listdir(self.work), [])
        self.send(logger, b"b")
        logger.close()
        self.assertEqual(len(os.listdir(self.out)), 2)

    def test_stop_then_close(self) -> None:
        """After stop every message is FINished at once; close stops the timer and moves the file."""
        logger = self.make(work_dir=self.work)
        (first,) = self.send(logger, b"a")
        logger.stop()
        self.assertEqual(first.finished, 1)
        (second,) = self.send(logger, b"b")
        self.assertEqual(second.finished, 1)
        logger.close()
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.assertEqual(os.listdir(self.work), [])
        self.assertEqual(self.read_all(self.out), b"a\nb\n")
