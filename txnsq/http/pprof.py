# -*- test-case-name: tests.test_http,tests.test_nsqlookupd_http -*-
"""
Go's ``net/http/pprof`` routes, with Python's equivalents, for any daemon's
HTTP API (nsqd and nsqlookupd both serve them).

The profiles themselves are :mod:`txnsq.http.profiles`; this module is their
HTTP side: :class:`PprofHandlers` holds the handlers and
:func:`add_pprof_routes` registers them in a daemon's Klein app and route
table.  Go nsqd serves the index at ``/debug/pprof/``, nsqlookupd at
``/debug/pprof``; the other paths are the same.  As in Go they are not
logged and write their own headers (``raw`` style).
"""

from __future__ import annotations

import gc
import sys
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Tuple

from klein import Klein
from twisted.internet.defer import Deferred
from twisted.web.iweb import IRequest

from txnsq.http.api import HTML_CONTENT_TYPE, TEXT_CONTENT_TYPE, APIBase, raw_query
from txnsq.http.routes import Route, go_route
from txnsq.protocol.http_params import go_parse_int, parse_query

if TYPE_CHECKING:
    from txnsq.http.profiles import ReactorProfiler

# txnsq.http.profiles (cProfile, pstats, traceback) is imported by the
# first /debug/pprof request: most daemons never get one.

__all__ = ["PprofHandlers", "add_pprof_routes"]


class PprofHandlers(APIBase):
    """
    The ``/debug/pprof`` handlers.

    :ivar _profiler_clock: the clock of the daemon's one CPU profiler (set
        by the API's ``__init__``); the profiler is made when first used.
    """

    _profiler_clock: Any
    _profiler_instance: Optional["ReactorProfiler"] = None

    @property
    def _profiler(self) -> "ReactorProfiler":
        """The daemon's one CPU profiler."""
        if self._profiler_instance is None:
            from txnsq.http.profiles import ReactorProfiler

            self._profiler_instance = ReactorProfiler(self._profiler_clock)
        return self._profiler_instance

    def _debug_text(self, request: IRequest, text: str, code: int = 200) -> bytes:
        request.setHeader(b"X-Content-Type-Options", b"nosniff")
        return self._reply(request, code, text.encode("utf-8"), TEXT_CONTENT_TYPE)

    def debug_index(self, request: IRequest) -> bytes:
        """The list of profiles."""
        from txnsq.http.profiles import pprof_index

        request.setHeader(b"X-Content-Type-Options", b"nosniff")
        return self._reply(request, 200, pprof_index(), HTML_CONTENT_TYPE)

    def debug_cmdline(self, request: IRequest) -> bytes:
        """The command line, NUL separated."""
        return self._debug_text(request, "\x00".join(sys.argv))

    def debug_symbol(self, request: IRequest) -> bytes:
        """Go's symbol lookup: there are no program counters to look up."""
        return self._debug_text(request, "num_symbols: 0\n")

    def debug_profile(self, request: IRequest) -> Any:
        """
        cProfile the reactor thread, where all of the daemon's work runs,
        for ``?seconds=`` (default 30); pstats text, or the marshalled
        stats with ``format=pstats``.
        """
        from txnsq.http.profiles import ProfilerBusy, profile_pstats, profile_text

        values, _ = parse_query(raw_query(request)[0])
        seconds = go_parse_int((values.get("seconds") or [""])[0])
        if seconds is None or seconds <= 0:
            seconds = 30
        binary = (values.get("format") or [""])[0] == "pstats"
        finished: Deferred[bytes] = Deferred()

        def done(profiler: Any) -> None:
            if binary:
                data = profile_pstats(profiler)
                request.setHeader(
                    b"Content-Disposition", b'attachment; filename="profile.pstats"'
                )
                finished.callback(
                    self._reply(request, 200, data, b"application/octet-stream")
                )
                return
            finished.callback(self._debug_text(request, profile_text(profiler)))

        try:
            abandon = self._profiler.start(seconds, done)
        except (ProfilerBusy, ValueError) as error:
            # ValueError: another profiler owns the thread.
            return self._debug_text(
                request, "Could not enable CPU profiling: %s\n" % (error,), 500
            )
        request.notifyFinish().addErrback(  # type: ignore[attr-defined]
            lambda reason: abandon()
        )
        return finished

    def debug_heap(self, request: IRequest) -> bytes:
        """A memory summary; ``gc=1`` runs a full collection first."""
        from txnsq.http.profiles import memory_summary

        values, _ = parse_query(raw_query(request)[0])
        if (values.get("gc") or ["0"])[0] not in ("", "0"):
            gc.collect()
        return self._debug_text(request, memory_summary())

    def debug_goroutine(self, request: IRequest) -> bytes:
        """Every thread's stack: grouped, or one by one with ``debug=2``."""
        from txnsq.http.profiles import thread_stacks

        values, _ = parse_query(raw_query(request)[0])
        debug = go_parse_int((values.get("debug") or ["0"])[0]) or 0
        return self._debug_text(request, thread_stacks(debug >= 2))

    def debug_block(self, request: IRequest) -> bytes:
        """Go's blocking profile has no Python equivalent."""
        return self._debug_text(
            request,
            "block profile: not available in Python; GET /debug/pprof/profile "
            "shows where the reactor thread spends its time\n",
        )

    def debug_threadcreate(self, request: IRequest) -> bytes:
        """The live threads."""
        from txnsq.http.profiles import thread_list

        return self._debug_text(request, thread_list())


def add_pprof_routes(app: Klein, routes: List[Route], index: str) -> None:
    """
    Register Go's pprof routes, in Go's order, in a daemon's Klein ``app``
    and route table ``routes``; the index page at ``index``.  The API class
    must inherit :class:`PprofHandlers`.
    """
    table: List[Tuple[str, str, Callable[..., Any]]] = [
        ("GET", index, PprofHandlers.debug_index),
        ("GET", "/debug/pprof/cmdline", PprofHandlers.debug_cmdline),
        ("GET", "/debug/pprof/symbol", PprofHandlers.debug_symbol),
        ("POST", "/debug/pprof/symbol", PprofHandlers.debug_symbol),
        ("GET", "/debug/pprof/profile", PprofHandlers.debug_profile),
        ("GET", "/debug/pprof/heap", PprofHandlers.debug_heap),
        ("GET", "/debug/pprof/goroutine", PprofHandlers.debug_goroutine),
        ("GET", "/debug/pprof/block", PprofHandlers.debug_block),
        ("GET", "/debug/pprof/threadcreate", PprofHandlers.debug_threadcreate),
    ]
    for method, pattern, handler in table:
        go_route(app, method, pattern, style="raw", routes=routes)(handler)
