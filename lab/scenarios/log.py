"""
Retained-log scenarios: one nsqd with a retained topic of two
partitions, a writer on ``c1`` (MetaQ ``put`` and V2 ``PUB``), and read
passes of the whole log by offset before, between and after the faults:
SIGKILL, power loss (with ``--sync-every=1``, and with the default
sync to document what it loses), a full disk, and damaged segment and
index files.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any, Dict, List, Optional, Tuple

from lab.checkers_log import LogResult
from lab.disk_nemeses import DiskFull, PowerLoss, StoppedDamage, on_small_tmpfs, under_power_loss
from lab.errors import LabError
from lab.log_damage import Damage, Expectation, do_damage
from lab.log_workload import LOG_TOPIC, LogWorkload, start_log_node
from lab.nemesis import Nemesis, ProcessFault
from lab.scenarios import register
from lab.scenarios.base import Scenario
from lab.world import NsqdNode, World

__all__ = ["LogCorruption", "LogDiskFull", "LogProcessFault"]

PARTITIONS = 2

#: The segment size of the damage scenarios (96 records of 500 bytes).
SEGMENT_BYTES = 48000

#: The figures a scenario that documents a loss reports without asserting.
LOSS_FIGURES = ("lost", "vanished", "unstable", "misplaced")


def _finish(result: Any, check: LogResult, documented: Tuple[str, ...] = ()) -> None:
    result.figures.update(check.as_dict())
    if check.acknowledged == 0:
        result.problems.append("nothing was acknowledged")
    result.problems.extend(check.violations(documented))


def _acked_between(workload: LogWorkload, since: float, until: float = float("inf")) -> int:
    return len(workload.writer_events("ok", since, until))


class LogProcessFault(Scenario):
    """
    The writer runs through a fault of the nsqd's process: SIGKILL and a
    restart, or a power loss (SIGKILL, unsynced writes undone, restart
    under the shim).  Read passes before the fault, after the restart
    and at the end.

    :param how: ``kill`` or ``power``.
    :param sync_every: nsqd's ``--sync-every`` (None: its default, 2500).
    :param documents_loss: report what is lost without asserting it (the
        default sync loses up to ``--sync-timeout`` of records).
    """

    workload = "log"

    def __init__(self, name: str, summary: str, nemeses: List[str], how: str, sync_every: Optional[int],
                 documents_loss: bool = False) -> None:
        self.name = name
        self.summary = summary
        self.nemeses = nemeses
        self.how = how
        self.sync_every = sync_every
        self.documents_loss = documents_loss

    def run_round(self, context: Any, result: Any) -> None:
        world: World = context.world
        history = context.history
        journal: List[str] = []

        def prepare(node: NsqdNode) -> None:
            if self.how == "power":
                journal.append(under_power_loss(world, node))

        node = start_log_node(world, PARTITIONS, self.sync_every, prepare=prepare)
        workload = LogWorkload(world, history.folder, world.host("c1"), node, PARTITIONS)
        workload.create()
        warmup, down, after = (3.0, 1.0, 3.0) if context.quick else (5.0, 2.0, 8.0)
        rate = 150.0 if context.quick else 300.0
        t0 = time.time()
        # The restart takes a few seconds too: the writer runs through it.
        workload.start_writer("w1", rate, duration=warmup + down + after + 3.0)
        context.sleep_until(t0, 1.0)
        workload.read_pass("before")
        context.sleep_until(t0, warmup)
        nemesis: Nemesis
        if self.how == "power":
            nemesis = PowerLoss(world, history, node, journal[0])
        else:
            nemesis = ProcessFault(world, history, node, "kill")
        fault_at = time.time()
        nemesis.start()
        try:
            time.sleep(down)
        finally:
            nemesis.stop()
        restarted = time.time()
        result.failover_s = round(restarted - fault_at, 2)
        workload.read_pass("after-restart")
        workload.wait_writers(60)
        workload.read_pass("final")
        check = workload.check()
        _finish(result, check, LOSS_FIGURES if self.documents_loss else ())
        after_ok = _acked_between(workload, restarted)
        result.figures["acked_after_restart"] = after_ok
        first_ok = [e["t"] for e in workload.writer_events("ok", restarted)]
        result.recover_s = round(min(first_ok) - restarted, 2) if first_ok else None
        if isinstance(nemesis, PowerLoss):
            result.figures["power_loss"] = nemesis.describe()
        if after_ok == 0:
            result.problems.append("no write was acknowledged after the restart")
        if not node.alive():
            result.problems.append("nsqd is not running at the end")
        result.passed = not result.problems


class LogDiskFull(Scenario):
    """
    nsqd's data path on a small tmpfs; while the writer runs, the tmpfs
    is filled for a few seconds, then freed.  Writes must fail with a
    clear error (nothing stored), reads go on, writes resume.
    """

    workload = "log"
    name = "log-disk-full"
    summary = "the data path (a 16 MiB tmpfs) full for 3 s: writes fail clearly, reads go on, writes resume"
    nemeses = ["disk-full"]

    def run_round(self, context: Any, result: Any) -> None:
        world: World = context.world
        history = context.history

        def prepare(node: NsqdNode) -> None:
            on_small_tmpfs(world, node.data_path, 16 * 1024 * 1024)

        node = start_log_node(world, PARTITIONS, 1, prepare=prepare)
        workload = LogWorkload(world, history.folder, world.host("c1"), node, PARTITIONS)
        workload.create()
        warmup, full, after = (3.0, 3.0, 3.0) if context.quick else (5.0, 6.0, 6.0)
        rate = 150.0 if context.quick else 300.0
        t0 = time.time()
        workload.start_writer("w1", rate, duration=warmup + full + after)
        context.sleep_until(t0, 1.0)
        workload.read_pass("before")
        context.sleep_until(t0, warmup)
        nemesis = DiskFull(world, history, node.data_path)
        filled = time.time()
        nemesis.start()
        try:
            during = workload.read_pass("while-full")
            context.sleep_until(filled, full)
        finally:
            nemesis.stop()
        freed = time.time()
        workload.wait_writers(60)
        workload.read_pass("final")
        check = workload.check()
        _finish(result, check)
        fails = workload.writer_events("fail", filled, freed)
        unknown = workload.writer_events("info", filled, freed)
        whys = sorted({str(e.get("why", ""))[:120] for e in fails})
        result.figures.update(
            acked_while_full=_acked_between(workload, filled + 0.5, freed),
            failed_while_full=len(fails),
            unknown_while_full=len(unknown),
            errors_while_full=whys[:4],
            acked_after_freed=_acked_between(workload, freed),
        )
        if not fails:
            result.problems.append("no write failed while the disk was full (the fault did not bite)")
        elif not any("No space left on device" in why for why in whys):
            result.problems.append("writes failed without naming the full disk: %s" % whys[:3])
        if not during.get("complete"):
            result.problems.append("the read pass while the disk was full did not complete: %s" % during)
        if result.figures["acked_after_freed"] == 0:
            result.problems.append("no write was acknowledged after the disk was freed")
        if not node.alive() or node.starts != 1:
            result.problems.append("nsqd did not keep running through the full disk")
        result.passed = not result.problems


# -- damaged files -----------------------------------------------------------------------


def _last_pass_records(workload: LogWorkload) -> Dict[int, List[Tuple[int, int]]]:
    """(offset, size) of each record the latest read pass found, by partition."""
    events = workload.events()
    passes = [e for e in events if e.get("type") == "read" and e.get("f") == "pass"]
    if not passes:
        raise LabError("no read pass yet")
    label = passes[-1]["pass"]
    found: Dict[int, List[Tuple[int, int]]] = {}
    for e in events:
        if e.get("type") == "read" and e.get("f") == "record" and e.get("pass") == label:
            found.setdefault(e["v"][0], []).append((e["v"][1], e["size"]))
    for records in found.values():
        records.sort()
    return found


class Stage:
    """One stop-damage-restart: how nsqd stops, the damage, the records written before."""

    def __init__(self, how: str, damages: List[Damage], write: int) -> None:
        self.how = how
        self.damages = damages
        self.write = write


class LogCorruption(Scenario):
    """
    Records written (MetaQ ``put``, both partitions), read, then stages:
    nsqd stopped (SIGTERM, or SIGKILL), its segment or index files
    damaged, restarted, the log read again.  Asserts what docs/storage.md
    (Recovery) says happens to the damaged records, that no record
    failing its checksum is served, and that every other record reads
    back identical.

    Segments are kept small (``--retention-bytes`` of two segments of
    48,000 bytes, 96 records of 500 bytes) so that each partition has a
    sealed segment and a last one.
    """

    workload = "log"

    def __init__(self, name: str, summary: str, nemeses: List[str], stages: List[Stage]) -> None:
        self.name = name
        self.summary = summary
        self.nemeses = nemeses
        self.stages = stages

    def run_round(self, context: Any, result: Any) -> None:
        world: World = context.world
        history = context.history
        # Segments are retention_bytes / partitions bytes; retention by
        # size deletes the oldest once the topic would still hold the
        # limit without it, which these rounds (268 records of 500 bytes
        # at most) stay under: 134,000 - 48,000 < 96,000.
        node = start_log_node(world, PARTITIONS, 1, extra=["--retention-bytes=%d" % (PARTITIONS * SEGMENT_BYTES),
                                                         "--retention-age=0"])
        workload = LogWorkload(world, history.folder, world.host("c1"), node, PARTITIONS)
        workload.create()
        expect = Expectation(history)
        number = 1
        for index, stage in enumerate(self.stages):
            workload.start_writer("w%d" % (index + 1), 400.0, count=stage.write, mode="put", size=480, start=number)
            number += stage.write
            workload.wait_writers(60)
            unknown = workload.writer_events("info") + workload.writer_events("fail")
            if unknown:
                raise LabError("writes before the damage did not all succeed: %s" % unknown[:3])
            workload.read_pass("before-%d" % (index + 1), max_size=600)
            records = _last_pass_records(workload)

            def damage(stage: Stage = stage, records: Dict[int, List[Tuple[int, int]]] = records) -> None:
                for one in stage.damages:
                    do_damage(context, node, LOG_TOPIC, records, one, expect)

            nemesis: Nemesis
            if stage.how == "kill":
                nemesis = _KilledDamage(world, history, node, damage, "stage %d" % (index + 1))
            else:
                nemesis = StoppedDamage(world, history, node, damage, "stage %d" % (index + 1))
            nemesis.start()
            nemesis.stop()
            workload.read_pass("after-%d" % (index + 1), max_size=600)
        workload.start_writer("w%d" % (len(self.stages) + 1), 400.0, count=40, mode="put", size=480, start=number)
        workload.wait_writers(60)
        workload.read_pass("final", max_size=600)
        check = workload.check()
        _finish(result, check)
        self._expected(workload, node, check, expect, result)
        result.passed = not result.problems

    def _expected(self, workload: LogWorkload, node: NsqdNode, check: LogResult, expect: Expectation,
                  result: Any) -> None:
        # The acknowledged records a cut must take: those at its offsets
        # acknowledged before it (later ones may reuse its offsets).
        acked_in = 0
        for e in workload.writer_events("ok"):
            if any(e.get("part") == p and lo <= e.get("off", -1) < hi and e["t"] < when
                   for p, lo, hi, when in expect.cut):
                acked_in += 1
        result.figures["expected_cut"] = acked_in
        result.figures["expected_altered"] = len(expect.altered)
        if check.cut != acked_in:
            result.problems.append("records cut: %d, expected %d (%s)" % (check.cut, acked_in, expect.cut))
        if check.cut_kept:
            result.problems.append("%d records nsqd was expected to drop still read back" % check.cut_kept)
        if check.altered != len(expect.altered):
            result.problems.append("records altered: %d, expected %d (%s)" % (
                check.altered, len(expect.altered), expect.altered))
        log = node.process.log() if node.process else ""
        for pattern in expect.log_lines:
            if not re.search(pattern, log):
                result.problems.append("no log line matching %r" % pattern)
        for path, size in expect.files:
            if not os.path.exists(path):
                result.problems.append("no %s" % path)
            elif size is not None and os.path.getsize(path) != size:
                result.problems.append("%s holds %d bytes, expected %d" % (path, os.path.getsize(path), size))
        for partition, lo, hi in expect.skips:
            if not any(s[0] == partition and s[1] <= lo and s[2] >= hi for s in check.skips):
                result.problems.append("no read of p%d moved from %d past %d" % (partition, lo, hi))
        if "deleted segment" in log:
            result.problems.append("retention deleted a segment: the round's sizes are wrong")


class _KilledDamage(StoppedDamage):
    """StoppedDamage after a SIGKILL instead of a clean stop (nothing sealed)."""

    def _start(self) -> None:
        process = self.node.process
        assert process is not None
        self.exit_code = process.kill()
        self.damage()


register(LogProcessFault(
    "log-sigkill", "nsqd (--sync-every=1) SIGKILLed under put/PUB load, restarted on its data",
    ["process:sigkill"], "kill", 1))
register(LogProcessFault(
    "log-power-loss", "nsqd (--sync-every=1) loses power under put/PUB load: unsynced writes undone",
    ["power-loss"], "power", 1))
register(LogProcessFault(
    "log-power-loss-default-sync",
    "the same with the default sync (every 2500 records or 2 s): documents what it loses (not a bound)",
    ["power-loss"], "power", None, documents_loss=True))
register(LogDiskFull())
register(LogCorruption(
    "log-corrupt-segment",
    "segment files damaged while nsqd is stopped: byte flips (data, message id), cut tails",
    ["damage:segment"],
    [
        Stage("term", [Damage(0, "segment", "sealed", "data"), Damage(1, "segment", "last", "tail", tail=100)], 208),
        Stage("term", [Damage(1, "segment", "last", "data"), Damage(0, "segment", "last", "id"),
                       Damage(1, "segment", "sealed", "id")], 20),
    ]))
register(LogCorruption(
    "log-corrupt-index",
    "index files damaged while nsqd is stopped (cleanly, then killed): byte flips, cut tails",
    ["damage:index"],
    [
        Stage("term", [Damage(0, "index", "sealed", "entry"), Damage(1, "index", "last", "tail", tail=5)], 208),
        Stage("kill", [Damage(0, "index", "last", "entry"), Damage(1, "index", "last", "tail", tail=12)], 20),
    ]))
