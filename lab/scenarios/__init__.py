"""
The lab's scenarios, by name: each module adds its own with
:func:`register`.
"""

from __future__ import annotations

from typing import Dict, List

from lab.scenarios.base import Scenario

__all__ = ["SCENARIOS", "Scenario", "all_scenarios", "register"]

SCENARIOS: Dict[str, Scenario] = {}


def register(scenario: Scenario) -> Scenario:
    """Add ``scenario`` to the registry (its name must be new)."""
    if scenario.name in SCENARIOS:
        raise ValueError("scenario %s registered twice" % scenario.name)
    SCENARIOS[scenario.name] = scenario
    return scenario


def all_scenarios() -> List[Scenario]:
    """Every scenario, in registration order (the modules imported once)."""
    from lab.scenarios import queue  # noqa: F401

    for optional in ("log", "nats", "lookupd", "spark", "clock", "slownet", "disk"):
        try:
            __import__("lab.scenarios." + optional)
        except ModuleNotFoundError as e:
            if e.name != "lab.scenarios." + optional:
                raise
    return list(SCENARIOS.values())
