# -*- test-case-name: tests.test_version -*-
"""
The versions txnsq reports.

NSQ clients, harnesses and nsqadmin read nsqd's version to decide what it
can do: gnsq turns on its HTTP features only for nsqd 0.3.6 and later,
nsqadmin marks a node older than the cluster's newest as out of date, and
gnsq's test harness only starts an nsqd whose ``--version`` line matches
``^nsqd v\\d+\\.\\d+\\.\\d+(-\\S+)? \\(built w/[a-z0-9.-]+\\)$``. So wherever NSQ
reports a version (``--version``, ``/info``, the IDENTIFY reply, lookupd
registration, ``/stats``), txnsq reports the NSQ release whose protocol and
behaviour it implements, :data:`NSQ_VERSION`, and names itself in the build
token (``nsqd v1.3.0 (built w/txnsq-0.1.0-cpython-3.11.7)``) and in a
``txnsq_version`` field of ``/info``.  The ``--version`` line adds which
hot path runs, ``-compiled`` or ``-pure`` (:mod:`txnsq.speedups`):
``nsqd v1.3.0 (built w/txnsq-0.1.0-cpython-3.11.7-compiled)``.
"""

from __future__ import annotations

import platform
import re

from txnsq import __version__, speedups

__all__ = ["NSQ_VERSION", "TXNSQ_VERSION", "build_token", "version_string"]

#: The NSQ release whose protocol and behaviour txnsq implements.
NSQ_VERSION = "1.3.0"

#: txnsq's own release.
TXNSQ_VERSION = __version__

_NOT_IN_TOKEN = re.compile(r"[^a-z0-9.-]+")


def build_token(
    implementation: str = platform.python_implementation(),
    python_version: str = platform.python_version(),
) -> str:
    """
    What the daemons were built with, in the place Go puts its toolchain
    (``go1.21.8``): ``txnsq-0.1.0-cpython-3.11.7``. Lower case letters,
    digits, dots and dashes only, as harnesses parse it.
    """
    text = "txnsq-%s-%s-%s" % (TXNSQ_VERSION, implementation, python_version)
    return _NOT_IN_TOKEN.sub("-", text.lower()).strip("-")


def version_string(program: str) -> str:
    """
    ``nsqd v1.3.0 (built w/txnsq-0.1.0-cpython-3.11.7-compiled)``: Go's
    line, the build token followed by the hot path in use
    (:func:`txnsq.speedups.hot_path_token`).
    """
    return "%s v%s (built w/%s-%s)" % (program, NSQ_VERSION, build_token(), speedups.hot_path_token())
