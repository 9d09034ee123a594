# -*- test-case-name: tests.test_cluster_mirror -*-
"""
What the mirror keeps in ``--data-path`` (:mod:`txnsq.mirror.mirror`):
this node's stable mirror id, and the topics named by ``POST
/topic/mirror``.
"""

from __future__ import annotations

import os
from base64 import b32encode
from typing import Optional, Set

from twisted.logger import Logger

from txnsq.files import write_file_atomically
from txnsq.mirror.state import MirrorState

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
    :class:`Mirror <txnsq.mirror.mirror.Mirror>`'s keeping of the topics named by
    ``POST /topic/mirror`` in :attr:`named_file`, one a line.
    """

    state: MirrorState

    _log: Logger
    named_file: Optional[str]

    def _load_named(self) -> Set[str]:
        """The topics ``POST /topic/mirror`` named before a restart."""
        if not self.named_file:
            return set()
        try:
            with open(self.named_file, encoding="ascii") as stream:
                return {line.strip() for line in stream if line.strip()}
        except (OSError, UnicodeDecodeError):
            return set()

    def _keep_named(self) -> None:
        """Write the named topics (atomically); logged, not raised, when it fails."""
        if not self.named_file:
            return
        data = "".join(name + "\n" for name in sorted(self.state.named)).encode("ascii")
        try:
            write_file_atomically(self.named_file, data)
        except OSError as error:
            self._log.warn(
                "mirror: cannot keep the mirrored topics in {path}: {error}",
                path=self.named_file,
                error=error,
            )
