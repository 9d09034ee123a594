"""
The flight log of the disk backend: what it holds is what a later
:meth:`FlightLog.recover` gives back, whatever is cut short by a crash.
"""

from __future__ import annotations

import os
from typing import List

from twisted.trial.unittest import SynchronousTestCase

from txnsq.protocol.message import encode_message
from txnsq.storage import flight_log
from txnsq.storage.flight_log import MAGIC, FlightLog, flight_file_name


def message(number: int, body: bytes = b"body") -> bytes:
    """An encoded message whose ID is made from ``number``."""
    return encode_message(1700000000 * 10**9, 1, b"%016d" % (number,), body)


def msg_id(number: int) -> bytes:
    return b"%016d" % (number,)


class FlightLogTests(SynchronousTestCase):
    """Holds and releases written, and given back by a new log on the same file."""

    def setUp(self) -> None:
        directory = self.mktemp()
        os.makedirs(directory)
        self.path = os.path.join(directory, flight_file_name("t:c"))
        self.log = self.make()

    def make(self, sync: bool = False) -> FlightLog:
        log = FlightLog(self.path, sync)
        self.addCleanup(log.close)
        return log

    def size(self) -> int:
        return os.path.getsize(self.path)

    def test_file_name(self) -> None:
        """A queue's flight log is NAME.diskqueue.flight.dat."""
        self.assertEqual(flight_file_name("t:c"), "t:c.diskqueue.flight.dat")

    def test_no_file_recovers_nothing(self) -> None:
        """Without a file nothing is held."""
        self.assertEqual(self.log.recover(), [])
        self.assertFalse(os.path.exists(self.path))

    def test_nothing_written_before_write(self) -> None:
        """Holds stay in memory until write() (the commit of a reactor turn)."""
        self.log.hold(0, message(1))
        self.assertTrue(self.log.dirty)
        self.assertEqual(self.make().recover(), [])
        self.log.write()
        self.assertFalse(self.log.dirty)
        self.assertEqual(self.make().recover(), [(0, message(1))])

    def test_held_minus_released_recovered_in_order(self) -> None:
        """A new log on the file holds what was held and not released, in holding order, with due values."""
        self.log.hold(0, message(1))
        self.log.hold(5_000, message(2))
        self.log.hold(0, message(3))
        self.log.release(msg_id(1))
        self.log.write()
        self.assertEqual(self.make().recover(), [(5_000, message(2)), (0, message(3))])

    def test_held_again_replaces(self) -> None:
        """A message held twice (REQ with a delay) is recovered once, with its last due value and bytes."""
        self.log.hold(0, message(1, b"first"))
        self.log.write()
        self.log.hold(9, message(1, b"again"))
        self.log.write()
        self.assertEqual(self.make().recover(), [(9, message(1, b"again"))])

    def test_unknown_release_writes_nothing(self) -> None:
        """Releasing an ID that is not held adds no record."""
        self.log.release(msg_id(7))
        self.assertFalse(self.log.dirty)

    def test_cut_back_when_nothing_held(self) -> None:
        """Once everything held is released the file is cut back to its magic."""
        for number in range(10):
            self.log.hold(0, message(number))
        self.log.write()
        self.assertGreater(self.size(), len(MAGIC))
        for number in range(10):
            self.log.release(msg_id(number))
        self.log.write()
        self.assertEqual(self.size(), len(MAGIC))
        self.assertEqual(self.make().recover(), [])

    def test_torn_last_record_ignored(self) -> None:
        """A record cut short by a crash mid-write is ignored; the whole ones before it count."""
        self.log.hold(0, message(1))
        self.log.hold(0, message(2))
        self.log.write()
        with open(self.path, "r+b") as f:
            f.truncate(self.size() - 3)
        self.assertEqual(self.make().recover(), [(0, message(1))])

    def test_foreign_file_set_aside(self) -> None:
        """A file without the magic is renamed .bad and nothing is recovered."""
        with open(self.path, "wb") as f:
            f.write(b"not a flight log")
        self.assertEqual(self.log.recover(), [])
        self.assertTrue(os.path.exists(self.path + ".bad"))

    def test_rewritten_when_long(self) -> None:
        """A log past COMPACT_BYTES and twice what it holds is rewritten with only what is held."""
        self.patch(flight_log, "COMPACT_BYTES", 1000)
        self.log.hold(0, message(0))
        for number in range(1, 100):
            self.log.hold(0, message(number))
            self.log.release(msg_id(number))
            self.log.write()
        self.assertLess(self.size(), 1000)
        self.assertEqual(self.make().recover(), [(0, message(0))])

    def test_release_all(self) -> None:
        """release_all (a channel emptied) leaves nothing to recover."""
        self.log.hold(0, message(1))
        self.log.write()
        self.log.release_all()
        self.log.write()
        self.assertEqual(self.make().recover(), [])

    def test_recover_then_append(self) -> None:
        """A recovered log goes on appending after what it read."""
        self.log.hold(0, message(1))
        self.log.write()
        log = self.make()
        log.recover()
        log.hold(0, message(2))
        log.release(msg_id(1))
        log.write()
        self.assertEqual(self.make().recover(), [(0, message(2))])

    def test_remove(self) -> None:
        """remove() deletes the file."""
        self.log.hold(0, message(1))
        self.log.write()
        self.log.remove()
        self.assertFalse(os.path.exists(self.path))

    def test_sync_only_for_holds(self) -> None:
        """With sync, a write holding a message is fsynced; one that only releases is not."""
        synced: List[int] = []
        self.patch(flight_log.os, "fsync", synced.append)
        log = self.make(sync=True)
        log.hold(0, message(1))
        log.hold(0, message(2))
        log.write()
        self.assertEqual(len(synced), 1)
        log.release(msg_id(1))
        log.write()
        self.assertEqual(len(synced), 1)
