"""Tests for :mod:`lab.clock`'s :class:`FakeClock`: what it writes for libfaketime."""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any, Dict, List

from twisted.trial.unittest import SynchronousTestCase

from lab.clock import FakeClock, find_libfaketime
from lab.errors import LabError


class _Ledger:
    def __init__(self) -> None:
        self.files: List[str] = []

    def file(self, path: str) -> None:
        self.files.append(path)


class _World:
    def __init__(self, folder: str) -> None:
        self.round_dir = folder
        self.ledger = _Ledger()


class _Process:
    pid = 4242


class _Node:
    name = "n1"

    def __init__(self) -> None:
        self.env: Dict[str, str] = {"LD_PRELOAD": "/lib/other.so"}
        self.start_hooks: List[Any] = []
        self.process: Any = None
        self.running = False

    def alive(self) -> bool:
        return self.running


class FakeClockTests(SynchronousTestCase):
    """FakeClock: the node's environment and the offset file."""

    def setUp(self) -> None:
        try:
            find_libfaketime()
        except LabError as e:
            raise self.skipTest(str(e))  # type: ignore[misc]
        self.folder = tempfile.mkdtemp()
        self.world = _World(self.folder)
        self.node = _Node()
        self.clock = FakeClock(self.world, self.node)  # type: ignore[arg-type]

    def tearDown(self) -> None:
        for name in os.listdir(os.path.join(self.folder, "clock")):
            os.unlink(os.path.join(self.folder, "clock", name))
        os.rmdir(os.path.join(self.folder, "clock"))
        os.rmdir(self.folder)

    def assertNear(self, value: float, expected: float) -> None:
        """Within 50 ms: the clock is read between the test's steps."""
        self.assertTrue(abs(value - expected) < 0.05, "%r is not near %r" % (value, expected))

    def written(self) -> List[float]:
        with open(self.clock.path) as f:
            offset, rate = f.read().split()
        return [float(offset), float(rate.lstrip("x"))]

    def test_environment(self) -> None:
        """The library is preloaded after what was there; the file is read at every call; only the wall clock moves."""
        env = self.node.env
        self.assertEqual(env["LD_PRELOAD"].split()[0], "/lib/other.so")
        self.assertTrue(env["LD_PRELOAD"].endswith("libfaketime.so.1"))
        self.assertEqual(env["FAKETIME_TIMESTAMP_FILE"], self.clock.path)
        self.assertEqual((env["FAKETIME_NO_CACHE"], env["FAKETIME_DONT_FAKE_MONOTONIC"]), ("1", "1"))
        self.assertEqual(self.written(), [0.0, 1.0])
        self.assertIs(FakeClock.of(self.node), self.clock)  # type: ignore[arg-type]

    def test_step(self) -> None:
        """A step adds to the offset and keeps the rate."""
        self.clock.step(30.0)
        self.assertEqual(self.written(), [30.0, 1.0])
        self.clock.step(-30.0)
        self.assertEqual(self.written(), [0.0, 1.0])

    def test_rate_does_not_jump(self) -> None:
        """A rate set 10 s after the start is offset by what libfaketime would add for those 10 s."""
        self.clock.started_at = time.time() - 10.0
        self.clock.set(2.0, 1.5)
        offset, rate = self.written()
        self.assertEqual(rate, 1.5)
        self.assertNear(offset, 2.0 - 5.0)

    def test_lead_grows_with_rate(self) -> None:
        """The lead grows at rate - 1 from the moment the rate is set."""
        self.clock.set(1.0, 2.0)
        self.clock._lead_at -= 3.0
        self.assertNear(self.clock.lead_now(), 4.0)

    def test_restart_keeps_lead(self) -> None:
        """A new process of the node starts with the lead the clock has, and its files are recorded."""
        self.clock.set(0.0, 2.0)
        self.clock._lead_at -= 2.0
        self.node.process = _Process()
        self.node.start_hooks[0](self.node)
        offset, rate = self.written()
        self.assertNear(offset, 2.0)
        self.assertEqual(rate, 2.0)
        self.assertEqual(self.world.ledger.files, ["/dev/shm/faketime_shm_4242", "/dev/shm/sem.faketime_sem_4242"])

    def test_running_node(self) -> None:
        """A clock cannot be installed on a running node."""
        node = _Node()
        node.running = True
        self.assertRaises(LabError, FakeClock, self.world, node)

    def test_bad_rate(self) -> None:
        """A rate of 0 or less is refused."""
        self.assertRaises(LabError, self.clock.set, 0.0, 0.0)
