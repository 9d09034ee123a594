"""What every scenario is: a name, what it covers, and a round."""

from __future__ import annotations

from typing import Any, List

__all__ = ["Scenario"]


class Scenario:
    """
    A scenario: one workload under one nemesis schedule.

    :ivar name: its name on the command line.
    :ivar summary: one line for ``python -m lab list``.
    :ivar nemeses: the nemeses it uses (for the list).
    :ivar workload: the workload it runs.
    """

    name = ""
    summary = ""
    nemeses: List[str] = []
    workload = ""

    def run_round(self, context: Any, result: Any) -> None:
        """Run one round in ``context``'s fresh world, filling ``result``."""
        raise NotImplementedError
