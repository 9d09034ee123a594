# -*- test-case-name: tests.test_memstats -*-
"""
The memory block of nsqd's ``/stats`` (Go's ``memStats``): the process's
memory and garbage collections under Go's names, mapped to what Python
knows (:func:`memory_stats`).
"""

from __future__ import annotations

import gc
import os
import sys
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Deque, Dict, List, Optional, Tuple

__all__ = ["MemStats", "memory_stats", "watch_gc"]


@dataclass
class MemStats:
    """
    The process's memory, under Go's ``memStats`` names.  See
    :func:`memory_stats` for what each means in Python.
    """

    heap_objects: int
    heap_idle_bytes: int
    heap_in_use_bytes: int
    heap_released_bytes: int
    gc_pause_usec_100: int
    gc_pause_usec_99: int
    gc_pause_usec_95: int
    next_gc_bytes: int
    gc_total_runs: int

    def to_json(self) -> Dict[str, Any]:
        """Go's ``memStats`` JSON, in its field order."""
        return {
            "heap_objects": self.heap_objects,
            "heap_idle_bytes": self.heap_idle_bytes,
            "heap_in_use_bytes": self.heap_in_use_bytes,
            "heap_released_bytes": self.heap_released_bytes,
            "gc_pause_usec_100": self.gc_pause_usec_100,
            "gc_pause_usec_99": self.gc_pause_usec_99,
            "gc_pause_usec_95": self.gc_pause_usec_95,
            "next_gc_bytes": self.next_gc_bytes,
            "gc_total_runs": self.gc_total_runs,
        }


class _GCPauses:
    """
    The durations of the last 256 collections, timed by ``gc.callbacks``.
    PyPy has no ``gc.callbacks``; there its major collections are counted
    through ``gc.hooks`` (when no other hook is set), and no pause is timed.
    """

    def __init__(self) -> None:
        # Go's MemStats.PauseNs is a ring of the last 256 pauses.
        self.pauses: Deque[int] = deque(maxlen=256)
        self.runs = 0
        self._started = 0.0
        self.installed = False

    def install(self) -> None:
        if self.installed:
            return
        callbacks = getattr(gc, "callbacks", None)
        if callbacks is not None:
            callbacks.append(self._callback)
            self.installed = True
            return
        hooks = getattr(gc, "hooks", None)
        if hooks is not None and hooks.on_gc_collect is None:
            hooks.on_gc_collect = self._collected
            self.installed = True

    def _collected(self, stats: Any) -> None:
        self.runs += stats.count

    def _callback(self, phase: str, info: Dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif phase == "stop" and self._started:
            self.pauses.append(int((time.perf_counter() - self._started) * 1e9))
            self._started = 0.0
            self.runs += 1


_gc_pauses = _GCPauses()


def watch_gc() -> None:
    """
    Start timing garbage collections (for ``gc_pause_usec_*``).  Called by
    the first :func:`memory_stats`; call it at start-up to have pauses from
    the start.  Calling it again does nothing.
    """
    _gc_pauses.install()


def _percentile(perc: float, values: List[int]) -> int:
    """Go nsqd's ``percentile`` over sorted values: 0 when there is none."""
    length = len(values)
    if length == 0:
        return 0
    index = int((perc / 100.0) * length + 0.5)
    if index >= length:
        index = length - 1
    return values[index]


def _resident_bytes() -> int:
    """The resident set size, from ``/proc/self/statm`` or ``getrusage``."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            resident = int(statm.read().split()[1])
        return resident * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        pass
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Kilobytes on Linux, bytes on macOS.
    return peak if sys.platform == "darwin" else peak * 1024


def _gc_total_runs() -> int:
    try:
        return sum(int(generation["collections"]) for generation in gc.get_stats())
    except (AttributeError, TypeError, KeyError):
        return _gc_pauses.runs


def _traced_memory() -> Optional[Tuple[int, int]]:
    """``tracemalloc``'s (current, peak) while it traces; None otherwise."""
    try:
        import tracemalloc
    except ImportError:  # PyPy has no _tracemalloc
        return None
    if not tracemalloc.is_tracing():
        return None
    return tracemalloc.get_traced_memory()


def memory_stats() -> MemStats:
    """
    The process's memory under Go's names, mapped to what Python knows:

    - ``heap_objects``: ``sys.getallocatedblocks()``, the memory blocks the
      interpreter has allocated (0 where the runtime does not tell).
    - ``heap_in_use_bytes``: with ``tracemalloc`` tracing, the traced
      memory now; else the resident set size (``/proc/self/statm``, or
      the peak from ``getrusage`` elsewhere).
    - ``heap_idle_bytes``: with ``tracemalloc`` tracing, its peak minus
      what is in use now (memory used before and free now); else 0.
    - ``heap_released_bytes``: 0; CPython does not report memory given
      back to the system.
    - ``gc_pause_usec_100``/``99``/``95``: percentiles (Go's rule) of the
      durations of the last 256 garbage collections, in microseconds,
      timed through ``gc.callbacks`` since :func:`watch_gc`.
    - ``next_gc_bytes``: allocations left before the next generation-0
      collection (``gc.get_threshold()[0] - gc.get_count()[0]``); Python
      triggers collections by object count, not bytes.  0 while the
      collector is disabled.
    - ``gc_total_runs``: collections of every generation so far
      (``gc.get_stats()``).
    """
    watch_gc()
    blocks = getattr(sys, "getallocatedblocks", None)
    heap_objects = blocks() if blocks is not None else 0
    idle = 0
    traced = _traced_memory()
    if traced is not None:
        in_use, peak = traced
        idle = peak - in_use
    else:
        in_use = _resident_bytes()
    pauses = sorted(_gc_pauses.pauses)
    next_gc = 0
    # PyPy's collector is not generational by object count: no threshold.
    if gc.isenabled() and hasattr(gc, "get_threshold"):
        next_gc = max(gc.get_threshold()[0] - gc.get_count()[0], 0)
    return MemStats(
        heap_objects=heap_objects,
        heap_idle_bytes=idle,
        heap_in_use_bytes=in_use,
        heap_released_bytes=0,
        gc_pause_usec_100=_percentile(100.0, pauses) // 1000,
        gc_pause_usec_99=_percentile(99.0, pauses) // 1000,
        gc_pause_usec_95=_percentile(95.0, pauses) // 1000,
        next_gc_bytes=next_gc,
        gc_total_runs=_gc_total_runs(),
    )
