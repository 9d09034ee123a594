"""
Durability of the ``disk`` storage backend, end to end: real nsqd
processes on a data directory made by the test, stopped with SIGTERM or
SIGKILL and restarted on it, consumed over TCP; a directory in Go nsqd's
byte layout read by txnsq, and txnsq's directory read the way Go reads it.
"""

from __future__ import annotations

import json
import os
import re
import struct
from collections import Counter
from typing import Any, Dict, Generator, List, Optional, Sequence, Tuple

from twisted.internet.defer import inlineCallbacks
from twisted.trial.unittest import TestCase

from tests.integration.nsq_client import Message, NSQClient, connect
from tests.integration.nsqd_process import ExitStatus, NSQDProcess, run_nsqd
from tests.integration.test_nsqd_process import LOOPBACK, ProcessStarter
from txnsq.version import NSQ_VERSION

#: Generous bound for anything that should happen "at once".
WAIT = 30.0

#: How long nothing must arrive to count as "nothing arrives".
QUIET = 1.0

CLEAN_EXIT = ExitStatus(0, None)

_RECORD_LENGTH = struct.Struct(">I")
_META = re.compile(rb"\A(-?\d+)\n(\d+),(\d+)\n(\d+),(\d+)\n\Z")
_MESSAGE_HEADER = struct.Struct(">qH16s")


# -- go-diskqueue, read as Go reads it (independently of txnsq) -------------


def segment_path(data_path: str, queue: str, number: int) -> str:
    """The path of go-diskqueue segment ``number`` of ``queue``."""
    return os.path.join(data_path, "%s.diskqueue.%06d.dat" % (queue, number))


def read_meta(data_path: str, queue: str) -> Tuple[int, int, int, int, int]:
    """``(depth, readFileNum, readPos, writeFileNum, writePos)`` of a meta file."""
    with open(os.path.join(data_path, queue + ".diskqueue.meta.dat"), "rb") as meta:
        data = meta.read()
    match = _META.match(data)
    if match is None:
        raise AssertionError("%s: not a go-diskqueue meta file: %r" % (queue, data))
    depth, read_file, read_pos, write_file, write_pos = (int(group) for group in match.groups())
    return depth, read_file, read_pos, write_file, write_pos


def segment_records(path: str, start: int = 0, end: Optional[int] = None) -> List[bytes]:
    """The messages of the records of a segment file from ``start`` to ``end``."""
    with open(path, "rb") as segment:
        data = segment.read()
    if end is None:
        end = len(data)
    messages = []
    pos = start
    while pos < end:
        (length,) = _RECORD_LENGTH.unpack_from(data, pos)
        pos += _RECORD_LENGTH.size
        if pos + length > end:
            raise AssertionError("%s: record at %d runs past %d" % (path, pos, end))
        messages.append(data[pos : pos + length])
        pos += length
    return messages


def read_queue(data_path: str, queue: str) -> List[bytes]:
    """
    The messages a Go nsqd would read from ``queue``: from the meta file's
    read position to its write position; a segment before the last is read
    to its end.
    """
    _, read_file, read_pos, write_file, write_pos = read_meta(data_path, queue)
    messages: List[bytes] = []
    for number in range(read_file, write_file + 1):
        path = segment_path(data_path, queue, number)
        start = read_pos if number == read_file else 0
        if number == write_file:
            if write_pos == start:
                break
            messages.extend(segment_records(path, start, write_pos))
        else:
            messages.extend(segment_records(path, start))
    return messages


def message_body(data: bytes) -> bytes:
    """The body of an encoded message."""
    return data[_MESSAGE_HEADER.size :]


def message_attempts(data: bytes) -> int:
    """The attempts count of an encoded message."""
    attempts: int = _MESSAGE_HEADER.unpack_from(data)[1]
    return attempts


def bodies_of(messages: Sequence[Message]) -> List[bytes]:
    """The bodies of received messages, in order."""
    return [message.body for message in messages]


