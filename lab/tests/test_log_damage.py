"""
Tests for :mod:`lab.log_damage`: each damage done to a real
:class:`txnsq.storage.log.PartitionLog`'s files, closed, and what the
next open does compared with what the module expects.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import tempfile
from typing import Any, Dict, List, Tuple

from twisted.internet.task import Clock
from twisted.logger import globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase

from lab.log_damage import Damage, Expectation, do_damage
from txnsq.storage.log import OffsetOutOfRange, PartitionLog
from txnsq.storage.log_format import iter_records

TOPIC = "t"
SEGMENT = 4000


class _History:
    def __init__(self) -> None:
        self.events: List[Tuple[str, str, Dict[str, Any]]] = []

    def event(self, kind: str, what: str, **fields: Any) -> None:
        self.events.append((kind, what, fields))


class _Context:
    def __init__(self) -> None:
        self.history = _History()
        self.rng = random.Random(1)


class _Node:
    def __init__(self, data_path: str) -> None:
        self.data_path = data_path


def _read(directory: str) -> Tuple[Dict[int, bytes], List[Tuple[int, int]]]:
    """Every record (offset -> record bytes) of a partition opened again, and the moves."""
    log = PartitionLog(directory, Clock(), segment_bytes=SEGMENT, sync_every=1)
    found: Dict[int, bytes] = {}
    moves = []
    offset = 0
    try:
        while True:
            try:
                data, following = log.read(offset, 100000)
            except OffsetOutOfRange as moved:
                moves.append((offset, moved.nearest))
                offset = moved.nearest
                continue
            if not data:
                return found, moves
            for record in iter_records(data, offset):
                found[record.offset] = bytes(record.data) + bytes(record.msg_id)
            offset = following
    finally:
        log.close()


class DamageTests(SynchronousTestCase):
    """Each damage's expectation is what a PartitionLog does at its next open."""

    def setUp(self) -> None:
        self.data = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.data)
        self.directory = os.path.join(self.data, "retained", "%s-0" % TOPIC)
        log = PartitionLog(self.directory, Clock(), segment_bytes=SEGMENT, sync_every=1)
        self.records: Dict[int, List[Tuple[int, int]]] = {0: []}
        for n in range(60):
            data = b"record %04d " % n + b"x" * 88
            offset = log.append(b"%08d" % n, 0, data, 10**18 + n)
            self.records[0].append((offset, 20 + len(data)))
        log.close()
        self.before, _ = _read(self.directory)
        self.lines: List[str] = []

        def observe(event: Dict[str, Any]) -> None:
            from twisted.logger import formatEvent

            self.lines.append(formatEvent(event))

        observer: Any = observe  # an ILogObserver: a callable taking the event
        globalLogPublisher.addObserver(observer)
        self.addCleanup(globalLogPublisher.removeObserver, observer)

    def damage(self, damage: Damage) -> Tuple[Expectation, Dict[int, bytes], List[Tuple[int, int]]]:
        context = _Context()
        expect = Expectation(context.history)
        node: Any = _Node(self.data)  # do_damage only reads its data_path
        do_damage(context, node, TOPIC, self.records, damage, expect)
        after, moves = _read(self.directory)
        text = "\n".join(self.lines)
        for pattern in expect.log_lines:
            self.assertTrue(re.search(pattern, text), "no %r in %s" % (pattern, text))
        for path, size in expect.files:
            self.assertTrue(os.path.exists(path), path)
            if size is not None:
                self.assertEqual(os.path.getsize(path), size)
        for offset, record in self.before.items():
            cut = any(lo <= offset < hi for _, lo, hi, _ in expect.cut)
            altered = any(lo <= offset < hi for _, lo, hi, _ in expect.altered)
            if cut:
                self.assertNotIn(offset, after)
            elif altered:
                self.assertNotEqual(after[offset], record)
                self.assertEqual(after[offset][:-8], record[:-8])
            else:
                self.assertEqual(after.get(offset), record)
        return expect, after, moves

    def test_sealed_data(self) -> None:
        """A data byte flipped in a sealed segment sets it aside whole; reads move past it."""
        expect, after, moves = self.damage(Damage(0, "segment", "sealed", "data"))
        self.assertEqual(len(expect.cut), 1)
        self.assertEqual(expect.skips, [(0, 0, expect.cut[0][2])])
        self.assertEqual(moves, [(0, expect.cut[0][2])])

    def test_last_data(self) -> None:
        """A data byte flipped in the last segment cuts it at that record."""
        expect, after, _ = self.damage(Damage(0, "segment", "last", "data"))
        self.assertEqual(len(expect.cut), 1)
        self.assertEqual(max(after), max(o for o in after if o < expect.cut[0][1]))

    def test_last_tail(self) -> None:
        """A cut tail of the last segment loses the record it cut into."""
        expect, after, _ = self.damage(Damage(0, "segment", "last", "tail", tail=30))
        partition, lo, hi, _ = expect.cut[0]
        self.assertEqual(hi - lo, 120)

    def test_sealed_id(self) -> None:
        """A message-id byte flipped in a sealed segment comes back altered, its data the same, and is sealed again."""
        expect, _, _ = self.damage(Damage(0, "segment", "sealed", "id"))
        self.assertEqual((len(expect.altered), expect.cut), (1, []))
        self.assertEqual(len(expect.log_lines), 1)

    def test_last_id(self) -> None:
        """A message-id byte flipped in the last segment comes back altered, without a word in the log."""
        expect, _, _ = self.damage(Damage(0, "segment", "last", "id"))
        self.assertEqual((len(expect.altered), expect.cut, expect.log_lines), (1, [], []))

    def test_sealed_index(self) -> None:
        """A sealed index with a flipped entry is rebuilt: every record reads back the same."""
        expect, _, _ = self.damage(Damage(0, "index", "sealed", "entry"))
        self.assertEqual((expect.cut, expect.altered, len(expect.log_lines)), ([], [], 1))

    def test_last_index_tail(self) -> None:
        """The last (sealed at close) index with a cut tail is rebuilt."""
        expect, _, _ = self.damage(Damage(0, "index", "last", "tail", tail=5))
        self.assertEqual((expect.cut, expect.altered, len(expect.log_lines)), ([], [], 1))
