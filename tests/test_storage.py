"""
Tests for txnsq.storage: one conformance suite (``BackendQueueConformance``)
that every backend runs, plus each backend's own behaviour and the plugin
lookup.

A new backend gets the whole suite with a subclass that supplies
``make_backend`` (and, if it needs settings such as a data path,
``make_options``)::

    class DiskStorageTests(BackendQueueConformance, SynchronousTestCase):
        persistent = True

        def make_backend(self):
            return DiskStorage()

        def make_options(self):
            options = BackendQueueConformance.make_options(self)
            options.data_path = self.mktemp()
            os.makedirs(options.data_path)
            return options

(``tests/test_storage_disk.py`` has exactly that.)
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, List

from twisted.internet.task import Clock
from twisted.plugin import IPlugin, getPlugins
from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

from txnsq.storage import plugins as storage_plugins
from txnsq.storage.disk import DiskStorage
from txnsq.storage.ephemeral import EphemeralQueue, EphemeralStorage
from txnsq.storage.interfaces import IBackendQueue, IBatchQueue, IStorageBackend
from txnsq.storage.memory import MemoryQueue, MemoryStorage
from txnsq.storage.plugins import get_storage_backend, storage_backends


def message(i: int, size: int = 40) -> bytes:
    """A distinct message-like payload, ``size`` bytes long."""
    prefix = b"%08d:" % (i,)
    return prefix + bytes((i + j) % 256 for j in range(size - len(prefix)))


class BackendQueueConformance:
    """
    Behaviour every ``IBackendQueue`` shares, whatever its backend.

    Subclasses (with ``SynchronousTestCase``) supply :meth:`make_backend`;
    ``persistent`` says whether a closed queue's messages come back when
    the same name is opened again.  The tests stay within
    ``mem_queue_size`` so backends that drop overflow pass too.  Messages
    are at least 26 bytes, the header of an encoded message, as every
    message a topic or channel stores is.
    """

    #: Whether the backend's queues provide IBatchQueue (txnsq's own do).
    takes_runs = False

    persistent = False
    mem_queue_size = 100

    # Provided by SynchronousTestCase.
    assertEqual: Any
    assertIsNone: Any
    assertIsInstance: Any
    assertTrue: Any
    addCleanup: Any

    def make_backend(self) -> Any:
        """The backend under test (an ``IStorageBackend`` provider)."""
        raise NotImplementedError()

    def make_options(self) -> Any:
        """The settings queues are opened with."""
        return SimpleNamespace(
            mem_queue_size=self.mem_queue_size,
            data_path="",
            max_bytes_per_file=104857600,
            sync_every=2500,
            sync_timeout=2.0,
            max_msg_size=1048576,
        )

    def setUp(self) -> None:
        self.clock = Clock()
        self.options = self.make_options()
        self.backend = self.make_backend()
        self.opened: List[Any] = []

    def open(self, name: str = "topic:channel") -> Any:
        """Open a queue; it is deleted at the end of the test."""
        queue = self.backend.open_queue(name, self.options, self.clock)
        self.opened.append(queue)
        self.addCleanup(queue.delete)
        return queue

    def drain(self, queue: Any) -> List[bytes]:
        """Read a queue until it is empty."""
        out = []
        data = queue.read()
        while data is not None:
            out.append(data)
            data = queue.read()
        return out

    def test_backend_provides_interface(self) -> None:
        """The backend provides IStorageBackend and IPlugin."""
        self.assertTrue(verifyObject(IStorageBackend, self.backend))
        self.assertTrue(verifyObject(IPlugin, self.backend))
        self.assertIsInstance(self.backend.name, str)
        self.assertIsInstance(self.backend.description, str)

    def test_queue_provides_interface(self) -> None:
        """An opened queue provides IBackendQueue, limit included."""
        queue = self.open()
        self.assertTrue(verifyObject(IBackendQueue, queue))
        self.assertTrue(queue.limit is None or isinstance(queue.limit, int))

    def test_put_many(self) -> None:
        """A queue that takes runs (IBatchQueue) keeps them in order, interleaved with single puts and reads."""
        queue = self.open()
        if not IBatchQueue.providedBy(queue):
            # IBatchQueue is optional for a backend of one's own; txnsq's
            # own say they take runs, so that this cannot be skipped for them.
            self.assertFalse(self.takes_runs, "%r does not provide IBatchQueue" % (queue,))
            self.skipTest("%r does not take runs" % (queue,))
        self.assertTrue(verifyObject(IBatchQueue, queue))
        sent = [message(i) for i in range(40)]
        queue.put_many(sent[:15])
        queue.put(sent[15])
        queue.put_many([])
        out = [queue.read(), queue.read()]
        queue.put_many(sent[16:])
        self.assertEqual(queue.depth(), 38)
        out.extend(self.drain(queue))
        self.assertEqual(out, sent)

    def test_new_queue_empty(self) -> None:
        """A new queue has depth 0 and reads None."""
        queue = self.open()
        self.assertEqual(queue.depth(), 0)
        self.assertIsNone(queue.read())

    def test_fifo(self) -> None:
        """Messages are read back in the order they were put."""
        queue = self.open()
        sent = [message(i) for i in range(50)]
        for data in sent:
            queue.put(data)
        self.assertEqual(self.drain(queue), sent)
        self.assertIsNone(queue.read())

    def test_depth(self) -> None:
        """depth() counts messages put and not yet read."""
        queue = self.open()
        for i in range(10):
            queue.put(message(i))
        self.assertEqual(queue.depth(), 10)
        queue.read()
        queue.read()
        self.assertEqual(queue.depth(), 8)

    def test_interleaved(self) -> None:
        """Puts and reads may interleave without losing order."""
        queue = self.open()
        out = []
        for i in range(30):
            queue.put(message(i))
            if i % 3 == 2:
                out.append(queue.read())
        out.extend(self.drain(queue))
        self.assertEqual(out, [message(i) for i in range(30)])

    def test_binary_round_trip(self) -> None:
        """Any bytes, including every byte value and newlines, come back unchanged."""
        queue = self.open()
        data = bytes(range(256)) * 3 + b"\n\r\n\x00"
        queue.put(data)
        queue.put(message(1))
        self.assertEqual(self.drain(queue), [data, message(1)])

    def test_large_message(self) -> None:
        """A 1 MiB message comes back whole."""
        queue = self.open()
        data = message(7, 1024 * 1024)
        queue.put(data)
        self.assertEqual(queue.read(), data)

    def test_up_to_mem_queue_size(self) -> None:
        """mem_queue_size messages are all kept."""
        queue = self.open()
        sent = [message(i) for i in range(self.mem_queue_size)]
        for data in sent:
            queue.put(data)
        self.assertEqual(queue.depth(), self.mem_queue_size)
        self.assertEqual(self.drain(queue), sent)

    def test_empty(self) -> None:
        """empty() drops every message and the queue stays usable."""
        queue = self.open()
        for i in range(5):
            queue.put(message(i))
        queue.empty()
        self.assertEqual(queue.depth(), 0)
        self.assertIsNone(queue.read())
        queue.put(message(99))
        self.assertEqual(self.drain(queue), [message(99)])

    def test_queues_independent(self) -> None:
        """Queues of different names do not share messages."""
        first = self.open("t:a")
        second = self.open("t:b")
        first.put(message(1))
        second.put(message(2))
        self.assertEqual(self.drain(first), [message(1)])
        self.assertEqual(self.drain(second), [message(2)])

    def test_delete(self) -> None:
        """After delete(), the same name opens as an empty queue."""
        queue = self.backend.open_queue("gone", self.options, self.clock)
        queue.put(message(1))
        queue.delete()
        again = self.open("gone")
        self.assertEqual(again.depth(), 0)
        self.assertIsNone(again.read())

    def test_close_and_reopen(self) -> None:
        """A closed queue's messages come back on reopening iff the backend persists."""
        queue = self.backend.open_queue("kept", self.options, self.clock)
        sent = [message(i) for i in range(3)]
        for data in sent:
            queue.put(data)
        queue.close()
        again = self.open("kept")
        if self.persistent:
            self.assertEqual(again.depth(), 3)
            self.assertEqual(self.drain(again), sent)
        else:
            self.assertEqual(again.depth(), 0)

    def test_no_timers_left(self) -> None:
        """A queue leaves no timer behind once closed or deleted."""
        closed = self.backend.open_queue("a", self.options, self.clock)
        closed.put(message(1))
        closed.close()
        deleted = self.backend.open_queue("b", self.options, self.clock)
        deleted.put(message(2))
        deleted.delete()
        self.assertEqual(list(self.clock.getDelayedCalls()), [])


