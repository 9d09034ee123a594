"""
Clock faults: an nsqd whose clock is off, through libfaketime (Debian
package ``faketime``) preloaded into it.

A :class:`FakeClock` is installed on a node before it starts: its
environment gets ``LD_PRELOAD=libfaketime.so.1`` (after any preload it
already has) and ``FAKETIME_TIMESTAMP_FILE`` naming a file of the
round's, read at every clock call (``FAKETIME_NO_CACHE=1``, 3-4 us a
call), so the lab changes the node's time while it runs.  libfaketime
computes ``fake = start + (real - start) * rate + offset`` from the
process's start; :meth:`FakeClock.set` writes the offset that gives the
clock the lead asked for at that moment, so a rate change does not
jump.  What the lab changes is the time the process reads
(``clock_gettime``, ``gettimeofday``, ``time``), and libfaketime scales
the timeouts of ``epoll_wait``/``poll``/``select``/``nanosleep`` by the
rate: a fast node's reactor wakes sooner, as on a fast machine.

- :class:`ClockSkew` steps the node's wall clock by ``offset`` seconds
  (an NTP step or an operator's ``date -s``) and steps it back at stop.
  Only ``CLOCK_REALTIME`` moves (``FAKETIME_DONT_FAKE_MONOTONIC=1``), as
  in a real step.  Twisted's reactor schedules on ``time.time()``
  (``reactor.seconds``), and so does every timer of txnsq: a forward step
  makes every pending timer due at once; a backward one postpones every
  timer already scheduled by the step.
- :class:`ClockRate` makes the node's clock run ``rate`` times as fast
  from its start on (a bad oscillator: ``CLOCK_MONOTONIC`` too), and at
  stop steps it back to the true time (what ntpd does past 128 ms).

libfaketime keeps a semaphore and a shared memory segment in
``/dev/shm`` per process (named by its pid), and a process killed, or
started through ``ip netns exec`` (which loads it first, then execs),
leaves them: each start's are recorded in the ledger and removed at
teardown.
"""

from __future__ import annotations

import glob
import os
import time
import weakref
from typing import Any, Dict, Optional

from lab.errors import LabError
from lab.history import History
from lab.nemesis import Nemesis
from lab.world import NsqdNode, World

__all__ = ["ClockRate", "ClockSkew", "FakeClock", "find_libfaketime"]

#: Where Debian's ``faketime`` package puts the library.
LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"

_CLOCKS: "weakref.WeakKeyDictionary[NsqdNode, FakeClock]" = weakref.WeakKeyDictionary()


def find_libfaketime() -> str:
    """
    The path of ``libfaketime.so.1``.

    :raises LabError: it is not installed (naming its Debian package).
    """
    if os.path.exists(LIBFAKETIME):
        return LIBFAKETIME
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    if found:
        return found[0]
    raise LabError("missing libfaketime (Debian package faketime; bash .ci/ensure_lab.sh installs it)")


