"""Figures a workload measures beside its timed rate (``Row.figures``), and their table.

Most workloads report one figure, msgs/s of the timed loop. A workload that measures
more (how long its store takes to reopen, how much disk it uses) declares a
:class:`Figure` per extra value in ``Workload.figures`` and returns the values from
``Workload.measure_figures()``; its row then keeps msgs/s (and the pymq/peer ratio) for
the main table and carries the others in ``Row.figures`` (in the JSON too), printed as a
table of their own under the main one (a line per figure, a column per implementation).
Rows without extra figures are unchanged.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any


@dataclasses.dataclass(frozen=True)
class Figure:
    """One extra figure: its key in ``Row.figures`` (and the JSON), which names the unit
    (``"reopen_s"``, ``"disk_mib"``), the table's column header and the value format."""

    key: str
    header: str
    fmt: str = "{:,.3f}"
    lower_is_better: bool = True   # the best repeat's value is the lowest (else the highest)
    median: bool = False           # report the median over the repeats, not the best (ratios
                                   # of two figures measured in the same round)


def best_figures(repeats: Iterable[Mapping[str, float | None]],
                 specs: Sequence[Figure]) -> dict[str, float | None]:
    """Each figure's best value over the repeats (lowest, or highest where
    ``lower_is_better`` is False; the median where ``median``); None when no repeat
    measured it."""
    repeats = list(repeats)
    best: dict[str, float | None] = {}
    for spec in specs:
        values = [r[spec.key] for r in repeats if r.get(spec.key) is not None]
        pick = statistics.median if spec.median else min if spec.lower_is_better else max
        best[spec.key] = pick(values) if values else None
    return best


def _cell(value: Any, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def format_figures(rows: Sequence[Any], specs: Mapping[str, Figure], repeat: int) -> str:
    """Per group whose rows carry figures: a caption line, then an indented table with a
    line per figure (msgs/s first) and a column per implementation, so that it stays
    narrow however many figures there are (empty text when no row has any)."""
    blocks = []
    for group in dict.fromkeys(row.workload for row in rows if row.figures):
        grows = [row for row in rows if row.workload == group and row.figures]
        keys = list(dict.fromkeys(key for row in grows for key in row.figures))
        figs = [specs.get(key, Figure(key, key, "{:,.3g}")) for key in keys]
        table = [["figure", *(row.implementation for row in grows)],
                 ["msgs/s", *(f"{row.msgs_per_s:,.0f}" for row in grows)]]
        table += [[f.header, *(_cell(row.figures.get(f.key), f.fmt) for row in grows)] for f in figs]
        widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
        lines = [f"{group}: msgs/s the median, others the best of {repeat} round(s) or as named"]
        for line in table:
            cells = [line[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(line[1:], widths[1:])]
            lines.append(("  " + "  ".join(cells)).rstrip())
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
