# -*- test-case-name: tests.test_storage -*-
"""
Finding storage backends: every ``IStorageBackend`` Twisted plugin (txnsq's
own are in ``twisted/plugins/txnsq_storage.py``; a third party ships its own
plugin file) is selectable by its ``name``.
"""

from __future__ import annotations

from typing import Dict

from twisted.plugin import getPlugins

from txnsq.storage.interfaces import IStorageBackend

__all__ = ["get_storage_backend", "storage_backends"]


def storage_backends() -> Dict[str, IStorageBackend]:
    """
    Every installed storage backend, by name.

    When two plugins claim one name, the first one found wins.
    """
    # txnsq's own backends are always there, even where plugin discovery
    # cannot see txnsq's plugin file (editable installs, zipped apps).
    from txnsq.storage.disk import DiskStorage
    from txnsq.storage.ephemeral import EphemeralStorage
    from txnsq.storage.memory import MemoryStorage

    found: Dict[str, IStorageBackend] = {}
    for builtin in (DiskStorage(), MemoryStorage(), EphemeralStorage()):
        found[builtin.name] = builtin
    for plugin in getPlugins(IStorageBackend):
        found.setdefault(plugin.name, plugin)
    return found


def get_storage_backend(name: str) -> IStorageBackend:
    """
    The installed storage backend called ``name``.

    :raises ValueError: no backend has that name; the message lists the
        known names.
    """
    backends = storage_backends()
    try:
        return backends[name]
    except KeyError:
        raise ValueError(
            "unknown storage backend %r (known: %s)"
            % (name, ", ".join(sorted(backends)) or "none")
        )
