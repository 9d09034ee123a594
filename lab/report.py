"""The table a run prints: one row a scenario, summed over its rounds."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Dict, List, Optional

__all__ = ["print_table", "table_rows"]

COLUMNS = ["scenario", "rounds", "passed", "acknowledged", "lost", "unexpected", "duplicates",
           "recovered", "failover s", "recover s"]


def _median(values: List[float]) -> Optional[float]:
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else round((values[mid - 1] + values[mid]) / 2, 2)


def table_rows(results: List[Any]) -> List[List[str]]:
    """The table's rows (strings), in the order the scenarios ran."""
    groups: "OrderedDict[str, List[Any]]" = OrderedDict()
    for result in results:
        groups.setdefault(result.scenario, []).append(result)
    rows = []
    for name, group in groups.items():
        def total(key: str) -> str:
            values = [r.figures.get(key) for r in group if isinstance(r.figures.get(key), int)]
            return str(sum(values)) if values else "-"

        failover = _median([r.failover_s for r in group])
        recover = _median([r.recover_s for r in group])
        rows.append([
            name, str(len(group)), "%d/%d" % (sum(r.passed for r in group), len(group)),
            total("acknowledged"), total("lost"), total("unexpected"), total("duplicates"),
            total("recovered"),
            "-" if failover is None else "%.1f" % failover,
            "-" if recover is None else "%.1f" % recover,
        ])
    return rows


def print_table(results: List[Any], label: str = "") -> None:
    """Print the table (Markdown, so that it pastes into docs/reliability.md)."""
    rows = table_rows(results)
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(COLUMNS)]
    if label:
        print("\n%s" % label)
    print("| " + " | ".join(c.ljust(w) for c, w in zip(COLUMNS, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |")
    failed = [r for r in results if not r.passed]
    for r in failed:
        print("FAILED %s round %d: %s" % (r.scenario, r.round, "; ".join(r.problems)[:1000]))
