# -*- test-case-name: tests.test_cluster_subjects -*-
"""
NATS subjects: dot-separated tokens; in interest, ``*`` matches one token
and ``>`` (last) one or more.
"""

from __future__ import annotations

from typing import List

__all__ = ["is_literal", "subject_matches", "valid_subject"]


def is_literal(pattern: str) -> bool:
    """``pattern`` has no wildcard token."""
    if "*" not in pattern and ">" not in pattern:
        return True
    for token in pattern.split("."):
        if token == "*" or token == ">":
            return False
    return True


def valid_subject(subject: str, wildcards: bool = True) -> bool:
    """
    ``subject`` is a well-formed NATS subject: non-empty tokens, no
    whitespace; ``>`` only last; wildcards only when ``wildcards``.
    """
    if not subject or any(c in subject for c in " \t\r\n"):
        return False
    tokens = subject.split(".")
    for index, token in enumerate(tokens):
        if not token:
            return False
        if token == "*" or token == ">":
            if not wildcards:
                return False
            if token == ">" and index != len(tokens) - 1:
                return False
    return True


def subject_matches(pattern: str, subject: str) -> bool:
    """The literal ``subject`` is matched by interest in ``pattern``."""
    if pattern == subject:
        return True
    if "*" not in pattern and ">" not in pattern:
        return False
    ptokens: List[str] = pattern.split(".")
    stokens = subject.split(".")
    last = len(ptokens) - 1
    for index, token in enumerate(ptokens):
        if token == ">" and index == last:
            return len(stokens) > index
        if index >= len(stokens):
            return False
        if token != "*" and token != stokens[index]:
            return False
    return len(stokens) == len(ptokens)
