"""
The retained-log workload: one nsqd with a retained topic (MetaQ
listener on), a numbering writer on a client host (MetaQ ``put`` and V2
``PUB``), and read passes of the whole log by offset before, between and
after the faults; the log checker over the history.
"""

from __future__ import annotations

import os
import time
from typing import Any, Dict, List, Optional

from lab.checkers_log import LogResult, check_log
from lab.errors import LabError
from lab.history import read_history
from lab.net import Host
from lab.procs import LabProcess
from lab.world import METAQ_PORT, NsqdNode, World

__all__ = ["LogWorkload", "LOG_TOPIC", "start_log_node"]

#: The retained topic.
LOG_TOPIC = "log"


def start_log_node(
    world: World,
    partitions: int,
    sync_every: Optional[int],
    extra: Optional[List[str]] = None,
    prepare: Any = None,
) -> NsqdNode:
    """
    The client host ``c1`` and nsqd ``n1`` with a MetaQ listener,
    ``LOG_TOPIC`` retained when created, ``partitions`` partitions and
    ``--sync-every=sync_every`` (None: nsqd's default); started after
    ``prepare(node)`` (a tmpfs, the power-loss shim) when given.
    """
    world.host("c1")
    flags = ["--retain-topics=^%s$" % LOG_TOPIC, "--log-partitions=%d" % partitions]
    if sync_every is not None:
        flags.append("--sync-every=%d" % sync_every)
    node = world.add_nsqd(["n1"], metaq=True, extra=flags + (extra or []))[0]
    os.makedirs(node.data_path, exist_ok=True)
    if prepare is not None:
        prepare(node)
    node.start()
    return node


class LogWorkload:
    """
    Writers and read passes of one retained topic on one nsqd.

    :param world: the round's world (the nsqd started).
    :param history_dir: where the workers write.
    :param client: the client host.
    :param node: the nsqd.
    :param partitions: the topic's partitions.
    """

    def __init__(self, world: World, history_dir: str, client: Host, node: NsqdNode, partitions: int) -> None:
        self.world = world
        self.history_dir = history_dir
        self.client = client
        self.node = node
        self.partitions = partitions
        self.topic = LOG_TOPIC
        self.writers: List[LabProcess] = []
        self.pass_results: Dict[str, Dict[str, Any]] = {}

    @property
    def metaq(self) -> str:
        """The nsqd's MetaQ address."""
        return "%s:%d" % (self.node.host.address, METAQ_PORT)

    def create(self) -> None:
        """The topic, retained (``--retain-topics``), before any write."""
        status, text = self.world.http(self.client, "POST", "http://%s/topic/create?topic=%s" % (self.node.http, self.topic))
        if status != 200:
            raise LabError("/topic/create on %s: %s %s" % (self.node.name, status, text[:200]))

    def start_writer(
        self,
        name: str,
        rate: float,
        duration: float = 0.0,
        count: int = 0,
        mode: str = "both",
        size: int = 120,
        start: int = 1,
        timeout: float = 4.0,
    ) -> LabProcess:
        """A numbering writer (see :mod:`lab.workers.log_writer`)."""
        args = [
            "--metaq", self.metaq,
            "--nsqd", self.node.tcp,
            "--mode", mode,
            "--topic", self.topic,
            "--partitions", str(self.partitions),
            "--rate", str(rate),
            "--duration", str(duration),
            "--count", str(count),
            "--size", str(size),
            "--start", str(start),
            "--timeout", str(timeout),
            "--out", os.path.join(self.history_dir, name + ".jsonl"),
            "--process", name,
        ]
        process = self.world.start_worker(self.client, name, "log_writer", args)
        self.writers.append(process)
        return process

    def wait_writers(self, timeout: float) -> None:
        """Wait for every writer to end (they stop by themselves)."""
        deadline = time.monotonic() + timeout
        for process in self.writers:
            if process.wait(max(1.0, deadline - time.monotonic())) is None:
                process.kill()
                raise LabError("writer %s did not end: %s" % (process.name, process.log()[-400:]))
            if process.popen.returncode != 0:
                raise LabError("writer %s failed: %s" % (process.name, process.log()[-600:].replace("\n", " | ")))

    def read_pass(self, label: str, wait: float = 20.0, timeout: float = 60.0, max_size: int = 8192) -> Dict[str, Any]:
        """
        One read pass of every partition, labelled ``label``; returns its
        summary (records, bad, complete).  ``wait``: how long the reader
        waits for nsqd to answer at all; ``max_size``: bytes per ``get``
        (small: a ``get`` at nearly every record, through the index).
        """
        name = "reader-" + label
        process = self.world.start_worker(self.client, name, "log_reader", [
            "--metaq", self.metaq,
            "--topic", self.topic,
            "--partitions", str(self.partitions),
            "--label", label,
            "--wait", str(wait),
            "--max-size", str(max_size),
            "--out", os.path.join(self.history_dir, name + ".jsonl"),
            "--process", name,
        ])
        if process.wait(timeout) is None:
            process.kill()
            raise LabError("reader %s did not end in %.0f s: %s" % (label, timeout, process.log()[-400:]))
        if process.popen.returncode != 0:
            raise LabError("reader %s failed: %s" % (label, process.log()[-600:].replace("\n", " | ")))
        summary: Dict[str, Any] = {}
        for event in read_history(self.history_dir):
            if event.get("type") == "read" and event.get("f") == "pass" and event.get("pass") == label:
                summary = {k: event.get(k) for k in ("records", "bad", "complete")}
        self.pass_results[label] = summary
        return summary

    def events(self) -> List[Dict[str, Any]]:
        """The round's history."""
        return read_history(self.history_dir)

    def check(self) -> LogResult:
        """The log checker over the history so far."""
        return check_log(self.events())

    def writer_events(self, kind: str, since: float = 0.0, until: float = float("inf")) -> List[Dict[str, Any]]:
        """The writers' ``kind`` events (ok, fail, info) between two times."""
        return [
            e for e in self.events()
            if e.get("type") == kind and e.get("f") in ("put", "pub") and since <= e.get("t", 0) < until
        ]
