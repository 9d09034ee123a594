"""
Fakes shared by the broker core tests (test_topic, test_channel,
test_broker): options, a consumer and a storage backend that records what
it is asked to do.
"""

from __future__ import annotations

import struct
from collections import deque
from types import SimpleNamespace
from typing import Any, Deque, Dict, List, NamedTuple, Optional

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer

from txnsq.nsqd.broker import Broker
from txnsq.storage.interfaces import IBackendQueue, IStorageBackend
from txnsq.storage.memory import MemoryStorage

#: Where test clocks start: a realistic epoch, where float seconds are only
#: exact to about a quarter of a microsecond.
START = 1700000000.0

_HEADER = struct.Struct(">qH16s")


class Message(NamedTuple):
    """A decoded message payload (decoded here, independently of the code)."""

    timestamp: int
    attempts: int
    id: bytes
    body: bytes


def decode(data: bytes) -> Message:
    """Decode ``i64 ts | u16 attempts | 16-byte id | body``."""
    timestamp, attempts, msg_id = _HEADER.unpack_from(data)
    return Message(timestamp, attempts, msg_id, data[_HEADER.size :])


def make_options(**overrides: Any) -> SimpleNamespace:
    """A stand-in for NSQDOptions with Go's defaults for what the core reads."""
    values: Dict[str, Any] = dict(
        node_id=1,
        mem_queue_size=10000,
        msg_timeout=60.0,
        max_msg_timeout=900.0,
        max_req_timeout=3600.0,
        max_channel_consumers=0,
        max_msg_size=1048576,
        data_path="",
        storage="memory",
    )
    values.update(overrides)
    return SimpleNamespace(**values)


class FakeConsumer:
    """A consumer that records what it is sent."""

    def __init__(self, ready_count: int = 0, msg_timeout: float = 60.0) -> None:
        self.ready_count = ready_count
        self.in_flight_count = 0
        self.msg_timeout = msg_timeout
        self.received: List[bytes] = []
        self.closed = False

    def __repr__(self) -> str:
        return "<FakeConsumer rdy=%d in_flight=%d>" % (
            self.ready_count,
            self.in_flight_count,
        )

    def send_message(self, data: bytes) -> None:
        self.received.append(data)

    def close(self) -> None:
        self.closed = True

    def take(self) -> List[Message]:
        """The messages received since the last call, decoded."""
        messages = [decode(data) for data in self.received]
        del self.received[:]
        return messages

    def bodies(self) -> List[bytes]:
        """The bodies received since the last call."""
        return [message.body for message in self.take()]


@implementer(IBackendQueue)
class RecordingQueue:
    """A memory queue that logs calls and keeps its messages when closed."""

    def __init__(self, name: str, limit: Optional[int], log: List[Any]) -> None:
        self.name = name
        self.limit = limit
        self.items: Deque[bytes] = deque()
        self.log = log
        self.closed = False
        self.deleted = False
        self.error: Optional[str] = None

    def put(self, data: bytes) -> None:
        self.items.append(data)

    def read(self) -> Optional[bytes]:
        return self.items.popleft() if self.items else None

    def depth(self) -> int:
        return len(self.items)

    def empty(self) -> None:
        self.items.clear()

    def close(self) -> None:
        self.closed = True
        self.log.append(("close", self.name))

    def delete(self) -> None:
        self.items.clear()
        self.deleted = True
        self.log.append(("delete", self.name))


@implementer(IStorageBackend)
class RecordingStorage:
    """A backend of RecordingQueues, each findable by name."""

    name = "recording"
    description = "test backend"
    durable = False

    def __init__(self) -> None:
        self.queues: Dict[str, RecordingQueue] = {}
        self.log: List[Any] = []

    def open_queue(self, name: str, options: Any, clock: Any) -> RecordingQueue:
        self.log.append(("open", name))
        queue = self.queues[name] = RecordingQueue(name, options.mem_queue_size, self.log)
        return queue


def make_broker(
    clock: Optional[Clock] = None, storage: Any = None, **overrides: Any
) -> Broker:
    """A broker on a Clock (started at START) with memory storage."""
    if clock is None:
        clock = Clock()
        clock.advance(START)
    return Broker(
        make_options(**overrides),
        clock,
        storage if storage is not None else MemoryStorage(),
    )


class TopicTestCase(SynchronousTestCase):
    """A broker on a Clock (see :func:`make_broker`) with topic ``t``."""

    def setUp(self) -> None:
        self.build()

    def build(self, **overrides: Any) -> None:
        """(Re)make the broker with some options changed."""
        self.broker = make_broker(**overrides)
        self.clock = self.broker.clock
        self.topic = self.broker.get_topic("t")
