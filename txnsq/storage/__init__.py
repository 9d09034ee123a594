"""
Message storage: the ``IBackendQueue`` interface and its backends, each
registered as a Twisted plugin and chosen with ``--storage NAME``.

Public API: the submodules :mod:`txnsq.storage.interfaces` (what a
backend of one's own provides) and :mod:`txnsq.storage.topic_log` and
:mod:`txnsq.storage.log` (a retained topic's log, as the broker hands it
out).  Every other submodule, the backends included (they are chosen by
name), is private.
"""

__all__: list = []
