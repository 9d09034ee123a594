# -*- test-case-name: tests.test_storage_disk -*-
"""
What a disk queue's files say when it opens (go-diskqueue's
``retrieveMetaData`` and txnsq's checks around it): the meta file, or the
segments counted when it is missing or unreadable; a write segment longer
or shorter than the meta says; the deferred file of the last clean
shutdown, if it still applies.  Files that cannot be read are set aside as
``.bad``, never deleted.
"""

from __future__ import annotations

import os
from typing import List, Optional, Tuple

from twisted.logger import Logger

from txnsq.storage.flight_log import flight_file_name
from txnsq.storage.diskqueue_format import (
    MIN_MESSAGE_SIZE,
    RECORD_HEADER,
    DeferredState,
    DiskFormatError,
    QueueState,
    decode_deferred,
    decode_meta,
    deferred_file_name,
    meta_file_name,
    parse_segment_file_name,
    segment_file_name,
)

__all__ = [
    "READ_CHUNK",
    "SavedDeferred",
    "count_records",
    "open_state",
    "quarantine",
    "read_saved_deferred",
    "remove_file",
    "remove_stale_temp_files",
    "segment_numbers",
]

#: How much of a segment is read at once (kept per queue while reading, so
#: modest: a daemon may have thousands of spilling channels).
READ_CHUNK = 64 * 1024

#: The deferred file's state and messages, ``(due, data)``.
SavedDeferred = Tuple[DeferredState, List[Tuple[int, bytes]]]

# The disk queue's namespace: these lines are the queue's.
_log = Logger(namespace="txnsq.storage.disk")


def segment_numbers(directory: str, name: str) -> List[int]:
    """The numbers of the queue ``name``'s segment files, sorted."""
    try:
        names = os.listdir(directory or ".")
    except OSError:
        return []
    numbers = []
    for filename in names:
        parsed = parse_segment_file_name(filename)
        if parsed is not None and parsed[0] == name:
            numbers.append(parsed[1])
    numbers.sort()
    return numbers


def quarantine(path: str) -> None:
    """Set an unreadable file aside as ``.bad`` (never delete it)."""
    try:
        os.rename(path, path + ".bad")
    except OSError:
        pass


def remove_file(directory: str, name: str, filename: str) -> None:
    """Remove one of the queue ``name``'s files; a missing one is no error, others are logged."""
    try:
        os.unlink(os.path.join(directory, filename))
    except FileNotFoundError:
        pass
    except OSError as error:
        _log.error(
            "DISKQUEUE({name}) failed to remove {file} - {error}",
            name=name,
            file=filename,
            error=error,
        )


def remove_stale_temp_files(directory: str, name: str, filenames: List[str]) -> int:
    """
    Remove what atomic writes of the queue ``name``'s ``filenames`` (its
    meta file, ...) left behind when the process died mid-write:
    ``FILE.<n>.tmp`` (:func:`txnsq.files.write_file_atomically`), never
    renamed into place, so never read.  Logged once; returns how many.
    """
    try:
        names = os.listdir(directory or ".")
    except OSError:
        return 0
    stale = []
    for candidate in names:
        if candidate.endswith(".tmp"):
            for filename in filenames:
                if candidate.startswith(filename + ".") and candidate[len(filename) + 1 : -4].isdigit():
                    stale.append(candidate)
                    break
    if stale:
        stale.sort()
        _log.warn(
            "DISKQUEUE({name}): removing {count} temporary files left by an "
            "interrupted write: {files}",
            name=name,
            count=len(stale),
            files=", ".join(stale),
        )
        for filename in stale:
            remove_file(directory, name, filename)
    return len(stale)


def count_records(path: str, start: int, max_msg_size: int) -> int:
    """How many whole, plausible records the segment ``path`` holds from ``start``."""
    count = 0
    try:
        with open(path, "rb") as segment:
            segment.seek(start)
            buffer = b""
            offset = 0
            header = RECORD_HEADER.size
            while True:
                if len(buffer) - offset < header:
                    buffer = buffer[offset:] + segment.read(READ_CHUNK)
                    offset = 0
                    if len(buffer) < header:
                        return count
                (length,) = RECORD_HEADER.unpack_from(buffer, offset)
                if length < MIN_MESSAGE_SIZE or length > max_msg_size:
                    return count
                end = offset + header + length
                while len(buffer) < end:
                    more = segment.read(max(READ_CHUNK, end - len(buffer)))
                    if not more:
                        return count
                    buffer += more
                offset = end
                count += 1
    except OSError:
        return count


