# -*- test-case-name: tests.test_testing -*-
"""
Helpers for testing code that uses NSQ, under trial.

- :class:`MemoryNSQD`: an nsqd in memory on a ``Clock`` (the real broker
  and protocol, no sockets), that txnsq's ``Producer`` and ``Consumer``
  reach through their ``connect=`` hook; the test moves bytes and time
  with ``flush()`` and ``advance()``.
- :func:`start_nsqd`, :func:`start_nsqlookupd`: real daemons inside the
  test's reactor, on ``127.0.0.1`` with kernel-chosen ports, for code that
  opens its own sockets.

See ``docs/testing.md``.

Public API: the names in ``__all__``.  The submodules are private.
"""

from txnsq.testing.memory import MemoryNSQD
from txnsq.testing.servers import RunningNSQD, RunningNSQLookupd, start_nsqd, start_nsqlookupd

__all__ = ["MemoryNSQD", "RunningNSQD", "RunningNSQLookupd", "start_nsqd", "start_nsqlookupd"]
