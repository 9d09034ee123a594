"""
Exactly once through crashes: a streaming query over a retained topic,
its driver (the Python process and its JVM) killed with SIGKILL and
started again from its checkpoint five times while 200,000 messages are
published; its output, Parquet files or a second retained topic written
by the ``nsq`` sink in idempotent mode (two queries of one driver), holds
every message exactly once.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from typing import List, Optional

from twisted.trial.unittest import SynchronousTestCase

from tests_spark.nsqd import unique_topic, wait_until
from tests_spark.spark import spark_session
from tests_spark.test_offsets import metaq_address, metaq_nsqd
from txnsq.spark.blocking import BlockingConnection

COUNT = 200_000
KILLS = 5
#: Where a driver's first error shows in its output.
_FIRST_ERROR = ("Traceback (most recent call last)", " ERROR ", "Exception in thread")
#: Bound on one driver's start and first committed batch, and on the final run.
TIMEOUT = 300.0
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _Publisher(threading.Thread):
    """
    Publishes bodies ``0000000`` ... ``COUNT - 1`` in MPUBs of 500: one
    share (``COUNT / KILLS``) each time :meth:`release` is called, spread
    over about ``seconds``, so that every driver run has messages arriving.
    """

    def __init__(self, address: str, topic: str, seconds: float) -> None:
        threading.Thread.__init__(self, daemon=True)
        self.address = address
        self.topic = topic
        self.share = COUNT // KILLS
        self.pause = seconds / (self.share / 500)
        self.releases = threading.Semaphore(0)
        self.error: Optional[BaseException] = None

    def release(self) -> None:
        """Let the next share be published."""
        self.releases.release()

    def run(self) -> None:
        try:
            for first in range(0, COUNT, self.share):
                self.releases.acquire()
                # A connection per share: an idle one would miss nsqd's
                # heartbeats while a driver starts.
                conn = BlockingConnection(self.address)
                try:
                    for start in range(first, first + self.share, 500):
                        conn.mpublish(self.topic, [b"%07d" % i for i in range(start, start + 500)])
                        time.sleep(self.pause)
                finally:
                    conn.close()
        except BaseException as error:
            self.error = error


class ExactlyOnceTests(SynchronousTestCase):
    """Driver killed 5 times during 200,000 publishes; each message out exactly once."""

    def setUp(self) -> None:
        self.spark = spark_session()
        self.nsqd = metaq_nsqd()
        self.metaq = metaq_address(self.nsqd)
        self.source = unique_topic("eo_src")
        self.target = unique_topic("eo_dst")
        for topic in (self.source, self.target):
            self.nsqd.http("POST", "/topic/create?topic=%s" % (topic,), b"")
        self.checkpoint = os.path.abspath(self.mktemp())
        self.parquet = os.path.abspath(self.mktemp())
        self.logs: List[str] = []

    def driver(self, *extra: str) -> subprocess.Popen:
        """The driver process running both queries (its output in a log file)."""
        log = os.path.abspath(self.mktemp())
        self.logs.append(log)
        command = [
            sys.executable,
            "-m",
            "tests_spark.offset_query",
            "--metaq",
            self.metaq,
            "--topic",
            self.source,
            "--checkpoint",
            self.checkpoint,
            "--parquet",
            self.parquet,
            "--nsq",
            self.target,
            "eo-test",
        ]
        with open(log, "wb") as output:
            process = subprocess.Popen(
                command + list(extra), cwd=_ROOT, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.addCleanup(self._kill, process)
        return process

    def last_log(self) -> str:
        """The last driver's output: where its first error starts (the cause), and its end."""
        with open(self.logs[-1], "rb") as f:
            text = f.read().decode("utf-8", "replace")
        starts = [at for at in (text.find(mark) for mark in _FIRST_ERROR) if at >= 0]
        first = min(starts) if starts else len(text)
        if first >= len(text) - 4000:
            return text[max(0, min(first, len(text) - 4000)):]
        return text[first:first + 6000] + "\n[...]\n" + text[-4000:]

    def _kill(self, process: subprocess.Popen) -> None:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)

    def commits(self, name: str) -> int:
        directory = os.path.join(self.checkpoint, name, "commits")
        return len([n for n in os.listdir(directory) if n.isdigit()]) if os.path.isdir(directory) else 0

    def test_parquet_and_nsq_sink(self) -> None:
        """
        Both the Parquet sink's output and the second retained topic written
        by the nsq sink in idempotent mode hold each of the 200,000 messages
        once (0 missing, 0 duplicates) after 5 SIGKILLs of their driver.
        """
        publisher = _Publisher(self.nsqd.tcp_address, self.source, 15.0)
        publisher.start()
        rng = random.Random(19)
        mid_batch = 0
        for _ in range(KILLS):
            before = (self.commits("parquet"), self.commits("nsq"))
            process = self.driver("--max-offsets", "20000")
            publisher.release()

            def committed() -> bool:
                now = (self.commits("parquet"), self.commits("nsq"))
                if publisher.error is not None:
                    raise AssertionError("the publisher failed: %s" % (publisher.error,))
                return (now[0] > before[0] and now[1] > before[1]) or process.poll() is not None

            wait_until(committed, TIMEOUT, "a committed batch of each query", 0.1)
            self.assertIsNone(process.poll(), "the driver exited: " + self.last_log())
            # Kill somewhere in the next batches, or between them.
            time.sleep(rng.uniform(0.0, 2.0))
            offsets = os.path.join(self.checkpoint, "nsq", "offsets")
            planned = len([n for n in os.listdir(offsets) if n.isdigit()]) if os.path.isdir(offsets) else 0
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)
            mid_batch += planned > self.commits("nsq")
        publisher.join(TIMEOUT)
        self.assertIsNone(publisher.error)
        self.assertFalse(publisher.is_alive())
        final = self.driver("--available-now")
        self.assertEqual(final.wait(TIMEOUT), 0, self.last_log())
        # Which kills fell inside a batch of the nsq query (planned, not committed).
        print("kills inside an nsq sink batch: %d of %d" % (mid_batch, KILLS))

        self.assertExactlyOnce([row.body for row in self.spark.read.parquet(self.parquet).collect()])
        rows = (
            self.spark.read.format("nsq")
            .option("topic", self.target)
            .option("metaq_addresses", self.metaq)
            .load()
            .select("body")
            .collect()
        )
        self.assertExactlyOnce([row.body for row in rows])

    def assertExactlyOnce(self, bodies: List[bytes]) -> None:
        counts = Counter(int(body) for body in bodies)
        missing = len([i for i in range(COUNT) if i not in counts])
        duplicates = sum(n - 1 for n in counts.values())
        self.assertEqual((missing, duplicates, len(bodies)), (0, 0, COUNT))
        self.assertEqual(set(counts), set(range(COUNT)))
