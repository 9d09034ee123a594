# -*- test-case-name: tests.test_http,tests.test_nsqlookupd_http -*-
"""
Python's stand-ins for Go's ``runtime/pprof``, served under ``/debug/pprof``.

Go's paths are kept with Python's equivalents behind them: thread stacks
for ``goroutine``, a memory summary for ``heap``, the live threads for
``threadcreate`` and a cProfile of the reactor thread, where all of a
daemon's work runs, for ``profile``.
"""

from __future__ import annotations

import cProfile
import gc
import html
import io
import marshal
import pstats
import sys
import threading
import traceback
from collections import Counter
from types import FrameType
from typing import Any, Callable, Dict, List, Sequence, Tuple

__all__ = [
    "ProfilerBusy",
    "ReactorProfiler",
    "memory_summary",
    "pprof_index",
    "profile_pstats",
    "profile_text",
    "thread_list",
    "thread_stacks",
]


def _thread_frames() -> Dict[int, FrameType]:
    """Every thread's current frame, by thread id (the one reach into ``sys``'s privates)."""
    return sys._current_frames()


def thread_stacks(full: bool) -> str:
    """
    Every thread's stack, innermost call first: each thread on its own
    (``goroutine?debug=2``) or identical stacks counted together.
    """
    frames = _thread_frames()
    names = {thread.ident: thread for thread in threading.enumerate()}
    entries: List[Tuple[str, List[str]]] = []
    for ident, frame in frames.items():
        thread = names.get(ident)
        if thread is None:
            label = "thread %d [unknown]" % (ident,)
        else:
            label = "thread %d [%s%s]" % (
                ident,
                thread.name,
                ", daemon" if thread.daemon else "",
            )
        lines: List[str] = []
        for summary in reversed(traceback.extract_stack(frame)):
            lines.append("%s()\n\t%s:%s" % (summary.name, summary.filename, summary.lineno))
        entries.append((label, lines))
    if full:
        return "".join(
            "%s:\n%s\n\n" % (label, "\n".join(lines)) for label, lines in entries
        )
    groups: Counter[Tuple[str, ...]] = Counter(tuple(lines) for _, lines in entries)
    out = ["thread profile: total %d\n" % (len(entries),)]
    for stack, count in groups.most_common():
        out.append("%d @\n" % (count,))
        for line in stack:
            function, location = line.split("\n\t", 1)
            out.append("#\t%s\t%s\n" % (function, location))
        out.append("\n")
    return "".join(out)


def memory_summary(top: int = 30) -> str:
    """
    The heap as Python sees it: process memory, the garbage collector's
    counters, live objects by type and, while ``tracemalloc`` traces, the
    lines that allocated most.
    """
    out = ["heap profile (Python %s)\n" % (sys.version.split()[0],)]
    try:
        import resource

        usage = resource.getrusage(resource.RUSAGE_SELF)
        out.append("max_rss_kb %d\n" % (usage.ru_maxrss,))
    except ImportError:  # pragma: no cover - not on POSIX
        pass
    try:
        with open("/proc/self/statm") as statm:
            pages = statm.read().split()
        page_size = 4096
        try:
            import os

            page_size = os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, ValueError, OSError):  # pragma: no cover
            pass
        out.append("rss_bytes %d\n" % (int(pages[1]) * page_size,))
    except (OSError, IndexError, ValueError):
        pass
    out.append("\n# gc\n")
    out.append("enabled %s\n" % (gc.isenabled(),))
    get_count = getattr(gc, "get_count", None)
    if get_count is not None:
        out.append("count %s\n" % (" ".join(str(n) for n in get_count()),))
    get_threshold = getattr(gc, "get_threshold", None)
    if get_threshold is not None:
        out.append("threshold %s\n" % (" ".join(str(n) for n in get_threshold()),))
    get_stats = getattr(gc, "get_stats", None)
    gc_stats = get_stats() if get_stats is not None else []
    if not isinstance(gc_stats, list):
        # PyPy: one GcStats object with a readable summary, not generations.
        out.append("%s\n" % (gc_stats,))
    else:
        for generation, stats in enumerate(gc_stats):
            out.append(
                "generation %d: collections %s collected %s uncollectable %s\n"
                % (
                    generation,
                    stats.get("collections"),
                    stats.get("collected"),
                    stats.get("uncollectable"),
                )
            )
    objects = gc.get_objects()
    by_type: Counter[str] = Counter(type(obj).__qualname__ for obj in objects)
    out.append("\n# objects tracked by the collector: %d\n" % (len(objects),))
    del objects
    for name, count in by_type.most_common(top):
        out.append("%10d %s\n" % (count, name))
    out.append("\n# tracemalloc\n")
    try:
        import tracemalloc

        tracing = tracemalloc.is_tracing()
    except Exception:  # PyPy has no working tracemalloc
        tracing = False
    if not tracing:
        out.append(
            "not tracing: start the daemon with PYTHONTRACEMALLOC=1 (or more frames) "
            "to see which lines allocate\n"
        )
    else:
        current, peak = tracemalloc.get_traced_memory()
        out.append("traced_bytes %d\npeak_traced_bytes %d\n" % (current, peak))
        for stat in tracemalloc.take_snapshot().statistics("lineno")[:top]:
            out.append("%s\n" % (stat,))
    return "".join(out)


