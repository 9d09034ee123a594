# -*- test-case-name: tests.test_tools_to_nsq -*-
"""
Cutting a byte stream into records at a one-byte delimiter (sans-IO), as
``to_nsq`` cuts standard input: the delimiter is dropped, empty records
are skipped, and what follows the last delimiter is a record of its own
when the stream ends.
"""

from __future__ import annotations

from typing import List

__all__ = ["DelimitedSplitter"]


class DelimitedSplitter:
    """
    Feed bytes, get complete records.

    :param delimiter: exactly one byte.
    :raises ValueError: the delimiter is not one byte.
    """

    def __init__(self, delimiter: bytes) -> None:
        if len(delimiter) != 1:
            raise ValueError("--delimiter must be a single byte")
        self.delimiter = delimiter
        self._buffer = b""

    def feed(self, data: bytes) -> List[bytes]:
        """The records completed by ``data``, in order, empty ones left out."""
        if not data:
            return []
        parts = (self._buffer + data).split(self.delimiter)
        self._buffer = parts.pop()
        return [part for part in parts if part]

    def finish(self) -> List[bytes]:
        """The stream ended: the unterminated last record, if any."""
        rest, self._buffer = self._buffer, b""
        return [rest] if rest else []