class FakeClock:
    """
    The clock of one nsqd, set from the lab while it runs.  Install it
    before the node starts; it stays installed for the node's restarts,
    which keep the clock's lead (the machine's clock is still off).

    :param world: the round's world (its folder and ledger).
    :param node: the nsqd, not started yet.
    :param fake_monotonic: move ``CLOCK_MONOTONIC`` with the wall clock
        (right for a rate; a step moves only the wall clock).
    :raises LabError: libfaketime is missing, or the node runs already.
    """

    def __init__(self, world: World, node: NsqdNode, fake_monotonic: bool = False) -> None:
        if node.alive():
            raise LabError("a fake clock is installed before %s starts" % (node.name,))
        library = find_libfaketime()
        self.world = world
        self.node = node
        self.path = os.path.join(world.round_dir, "clock", node.name + ".faketime")
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        #: libfaketime's start: the real time its process loaded it.
        self.started_at = time.time()
        self.lead = 0.0
        self.rate = 1.0
        self._lead_at = self.started_at
        self._write(0.0)
        preload = node.env.get("LD_PRELOAD", "")
        node.env["LD_PRELOAD"] = (preload + " " + library).strip()
        node.env["FAKETIME_TIMESTAMP_FILE"] = self.path
        node.env["FAKETIME_NO_CACHE"] = "1"
        if not fake_monotonic:
            node.env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
        node.start_hooks.append(self._started)
        _CLOCKS[node] = self

    @classmethod
    def of(cls, node: NsqdNode) -> "FakeClock":
        """
        The fake clock installed on ``node``.

        :raises LabError: none is (the scenario must install one before
            the node starts).
        """
        clock = _CLOCKS.get(node)
        if clock is None:
            raise LabError("%s has no fake clock (install FakeClock before it starts)" % (node.name,))
        return clock

    def _started(self, node: NsqdNode) -> None:
        process = node.process
        assert process is not None
        pid = process.pid
        for path in ("/dev/shm/faketime_shm_%d" % pid, "/dev/shm/sem.faketime_sem_%d" % pid):
            self.world.ledger.file(path)
        # A new process is a new libfaketime start: the lead it has now
        # is carried over as the new offset.
        lead = self.lead_now()
        self.started_at = time.time()
        self.set(lead, self.rate)

    def lead_now(self) -> float:
        """How far ahead of the true time the node's clock is now, in seconds."""
        return self.lead + (self.rate - 1.0) * (time.time() - self._lead_at)

    def set(self, lead: float, rate: float) -> None:
        """From now on the node's clock is ``lead`` seconds ahead and runs at ``rate``."""
        if rate <= 0:
            raise LabError("a clock rate must be positive, not %r" % (rate,))
        now = time.time()
        self.lead, self.rate, self._lead_at = lead, rate, now
        # fake(now) = start + (now - start) * rate + offset = now + lead
        self._write(lead - (rate - 1.0) * (now - self.started_at))

    def step(self, seconds: float) -> None:
        """The node's clock jumps by ``seconds`` (back when negative); its rate stays."""
        self.set(self.lead_now() + seconds, self.rate)

    def _write(self, offset: float) -> None:
        # Renamed into place: the library reads the file at every call
        # and must never see it half written.
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            f.write("%+.6f x%.6f\n" % (offset, self.rate))
        os.replace(tmp, self.path)


class ClockSkew(Nemesis):
    """
    The node's wall clock steps ``offset`` seconds (forward when
    positive) at start, and back at stop.  The node needs a
    :class:`FakeClock` (without ``fake_monotonic``).
    """

    name = "clock-skew"

    def __init__(self, world: World, history: History, node: NsqdNode, offset: float) -> None:
        super().__init__(world, history)
        self.node = node
        self.offset = offset
        self.clock = FakeClock.of(node)

    def describe(self) -> Dict[str, Any]:
        return {"node": self.node.name, "offset": self.offset}

    def _start(self) -> None:
        self.clock.step(self.offset)

    def _stop(self) -> None:
        self.clock.step(-self.offset)


class ClockRate(Nemesis):
    """
    The node's clock runs ``rate`` times as fast (1.5: fast, 0.7: slow)
    from start; at stop it is stepped back to the true time and runs
    true again.  The node needs a :class:`FakeClock` (``fake_monotonic``
    for a faithful bad oscillator).
    """

    name = "clock-rate"

    def __init__(self, world: World, history: History, node: NsqdNode, rate: float) -> None:
        super().__init__(world, history)
        self.node = node
        self.rate = rate
        self.clock = FakeClock.of(node)
        self.stepped: Optional[float] = None

    def describe(self) -> Dict[str, Any]:
        entry: Dict[str, Any] = {"node": self.node.name, "rate": self.rate}
        if self.stepped is not None:
            entry["stepped_back_s"] = round(self.stepped, 3)
        return entry

    def _start(self) -> None:
        self.stepped = None
        self.clock.set(self.clock.lead_now(), self.rate)

    def _stop(self) -> None:
        self.stepped = self.clock.lead_now()
        self.clock.set(0.0, 1.0)
