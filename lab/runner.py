"""
Running scenarios: a fresh world (hosts, components) for every round,
torn down after it whatever happens; the round's figures, a table at the
end, and with ``--keep`` the world and the JSON history left for
inspection.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional

from lab.errors import LabError
from lab.history import History
from lab.ledger import NAMESPACE_PREFIX, Ledger
from lab.world import World

__all__ = ["RoundContext", "RoundResult", "Runner"]


class RoundResult:
    """
    One round's figures: the queue checker's names (acknowledged, lost,
    unexpected, duplicates, recovered), times, and whether it passed.
    """

    def __init__(self, scenario: str, round_no: int) -> None:
        self.scenario = scenario
        self.round = round_no
        self.passed = False
        self.figures: Dict[str, Any] = {}
        self.problems: List[str] = []
        self.failover_s: Optional[float] = None
        self.recover_s: Optional[float] = None
        self.seconds = 0.0

    def as_dict(self) -> Dict[str, Any]:
        """JSON-ready."""
        return dict(self.__dict__)


class RoundContext:
    """
    What a scenario's round is given: its world, history, folders, the
    options of the run, and a random source seeded from ``--seed``.
    """

    def __init__(self, world: World, history: History, folder: str, quick: bool, rng: Any, python: str) -> None:
        self.world = world
        self.history = history
        self.folder = folder
        self.quick = quick
        self.rng = rng
        self.python = python

    def sleep_until(self, t0: float, offset: float) -> None:
        """Sleep until ``offset`` seconds after ``t0`` (a ``time.time()``)."""
        delay = t0 + offset - time.time()
        if delay > 0:
            time.sleep(delay)


class _Interrupted(BaseException):
    """SIGTERM or SIGINT reached the lab: tear down and leave."""


def _raise_interrupted(signum: int, frame: Any) -> None:
    # A second Ctrl-C must not cut the teardown short.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise _Interrupted(signum)


class Runner:
    """
    Runs rounds of scenarios.

    :param keep: leave each round's world (namespaces, processes, files)
        in place and write the JSON history; print how to remove them.
    :param out: the folder holding every round's logs, data and history
        (a temporary folder, removed at the end unless ``keep``).
    """

    def __init__(self, quick: bool, seed: int, keep: bool, python: str, out: Optional[str] = None,
                 echo: Callable[[str], None] = print) -> None:
        self.quick = quick
        self.seed = seed
        self.keep = keep
        self.python = python
        self.echo = echo
        self.run_id = secrets.token_hex(3)
        self.base = out or tempfile.mkdtemp(prefix="txnsq-lab-%s-" % self.run_id)
        self.made_base = out is None
        self.results: List[RoundResult] = []
        self.kept: List[str] = []

    def run(self, scenarios: List[Any], rounds: int) -> List[RoundResult]:
        """Every round of every scenario; results in order."""
        import random

        previous = {s: signal.signal(s, _raise_interrupted) for s in (signal.SIGINT, signal.SIGTERM)}
        self.echo("run id %s (namespaces %s%s*)" % (self.run_id[:4], NAMESPACE_PREFIX, self.run_id[:4]))
        try:
            for scenario in scenarios:
                for number in range(1, rounds + 1):
                    rng = random.Random("%d/%s/%d" % (self.seed, scenario.name, number))
                    self.results.append(self._round(scenario, number, rng))
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            if self.made_base and not self.keep:
                shutil.rmtree(self.base, ignore_errors=True)
        return self.results

    def _round(self, scenario: Any, number: int, rng: Any) -> RoundResult:
        result = RoundResult(scenario.name, number)
        ledger = Ledger("%s%02d" % (self.run_id[:4], len(self.results) % 100))
        folder = os.path.join(self.base, "%s-%d" % (scenario.name, number))
        os.makedirs(folder, exist_ok=True)
        started = time.time()
        history = History(os.path.join(folder, "history"))
        world: Optional[World] = None
        interrupted = False
        try:
            world = World(ledger, folder, self.python)
            context = RoundContext(world, history, folder, self.quick, rng, self.python)
            scenario.run_round(context, result)
        except LabError as e:
            result.passed = False
            result.problems.append(str(e))
        except _Interrupted:
            interrupted = True
            raise
        finally:
            result.seconds = round(time.time() - started, 1)
            history.close()
            if self.keep and not interrupted:
                with open(os.path.join(folder, "result.json"), "w") as f:
                    json.dump(result.as_dict(), f, indent=1, default=str)
                self.kept.extend(ledger.teardown(keep=True))
                self.echo("kept: %s (history in %s)" % (folder, history.folder))
            else:
                if world is not None:
                    world.teardown_processes()
                problems = ledger.teardown()
                if interrupted:
                    self.echo("interrupted: the round's namespaces and processes are removed"
                              + ("" if not problems else "; left: " + "; ".join(problems)))
                elif problems:
                    result.problems.extend("teardown: " + p for p in problems)
                    result.passed = False
        self.echo(_line(result))
        return result


def _line(result: RoundResult) -> str:
    figures = result.figures
    return "%-36s round %d %s  acked %s lost %s unexpected %s dup %s recovered %s  %.0fs%s" % (
        result.scenario,
        result.round,
        "PASS" if result.passed else "FAIL",
        figures.get("acknowledged", "-"),
        figures.get("lost", "-"),
        figures.get("unexpected", "-"),
        figures.get("duplicates", "-"),
        figures.get("recovered", "-"),
        result.seconds,
        "" if not result.problems else "  (" + "; ".join(result.problems)[:300] + ")",
    )
