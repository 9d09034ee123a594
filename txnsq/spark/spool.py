# -*- test-case-name: tests.test_spark_spool -*-
"""
Spool files: each streaming micro-batch is written to ``spool_path`` before
Spark is told its offset, so that a batch Spark asks for again (recovery
after a failure or a restart) has the same rows; a batch's file is deleted
once Spark commits it.

Files are ``batch-<n>.spool``: a magic line, then per message ``>16sqHHI``
(id, timestamp, attempts, length of the nsqd address, length of the body),
the address, the body.  They are written to a temporary name, fsynced and
renamed, so a crash leaves a whole file or none.  ``last-batch`` holds the
number of the last batch handed out, for Spark versions that do not pass
the start offset to ``latestOffset``.
"""

from __future__ import annotations

import os
import re
import struct
from typing import List, Optional, Sequence

from txnsq.files import write_file_atomically
from txnsq.spark.records import NSQMessage

__all__ = ["Spool", "SpoolError", "batch_number"]

_MAGIC = b"txnsq-spark-spool 1\n"
_RECORD = struct.Struct(">16sqHHI")
_NAME = re.compile(r"^batch-([0-9]+)\.spool$")
_LAST = "last-batch"


class SpoolError(Exception):
    """A spool file is missing or damaged."""


class Spool:
    """
    The spool directory of one streaming query's source.

    :ivar path: the directory (created if missing).
    """

    def __init__(self, path: str) -> None:
        """:raises OSError: the directory cannot be created."""
        self.path = path
        os.makedirs(path, exist_ok=True)

    def _file(self, batch: int) -> str:
        return os.path.join(self.path, "batch-%d.spool" % (batch,))

    def write(self, batch: int, messages: Sequence[NSQMessage]) -> None:
        """Spool ``messages`` as batch ``batch`` (replacing an older file of that number)."""
        parts = [_MAGIC]
        pack = _RECORD.pack
        for m in messages:
            nsqd = m.nsqd.encode("utf-8")
            parts.append(pack(m.id, m.timestamp, m.attempts, len(nsqd), len(m.body)))
            parts.append(nsqd)
            parts.append(m.body)
        write_file_atomically(self._file(batch), b"".join(parts))

    def read(self, batch: int) -> List[NSQMessage]:
        """
        The messages of batch ``batch``.

        :raises SpoolError: no such file, or a damaged one.
        """
        try:
            with open(self._file(batch), "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise SpoolError("spool file of batch %d is missing in %s" % (batch, self.path)) from None
        if not data.startswith(_MAGIC):
            raise SpoolError("%s is not a spool file" % (self._file(batch),))
        out = []
        pos = len(_MAGIC)
        unpack = _RECORD.unpack_from
        size = _RECORD.size
        end = len(data)
        while pos < end:
            if end - pos < size:
                raise SpoolError("%s is truncated" % (self._file(batch),))
            msg_id, timestamp, attempts, nsqd_len, body_len = unpack(data, pos)
            pos += size
            stop = pos + nsqd_len + body_len
            if stop > end:
                raise SpoolError("%s is truncated" % (self._file(batch),))
            nsqd = data[pos : pos + nsqd_len].decode("utf-8")
            out.append(NSQMessage(msg_id, timestamp, attempts, data[pos + nsqd_len : stop], nsqd))
            pos = stop
        return out

    def batches(self) -> List[int]:
        """The numbers of the spooled batches, ascending."""
        found = []
        for name in os.listdir(self.path):
            match = _NAME.match(name)
            if match:
                found.append(int(match.group(1)))
        return sorted(found)

    def delete_through(self, batch: int) -> None:
        """Delete the files of every batch numbered ``batch`` or less."""
        for number in self.batches():
            if number <= batch:
                try:
                    os.remove(self._file(number))
                except FileNotFoundError:
                    pass

    def last_batch(self) -> int:
        """The number last given to :meth:`set_last_batch` (0 if none)."""
        try:
            with open(os.path.join(self.path, _LAST), "rb") as f:
                return int(f.read().strip() or b"0")
        except (FileNotFoundError, ValueError):
            return 0

    def set_last_batch(self, batch: int) -> None:
        """Remember ``batch`` as the last number handed out."""
        write_file_atomically(os.path.join(self.path, _LAST), b"%d\n" % (batch,))


def batch_number(offset: Optional[dict]) -> int:
    """
    The batch number of a source offset (``{"batch": n}``).

    :raises ValueError: not such an offset.
    """
    if offset is None:
        return 0
    value = offset.get("batch") if isinstance(offset, dict) else None
    if not isinstance(value, int) or value < 0:
        raise ValueError("not an nsq source offset: %r" % (offset,))
    return value
