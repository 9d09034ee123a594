# -*- test-case-name: tests.test_mirror_files,tests.test_cluster_mirror -*-
"""
What the mirror (:class:`Mirror <txnsq.mirror.mirror.Mirror>`) keeps in
``--data-path``: this node's stable mirror id, and the topics named by
``POST /topic/mirror``.
"""

from __future__ import annotations

import os
from base64 import b32encode
from typing import Iterable, Optional, Set

from twisted.logger import Logger

from txnsq.files import write_file_atomically

__all__ = ["NAMED_TOPICS_FILE", "NODE_ID_FILE", "NamedTopicsFile", "load_node_id", "random_id"]

#: File (in ``--data-path``) keeping this node's mirror id across restarts.
NODE_ID_FILE = "txnsq-mirror.id"

#: File (in ``--data-path``) keeping the topics of ``POST /topic/mirror``.
NAMED_TOPICS_FILE = "txnsq-mirror.topics"


def random_id() -> str:
    """A random id (16 lower-case base32 characters): a process epoch, a new node id."""
    return b32encode(os.urandom(10)).decode().lower()


def load_node_id(data_path: str) -> str:
    """
    This node's mirror id: read from ``data_path``, made and kept there if
    new (a new one each start when it cannot be written there).  It is
    written as every kept file is (:func:`txnsq.files.write_file_atomically`:
    synced, then renamed in a synced directory).
    """
    path = os.path.join(data_path or ".", NODE_ID_FILE)
    try:
        with open(path) as stream:
            found = stream.read().strip()
        if found:
            return found
    except OSError:
        pass
    node_id = random_id()
    try:
        write_file_atomically(path, (node_id + "\n").encode("ascii"))
    except OSError as error:
        # Mirroring still works; a restart will look like a new node
        # (its standbys take over at once rather than at its return).
        Logger().warn(
            "mirror: cannot keep the node id in {path}: {error}", path=path, error=error
        )
    return node_id


class NamedTopicsFile:
    """
    The topics named by ``POST /topic/mirror``, kept in a file one a line
    (``txnsq-mirror.topics`` in the data path), so that a restarted node
    mirrors them again.

    :param path: the file, or ``None``: nothing is kept.
    """

    _log = Logger()

    def __init__(self, path: Optional[str]) -> None:
        self.path = path

    def load(self) -> Set[str]:
        """The topics named before a restart (none when the file is missing or unreadable)."""
        if not self.path:
            return set()
        try:
            with open(self.path, encoding="ascii") as stream:
                return {line.strip() for line in stream if line.strip()}
        except (OSError, UnicodeDecodeError):
            return set()

    def keep(self, names: Iterable[str]) -> None:
        """Write ``names`` (atomically, sorted); logged, not raised, when it fails."""
        if not self.path:
            return
        data = "".join(name + "\n" for name in sorted(names)).encode("ascii")
        try:
            write_file_atomically(self.path, data)
        except OSError as error:
            self._log.warn(
                "mirror: cannot keep the mirrored topics in {path}: {error}",
                path=self.path,
                error=error,
            )