def thread_list() -> str:
    """The live threads (Go's ``threadcreate`` profile counts OS threads)."""
    threads = threading.enumerate()
    out = ["threadcreate profile: total %d\n" % (len(threads),)]
    for thread in threads:
        out.append(
            "%s ident=%s daemon=%s alive=%s\n"
            % (thread.name, thread.ident, thread.daemon, thread.is_alive())
        )
    return "".join(out)


_PPROF_PROFILES: Sequence[Tuple[str, str, str]] = (
    ("block", "block", "Python has no blocking profile; see profile for the reactor thread's time."),
    ("cmdline", "cmdline", "The command line of the running daemon, NUL separated."),
    (
        "goroutine",
        "goroutine?debug=1",
        "Stack traces of all threads, identical stacks counted together; "
        "debug=2 shows each thread.",
    ),
    (
        "heap",
        "heap",
        "Process memory, garbage collector counters, live objects by type and "
        "tracemalloc's top lines when tracing (gc=1 collects first).",
    ),
    (
        "profile",
        "profile",
        "cProfile of the reactor thread for ?seconds= (default 30): text, or "
        "format=pstats for a file pstats and snakeviz read.",
    ),
    ("symbol", "symbol", "Go symbol lookup; nothing to look up in Python (num_symbols: 0)."),
    ("threadcreate", "threadcreate", "The live threads."),
)


def pprof_index() -> bytes:
    """The ``/debug/pprof/`` page, in the shape of Go's."""
    rows = []
    counts = {
        "goroutine": str(len(_thread_frames())),
        "threadcreate": str(threading.active_count()),
    }
    for name, link, _ in _PPROF_PROFILES:
        rows.append(
            "<tr><td>%s</td><td><a href='%s'>%s</a></td></tr>\n"
            % (counts.get(name, ""), html.escape(link, quote=True), name)
        )
    descriptions = "".join(
        "<li><div class=profile-name>%s: </div> %s</li>\n" % (name, html.escape(text))
        for name, _, text in _PPROF_PROFILES
    )
    page = (
        "<html>\n<head>\n<title>/debug/pprof/</title>\n</head>\n<body>\n"
        "/debug/pprof/\n<br>\n<p>Set debug=1 as a query parameter to export in "
        "legacy text format</p>\n<br>\nTypes of profiles available:\n<table>\n"
        "<thead><td>Count</td><td>Profile</td></thead>\n%s</table>\n"
        "<a href='goroutine?debug=2'>full goroutine stack dump</a>\n<br>\n"
        "<p>\nProfile Descriptions (txnsq: Python's equivalents of Go's):\n<ul>\n%s</ul>\n"
        "</p>\n</body>\n</html>\n" % ("".join(rows), descriptions)
    )
    return page.encode("utf-8")


class ProfilerBusy(Exception):
    """A CPU profile is already running (Go: ``cpu profiling already in use``)."""


class ReactorProfiler:
    """
    One cProfile run at a time of the thread that starts it (the reactor
    thread, when a request starts it).

    :param clock: schedules the end of a run.
    """

    def __init__(self, clock: Any) -> None:
        self._clock = clock
        self.running = False

    def start(
        self, seconds: float, done: Callable[[cProfile.Profile], None]
    ) -> Callable[[], None]:
        """
        Profile for ``seconds``, then call ``done`` with the profiler.

        :return: a function that abandons the run if it has not ended
            (``done`` is then never called).
        :raises ProfilerBusy: a run is already going.
        :raises ValueError: another profiler owns the thread.
        """
        if self.running:
            raise ProfilerBusy("cpu profiling already in use")
        profiler = cProfile.Profile()
        profiler.enable()
        self.running = True

        def stop() -> None:
            profiler.disable()
            self.running = False
            done(profiler)

        call = self._clock.callLater(seconds, stop)

        def abandon() -> None:
            if call.active():
                call.cancel()
                profiler.disable()
                self.running = False

        return abandon


def profile_text(profiler: cProfile.Profile) -> str:
    """The 60 costliest calls of a finished run, by cumulative time."""
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("cumulative").print_stats(60)
    return out.getvalue()


def profile_pstats(profiler: cProfile.Profile) -> bytes:
    """A finished run as the file ``pstats`` and snakeviz read."""
    profiler.create_stats()
    return marshal.dumps(profiler.stats)  # type: ignore[attr-defined]
