"""
A run's history: every client operation (invoke, then ok, fail or info
for an unknown outcome; recv for a delivery) and every nemesis event,
with its time and node, as the workers and the lab wrote them.
"""

from __future__ import annotations

import glob
import json
import os
import time
from typing import Any, Dict, List

__all__ = ["History", "read_history"]


class History:
    """
    The lab's own events (nemeses, phases) for one round; the workers'
    files are read beside them by :func:`read_history`.

    :param folder: the round's history folder (workers write there too).
    """

    def __init__(self, folder: str) -> None:
        self.folder = folder
        os.makedirs(folder, exist_ok=True)
        self.path = os.path.join(folder, "lab.jsonl")
        self._file = open(self.path, "a", buffering=1)

    def event(self, kind: str, what: str, **fields: Any) -> None:
        """A nemesis or phase event (``kind``: start, stop, phase)."""
        entry = {"t": round(time.time(), 4), "p": "nemesis", "type": kind, "f": what}
        entry.update(fields)
        self._file.write(json.dumps(entry, separators=(",", ":")) + "\n")

    def worker_file(self, name: str) -> str:
        """Where the worker ``name`` writes."""
        return os.path.join(self.folder, name + ".jsonl")

    def close(self) -> None:
        """Stop writing."""
        self._file.close()


def read_history(folder: str) -> List[Dict[str, Any]]:
    """Every event of a round, workers' and the lab's, ordered by time."""
    events: List[Dict[str, Any]] = []
    for path in glob.glob(os.path.join(folder, "*.jsonl")):
        with open(path, errors="replace") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    events.append(json.loads(line))
                except ValueError:
                    # A worker killed mid-line: its last line is cut.
                    continue
    events.sort(key=lambda e: e.get("t", 0))
    return events