def open_state(directory: str, name: str, max_msg_size: int) -> Tuple[QueueState, QueueState]:
    """
    Where the queue ``name`` was, as its files say: the state its meta file
    records (or the segments give without one), and the state to go on
    from once the write segment is checked (:func:`_check_write_file`).
    """
    remove_stale_temp_files(
        directory, name, [meta_file_name(name), deferred_file_name(name), flight_file_name(name)]
    )
    meta_path = os.path.join(directory, meta_file_name(name))
    state: Optional[QueueState] = None
    try:
        with open(meta_path, "rb") as meta:
            state = decode_meta(meta.read(256))
    except FileNotFoundError:
        pass
    except (OSError, DiskFormatError) as error:
        _log.error(
            "DISKQUEUE({name}) failed to retrieveMetaData - {error}",
            name=name,
            error=error,
        )
        quarantine(meta_path)
    if state is None:
        state = _recover_without_meta(directory, name, max_msg_size)
    return state, _check_write_file(directory, name, state, max_msg_size)


def _recover_without_meta(directory: str, name: str, max_msg_size: int) -> QueueState:
    """No usable meta file: take whatever segments are there."""
    numbers = segment_numbers(directory, name)
    if not numbers:
        return QueueState(0, 0, 0, 0, 0)
    depth = 0
    kept = []
    for number in numbers:
        path = os.path.join(directory, segment_file_name(name, number))
        try:
            empty = os.stat(path).st_size == 0
        except OSError:
            empty = False
        if empty:
            # Created and never synced before a power loss: it holds
            # nothing, and reading from it would count as unread.
            remove_file(directory, name, segment_file_name(name, number))
            continue
        kept.append(number)
        depth += count_records(path, 0, max_msg_size)
    _log.warn(
        "DISKQUEUE({name}): no meta file; recovered {depth} messages from {files} files",
        name=name,
        depth=depth,
        files=len(numbers),
    )
    if not kept:
        # Write on after the last number, read from there: nothing is unread.
        return QueueState(0, numbers[-1] + 1, 0, numbers[-1] + 1, 0)
    return QueueState(depth, kept[0], 0, numbers[-1] + 1, 0)


def _check_write_file(
    directory: str, name: str, state: QueueState, max_msg_size: int
) -> QueueState:
    """
    A write segment longer than the meta says holds records written
    after the last sync: count them and write on in a new segment, so
    that they are read and never overwritten (go-diskqueue skips to a
    new file too).  A shorter one lost its end: write on in a new one.
    """
    path = os.path.join(directory, segment_file_name(name, state.write_file))
    try:
        size = os.stat(path).st_size
    except FileNotFoundError:
        if state.write_pos == 0:
            return state
        size = -1
    except OSError:
        size = -1
    if size == state.write_pos:
        return state
    depth = state.depth
    if size > state.write_pos:
        extra = count_records(path, state.write_pos, max_msg_size)
        depth += extra
        _log.warn(
            "DISKQUEUE({name}) {file} metadata writePos {pos} < file size of {size}, "
            "skipping to new file ({extra} unsynced messages recovered)",
            name=name,
            file=path,
            pos=state.write_pos,
            size=size,
            extra=extra,
        )
    else:
        _log.error(
            "DISKQUEUE({name}) {file} is shorter than its metadata says "
            "({size} < {pos}); writing on in a new file",
            name=name,
            file=path,
            size=size,
            pos=state.write_pos,
        )
    return state._replace(depth=depth, write_file=state.write_file + 1, write_pos=0)


def read_saved_deferred(
    directory: str, name: str, recorded: QueueState, current: QueueState
) -> Optional[SavedDeferred]:
    """
    The deferred file of the last clean shutdown, if it still matches the
    queue: written at ``current`` and ``recorded`` (the meta file's state)
    equal to it.  A file that no longer applies is removed, a corrupt one
    set aside; their messages are then delivered without their delay.
    """
    path = os.path.join(directory, deferred_file_name(name))
    try:
        with open(path, "rb") as saved:
            data = saved.read()
    except FileNotFoundError:
        return None
    except OSError as error:
        _log.error(
            "DISKQUEUE({name}) cannot read {file} - {error}",
            name=name,
            file=path,
            error=error,
        )
        return None
    try:
        deferred_state, items = decode_deferred(data)
    except DiskFormatError as error:
        _log.error(
            "DISKQUEUE({name}) {file} is corrupt - {error}; its messages are "
            "delivered without their delay",
            name=name,
            file=path,
            error=error,
        )
        quarantine(path)
        return None
    if deferred_state.queue != current or recorded != current:
        _log.warn(
            "DISKQUEUE({name}) the queue changed since {file} was written; "
            "its messages are delivered without their delay",
            name=name,
            file=path,
        )
        remove_file(directory, name, deferred_file_name(name))
        return None
    return deferred_state, items
