"""
The MetaQ listener: nsqd's retained topics served over the MetaQ text
protocol (``--metaq-address``).

A thin Twisted adapter (:mod:`txnsq.metaq.server`) over the sans-IO codec
:mod:`txnsq.protocol.metaq`, calling an :class:`IMetaqBackend`
(:mod:`txnsq.metaq.backend`): nsqd's broker and its retained logs, or a
directory of topic logs.  The listener keeps no topics of its own.

Public API: the names in ``__all__``.  The submodules are private.
"""

from __future__ import annotations

from txnsq.metaq.backend import (
    BrokerMetaqBackend,
    IMetaqBackend,
    LogMetaqBackend,
    MetaqRefused,
    NoSuchPartition,
)
from txnsq.metaq.server import MetaqFactory, MetaqServerProtocol

__all__ = [
    "BrokerMetaqBackend",
    "IMetaqBackend",
    "LogMetaqBackend",
    "MetaqFactory",
    "MetaqRefused",
    "MetaqServerProtocol",
    "NoSuchPartition",
]
