"""The lab's own error: a one-line reason, printed, exit status 2."""

from __future__ import annotations

__all__ = ["LabError"]


class LabError(Exception):
    """
    Something the lab cannot do here (no root, a missing tool, an unknown
    scenario): the message is one line naming what is missing.
    """
