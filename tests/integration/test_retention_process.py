"""
Retained topics end to end: a real nsqd with a 4-partition retained
topic, published to over TCP (PUB, MPUB) and HTTP, read back from the log
files after SIGTERM; channels rewound to the earliest record and to a
timestamp; every acknowledged record kept through SIGKILL with
``--sync-every=1``.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from typing import Any, Dict, Generator, List, Sequence

from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.internet.task import Clock, deferLater
from twisted.trial.unittest import TestCase

from tests.integration.nsq_client import NSQClient, connect, receive_exactly
from tests.integration.nsqd_process import ExitStatus, NSQDProcess
from tests.integration.test_http_process import http_client
from tests.integration.test_nsqd_process import LOOPBACK
from txnsq.storage.topic_log import TopicLog
from txnsq.storage.log_format import iter_records

WAIT = 60.0
QUIET = 1.0


def read_log(data_path: str, topic: str, partitions: int) -> Dict[int, List[Any]]:
    """Every record of every partition, read from the files with a fresh TopicLog."""
    log = TopicLog(os.path.join(data_path, "retained"), topic, partitions, Clock())
    try:
        found: Dict[int, List[Any]] = {}
        for number, part in enumerate(log.partitions):
            found[number] = []
            offset = part.first_offset
            while offset < part.next_offset:
                data, offset = part.read(offset, 1 << 20)
                found[number].extend(iter_records(data, offset - len(data)))
        return found
    finally:
        log.close()


class RetainedTopicProcessTests(TestCase):
    """A retained topic on a real nsqd."""

    timeout = 240

    def setUp(self) -> None:
        from twisted.internet import reactor

        self.reactor: Any = reactor
        self.http = http_client(reactor)

    @inlineCallbacks
    def start(self, data_path: str, *flags: str) -> Generator[Any, Any, NSQDProcess]:
        process = NSQDProcess(LOOPBACK + ["--data-path=%s" % (data_path,)] + list(flags), self.reactor)
        self.addCleanup(self._reap, process)
        yield process.start()
        return process

    @inlineCallbacks
    def _reap(self, process: NSQDProcess) -> Generator[Any, Any, None]:
        process.kill()
        yield process.ended

    @inlineCallbacks
    def post(self, process: NSQDProcess, path: str, body: bytes = b"") -> Generator[Any, Any, Any]:
        response = yield self.http.post("http://127.0.0.1:%d%s" % (process.http_port, path), data=body)
        content = yield response.content()
        self.assertEqual(response.code, 200, (path, content))
        return content

    @inlineCallbacks
    def stats(self, process: NSQDProcess) -> Generator[Any, Any, Any]:
        response = yield self.http.get("http://127.0.0.1:%d/stats?format=json" % (process.http_port,))
        content = yield response.content()
        return json.loads(content)

    @inlineCallbacks
    def connect(self, process: NSQDProcess) -> Generator[Any, Any, NSQClient]:
        client = yield connect(self.reactor, process.tcp_port)
        self.addCleanup(client.close)
        return client

    def receive(self, process: NSQDProcess, topic: str, channel: str, count: int) -> "Deferred[List[bytes]]":
        """Subscribe with a FINning client; exactly ``count`` messages arrive."""
        return receive_exactly(self.reactor, process.tcp_port, topic, channel, count, WAIT, QUIET, 2000)

    @inlineCallbacks
    def publish_tcp(self, process: NSQDProcess, topic: str, bodies: Sequence[bytes], batch: int) -> Generator[Any, Any, None]:
        client = yield self.connect(process)
        for start in range(0, len(bodies), batch):
            chunk = bodies[start : start + batch]
            if batch == 1:
                self.assertEqual((yield client.pub(topic, chunk[0])), b"OK")
            else:
                self.assertEqual((yield client.mpub(topic, chunk)), b"OK")

    @inlineCallbacks
    def test_publish_read_rewind(self) -> Generator[Any, Any, None]:
        """10,500 messages over TCP and HTTP are all in the 4 partitions' files after SIGTERM; rewinds replay all, or exactly the suffix."""
        data_path = os.path.abspath(self.mktemp())
        os.makedirs(data_path)
        nsqd = yield self.start(data_path, "--retain-topics=^r$", "--log-partitions=4")
        # A channel from the start, so that the topic holds no backlog of
        # its own (the first channel would get it besides its rewind).
        yield self.post(nsqd, "/topic/create?topic=r")
        yield self.post(nsqd, "/channel/create?topic=r&channel=live")
        pubs = [b"tcp pub %05d" % (n,) for n in range(1000)]
        mpubs = [b"tcp mpub %05d" % (n,) for n in range(4000)]
        https = [b"http %05d" % (n,) for n in range(5000)]
        yield self.publish_tcp(nsqd, "r", pubs, 1)
        yield self.publish_tcp(nsqd, "r", mpubs, 100)
        for start in range(0, len(https), 100):
            yield self.post(nsqd, "/mpub?topic=r", b"\n".join(https[start : start + 100]))
        # The rewind point: strictly between the last message above and the
        # first below, by more than the ids' time resolution (~1 ms).
        yield deferLater(self.reactor, 0.005, lambda: None)
        since_ms = int(time.time() * 1000)
        yield deferLater(self.reactor, 0.005, lambda: None)
        later = [b"later %03d" % (n,) for n in range(500)]
        for body in later[:100]:
            yield self.post(nsqd, "/pub?topic=r", body)
        yield self.publish_tcp(nsqd, "r", later[100:], 1)
        everything = pubs + mpubs + https + later

        stats = yield self.stats(nsqd)
        [topic] = stats["topics"]
        partitions = topic["retention"]["partitions"]
        self.assertEqual(len(partitions), 4)
        self.assertEqual(topic["retention"]["log_bytes"], sum(20 + len(body) for body in everything))
        # Single PUBs are spread evenly over the partitions.
        self.assertTrue(all(p["next_offset"] > 0 for p in partitions))

        yield self.post(nsqd, "/channel/create?topic=r&channel=all&from=earliest")
        received = yield self.receive(nsqd, "r", "all", len(everything))
        self.assertEqual(Counter(received), Counter(everything))

        yield self.post(nsqd, "/channel/create?topic=r&channel=suffix")
        yield self.post(nsqd, "/channel/rewind?topic=r&channel=suffix&timestamp=%d" % (since_ms,))
        suffix = yield self.receive(nsqd, "r", "suffix", len(later))
        self.assertEqual(sorted(suffix), later)

        # A second rewind of "all" to the earliest offsets replays everything again.
        yield self.post(nsqd, "/channel/rewind?topic=r&channel=all&earliest")
        again = yield self.receive(nsqd, "r", "all", len(everything))
        self.assertEqual(Counter(again), Counter(everything))

        status = yield nsqd.stop("TERM")
        self.assertEqual(status, ExitStatus(0, None), nsqd.output())
        found = read_log(data_path, "r", 4)
        self.assertEqual(Counter(r.data for records in found.values() for r in records), Counter(everything))
        self.assertEqual([p["next_offset"] for p in partitions], [
            records[-1].offset + 20 + len(records[-1].data) for records in found.values()
        ])
        # Restarted: still retained, offsets unchanged.
        again_nsqd = yield self.start(data_path)
        stats = yield self.stats(again_nsqd)
        self.assertEqual(stats["topics"][0]["retention"]["partitions"], partitions)
        status = yield again_nsqd.stop("TERM")
        self.assertEqual(status, ExitStatus(0, None))

    @inlineCallbacks
    def test_sigkill_keeps_acknowledged(self) -> Generator[Any, Any, None]:
        """With --sync-every=1 every acknowledged PUB to a retained topic is in the log after SIGKILL."""
        data_path = os.path.abspath(self.mktemp())
        os.makedirs(data_path)
        flags = ["--sync-every=1", "--mem-queue-size=0"]
        nsqd = yield self.start(data_path, *flags)
        yield self.post(nsqd, "/topic/retention?topic=k&partitions=4")
        yield self.post(nsqd, "/channel/create?topic=k&channel=c")
        bodies = [b"acked %04d" % (n,) for n in range(400)]
        yield self.publish_tcp(nsqd, "k", bodies[:300], 1)
        for body in bodies[300:]:
            yield self.post(nsqd, "/pub?topic=k", body)
        status = yield nsqd.stop("KILL")
        self.assertEqual(status.signal, 9)
        found = read_log(data_path, "k", 4)
        self.assertEqual(sorted(r.data for records in found.values() for r in records), bodies)
        restarted = yield self.start(data_path, *flags)
        received = yield self.receive(restarted, "k", "c", len(bodies))
        self.assertEqual(sorted(received), bodies)
        status = yield restarted.stop("TERM")
        self.assertEqual(status, ExitStatus(0, None))