class MemoryStorageTests(BackendQueueConformance, SynchronousTestCase):
    """The memory backend."""

    takes_runs = True

    def make_backend(self) -> MemoryStorage:
        return MemoryStorage()

    def test_name(self) -> None:
        """The backend is called 'memory'."""
        self.assertEqual(self.backend.name, "memory")

    def test_limit_is_mem_queue_size(self) -> None:
        """A memory queue's limit is --mem-queue-size."""
        queue = self.open()
        self.assertIsInstance(queue, MemoryQueue)
        self.assertEqual(queue.limit, self.mem_queue_size)

    def test_put_beyond_limit(self) -> None:
        """put() never refuses: the limit is the topic's to enforce."""
        queue = self.open()
        for i in range(self.mem_queue_size + 10):
            queue.put(message(i))
        self.assertEqual(queue.depth(), self.mem_queue_size + 10)

    def test_runs_keep_order_and_depth(self) -> None:
        """
        Runs of equal-length messages (held joined until read), runs of
        mixed lengths and short runs (held one by one), and single puts
        interleave in order, and depth() counts every message throughout.
        """
        queue = self.open()
        sent: List[bytes] = []
        batches = [
            [message(i) for i in range(0, 10)],  # a run
            [message(10, 50), message(11), message(12), message(13)],  # mixed lengths
            [message(14), message(15)],  # too short for a run
            [message(i, 30) for i in range(16, 24)],  # a run, other length
        ]
        for n, batch in enumerate(batches):
            queue.put_many(batch)
            sent.extend(batch)
            queue.put(message(100 + n))
            sent.append(message(100 + n))
            self.assertEqual(queue.depth(), len(sent))
        # Entries: run + 1, 4 + 1, 2 + 1, run + 1.
        self.assertEqual(len(queue._items), 12)
        got = []
        while queue.depth():
            got.append(queue.read())
            self.assertEqual(queue.depth(), len(sent) - len(got))
        self.assertEqual(got, sent)
        self.assertIsNone(queue.read())

    def test_run_partly_read_then_emptied(self) -> None:
        """empty() drops a run half read, and the queue is usable after."""
        queue = self.open()
        queue.put_many([message(i) for i in range(8)])
        self.assertEqual(queue.read(), message(0))
        queue.empty()
        self.assertEqual(queue.depth(), 0)
        self.assertIsNone(queue.read())
        queue.put_many([message(i) for i in range(8, 16)])
        self.assertEqual(self.drain(queue), [message(i) for i in range(8, 16)])


