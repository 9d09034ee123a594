"""
Spark scenarios: Structured Streaming queries over a retained topic, run
by a driver on c1 against a real Spark standalone cluster (master on sm,
workers on w1 and w2: executors read the nsqds on n1 and n2 over MetaQ),
under SIGKILLs of a worker (its executor and Python workers with it) and
of the driver; each output must hold every acknowledged publish exactly
once (see :mod:`lab.spark_workload`).
"""

from __future__ import annotations

import time
from typing import Any, Callable, List, Optional

from lab.scenarios import register
from lab.scenarios.base import Scenario
from lab.spark_cluster import SparkProcessKill
from lab.spark_workload import SparkWorkload

__all__ = ["SparkAvailableNow", "SparkStream"]


def _worker_kill(workload: SparkWorkload, name: str) -> SparkProcessKill:
    cluster = workload.cluster
    return SparkProcessKill(
        workload.world, workload.history, "worker %s" % name,
        lambda: cluster.workers.get(name), lambda: cluster.start_worker(name, wait=False),
    )


def _driver_kill(workload: SparkWorkload) -> SparkProcessKill:
    return SparkProcessKill(
        workload.world, workload.history, "driver", lambda: workload.driver, workload.restart_driver,
    )


def _judge(workload: SparkWorkload, result: Any, problems: List[str]) -> None:
    """The check's figures into ``result``, and its verdict."""
    check = workload.check()
    result.figures = check.as_dict()
    result.figures.update(workload.figures())
    if check.acknowledged == 0:
        problems.append("nothing was acknowledged")
    for channel, figures in check.channels.items():
        if figures["lost"] or figures["duplicates"] or figures["unexpected"]:
            problems.append("%s: %d acknowledged missing, %d duplicates, %d unexpected" % (
                channel, figures["lost"], figures["duplicates"], figures["unexpected"]))
    if check.lost_sample:
        problems.append("missing e.g. %s" % (check.lost_sample[:5],))
    if check.unexpected_sample:
        problems.append("unexpected e.g. %s" % (check.unexpected_sample[:5],))
    result.problems.extend(problems)
    result.passed = not result.problems


def _kill_worker_in_task(
    workload: SparkWorkload, query: str, name: str, problems: List[str], armed: Optional[Callable[[], None]] = None
) -> Optional[float]:
    """
    SIGKILL worker ``name`` while it runs a task of ``query`` (held by the
    arm file), restart it 2 s later, and wait until the batch of that
    task is committed and the worker runs an executor again.  ``armed``
    is called once the arm is in place (to start the batches it should
    catch).  Returns when it was killed (None when no task of that query
    reached its executor: the round is void).
    """
    workload.arm([query], 0, workload.cluster.worker_hosts[name].address)
    try:
        if armed is not None:
            armed()
        held = workload.wait_held(query, 90)
        if held is None:
            problems.append("no task of %s ran on %s to kill it in" % (query, name))
            return None
        running = workload.planned(query)
        nemesis = _worker_kill(workload, name)
        nemesis.start()
        killed_at = time.time()
    finally:
        workload.disarm()
    time.sleep(2.0)
    nemesis.stop()
    workload.wait_committed(query, running, 180)
    # The next fault finds both executors again.
    workload.cluster.wait_executor(name, 120)
    return killed_at


def _kill_driver_in_task(workload: SparkWorkload, problems: List[str]) -> Optional[float]:
    """
    SIGKILL the driver while a batch of each query has its first task
    done (its Parquet file written, its rows put into the sink's topic)
    and its third held; restart it at once, and wait until the restarted
    driver has committed those batches.  Returns when it was killed (None
    when no such task came).
    """
    workload.arm(workload.queries, 2)
    try:
        for query in workload.queries:
            if workload.wait_held(query, 90) is None:
                problems.append("no third task of query %s was held to kill the driver in" % (query,))
                return None
        running = {query: workload.planned(query) for query in workload.queries}
        nemesis = _driver_kill(workload)
        nemesis.start()
        killed_at = time.time()
    finally:
        workload.disarm()
    nemesis.stop()
    for query, batches in running.items():
        workload.wait_committed(query, batches, 240)
    return killed_at


