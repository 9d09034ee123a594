# -*- test-case-name: lab.tests.test_log_damage -*-
"""
Damage to a stopped nsqd's retained-log files, and what nsqd documents it
does about each at its next start (docs/storage.md, "Recovery"): which
records go (``cut``: a sealed segment set aside whole, the last one cut
at the first bad record), which come back with other bytes
(``altered``: a message id or flag is not covered by the record's
checksum), the log lines, the ``.bad`` files and the reads moved past a
segment set aside.
"""

from __future__ import annotations

import glob
import os
import re
import time
from typing import Any, Dict, List, Optional, Tuple

from lab.disk_nemeses import disk_faults
from lab.errors import LabError
from lab.world import NsqdNode

__all__ = ["Damage", "Expectation", "Segment", "do_damage", "segments_of"]

#: A record's header: data length 4, checksum 4, message id 8, flag 4.
HEADER_SIZE = 20
#: An index entry: position 4, timestamp 8.
ENTRY_SIZE = 12


class Segment:
    """One segment file of a partition, as it lies on disk while nsqd is stopped."""

    def __init__(self, partition: int, path: str) -> None:
        self.partition = partition
        self.path = path
        self.base = int(os.path.basename(path)[:-4])
        self.size = os.path.getsize(path)
        self.index = path[:-4] + ".index"

    @property
    def end(self) -> int:
        """The offset after its last byte."""
        return self.base + self.size


def segments_of(data_path: str, topic: str, partition: int) -> List[Segment]:
    """The partition's segment files, oldest first (``.bad`` files left out)."""
    folder = os.path.join(data_path, "retained", "%s-%d" % (topic, partition))
    paths = sorted(glob.glob(os.path.join(folder, "[0-9]" * 20 + ".log")))
    return [Segment(partition, p) for p in paths]


class Damage:
    """
    One damage to a file of a stopped nsqd and what nsqd documents it
    does about it.

    :param partition: whose files.
    :param target: ``segment`` or ``index``.
    :param which: ``sealed`` (the first segment, which must not be the
        last) or ``last``.
    :param how: ``data`` (flip a byte in the data of the middle record),
        ``id`` (flip a byte of its message id), ``tail`` (cut ``tail``
        bytes off the file's end), ``entry`` (flip the first byte of the
        index's last entry, its position's top byte).
    """

    def __init__(self, partition: int, target: str, which: str, how: str, tail: int = 0) -> None:
        self.partition = partition
        self.target = target
        self.which = which
        self.how = how
        self.tail = tail

    def __repr__(self) -> str:
        return "p%d %s %s %s%s" % (self.partition, self.which, self.target, self.how,
                                   " %d" % self.tail if self.tail else "")


class Expectation:
    """What must follow from the damage done (docs/storage.md, Recovery)."""

    def __init__(self, history: Any) -> None:
        self.history = history
        self.cut: List[Tuple[int, int, int, float]] = []  # (partition, lo, hi, when)
        self.altered: List[Tuple[int, int, int, float]] = []
        self.log_lines: List[str] = []  # regular expressions in nsqd's log
        self.files: List[Tuple[str, Optional[int]]] = []  # paths that must exist (with size)
        self.skips: List[Tuple[int, int, int]] = []  # (partition, from, to) reads must be moved

    def declare(self, kind: str, partition: int, lo: int, hi: int, why: str) -> None:
        """Records of offsets ``lo`` to ``hi`` are expected gone (``cut``) or other bytes (``altered``)."""
        now = time.time()
        (self.cut if kind == "cut" else self.altered).append((partition, lo, hi, now))
        self.history.event("damage", kind, partition=partition, lo=lo, hi=hi, why=why)


