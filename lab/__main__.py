"""
``python -m lab list`` and ``python -m lab run NAME|all [--rounds N]
[--quick] [--seed S] [--keep]``; ``python -m lab clean [RUN]`` removes
what an interrupted or ``--keep`` run left.

Exit status: 0 when every round passed, 1 when one failed, 2 for a usage
error or a missing tool (one line naming it).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

from lab.errors import LabError

__all__ = ["main"]


def _pypy(repo: str) -> Optional[str]:
    """The PyPy the second pass of ``all`` runs nsqd on: tox's pypy3 environment, when built."""
    candidate = os.path.join(repo, ".tox", "pypy3", "bin", "python")
    return candidate if os.access(candidate, os.X_OK) else None


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab", description="txnsq's fault lab")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("list", help="name every scenario")
    run = sub.add_parser("run", help="run a scenario, or all")
    run.add_argument("name", nargs="+", help="scenario names, or all")
    run.add_argument("--rounds", type=int, default=None, help="rounds of each (default 1 quick, 3 otherwise)")
    run.add_argument("--quick", action="store_true", help="the short form CI runs")
    run.add_argument("--seed", type=int, default=1)
    run.add_argument("--keep", action="store_true", help="leave each round's namespaces, processes and files, and write the JSON history")
    run.add_argument("--python", default=sys.executable, help="the interpreter nsqd runs on")
    run.add_argument("--no-pypy", action="store_true", help="all: skip the second pass on PyPy")
    run.add_argument("--out", default=None, help="folder for logs, data and histories (kept)")
    run.add_argument("--json", default=None, help="write the rounds' results here")
    run.add_argument("--jobs", type=int, default=1, help="scenarios run side by side, each in a process of its own (all)")
    clean = sub.add_parser("clean", help="remove what earlier runs left")
    clean.add_argument("run_id", nargs="?", default="")
    args = parser.parse_args(argv)
    try:
        return _dispatch(args, parser)
    except LabError as e:
        print("lab: %s" % (e,), file=sys.stderr)
        return 2
    except BaseException as e:
        if type(e).__name__ == "_Interrupted":
            print("lab: interrupted", file=sys.stderr)
            return 130
        raise


def _dispatch(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from lab.scenarios import SCENARIOS, all_scenarios

    if args.command == "list":
        for scenario in all_scenarios():
            print("%-32s %-8s %-40s %s" % (scenario.name, scenario.workload, ",".join(scenario.nemeses), scenario.summary))
        return 0
    if args.command == "clean":
        from lab import preflight
        from lab.ledger import sweep

        preflight.check()
        left = sweep(args.run_id)
        for problem in left:
            print("left: %s" % problem)
        return 1 if left else 0
    if args.command != "run":
        parser.print_help()
        return 2
    scenarios = all_scenarios()
    if args.name == ["all"]:
        chosen = scenarios
    else:
        unknown = [n for n in args.name if n not in SCENARIOS]
        if unknown:
            raise LabError("no scenario named %r (python -m lab list names them)" % (unknown[0],))
        chosen = [SCENARIOS[n] for n in args.name]
    if args.rounds is not None and args.rounds < 1:
        raise LabError("--rounds must be at least 1")
    from lab import preflight
    from lab.report import print_table
    from lab.runner import Runner
    from lab.world import REPO

    preflight.check()
    rounds = args.rounds or (1 if args.quick else 3)
    passes = [("CPython", args.python)]
    pypy = None if args.no_pypy or args.quick or args.name != ["all"] else _pypy(REPO)
    if pypy:
        passes.append(("PyPy", pypy))
    if args.jobs < 1:
        raise LabError("--jobs must be at least 1")
    results = []
    for label, python in passes:
        print("== %s: nsqd on %s, %d round(s) each, seed %d" % (label, python, rounds, args.seed), flush=True)
        if args.jobs > 1 and len(chosen) > 1:
            from lab.parallel import run_parallel

            child_args = ["--rounds", str(rounds), "--seed", str(args.seed), "--python", python, "--no-pypy"]
            child_args += ["--quick"] if args.quick else []
            child_args += ["--keep"] if args.keep else []
            if args.out:
                child_args += ["--out", args.out]
            # The longest (Spark's JVMs) first, so the short ones fill in beside them.
            ordered = sorted(chosen, key=lambda s: s.workload != "spark")
            try:
                passed = run_parallel([s.name for s in ordered], args.jobs, child_args,
                                      echo=lambda line: print(line, flush=True))
            except KeyboardInterrupt:
                print("lab: interrupted", file=sys.stderr)
                return 130
            results.extend(passed)
            print_table(passed, label)
            continue
        runner = Runner(args.quick, args.seed, args.keep, python, out=args.out,
                        echo=lambda line: print(line, flush=True))
        results.extend(runner.run(chosen, rounds))
        for line in runner.kept:
            print("remove with: %s" % line)
        print_table(runner.results, label)
    if args.json:
        import json

        with open(args.json, "w") as f:
            json.dump([r.as_dict() for r in results], f, indent=1, default=str)
    return 0 if all(r.passed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
