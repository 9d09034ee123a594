"""
Retained topics' acceptance test on a real nsqd (``--metaq-address``,
``--log-partitions=4``): 100,000 messages published over TCP (PUB, MPUB),
HTTP (/pub, /mpub) and MetaQ (pipelined puts) to a retained topic;
reading every partition from offset 0 with MetaQ ``get`` returns exactly
those messages, in per-partition publish order; a channel rewound to
``earliest`` receives all 100,000 again; a channel rewound to a timestamp,
and ``nsq_log --timestamp``, give exactly the suffix published after it.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter, defaultdict
from typing import Any, Dict, Generator, List, Sequence, Tuple

from twisted.internet.defer import Deferred, gatherResults, inlineCallbacks
from twisted.internet.task import deferLater
from twisted.internet.utils import getProcessOutputAndValue
from twisted.trial.unittest import TestCase

from tests.integration.nsq_client import NSQClient, connect, receive_exactly
from tests.integration.nsqd_process import NSQDProcess
from tests.integration.test_http_process import http_client
from tests.integration.test_nsqd_process import LOOPBACK
from txnsq.client.metaq import LogRecord, MetaqClient, MetaqReader, connect_metaq

TOPIC = "accept"
PARTITIONS = 4
#: Messages per source (TCP, HTTP, MetaQ): 100,000 in all.
COUNTS = {b"tcp": 33334, b"http": 33333, b"metaq": 33333}
#: The first BEFORE of each source are published before the rewind's
#: timestamp, the rest after it.
BEFORE = 30000
#: PUBs (TCP) and /pubs (HTTP) at the start of each phase; the rest go in batches.
SINGLES = 100
BATCH = 1000
#: MetaQ puts in flight at once.
WINDOW = 2000
WAIT = 120.0
QUIET = 1.0


def body(source: bytes, number: int) -> bytes:
    """The numbered body ``number`` of ``source``."""
    return b"%s %06d" % (source, number)


def parse_body(data: bytes) -> Tuple[bytes, int]:
    """``(source, number)`` of a body made by :func:`body`."""
    source, number = data.split(b" ")
    return source, int(number)


class RetainedAcceptanceTests(TestCase):
    """The retained-topic acceptance process test."""

    timeout = 600

    def setUp(self) -> None:
        from twisted.internet import reactor

        self.reactor: Any = reactor
        self.http = http_client(reactor)

    @inlineCallbacks
    def post(self, process: NSQDProcess, path: str, data: bytes = b"") -> Generator[Any, Any, bytes]:
        response = yield self.http.post("http://127.0.0.1:%d%s" % (process.http_port, path), data=data)
        content = yield response.content()
        self.assertEqual(response.code, 200, (path, content))
        return content  # type: ignore[no-any-return]

    @inlineCallbacks
    def publish_tcp(self, client: NSQClient, bodies: Sequence[bytes]) -> Generator[Any, Any, None]:
        for data in bodies[:SINGLES]:
            self.assertEqual((yield client.pub(TOPIC, data)), b"OK")
        for start in range(SINGLES, len(bodies), BATCH):
            self.assertEqual((yield client.mpub(TOPIC, bodies[start : start + BATCH])), b"OK")

    @inlineCallbacks
    def publish_http(self, process: NSQDProcess, bodies: Sequence[bytes]) -> Generator[Any, Any, None]:
        for data in bodies[:SINGLES]:
            yield self.post(process, "/pub?topic=" + TOPIC, data)
        for start in range(SINGLES, len(bodies), BATCH):
            yield self.post(process, "/mpub?topic=" + TOPIC, b"\n".join(bodies[start : start + BATCH]))

    @inlineCallbacks
    def publish_metaq(
        self, client: MetaqClient, numbers: range, placed: Dict[bytes, Tuple[int, int]]
    ) -> Generator[Any, Any, None]:
        """Pipelined puts, WINDOW at a time, each naming its partition (number % 4)."""
        for start in range(numbers.start, numbers.stop, WINDOW):
            batch = range(start, min(start + WINDOW, numbers.stop))
            results = yield gatherResults(
                [client.put(TOPIC, number % PARTITIONS, body(b"metaq", number)) for number in batch],
                consumeErrors=True,
            )
            for number, (_msg_id, partition, offset) in zip(batch, results):
                placed[body(b"metaq", number)] = (partition, offset)

    @inlineCallbacks
    def publish_phase(
        self,
        process: NSQDProcess,
        tcp: NSQClient,
        metaq: MetaqClient,
        first: int,
        last: Dict[bytes, int],
        placed: Dict[bytes, Tuple[int, int]],
    ) -> Generator[Any, Any, None]:
        """The three sources at once, each from number ``first`` up to ``last[source]``."""
        yield gatherResults(
            [
                self.publish_tcp(tcp, [body(b"tcp", n) for n in range(first, last[b"tcp"])]),
                self.publish_http(process, [body(b"http", n) for n in range(first, last[b"http"])]),
                self.publish_metaq(metaq, range(first, last[b"metaq"]), placed),
            ],
            consumeErrors=True,
        )

    @inlineCallbacks
    def read_partition(self, client: MetaqClient, partition: int) -> Generator[Any, Any, List[LogRecord]]:
        """Every record of ``partition`` with ``get`` from offset 0 (a 301 followed) to its end."""
        reader = MetaqReader(client, TOPIC, partition, 0, 1 << 20)
        records: List[LogRecord] = []
        while True:
            batch = yield reader.next_batch()
            if not batch:
                return records
            records.extend(batch)

    def receive(self, process: NSQDProcess, channel: str, count: int) -> "Deferred[List[bytes]]":
        """Subscribe with a FINning client (RDY 2500); exactly ``count`` messages arrive."""
        return receive_exactly(self.reactor, process.tcp_port, TOPIC, channel, count, WAIT, QUIET)

    @inlineCallbacks
    def nsq_log(self, process: NSQDProcess, *args: str) -> Generator[Any, Any, bytes]:
        """Run nsq_log against the nsqd's MetaQ listener; its stdout (exit 0)."""
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ)
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        argv = ["-m", "txnsq.tools.nsq_log", "--nsqd-metaq-address=127.0.0.1:%d" % (process.metaq_port,)]
        out, err, code = yield getProcessOutputAndValue(sys.executable, argv + list(args), env=env)
        self.assertEqual(code, 0, err)
        return out  # type: ignore[no-any-return]

    @inlineCallbacks
    def test_publish_get_rewind(self) -> Generator[Any, Any, None]:
        """100,000 messages over TCP, HTTP and MetaQ are read back by get in per-partition publish order; earliest and timestamp rewinds give all of them and exactly the suffix."""
        data_path = os.path.abspath(self.mktemp())
        os.makedirs(data_path)
        process = NSQDProcess(
            LOOPBACK
            + [
                "--data-path=" + data_path,
                "--metaq-address=127.0.0.1:0",
                "--retain-topics=^%s$" % (TOPIC,),
                "--log-partitions=%d" % (PARTITIONS,),
                # The channel that takes the live messages holds them all in memory.
                "--mem-queue-size=200000",
            ],
            self.reactor,
        )
        self.addCleanup(self._reap, process)
        yield process.start()
        # A channel from the start, so that the topic keeps no backlog of its
        # own (the first channel made later would get it besides its rewind).
        yield self.post(process, "/topic/create?topic=" + TOPIC)
        yield self.post(process, "/channel/create?topic=%s&channel=live" % (TOPIC,))
        tcp = yield connect(self.reactor, process.tcp_port)
        self.addCleanup(tcp.close)
        metaq = yield connect_metaq(self.reactor, "127.0.0.1:%d" % (process.metaq_port,))
        self.addCleanup(metaq.close)

        placed: Dict[bytes, Tuple[int, int]] = {}
        before = {source: BEFORE for source in COUNTS}
        yield self.publish_phase(process, tcp, metaq, 0, before, placed)
        # The rewind point: strictly between the two phases by more than the
        # ids' time resolution (~1.05 ms) on both sides.
        yield deferLater(self.reactor, 0.005, lambda: None)
        since_ms = int(time.time() * 1000)
        yield deferLater(self.reactor, 0.005, lambda: None)
        yield self.publish_phase(process, tcp, metaq, BEFORE, COUNTS, placed)
        everything = Counter(body(source, n) for source, count in COUNTS.items() for n in range(count))
        suffix = Counter(body(source, n) for source, count in COUNTS.items() for n in range(BEFORE, count))
        self.assertEqual((sum(everything.values()), sum(suffix.values())), (100000, 10000))
        yield self.post(process, "/channel/delete?topic=%s&channel=live" % (TOPIC,))

        # get from offset 0, every partition: exactly the messages, each
        # source's in publish order within a partition, MetaQ puts where
        # their replies said.
        found: Counter[bytes] = Counter()
        for partition in range(PARTITIONS):
            records = yield self.read_partition(metaq, partition)
            self.assertTrue(records, "partition %d is empty" % (partition,))
            last: Dict[bytes, int] = defaultdict(lambda: -1)
            for record in records:
                source, number = parse_body(record.payload)
                self.assertGreater(number, last[source], (partition, record))
                last[source] = number
                self.assertEqual((record.flag, record.attribute), (0, None))
                if source == b"metaq":
                    self.assertEqual(placed[record.payload], (partition, record.offset))
                found[record.payload] += 1
            self.assertEqual(records[0].offset, 0)
            # An offset inside a record is moved (301) to the record's start.
            moved = yield metaq.get(TOPIC, partition, 1, 4096, follow_moved=True)
            self.assertEqual((moved.offset, moved.records[0]), (0, records[0]))
        self.assertEqual(found, everything)

        # A channel rewound to earliest receives all 100,000.
        yield self.post(process, "/channel/create?topic=%s&channel=all" % (TOPIC,))
        yield self.post(process, "/channel/rewind?topic=%s&channel=all&earliest" % (TOPIC,))
        received = yield self.receive(process, "all", 100000)
        self.assertEqual(Counter(received), everything)

        # A channel rewound to the timestamp receives exactly the suffix.
        yield self.post(process, "/channel/create?topic=%s&channel=since" % (TOPIC,))
        yield self.post(process, "/channel/rewind?topic=%s&channel=since&timestamp=%d" % (TOPIC, since_ms))
        received = yield self.receive(process, "since", 10000)
        self.assertEqual(Counter(received), suffix)

        # nsq_log --timestamp prints exactly each partition's suffix.
        logged: Counter[bytes] = Counter()
        for partition in range(PARTITIONS):
            out = yield self.nsq_log(
                process, "--topic=" + TOPIC, "--partition=%d" % (partition,), "--timestamp=%d" % (since_ms,)
            )
            logged.update(out.splitlines())
        self.assertEqual(logged, suffix)

    @inlineCallbacks
    def _reap(self, process: NSQDProcess) -> Generator[Any, Any, None]:
        process.kill()
        yield process.ended