class SparkAvailableNow(Scenario):
    """
    ``Trigger.AvailableNow`` into Parquet while the topic is published to:
    a worker SIGKILLed while it runs a task (restarted 2 s later); once
    the producers are done, the query runs again from its checkpoint to
    read the rest (in the full form, the other worker SIGKILLed in a task
    of that run).
    """

    name = "spark-available-now-worker-kill"
    summary = "AvailableNow query to Parquet on a standalone cluster; a worker SIGKILLed in a task"
    nemeses = ["spark:worker-sigkill"]
    workload = "spark"

    def run_round(self, context: Any, result: Any) -> None:
        quick = context.quick
        workload = SparkWorkload(context, nsq_sink=False)
        workload.start_nsqds()
        # Publishing starts with the cluster (the first run of the query
        # has several batches to read) and goes on into the query.
        rate, duration = (400.0, 20.0) if quick else (800.0, 60.0)
        workload.start_producers(duration, rate, batch=20)
        workload.start_cluster()
        workload.start_driver("available-now", max_offsets=3000 if quick else 6000)
        problems: List[str] = []
        workload.wait_committed("parquet", 1, 180)
        killed_at = _kill_worker_in_task(workload, "parquet", "w1", problems)
        if killed_at is not None:
            result.failover_s = workload.first_commit_after(killed_at)
        workload.wait_driver_line("first run done", 240)
        workload.wait_producers(duration + 60)
        finished_at = time.time()
        if not quick:
            # The second run (the rest of the topic) loses w2 in its turn.
            _kill_worker_in_task(workload, "parquet", "w2", problems, armed=workload.signal_finish)
        workload.finish(240)
        result.recover_s = round(time.time() - finished_at, 2)
        _judge(workload, result, problems)


class SparkStream(Scenario):
    """
    A streaming query (every 500 ms) into Parquet and, through the
    idempotent ``nsq`` sink, into a second retained topic, while the topic
    is published to: a worker SIGKILLed in a task (restarted 2 s later),
    then the driver SIGKILLed (Python and JVM) in a batch of each query,
    some of its tasks done, and started again from its checkpoints; once
    the producers are done, each query runs once more with AvailableNow
    and the sink's topic is read back.
    """

    name = "spark-stream-driver-kill"
    summary = "streaming query to Parquet and the idempotent nsq sink; a worker, then the driver SIGKILLed"
    nemeses = ["spark:worker-sigkill", "spark:driver-sigkill"]
    workload = "spark"

    def run_round(self, context: Any, result: Any) -> None:
        quick = context.quick
        workload = SparkWorkload(context, nsq_sink=True)
        workload.start_nsqds()
        workload.start_cluster()
        workload.start_driver("stream", max_offsets=4000 if quick else 8000)
        # Publishing starts once the driver has its executors, so that
        # batches keep coming through the faults.
        workload.wait_driver_line("session after", 180)
        rate, duration = (400.0, 25.0) if quick else (500.0, 120.0)
        workload.start_producers(duration, rate, batch=20)
        problems: List[str] = []
        workload.wait_committed("parquet", 1, 180)
        for number in range(1 if quick else 2):
            killed_at = _kill_worker_in_task(workload, "parquet", "w%d" % (number % 2 + 1), problems)
            if killed_at is None:
                break
            if result.failover_s is None:
                result.failover_s = workload.first_commit_after(killed_at)
            killed_at = _kill_driver_in_task(workload, problems)
            if killed_at is None:
                break
            if result.recover_s is None:
                result.recover_s = workload.first_commit_after(killed_at)
        workload.wait_producers(duration + 60)
        workload.finish(240)
        workload.dump_sink()
        _judge(workload, result, problems)


register(SparkAvailableNow())
register(SparkStream())