class DurabilityTests(TestCase):
    """Messages in a --data-path survive nsqd stopping and starting again."""

    timeout = 120

    def setUp(self) -> None:
        from twisted.internet import reactor

        self.reactor: Any = reactor
        self.reaper = ProcessStarter(self)

    # -- helpers -----------------------------------------------------------

    def make_dir(self) -> str:
        """A fresh empty directory (absolute path)."""
        path = os.path.abspath(self.mktemp())
        os.makedirs(path)
        return path

    @inlineCallbacks
    def start(self, data_path: str, *flags: str) -> Generator[Any, Any, NSQDProcess]:
        """An nsqd on ``data_path`` listening on loopback, reaped at cleanup."""
        process = NSQDProcess(
            LOOPBACK + ["--data-path=%s" % (data_path,)] + list(flags),
            cwd=os.path.dirname(data_path),
        )
        self.addCleanup(self.reaper._reap, process)
        yield process.start()
        return process

    @inlineCallbacks
    def stop(self, process: NSQDProcess, sig: str = "TERM") -> Generator[Any, Any, None]:
        """Signal nsqd; after SIGTERM it must exit 0, after SIGKILL be killed."""
        status = yield process.stop(sig)
        if sig == "TERM":
            self.assertEqual(status, CLEAN_EXIT, process.output())
        else:
            self.assertEqual(status.signal, 9, process.output())

    @inlineCallbacks
    def connect(self, process: NSQDProcess) -> Generator[Any, Any, NSQClient]:
        """A client connected to nsqd's TCP port, closed at cleanup."""
        client = yield connect(self.reactor, process.tcp_port, process.host)
        self.addCleanup(client.close)
        return client

    @inlineCallbacks
    def subscribe(
        self, process: NSQDProcess, topic: str, channel: str, ready: int
    ) -> Generator[Any, Any, NSQClient]:
        """A client subscribed to ``topic``/``channel`` with ``RDY ready``."""
        client = yield self.connect(process)
        yield client.sub(topic, channel)
        if ready:
            client.rdy(ready)
        return client

    @inlineCallbacks
    def create_channel(self, process: NSQDProcess, topic: str, channel: str) -> Generator[Any, Any, None]:
        """Create a channel by subscribing to it, then disconnect."""
        client = yield self.subscribe(process, topic, channel, 0)
        yield client.close()

    @inlineCallbacks
    def publish(
        self, process: NSQDProcess, topic: str, bodies: Sequence[bytes], batch: int = 100
    ) -> Generator[Any, Any, None]:
        """Publish ``bodies`` with MPUBs of ``batch``; every one answered OK."""
        client = yield self.connect(process)
        for start in range(0, len(bodies), batch):
            response = yield client.mpub(topic, bodies[start : start + batch])
            self.assertEqual(response, b"OK")
        yield client.close()

    @inlineCallbacks
    def consume(
        self, process: NSQDProcess, topic: str, channel: str, count: int
    ) -> Generator[Any, Any, List[Message]]:
        """
        Subscribe and receive ``count`` messages; then make sure nothing
        more arrives for a while.
        """
        client = yield self.subscribe(process, topic, channel, max(count, 1))
        arrived = yield client.wait_messages(count, WAIT)
        self.assertTrue(
            arrived,
            "%d of %d messages arrived\n%s" % (len(client.messages), count, process.output()),
        )
        more = yield client.wait_messages(count + 1, QUIET)
        self.assertFalse(more, "more than the %d messages expected arrived" % (count,))
        return client.messages

    @inlineCallbacks
    def assert_serves(self, process: NSQDProcess, topic: str, channel: str) -> Generator[Any, Any, None]:
        """nsqd delivers a new message published on ``topic`` to ``channel``."""
        consumer = yield self.subscribe(process, topic, channel, 1)
        producer = yield self.connect(process)
        yield producer.pub(topic, b"still serving")
        arrived = yield consumer.wait_for(
            lambda: b"still serving" in bodies_of(consumer.messages), WAIT
        )
        self.assertTrue(arrived, process.output())

    # -- tests -------------------------------------------------------------

    @inlineCallbacks
    def test_sigterm_keeps_spilled_messages(self) -> Generator[Any, Any, None]:
        """After SIGTERM and a restart every message is delivered exactly once, memory and disk parts alike."""
        data_path = self.make_dir()
        bodies = [b"message %04d" % (number,) for number in range(2000)]
        first = yield self.start(data_path, "--mem-queue-size=100")
        yield self.create_channel(first, "t", "c")
        yield self.publish(first, "t", bodies)
        # Records are written at the end of the reactor turn that took them,
        # before the OK goes out: all but the first 100 are on disk already.
        spilled = segment_records(segment_path(data_path, "t:c", 0))
        self.assertEqual([message_body(data) for data in spilled], bodies[100:])
        yield self.stop(first)
        self.assertEqual(read_meta(data_path, "t:c")[0], len(bodies))

        second = yield self.start(data_path, "--mem-queue-size=100")
        received = yield self.consume(second, "t", "c", len(bodies))
        self.assertEqual(Counter(bodies_of(received)), Counter(bodies))
        self.assertEqual({message.attempts for message in received}, {1})
        yield self.stop(second)

    @inlineCallbacks
    def test_sigterm_keeps_in_flight_and_deferred(self) -> Generator[Any, Any, None]:
        """After SIGTERM and a restart in-flight messages come again with one more attempt and deferred ones wait until due."""
        data_path = self.make_dir()
        due_ms = 4000
        first = yield self.start(data_path, "--mem-queue-size=100")
        consumer = yield self.subscribe(first, "t", "c", 1)
        producer = yield self.connect(first)

        # One message in flight on its second attempt.
        yield producer.pub("t", b"retried")
        self.assertTrue((yield consumer.wait_messages(1, WAIT)))
        consumer.req(consumer.messages[0].id, 0)
        self.assertTrue((yield consumer.wait_messages(2, WAIT)))
        retried = consumer.messages[1]
        self.assertEqual((retried.id, retried.attempts), (consumer.messages[0].id, 2))

        # Three more taken, one of them requeued for a minute: two in flight.
        bulk = [b"bulk %03d" % (number,) for number in range(300)]
        self.assertEqual((yield producer.mpub("t", bulk)), b"OK")
        consumer.rdy(4)
        self.assertTrue((yield consumer.wait_messages(5, WAIT)))
        consumer.rdy(0)
        requeued = consumer.messages[2]
        consumer.req(requeued.id, 60000)
        yield consumer.round_trip()
        in_flight = [retried] + consumer.messages[3:5]
        self.assertEqual(bodies_of(consumer.messages[2:5]), bulk[:3])

        sent_at = self.reactor.seconds()
        self.assertEqual((yield producer.dpub("t", due_ms, b"due soon")), b"OK")
        self.assertEqual((yield producer.dpub("t", 60000, b"due late")), b"OK")
        yield self.stop(first)

        second = yield self.start(data_path, "--mem-queue-size=100")
        client = yield self.subscribe(second, "t", "c", 1000)
        immediate = len(bulk)  # 297 queued, 3 in flight
        arrived = yield client.wait_messages(immediate, WAIT)
        self.assertTrue(arrived, "%d of %d arrived\n%s" % (len(client.messages), immediate, second.output()))
        received = client.messages[:immediate]
        self.assertEqual(
            Counter(bodies_of(received)),
            Counter(bulk[1:] + [b"retried"]),
        )
        by_id = {message.id: message for message in received}
        for before in in_flight:
            after = by_id[before.id]
            self.assertEqual(
                (after.body, after.timestamp, after.attempts),
                (before.body, before.timestamp, before.attempts + 1),
            )
        others = [message for message in received if message.id not in {m.id for m in in_flight}]
        self.assertEqual({message.attempts for message in others}, {1})

        def early() -> List[Message]:
            """Deferred messages delivered before they were due."""
            return [
                message
                for message in client.messages
                if message.body in (requeued.body, b"due late")
                or (message.body == b"due soon" and message.received_at < sent_at + due_ms / 1000.0)
            ]

        self.assertFalse((yield client.wait_for(lambda: bool(early()), QUIET)), early())
        due = yield client.wait_for(lambda: b"due soon" in bodies_of(client.messages), WAIT)
        self.assertTrue(due, "the 4 s DPUB never arrived\n%s" % (second.output(),))
        self.assertEqual(early(), [])
        (soon,) = [message for message in client.messages if message.body == b"due soon"]
        self.assertEqual(soon.attempts, 1)
        # The minute-long ones still wait.
        self.assertFalse((yield client.wait_messages(immediate + 2, QUIET)))
        yield self.stop(second)

    @inlineCallbacks
    def test_sigkill_with_sync_every_message(self) -> Generator[Any, Any, None]:
        """With --sync-every=1 and --mem-queue-size=0 every acknowledged PUB survives SIGKILL."""
        data_path = self.make_dir()
        flags = ["--sync-every=1", "--mem-queue-size=0"]
        bodies = [b"synced %03d" % (number,) for number in range(200)]
        first = yield self.start(data_path, *flags)
        yield self.create_channel(first, "t", "c")
        producer = yield self.connect(first)
        for body in bodies:
            self.assertEqual((yield producer.pub("t", body)), b"OK")
        yield self.stop(first, "KILL")

        second = yield self.start(data_path, *flags)
        received = yield self.consume(second, "t", "c", len(bodies))
        self.assertEqual(Counter(bodies_of(received)), Counter(bodies))
        yield self.stop(second)

    @inlineCallbacks
    def test_sigkill_with_defaults(self) -> Generator[Any, Any, None]:
        """After SIGKILL with messages in memory nsqd restarts and delivers a subset of them, each once and intact."""
        data_path = self.make_dir()
        bodies = [b"maybe %03d" % (number,) for number in range(500)]
        first = yield self.start(data_path)
        yield self.create_channel(first, "t", "c")
        yield self.publish(first, "t", bodies, batch=50)
        yield self.stop(first, "KILL")

        second = yield self.start(data_path)
        consumer = yield self.subscribe(second, "t", "c", 1000)
        producer = yield self.connect(second)
        # Recovered messages come before anything published after the start.
        yield producer.pub("t", b"marker")
        arrived = yield consumer.wait_for(lambda: b"marker" in bodies_of(consumer.messages), WAIT)
        self.assertTrue(arrived, second.output())
        self.assertFalse((yield consumer.wait_messages(len(consumer.messages) + 1, QUIET)))
        recovered = [message for message in consumer.messages if message.body != b"marker"]
        self.assertEqual(len(recovered) + 1, len(consumer.messages))
        self.assertLessEqual(set(bodies_of(recovered)), set(bodies))
        self.assertEqual(len(set(bodies_of(recovered))), len(recovered), "duplicates")
        self.assertEqual(len({message.id for message in recovered}), len(recovered), "duplicate ids")
        self.assertEqual({message.attempts for message in consumer.messages}, {1})
        yield self.stop(second)

    @inlineCallbacks
    def test_corrupt_segment_is_set_aside(self) -> Generator[Any, Any, None]:
        """A segment with an impossible record length is renamed .bad, logged and skipped; the other segments are delivered."""
        data_path = self.make_dir()
        flags = ["--mem-queue-size=0", "--max-bytes-per-file=1024"]
        # 84-byte records: 12 to a 1024-byte segment, 5 segments.
        bodies = [(b"segmented %03d " % (number,)).ljust(54, b".") for number in range(60)]
        first = yield self.start(data_path, *flags)
        yield self.create_channel(first, "t", "c")
        yield self.publish(first, "t", bodies, batch=10)
        yield self.stop(first)

        _, read_file, read_pos, write_file, _ = read_meta(data_path, "t:c")
        self.assertEqual((read_file, read_pos), (0, 0))
        self.assertEqual(write_file, 4)
        first_segment = segment_path(data_path, "t:c", 0)
        in_first = [message_body(data) for data in segment_records(first_segment)]
        self.assertEqual(in_first, bodies[: len(in_first)])
        with open(first_segment, "r+b") as segment:
            segment.write(b"\xff\xff\xff\xff")
        with open(first_segment, "rb") as segment:
            corrupted = segment.read()

        second = yield self.start(data_path, *flags)
        received = yield self.consume(second, "t", "c", len(bodies) - len(in_first))
        self.assertEqual(bodies_of(received), bodies[len(in_first) :])
        self.assertFalse(os.path.exists(first_segment))
        with open(first_segment + ".bad", "rb") as bad:
            self.assertEqual(bad.read(), corrupted)
        self.assertIn("invalid message read size (4294967295)", second.output())
        self.assertIn(first_segment + ".bad", second.output())
        yield self.assert_serves(second, "t", "c")
        yield self.stop(second)

    @inlineCallbacks
    def test_data_path_in_use(self) -> Generator[Any, Any, None]:
        """A second nsqd on a --data-path in use exits 1 with Go's message, and the first keeps serving."""
        data_path = self.make_dir()
        first = yield self.start(data_path)
        status, out, err = yield run_nsqd(
            LOOPBACK + ["--data-path=%s" % (data_path,)], cwd=os.path.dirname(data_path)
        )
        output = (out + err).decode("utf-8", "replace")
        self.assertEqual(status, ExitStatus(1, None), output)
        self.assertIn(
            "failed to instantiate nsqd - --data-path=%s in use "
            "(possibly by another instance of nsqd)" % (data_path,),
            output,
        )
        yield self.assert_serves(first, "t", "c")
        yield self.stop(first)

    @inlineCallbacks
    def test_reads_go_data_directory(self) -> Generator[Any, Any, None]:
        """A data directory in Go nsqd's byte layout is read: its channel delivers the queued messages with their IDs."""
        data_path = self.make_dir()
        files: Dict[str, bytes] = {
            "nsqd.dat": (
                b'{"topics":[{"name":"gotopic","paused":false,"channels":'
                b'[{"name":"gochan","paused":false}]}],"version":"1.3.0"}'
            ),
            # Topics have a queue too, empty here.
            "gotopic.diskqueue.meta.dat": b"0\n0,0\n0,0\n",
            "gotopic:gochan.diskqueue.000000.dat": (
                # length 31; timestamp 1700000000123456789 ns; attempts 0
                b"\x00\x00\x00\x1f" b"\x17\x97\x9c\xfe\x3d\x85\xcd\x15" b"\x00\x00"
                b"0a1b2c3d4e5f6789" b"hello"
                # length 31; timestamp 1700000001987654321 ns; attempts 2
                b"\x00\x00\x00\x1f" b"\x17\x97\x9c\xfe\xac\xa3\x32\xb1" b"\x00\x02"
                b"0a1b2c3d4e5f678a" b"world"
            ),
            "gotopic:gochan.diskqueue.meta.dat": b"2\n0,0\n0,70\n",
        }
        for name, data in files.items():
            with open(os.path.join(data_path, name), "wb") as written:
                written.write(data)

        nsqd = yield self.start(data_path)
        received = yield self.consume(nsqd, "gotopic", "gochan", 2)
        self.assertEqual(
            [(message.id, message.attempts, message.timestamp, message.body) for message in received],
            [
                (b"0a1b2c3d4e5f6789", 1, 1700000000123456789, b"hello"),
                (b"0a1b2c3d4e5f678a", 3, 1700000001987654321, b"world"),
            ],
        )
        yield self.stop(nsqd)

    @inlineCallbacks
    def test_leaves_go_data_directory(self) -> Generator[Any, Any, None]:
        """After SIGTERM the data path holds Go's nsqd.dat and meta and segment files whose depth is what is left."""
        data_path = self.make_dir()
        bodies = [b"left %d" % (number,) for number in range(5)]
        nsqd = yield self.start(data_path)
        consumer = yield self.subscribe(nsqd, "t8", "a", 0)
        yield self.create_channel(nsqd, "t8", "b")
        yield self.publish(nsqd, "t8", bodies)
        yield self.publish(nsqd, "lonely", [b"held 1", b"held 2"])
        consumer.rdy(2)
        self.assertTrue((yield consumer.wait_messages(2, WAIT)))
        consumer.rdy(0)
        for message in consumer.messages:
            consumer.fin(message.id)
        yield consumer.round_trip()
        yield self.stop(nsqd)

        with open(os.path.join(data_path, "nsqd.dat"), "rb") as metadata:
            written = metadata.read()
        self.assertEqual(
            written,
            b'{"topics":[{"name":"t8","paused":false,"channels":'
            b'[{"name":"a","paused":false},{"name":"b","paused":false}]},'
            b'{"name":"lonely","paused":false,"channels":null}],'
            b'"version":"' + NSQ_VERSION.encode() + b'"}',
        )
        self.assertEqual(
            [topic["name"] for topic in json.loads(written)["topics"]], ["t8", "lonely"]
        )
        expected = {
            "t8": [],
            "t8:a": bodies[2:],
            "t8:b": bodies,
            "lonely": [b"held 1", b"held 2"],
        }
        for queue, left in expected.items():
            messages = read_queue(data_path, queue)
            self.assertEqual(read_meta(data_path, queue)[0], len(left), queue)
            self.assertEqual([message_body(data) for data in messages], left, queue)
            self.assertEqual({message_attempts(data) for data in messages} - {0}, set(), queue)
        self.assertEqual(
            sorted(name for name in os.listdir(data_path) if "deferred" in name or name.endswith(".tmp")),
            [],
        )
