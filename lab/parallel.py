"""
Running scenarios side by side: each in a ``python -m lab run NAME``
child process of its own (its own run id, namespaces and teardown), at
most ``jobs`` at a time; their results are read back from JSON and
printed as one table.  Most of a round is waiting (for a fault's length,
a failover timeout, a drain), so two or three run well on two cores.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

from lab.runner import RoundResult

__all__ = ["run_parallel"]


def _result(data: Dict[str, Any]) -> RoundResult:
    result = RoundResult(data["scenario"], data["round"])
    result.__dict__.update(data)
    return result


def run_parallel(
    names: List[str],
    jobs: int,
    child_args: List[str],
    echo: Any = print,
) -> List[RoundResult]:
    """
    Run ``python -m lab run NAME CHILD_ARGS`` for each name, ``jobs`` at a
    time; returns every round's result in the order of ``names``.  A
    SIGINT or SIGTERM is passed on to the children (each tears its own
    world down) and then raised as :class:`KeyboardInterrupt`.
    """
    folder = tempfile.mkdtemp(prefix="txnsq-lab-jobs-")
    pending = list(names)
    running: Dict[str, Tuple[subprocess.Popen, str, str, float]] = {}
    done: Dict[str, List[RoundResult]] = {}
    interrupted: List[int] = []

    def on_signal(signum: int, frame: Any) -> None:
        interrupted.append(signum)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        while (pending or running) and not interrupted:
            while pending and len(running) < jobs:
                name = pending.pop(0)
                out_json = os.path.join(folder, name + ".json")
                log = os.path.join(folder, name + ".log")
                with open(log, "wb") as f:
                    child = subprocess.Popen(
                        [sys.executable, "-m", "lab", "run", name, "--json", out_json, *child_args],
                        stdout=f, stderr=subprocess.STDOUT, start_new_session=True,
                        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    )
                running[name] = (child, out_json, log, time.time())
            time.sleep(0.2)
            for name, (child, out_json, log, started) in list(running.items()):
                if child.poll() is None:
                    continue
                del running[name]
                with open(log, errors="replace") as f:
                    lines = [l for l in f.read().splitlines() if " round " in l or l.startswith(("kept", "remove", "lab:"))]
                for line in lines:
                    echo(line)
                done[name] = _load(out_json, name, child.returncode, log)
        if interrupted:
            for child, _, _, _ in running.values():
                try:
                    os.kill(child.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            for child, _, _, _ in running.values():
                try:
                    child.wait(90)
                except subprocess.TimeoutExpired:
                    child.kill()
            raise KeyboardInterrupt
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    shutil.rmtree(folder, ignore_errors=True)
    results: List[RoundResult] = []
    for name in names:
        results.extend(done.get(name, []))
    return results


def _load(path: str, name: str, code: Optional[int], log: str) -> List[RoundResult]:
    try:
        with open(path) as f:
            return [_result(d) for d in json.load(f)]
    except (OSError, ValueError):
        result = RoundResult(name, 1)
        with open(log, errors="replace") as f:
            tail = f.read()[-500:].replace("\n", " | ")
        result.problems.append("the scenario's process ended (%s) without results: %s" % (code, tail))
        return [result]
