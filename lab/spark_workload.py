"""
The Spark workload: numbered publishes to a retained topic on two nsqds
(n1, n2: MetaQ on, two log partitions each), a Spark standalone cluster
(master on sm, workers on w1 and w2) and a driver on the client host c1
whose queries read the topic by offset on the cluster's executors and
write it to Parquet and, through the ``nsq`` sink's idempotent mode, to a
second retained topic on n1; then the check: each output holds every
acknowledged publish exactly once.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Dict, List, Optional

from lab.checkers import QueueResult, check_queue
from lab.errors import LabError
from lab.history import read_history
from lab.procs import LabProcess
from lab.spark_checker import commit_times, parquet_events, stray_files
from lab.spark_cluster import DRIVER_LOG4J, TASK_LOST_WITH_EXECUTOR, SparkCluster, host_env
from lab.world import METAQ_PORT, NsqdNode, World

__all__ = ["SOURCE", "TARGET", "SparkWorkload"]

SOURCE = "lab_events"
TARGET = "lab_events_copy"
PRODUCER_ID = "lab-copy"


class SparkWorkload:
    """
    One round's Spark workload (see the module docstring).

    :param context: the round's context.
    :param nsq_sink: whether the driver runs the ``nsq`` sink's query too.
    """

    def __init__(self, context: Any, nsq_sink: bool) -> None:
        self.context = context
        self.world: World = context.world
        self.history = context.history
        self.folder = os.path.join(context.folder, "spark")
        os.makedirs(self.folder, exist_ok=True)
        self.client = self.world.host("c1")
        self.nsq_sink = nsq_sink
        self.nodes: List[NsqdNode] = []
        self.cluster = SparkCluster(self.world, self.folder, "sm", ["w1", "w2"])
        self.producers: List[LabProcess] = []
        self.driver: Optional[LabProcess] = None
        self.driver_argv: List[str] = []
        self.driver_starts = 0
        self.checkpoint = os.path.join(self.folder, "checkpoint")
        self.parquet = os.path.join(self.folder, "parquet")
        self.finish_file = os.path.join(self.folder, "finish")
        self.arm_file = os.path.join(self.folder, "arm")
        self.marks_dir = os.path.join(self.folder, "marks")
        os.makedirs(self.marks_dir, exist_ok=True)

    # -- the world ---------------------------------------------------------------------

    def start_nsqds(self) -> None:
        """n1 and n2 with MetaQ, topics ``lab_*`` retained in two partitions; the topics made."""
        self.nodes = self.world.add_nsqd(
            ["n1", "n2"], metaq=True, extra=["--retain-topics=^lab_", "--log-partitions=2"]
        )
        for node in self.nodes:
            node.start()
        for node, topic in [(n, SOURCE) for n in self.nodes] + [(self.nodes[0], TARGET)]:
            status, text = self.world.http(self.client, "POST", "http://%s/topic/create?topic=%s" % (node.http, topic))
            if status != 200:
                raise LabError("topic %s on %s: %s %s" % (topic, node.name, status, text[:200]))

    @property
    def metaq(self) -> List[str]:
        """The nsqds' MetaQ addresses."""
        return ["%s:%d" % (n.host.address, METAQ_PORT) for n in self.nodes]

    def start_cluster(self) -> None:
        """The Spark master and both workers."""
        self.cluster.start()

    # -- producers ---------------------------------------------------------------------

    def start_producers(self, duration: float, rate: float, batch: int) -> None:
        """Producer ``p1`` pinned to n1, ``p2`` to n2: ``rate`` messages a second each, in MPUBs of ``batch``."""
        for index, node in enumerate(self.nodes):
            name = "p%d" % (index + 1)
            self.producers.append(self.world.start_worker(self.client, name, "producer", [
                "--nodes", node.tcp,
                "--topic", SOURCE,
                "--rate", str(rate),
                "--batch", str(batch),
                "--duration", str(duration),
                "--mode", "pinned",
                "--out", self.history.worker_file(name),
                "--process", name,
            ]))

    def wait_producers(self, timeout: float) -> None:
        """Until both producers have ended (they stop by themselves)."""
        deadline = time.monotonic() + timeout
        for process in self.producers:
            code = process.wait(max(1.0, deadline - time.monotonic()))
            if code is None:
                raise LabError("producer %s did not end: %s" % (process.name, process.log()[-400:]))
            if code != 0:
                raise LabError("producer %s failed: %s" % (process.name, process.log()[-600:].replace("\n", " | ")))

    # -- the driver --------------------------------------------------------------------

    def start_driver(self, trigger: str, max_offsets: int) -> LabProcess:
        """The driver on c1 (see :mod:`lab.workers.spark_driver`)."""
        log4j = os.path.join(self.folder, "driver-log4j2.properties")
        with open(log4j, "w") as f:
            f.write(DRIVER_LOG4J)
        argv = [
            sys.executable, "-m", "lab.workers.spark_driver",
            "--master", self.cluster.url,
            "--host", self.client.address,
            "--metaq", ",".join(self.metaq),
            "--topic", SOURCE,
            "--checkpoint", self.checkpoint,
            "--parquet", self.parquet,
            "--trigger", trigger,
            "--max-offsets", str(max_offsets),
            "--finish-file", self.finish_file,
            "--arm-file", self.arm_file,
            "--marks-dir", self.marks_dir,
            "--log4j", log4j,
        ]
        if self.nsq_sink:
            argv += ["--nsq", TARGET, PRODUCER_ID, "--sink-metaq", self.metaq[0]]
        self.driver_argv = argv
        return self.restart_driver()

    def restart_driver(self) -> LabProcess:
        """The driver started (again) with the same arguments: it resumes from its checkpoints."""
        scratch = os.path.join(self.folder, "local-c1")
        os.makedirs(scratch, exist_ok=True)
        self.driver = self.world.launcher.start(
            self.client, "spark-driver", self.driver_argv, env=host_env(self.client, scratch), cwd=self.folder
        )
        self.driver_starts += 1
        self.history.event("phase", "driver-start", n=self.driver_starts)
        return self.driver

    @property
    def queries(self) -> List[str]:
        """The driver's queries' names."""
        return ["parquet", "nsq"] if self.nsq_sink else ["parquet"]

    def commits(self, query: str) -> int:
        """Batches ``query`` has committed (its checkpoint's ``commits/``)."""
        return len(commit_times(os.path.join(self.checkpoint, query)))

    def planned(self, query: str) -> int:
        """Batches ``query`` has planned (its checkpoint's ``offsets/``)."""
        folder = os.path.join(self.checkpoint, query, "offsets")
        return len([n for n in os.listdir(folder) if n.isdigit()]) if os.path.isdir(folder) else 0

    def wait_committed(self, query: str, batches: int, timeout: float) -> None:
        """
        Until ``query`` has committed ``batches`` batches; LabError naming
        the driver's log if it died or time ran out.
        """
        deadline = time.monotonic() + timeout
        while self.commits(query) < batches:
            self._driver_alive()
            if time.monotonic() > deadline:
                raise LabError("query %s did not commit batch %d in %.0f s: %s" % (
                    query, batches - 1, timeout, self._driver_tail()))
            time.sleep(0.1)

    def arm(self, queries: List[str], least_partition: int = 0, address: str = "") -> None:
        """
        Hold the next task of each of ``queries`` whose partition is at
        least ``least_partition`` (on the host with ``address``, when
        given) until :meth:`disarm` (see
        :func:`lab.workers.spark_driver.pause_when_armed`).
        """
        for name in os.listdir(self.marks_dir):
            os.unlink(os.path.join(self.marks_dir, name))
        tmp = self.arm_file + ".tmp"
        with open(tmp, "w") as f:
            f.writelines(("%s %d %s" % (query, least_partition, address)).strip() + "\n" for query in queries)
        os.replace(tmp, self.arm_file)

    def disarm(self) -> None:
        """Let the held tasks go on."""
        try:
            os.unlink(self.arm_file)
        except FileNotFoundError:
            pass

    def wait_held(self, query: str, timeout: float) -> Optional[str]:
        """
        Until a task of ``query`` is held: its mark (``PARTITION ADDRESS
        ATTEMPT PID``), or None when none is within ``timeout`` (the query
        ended first).
        """
        path = os.path.join(self.marks_dir, query)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with open(path) as f:
                    mark = f.read().strip()
                if mark:
                    return mark
            except FileNotFoundError:
                pass
            if self.driver is None or not self.driver.alive():
                return None
            time.sleep(0.02)
        return None

    def _driver_alive(self) -> None:
        if self.driver is None or not self.driver.alive():
            code = None if self.driver is None else self.driver.popen.returncode
            raise LabError("the spark driver exited (%s): %s" % (code, self._driver_tail()))

    def _driver_tail(self) -> str:
        if self.driver is None:
            return ""
        text = self.driver.log()
        start = text.rfind("=== ")
        text = text[start:]
        # Where the first error starts tells the cause; the end, the state.
        marks = [text.find(m) for m in ("Traceback (most recent call last)", " ERROR ", "Exception in thread")]
        first = min([m for m in marks if m >= 0], default=-1)
        head = text[first:first + 1500] + " [...] " if 0 <= first < len(text) - 1500 else ""
        return (head + text[-1200:]).replace("\n", " | ")

    def wait_driver_line(self, pattern: str, timeout: float) -> None:
        """Until this start of the driver has printed ``pattern``."""
        assert self.driver is not None
        start = self.driver.log().rfind("=== ")
        deadline = time.monotonic() + timeout
        while pattern not in self.driver.log()[start:]:
            self._driver_alive()
            if time.monotonic() > deadline:
                raise LabError("the spark driver did not print %r in %.0f s: %s" % (pattern, timeout, self._driver_tail()))
            time.sleep(0.1)

    def signal_finish(self) -> None:
        """
        Tell the driver the producers are done: it runs each query once
        more with ``Trigger.AvailableNow`` from its checkpoint and exits.
        """
        with open(self.finish_file, "w") as f:
            f.write("done\n")

    def finish(self, timeout: float) -> None:
        """:meth:`signal_finish`, and wait until the driver has exited 0."""
        self.signal_finish()
        assert self.driver is not None
        code = self.driver.wait(timeout)
        if code is None:
            raise LabError("the spark driver did not finish in %.0f s: %s" % (timeout, self._driver_tail()))
        if code != 0:
            raise LabError("the spark driver failed (%s): %s" % (code, self._driver_tail()))

    # -- the check ---------------------------------------------------------------------

    def dump_sink(self, timeout: float = 60.0) -> None:
        """The idempotent sink's topic read back over MetaQ into the history (channel ``nsq-sink``)."""
        process = self.world.start_worker(self.client, "dump", "log_dump", [
            "--metaq", self.metaq[0], "--topic", TARGET, "--channel", "nsq-sink",
            "--out", self.history.worker_file("dump"), "--process", "dump",
        ])
        code = process.wait(timeout)
        if code != 0:
            process.kill()
            raise LabError("reading %s back failed (%s): %s" % (TARGET, code, process.log()[-600:]))

    def check(self) -> QueueResult:
        """Each output against the producers' history (channels ``parquet`` and ``nsq-sink``)."""
        events = read_history(self.history.folder)
        events.extend(parquet_events(self.parquet, "parquet"))
        channels = ["parquet"] + (["nsq-sink"] if self.nsq_sink else [])
        return check_queue(events, channels)

    def figures(self) -> Dict[str, Any]:
        """What else the round reports: the Spark side's counts."""
        driver_log = self.driver.log() if self.driver is not None else ""
        return {
            "driver_starts": self.driver_starts,
            "executors_launched": self.cluster.executors_launched(),
            "tasks_lost_with_executor": driver_log.count(TASK_LOST_WITH_EXECUTOR),
            "executors_lost": driver_log.count("Lost executor"),
            "batches": {q: self.commits(q) for q in self.queries},
            "parquet_stray_files": len(stray_files(self.parquet)),
        }

    def first_commit_after(self, moment: float) -> Optional[float]:
        """Seconds from ``moment`` (a ``time.time()``) to the first commit of any query after it."""
        times = [t for q in self.queries for t in commit_times(os.path.join(self.checkpoint, q)) if t > moment]
        return round(min(times) - moment, 2) if times else None