class EphemeralStorageTests(BackendQueueConformance, SynchronousTestCase):
    """The ephemeral backend."""

    takes_runs = True

    def make_backend(self) -> EphemeralStorage:
        return EphemeralStorage()

    def test_name(self) -> None:
        """The backend is called 'ephemeral'."""
        self.assertEqual(self.backend.name, "ephemeral")

    def test_no_limit(self) -> None:
        """An ephemeral queue never makes a publish fail: its limit is None."""
        queue = self.open()
        self.assertIsInstance(queue, EphemeralQueue)
        self.assertIsNone(queue.limit)

    def test_drops_overflow(self) -> None:
        """Beyond mem_queue_size messages, put() drops and counts what it drops."""
        queue = self.open()
        for i in range(self.mem_queue_size + 7):
            queue.put(message(i))
        self.assertEqual(queue.depth(), self.mem_queue_size)
        self.assertEqual(queue.dropped, 7)
        self.assertEqual(
            self.drain(queue), [message(i) for i in range(self.mem_queue_size)]
        )

    def test_put_many_drops_overflow(self) -> None:
        """put_many() keeps what fits and drops and counts the rest, as put() of each does."""
        size = self.mem_queue_size
        sent = [message(i) for i in range(size + 7)]
        runs = self.open()
        runs.put_many(sent[:3])
        runs.put_many(sent[3 : size + 2])
        runs.put_many(sent[size + 2 :])
        one_by_one = self.open()
        for data in sent:
            one_by_one.put(data)
        self.assertEqual((runs.depth(), runs.dropped), (size, 7))
        self.assertEqual((one_by_one.depth(), one_by_one.dropped), (size, 7))
        self.assertEqual(self.drain(runs), self.drain(one_by_one))

    def test_room_after_read(self) -> None:
        """Reading makes room for new messages again."""
        queue = self.open()
        for i in range(self.mem_queue_size):
            queue.put(message(i))
        queue.read()
        queue.put(b"new")
        self.assertEqual(queue.dropped, 0)
        self.assertEqual(self.drain(queue)[-1], b"new")


class PluginTests(SynchronousTestCase):
    """Finding backends through Twisted plugins."""

    def test_plugins_found(self) -> None:
        """getPlugins finds the memory and ephemeral backends."""
        names = {plugin.name for plugin in getPlugins(IStorageBackend)}
        self.assertTrue({"memory", "ephemeral"} <= names, names)

    def test_get_memory(self) -> None:
        """get_storage_backend('memory') is the memory backend."""
        self.assertIsInstance(get_storage_backend("memory"), MemoryStorage)

    def test_get_ephemeral(self) -> None:
        """get_storage_backend('ephemeral') is the ephemeral backend."""
        self.assertIsInstance(get_storage_backend("ephemeral"), EphemeralStorage)

    def test_storage_backends(self) -> None:
        """storage_backends() maps each name to its backend."""
        backends = storage_backends()
        for name, backend in backends.items():
            self.assertEqual(backend.name, name)

    def test_builtin_without_plugin_scan(self) -> None:
        """txnsq's own backends are found without scanning the plugins."""

        def scan(interface: Any) -> Any:
            raise AssertionError("plugins scanned")

        self.patch(storage_plugins, "getPlugins", scan)
        self.assertIsInstance(get_storage_backend("disk"), DiskStorage)
        self.assertIsInstance(get_storage_backend("memory"), MemoryStorage)

    def test_third_party_plugin(self) -> None:
        """A name no builtin has is looked for among the plugins."""
        other = SimpleNamespace(name="other")
        self.patch(storage_plugins, "getPlugins", lambda interface: iter([other]))
        self.assertIs(get_storage_backend("other"), other)

    def test_unknown(self) -> None:
        """An unknown name is a ValueError that lists the known backends."""
        error = self.assertRaises(ValueError, get_storage_backend, "nonesuch")
        self.assertIn("'nonesuch'", str(error))
        self.assertIn("ephemeral", str(error))
        self.assertIn("memory", str(error))
