"""
What a Spark query wrote, as the queue checker sees deliveries: each row
of its Parquet output (the files Spark's file sink committed, as listed in
the output's ``_spark_metadata`` log: what ``spark.read.parquet`` reads)
becomes a ``recv`` of the body's producer and number on a channel named
for the output, so that :func:`lab.checkers.check_queue` counts, for every
output, the acknowledged publishes missing (lost), the rows never
published (unexpected) and the rows written more than once (duplicates).

Files in the output folder that the log does not list -- left by a task
attempt or a batch that did not commit (an executor killed mid-write) --
are not output; :func:`stray_files` counts them.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Dict, Iterator, List, Optional, Set
from urllib.parse import unquote, urlparse

__all__ = ["committed_files", "parquet_events", "stray_files", "commit_times"]

METADATA = "_spark_metadata"
_BATCH_FILE = re.compile(r"^(\d+)(\.compact)?$")


def _log_entries(path: str) -> Iterator[Dict[str, Any]]:
    with open(path, errors="replace") as f:
        version = f.readline().strip()
        if not version.startswith("v"):
            raise ValueError("%s: not a file sink log (first line %r)" % (path, version))
        for line in f:
            line = line.strip()
            if line:
                yield json.loads(line)


def _local_path(uri: str) -> str:
    parsed = urlparse(uri)
    if parsed.scheme not in ("", "file"):
        raise ValueError("not a local file: %s" % (uri,))
    return unquote(parsed.path)


def committed_files(output: str) -> List[str]:
    """
    The files of a file sink's ``output`` folder that its log lists as
    committed, as Spark reads them: the latest ``N.compact`` (every batch
    up to N) and each batch file after it, ``add`` entries less
    ``delete`` ones.  Empty when there is no log (nothing was committed).

    :raises ValueError: a log file that is not one.
    """
    folder = os.path.join(output, METADATA)
    if not os.path.isdir(folder):
        return []
    batches: Dict[int, str] = {}
    compacts: List[int] = []
    for name in os.listdir(folder):
        match = _BATCH_FILE.match(name)
        if not match:
            continue  # a temporary file of a write that did not finish
        number = int(match.group(1))
        if match.group(2):
            compacts.append(number)
        elif number in batches:
            continue  # N.compact holds batch N and all before it
        batches[number] = os.path.join(folder, name)
    first = max(compacts) if compacts else min(batches, default=0)
    files: Dict[str, None] = {}
    for number in sorted(n for n in batches if n >= first):
        for entry in _log_entries(batches[number]):
            path = _local_path(entry["path"])
            if entry.get("action", "add") == "delete":
                files.pop(path, None)
            else:
                files[path] = None
    return list(files)


def stray_files(output: str) -> List[str]:
    """Parquet files in ``output`` (the folder itself) that the log does not list."""
    listed: Set[str] = {os.path.realpath(p) for p in committed_files(output)}
    if not os.path.isdir(output):
        return []
    return sorted(
        os.path.join(output, name)
        for name in os.listdir(output)
        if name.endswith(".parquet") and os.path.realpath(os.path.join(output, name)) not in listed
    )


def parquet_events(output: str, channel: str, column: str = "body") -> List[Dict[str, Any]]:
    """
    One ``recv`` event for each row of the committed files of ``output``:
    ``v`` the number after the body's last ``:``, ``src`` what is before
    it (a body that is not ``producer:number`` gives its text as ``v``,
    which the queue checker counts as unexpected).
    """
    import pyarrow.parquet as pq

    events: List[Dict[str, Any]] = []
    for path in committed_files(output):
        table = pq.read_table(path, columns=[column])
        for raw in table.column(column).to_pylist():
            events.append(_event(raw, channel, os.path.basename(path)))
    return events


def _event(raw: Optional[bytes], channel: str, node: str) -> Dict[str, Any]:
    body = (raw or b"").decode("utf-8", "replace") if isinstance(raw, (bytes, type(None))) else str(raw)
    producer, _, number = body.rpartition(":")
    value: Any
    try:
        value = int(number)
    except ValueError:
        value = body
    return {"t": 0, "p": channel, "type": "recv", "f": "msg", "v": value, "node": node, "ch": channel,
            "src": producer}


def commit_times(checkpoint: str) -> List[float]:
    """When each batch of a query's checkpoint was committed (its ``commits/N`` file's mtime), in order."""
    folder = os.path.join(checkpoint, "commits")
    if not os.path.isdir(folder):
        return []
    times = [os.path.getmtime(os.path.join(folder, n)) for n in os.listdir(folder) if n.isdigit()]
    return sorted(times)
