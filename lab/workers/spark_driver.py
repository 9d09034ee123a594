"""
A Spark driver on a client host, against the lab's standalone cluster:
Structured Streaming queries over a retained topic read by offset
(``format("nsq")``, from the earliest offset) through the nsqds' MetaQ
listeners, each with its own checkpoint (``CHECKPOINT/NAME``):

- ``parquet``: each message's body to Parquet files (Spark's file sink);
- ``nsq`` (with ``--nsq TOPIC PRODUCER_ID``): each body to a second
  retained topic through the ``nsq`` sink's idempotent mode.

``--trigger available-now`` runs each query to the end of what the topic
held when it started; ``--trigger stream`` runs them every 500 ms until
``--finish-file`` appears.  Either way, once ``--finish-file`` appears
(after the producers are done), each query runs once more with
``Trigger.AvailableNow`` from its checkpoint -- so it ends having read
everything -- and the driver exits 0.  Killed with SIGKILL and started
again with the same arguments, it resumes from the checkpoints.

With ``--arm-file``, each query's rows pass through a ``mapInArrow``
that holds a task while the lab arms it (:func:`pause_when_armed`), so
that a SIGKILL lands inside a task; it passes the same rows in the same
order, which the idempotent sink needs.

Its output (the lab's log) says ``session after``, ``query NAME
started``, each batch of each finished query, ``first run done`` and
``finished``.

    python -m lab.workers.spark_driver --master spark://A:7077 --host ADDR \\
        --metaq A:8123,B:8123 --topic t --checkpoint DIR --parquet DIR \\
        [--nsq t_copy lab-copy --sink-metaq A:8123] [--trigger stream] \\
        [--max-offsets N] [--finish-file PATH] [--arm-file PATH --marks-dir DIR] \\
        [--log4j FILE]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Callable, Iterator, List, Optional, Tuple

from lab.spark_cluster import JVM_FLAGS

__all__ = ["main"]


def session(args: argparse.Namespace) -> Any:
    """
    The SparkSession on the cluster: the driver bound to this host's lab
    address (executors connect back to it), two executors of one core,
    and no job before both have registered.
    """
    from pyspark.sql import SparkSession

    import txnsq.spark

    log4j = " -Dlog4j2.configurationFile=file:%s" % (args.log4j,) if args.log4j else ""
    spark = (
        SparkSession.builder.master(args.master)
        .appName("txnsq-lab")
        .config("spark.driver.host", args.host)
        .config("spark.driver.bindAddress", args.host)
        .config("spark.driver.memory", "512m")
        .config("spark.driver.extraJavaOptions", JVM_FLAGS + log4j)
        .config("spark.executor.memory", "512m")
        .config("spark.executor.cores", "1")
        .config("spark.cores.max", str(args.cores))
        .config("spark.executor.extraJavaOptions", JVM_FLAGS)
        .config("spark.pyspark.python", sys.executable)
        .config("spark.scheduler.minRegisteredResourcesRatio", "1.0")
        .config("spark.scheduler.maxRegisteredResourcesWaitingTime", "90s")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.warehouse.dir", os.path.join(args.checkpoint, "warehouse"))
        .getOrCreate()
    )
    if not args.log4j:
        spark.sparkContext.setLogLevel("WARN")
    txnsq.spark.register(spark)
    return spark


def pause_when_armed(query: str, arm_file: str, marks_dir: str) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """
    A pass-through of a task's rows (for ``mapInArrow``: the same rows in
    the same order) that, while the lab has armed it, holds one task
    before its first row: so that the lab's SIGKILL lands in a task that
    is running, not between tasks.

    The arm file holds lines ``QUERY MIN_PARTITION [ADDRESS]``.  The first
    task of such a query whose partition is at least that number (and
    whose executor is on the host with that address, when given) creates
    the mark ``marks_dir/QUERY`` holding ``PARTITION ADDRESS ATTEMPT PID``
    and waits while the arm file is there (90 s at most: the lab removes
    it once its fault is in place).  Only one task of a query is held, so
    that another query's task can be held on the other executor.  The
    files are on the file system every lab host shares.
    """

    def passing(batches: Iterator[Any]) -> Iterator[Any]:
        from pyspark import TaskContext

        context = TaskContext.get()
        partition = context.partitionId() if context is not None else -1
        address = os.environ.get("SPARK_LOCAL_IP", "?")
        if _armed_for(arm_file, query, partition, address):
            try:
                fd = os.open(os.path.join(marks_dir, query), os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            except FileExistsError:
                fd = -1  # another task of this query is held
            if fd >= 0:
                attempt = context.attemptNumber() if context is not None else 0
                os.write(fd, ("%d %s %d %d\n" % (partition, address, attempt, os.getpid())).encode())
                os.close(fd)
                deadline = time.time() + 90.0
                while os.path.exists(arm_file) and time.time() < deadline:
                    time.sleep(0.05)
        for batch in batches:
            yield batch

    return passing


def _armed_for(arm_file: str, query: str, partition: int, address: str) -> bool:
    """Whether the arm file asks to hold this task."""
    try:
        with open(arm_file) as f:
            lines = f.read().splitlines()
    except OSError:
        return False
    for line in lines:
        fields = line.split()
        if len(fields) < 2 or fields[0] != query:
            continue
        if partition >= int(fields[1]) and (len(fields) < 3 or fields[2] == address):
            return True
    return False


def writers(spark: Any, args: argparse.Namespace) -> List[Tuple[str, Callable[[], Any]]]:
    """The queries, by name: each a function making its DataStreamWriter (trigger not set)."""

    def rows(query: str) -> Any:
        reader = (
            spark.readStream.format("nsq")
            .option("topic", args.topic)
            .option("metaq_addresses", args.metaq)
            .option("starting_offsets", "earliest")
        )
        if args.max_offsets:
            reader = reader.option("max_offsets_per_trigger", str(args.max_offsets))
        rows = reader.load().select("body")
        if args.arm_file:
            rows = rows.mapInArrow(pause_when_armed(query, args.arm_file, args.marks_dir), "body binary")
        return rows

    def parquet() -> Any:
        return rows("parquet").writeStream.format("parquet").option("path", args.parquet)

    def nsq() -> Any:
        target, producer = args.nsq
        return (
            rows("nsq").writeStream.format("nsq")
            .option("topic", target)
            .option("metaq_addresses", args.sink_metaq or args.metaq.split(",")[0])
            .option("idempotent", "true")
            .option("producer_id", producer)
        )

    made: List[Tuple[str, Callable[[], Any]]] = [("parquet", parquet)]
    if args.nsq:
        made.append(("nsq", nsq))
    return made


def start(args: argparse.Namespace, name: str, make: Callable[[], Any], available_now: bool) -> Any:
    """Start query ``name`` from its checkpoint."""
    writer = make().option("checkpointLocation", os.path.join(args.checkpoint, name)).queryName(name)
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="500 milliseconds")
    query = writer.start()
    print("query %s started (%s)" % (name, "available-now" if available_now else "stream"), flush=True)
    return query


def first_batch_done(query: Any, within: float = 180.0) -> None:
    """
    Until ``query`` has run a batch (or ended): two queries starting at
    the same moment in one driver can fail a first task in Spark's task
    deserialization (docs/spark.md), so the next starts after.
    """
    deadline = time.time() + within
    while query.isActive and query.lastProgress is None and time.time() < deadline:
        time.sleep(0.05)


def report(query: Any) -> None:
    """Print each batch of a query that ended (and raise its error, if it failed)."""
    for progress in query.recentProgress:
        print("%s batch %d: %d rows" % (query.name, progress["batchId"], progress["numInputRows"]), flush=True)
    error = query.exception()
    if error is not None:
        raise RuntimeError("query %s failed: %s" % (query.name, error))


def run_all(args: argparse.Namespace, made: List[Tuple[str, Callable[[], Any]]], available_now: bool,
            finish: Optional[str]) -> None:
    """
    Start every query (one after the other's first batch); with
    ``available_now`` wait for each to end, otherwise until ``finish``
    exists (then stop them).
    """
    queries: List[Any] = []
    for name, make in made:
        if queries:
            first_batch_done(queries[-1])
        queries.append(start(args, name, make, available_now))
    if not available_now:
        while finish is None or not os.path.exists(finish):
            for query in queries:
                if not query.isActive:
                    report(query)
                    raise RuntimeError("query %s ended by itself" % (query.name,))
            time.sleep(0.2)
        for query in queries:
            query.stop()
    for query in queries:
        query.awaitTermination()
        report(query)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1] if __doc__ else None)
    parser.add_argument("--master", required=True)
    parser.add_argument("--host", required=True, help="this host's lab address")
    parser.add_argument("--metaq", required=True, help="comma-separated MetaQ addresses of the source")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--parquet", required=True)
    parser.add_argument("--nsq", nargs=2, metavar=("TARGET_TOPIC", "PRODUCER_ID"))
    parser.add_argument("--sink-metaq", default="", help="the MetaQ address the nsq sink puts to")
    parser.add_argument("--trigger", choices=("available-now", "stream"), default="available-now")
    parser.add_argument("--max-offsets", type=int, default=0, help="records per micro-batch at most")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--finish-file", default=None)
    parser.add_argument("--arm-file", default="", help="holds tasks while it exists (see pause_when_armed)")
    parser.add_argument("--marks-dir", default="")
    parser.add_argument("--log4j", default="", help="the driver JVM's log4j2 configuration file")
    args = parser.parse_args(argv)

    began = time.time()
    spark = session(args)
    print("session after %.1fs" % (time.time() - began,), flush=True)
    made = writers(spark, args)
    run_all(args, made, args.trigger == "available-now", args.finish_file)
    print("first run done after %.1fs" % (time.time() - began,), flush=True)
    if args.finish_file:
        while not os.path.exists(args.finish_file):
            time.sleep(0.2)
        run_all(args, made, True, None)
    print("finished after %.1fs" % (time.time() - began,), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
