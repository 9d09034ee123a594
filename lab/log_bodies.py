"""
What the retained-log workload writes: the body of record ``n`` of a
writer, and how a body read back names its writer and number.  The
writer, the reader and the log checker share these, so a record read
back can be compared byte for byte with what was written.
"""

from __future__ import annotations

import hashlib
from typing import Optional, Tuple

__all__ = ["record_body", "parse_body", "record_hash"]


def record_body(process: str, n: int, size: int) -> bytes:
    """
    The body of ``process``'s record ``n``: ``<process>:<n>:`` then filler
    up to ``size`` bytes (at least the prefix) derived from the prefix, so
    that every record's bytes are distinct and known to the checker.
    """
    prefix = ("%s:%d:" % (process, n)).encode("ascii")
    if size <= len(prefix):
        return prefix
    filler = hashlib.sha256(prefix).hexdigest().encode("ascii")
    need = size - len(prefix)
    return prefix + (filler * (need // len(filler) + 1))[:need]


def parse_body(body: bytes) -> Optional[Tuple[str, int]]:
    """``(process, n)`` named by a body's prefix, or None when it names none."""
    head = body[:64]
    first = head.find(b":")
    if first <= 0:
        return None
    second = head.find(b":", first + 1)
    if second < 0:
        return None
    number = head[first + 1 : second]
    if not number.isdigit():
        return None
    try:
        return head[:first].decode("ascii"), int(number)
    except UnicodeDecodeError:
        return None


def record_hash(record: bytes) -> str:
    """A short hash of a whole record (header included): equal hashes, equal bytes."""
    return hashlib.blake2b(record, digest_size=8).hexdigest()
