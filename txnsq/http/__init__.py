"""
The HTTP plumbing every txnsq daemon serves its API with, after Go NSQ's
``internal/http_api`` and the libraries its daemons use.  A daemon's own
route table and handlers live in its package (``txnsq.nsqd.http``,
``txnsq.nsqlookupd.http``).

- :mod:`txnsq.http.api`: Go's reply styles (``v1``, ``text``), its request
  log line and the request readers (``APIBase``, ``raw_query``)
- :mod:`txnsq.http.routes`: julienschmidt/httprouter's routing on top of
  Klein: ``Route``, ``go_route``, exact matching, redirects, ``405`` with
  ``Allow``, ``404`` (``GoRouter``)
- :mod:`txnsq.http.pprof`: Go's ``net/http/pprof`` routes and handlers
- :mod:`txnsq.http.profiles`: the Python profiles behind them (thread
  stacks, memory summary, ``ReactorProfiler``)
- :mod:`txnsq.http.site`: ``GoSite``, the quiet ``twisted.web.server.Site`` answering
  bytes that are not HTTP as Go's net/http does

Public API: none.  This package is private to txnsq.
"""

__all__ = ["api", "pprof", "profiles", "routes", "site"]