def do_damage(context: Any, node: NsqdNode, topic: str, records: Dict[int, List[Tuple[int, int]]],
              damage: Damage, expect: Expectation) -> None:
    """
    Do ``damage`` to ``node``'s files of ``topic`` (nsqd stopped): on the
    middle record (of ``records``, ``(offset, size)`` by partition, as a
    read pass found them) of the segment it names.  Records it in the
    history, and what it must cause in ``expect``.

    :raises LabError: there is no such segment, record or index entry.
    """
    faults = disk_faults()
    segments = segments_of(node.data_path, topic, damage.partition)
    if damage.which == "sealed":
        if len(segments) < 2:
            raise LabError("%r: partition has %d segment(s), a sealed one is needed" % (damage, len(segments)))
        segment = segments[0]
    else:
        segment = segments[-1]
    inside = [(o, s) for o, s in records.get(damage.partition, []) if segment.base <= o < segment.end]
    if not inside:
        raise LabError("%r: no record read in %s" % (damage, segment.path))
    offset, size = inside[len(inside) // 2]
    p = damage.partition
    what = repr(damage)
    if damage.target == "index":
        path = segment.index
        sealed = _has_seal(path)
        if damage.how == "tail":
            faults.truncate_tail(path, damage.tail)
            where = os.path.getsize(path)
        else:
            entries = os.path.getsize(path) // ENTRY_SIZE
            # The last entry (before the seal's three, when sealed).
            entry = entries - (4 if sealed else 1)
            if entry < 0:
                raise LabError("%r: %s has no entry" % (damage, path))
            where = faults.flip_byte(path, entry * ENTRY_SIZE, context.rng)
        if sealed:
            # Any change to a sealed index fails its decoding (size, seal
            # or checksum); it is rebuilt from the records.  An unsealed
            # one is checked against the records and rebuilt silently.
            expect.log_lines.append(r"%s is damaged \(" % re.escape(os.path.basename(path)))
        context.history.event("info", "damage-done", file=path, damage=what, at=where)
        return
    name = os.path.basename(segment.path)
    if damage.how == "tail":
        faults.truncate_tail(segment.path, damage.tail)
        where = segment.end - damage.tail
        offset, size = [(o, s) for o, s in inside if o < where][-1]
    else:
        # A record: length 4, checksum 4, message id 8, flag 4, data.
        within = HEADER_SIZE + (size - HEADER_SIZE) // 2 if damage.how == "data" else 8 + 3
        where = segment.base + faults.flip_byte(segment.path, offset - segment.base + within, context.rng)
    context.history.event("info", "damage-done", file=segment.path, damage=what, at=where, record=offset)
    if damage.how == "id":
        # The checksum covers the data only (MetaQ's record layout): the
        # record is served with the other id.  A sealed segment's CRC no
        # longer matches while every record passes its checksum, so
        # recovery logs the alteration as an error and serves the
        # records as they are (docs/storage.md, Recovery).
        expect.declare("altered", p, offset, offset + size, what)
        if damage.which == "sealed":
            expect.log_lines.append(
                r"%s fails its seal's CRC32 though every record passes its checksum" % re.escape(name)
            )
    elif damage.which == "sealed":
        # A sealed segment that fails is set aside whole; reads skip it.
        expect.declare("cut", p, segment.base, segment.end, what)
        expect.log_lines.append(r"checksum mismatch at offset %d in \S*%s; saving the segment" % (offset, re.escape(name)))
        expect.files.append((segment.path + ".bad", segment.size))
        expect.skips.append((p, segment.base, segment.end))
    else:
        # The last segment is cut at the first bad record; the bytes cut
        # are saved beside it.
        expect.declare("cut", p, offset, segment.end, what)
        expect.log_lines.append(r"at offset %d in \S*%s; truncating the segment there" % (offset, re.escape(name)))
        left = segment.size - (damage.tail if damage.how == "tail" else 0)
        expect.files.append(("%s.%d.bad" % (segment.path, offset - segment.base), left - (offset - segment.base)))


def _has_seal(index_path: str) -> bool:
    """Whether an index file ends with a seal (its last entry's position is 0xffffffff)."""
    with open(index_path, "rb") as f:
        data = f.read()
    return len(data) >= 3 * ENTRY_SIZE and len(data) % ENTRY_SIZE == 0 and data[-ENTRY_SIZE:-8] == b"\xff\xff\xff\xff"
