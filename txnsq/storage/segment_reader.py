# -*- test-case-name: tests.test_storage_disk -*-
"""
The segment file a disk queue reads: its descriptor and a read-ahead
buffer, so that records are sliced out of one ``pread`` of
:data:`READ_CHUNK` bytes rather than read one by one, and the messages
already cut from that buffer (:attr:`SegmentReader.records`).
"""

from __future__ import annotations

import os
from typing import List, Optional

from txnsq.storage.disk_recovery import READ_CHUNK

__all__ = ["SegmentReader"]


class SegmentReader:
    """
    One open segment, or none.

    :ivar number: the segment open for reading, or -1.
    :ivar buf: bytes of the segment read ahead, from :attr:`buf_pos`.
    :ivar records: the messages of the records that follow the queue's
        read position in this segment, cut from :attr:`buf` in one go
        (``split_records``), the next one last (so that ``pop()`` takes
        it).  Only a cache: the read position is what counts, so whoever
        moves it other than by taking these empties the list (closing the
        segment does).
    """

    __slots__ = ("_fd", "number", "_end", "buf", "buf_pos", "records")

    def __init__(self) -> None:
        self._fd: Optional[int] = None
        self.number = -1
        # The segment's size, once it is no longer written to.
        self._end: Optional[int] = None
        self.buf = b""
        self.buf_pos = 0
        self.records: List[bytes] = []

    def open(self, path: str, number: int) -> None:
        """
        Read segment ``number`` at ``path`` from now on.

        :raises OSError: it cannot be opened (no segment is open then).
        """
        self.close()
        self._fd = os.open(path, os.O_RDONLY)
        self.number = number

    def complete_end(self) -> int:
        """The size of the open segment, now that it is complete (read once)."""
        end = self._end
        if end is None:
            assert self._fd is not None
            end = self._end = os.fstat(self._fd).st_size
        return end

    def buffered(self, pos: int, size: int) -> int:
        """
        The offset in :attr:`buf` of ``size`` bytes of the segment at
        ``pos``, reading more if need be; -1 if the segment ends first.
        """
        offset = pos - self.buf_pos
        if offset < 0 or offset + size > len(self.buf):
            assert self._fd is not None
            try:
                self.buf = os.pread(self._fd, max(size, READ_CHUNK), pos)
            except OSError:
                self.buf = b""
            self.buf_pos = pos
            offset = 0
            if len(self.buf) < size:
                return -1
        return offset

    def drop_buffer(self) -> None:
        """Let go of the read-ahead bytes (everything was read); the segment stays open."""
        self.buf = b""
        self.records = []

    def close(self) -> None:
        """Close the open segment, if any."""
        fd = self._fd
        if fd is not None:
            self._fd = None
            os.close(fd)
        self.number = -1
        self._end = None
        self.buf = b""
        self.buf_pos = 0
        self.records = []
