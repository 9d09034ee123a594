"""
What the benchmarks print: aligned text tables, Markdown tables, and
progress lines.

Standard library only: every benchmark imports it, the in-process ones and
those that drive a separate nsqd.
"""

from __future__ import annotations

import sys
from typing import Collection, List, Sequence

__all__ = ["markdown_table", "progress", "table"]


def table(rows: Sequence[Sequence[str]], left: Collection[int] = (0,)) -> str:
    """
    ``rows`` as an aligned text table: the first row is the header,
    underlined with dashes; columns two spaces apart; the columns whose
    index is in ``left`` (text) padded on the right, the others (figures)
    on the left; no trailing blanks.

    :raises ValueError: the rows do not all have as many cells as the header.
    """
    width = len(rows[0])
    if any(len(row) != width for row in rows):
        raise ValueError("every row needs %d cells" % (width,))
    widths = [max(len(row[column]) for row in rows) for column in range(width)]
    lines: List[str] = []
    for index, row in enumerate(rows):
        lines.append("  ".join(
            cell.ljust(size) if column in left else cell.rjust(size)
            for column, (cell, size) in enumerate(zip(row, widths))
        ).rstrip())
        if index == 0:
            lines.append("  ".join("-" * size for size in widths))
    return "\n".join(lines)


def markdown_table(rows: Sequence[Sequence[str]]) -> str:
    """
    ``rows`` as a Markdown table (the first row is the header), its columns
    padded to line up in the source.

    :raises ValueError: the rows do not all have as many cells as the header.
    """
    width = len(rows[0])
    if any(len(row) != width for row in rows):
        raise ValueError("every row needs %d cells" % (width,))
    widths = [max(3, max(len(row[column]) for row in rows)) for column in range(width)]
    lines = ["| " + " | ".join(cell.ljust(size) for cell, size in zip(row, widths)) + " |" for row in rows]
    lines.insert(1, "| " + " | ".join("-" * size for size in widths) + " |")
    return "\n".join(lines)


def progress(script: str, message: str) -> None:
    """A progress line on stderr, ``[script] message``, keeping stdout for the table."""
    sys.stderr.write("[%s] %s\n" % (script, message))
    sys.stderr.flush()
