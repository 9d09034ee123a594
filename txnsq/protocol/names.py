# -*- test-case-name: tests.test_protocol_names -*-
"""
Topic and channel name rules (Go's ``internal/protocol/names.go``).

A valid name is 1 to 64 bytes of ``[.a-zA-Z0-9_-]``, optionally ending in
``#ephemeral``.
"""

from __future__ import annotations

import re
from typing import Union

__all__ = [
    "EPHEMERAL_SUFFIX",
    "MAX_NAME_LENGTH",
    "is_ephemeral",
    "is_valid_channel_name",
    "is_valid_name",
    "is_valid_topic_name",
]

MAX_NAME_LENGTH = 64
EPHEMERAL_SUFFIX = "#ephemeral"

# fullmatch, not "$": Python's "$" also matches before a trailing newline,
# Go's does not.
_NAME_MATCH = re.compile(rb"[.a-zA-Z0-9_-]+(?:#ephemeral)?").fullmatch


def is_valid_name(name: Union[str, bytes]) -> bool:
    """Whether ``name`` (``str`` or ``bytes``) is a valid topic/channel name."""
    if isinstance(name, str):
        try:
            data = name.encode("ascii")
        except UnicodeEncodeError:
            # Valid names are ASCII only.
            return False
    else:
        data = name
    if not 0 < len(data) <= MAX_NAME_LENGTH:
        return False
    return _NAME_MATCH(data) is not None


def is_valid_topic_name(name: Union[str, bytes]) -> bool:
    """Whether ``name`` is a valid topic name."""
    return is_valid_name(name)


def is_valid_channel_name(name: Union[str, bytes]) -> bool:
    """Whether ``name`` is a valid channel name."""
    return is_valid_name(name)


def is_ephemeral(name: Union[str, bytes]) -> bool:
    """Whether ``name`` ends in ``#ephemeral`` (such topics/channels are not kept)."""
    if isinstance(name, str):
        return name.endswith(EPHEMERAL_SUFFIX)
    return name.endswith(b"#ephemeral")
