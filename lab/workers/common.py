"""What the workers share: the history file they append to."""

from __future__ import annotations

import json
import os
import time
from typing import Any, Dict, Optional

__all__ = ["HistoryWriter"]


class HistoryWriter:
    """
    Appends operations to a JSON-lines history file, flushed every
    ``flush_every`` lines and at the end, so that the lab reads it while
    the worker runs.

    :param path: the file.
    :param process: this worker's name in the history.
    """

    def __init__(self, path: str, process: str, flush_every: int = 200) -> None:
        self.process = process
        self._file = open(path, "a", buffering=1 << 16)
        self._pending = 0
        self._flush_every = flush_every

    def write(self, kind: str, f: str, value: Any, node: Optional[str] = None, **extra: Any) -> None:
        """One operation event: ``kind`` is invoke, ok, fail, info (unknown outcome) or recv."""
        entry: Dict[str, Any] = {"t": round(time.time(), 4), "p": self.process, "type": kind, "f": f, "v": value}
        if node is not None:
            entry["node"] = node
        if extra:
            entry.update(extra)
        self._file.write(json.dumps(entry, separators=(",", ":")) + "\n")
        self._pending += 1
        if self._pending >= self._flush_every:
            self.flush()

    def flush(self) -> None:
        """Make what was written readable by the lab."""
        self._pending = 0
        self._file.flush()

    def close(self) -> None:
        """Flush and close (fsynced: the lab reads it right after)."""
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
