"""From the repeats of the rounds to rows: medians, per-round ratios and their spread.

Every workload ran once per round (:mod:`.rounds`). A row keeps each round's figures
(``Row.rounds``) and their medians. A row beside its group's ``pymq`` row gets one ratio
per round, pymq's figure over the row's from the **same round** (the two ran next to each
other), and reports their median and min-max:

- throughput workloads: pymq msgs/s / the row's msgs/s;
- latency workloads (per-call samples): the row's p50 / pymq's p50, so > 1 still means
  pymq is faster (the rate of the timed loop when a p50 is 0, as lateness can be).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from .base import Workload
from .figures import best_figures
from .measure import Repeat, percentile


@dataclasses.dataclass
class Row:
    """One workload (group and implementation) over all its rounds."""

    workload: str
    implementation: str
    operation: str
    messages: int            # per round
    seconds: float           # median over the rounds of the timed run
    msgs_per_s: float        # median over the rounds
    ratio: float | None = None      # median of the per-round ratios to the group's pymq row
    ratio_min: float | None = None
    ratio_max: float | None = None
    ratio_basis: str | None = None  # "msgs/s" or "p50"
    p50_ns: float | None = None     # medians over the rounds of each round's percentile
    p99_ns: float | None = None
    #: per round, in order: seconds, msgs_per_s, p50_ns, p99_ns, ratio
    rounds: list[dict[str, float | None]] = dataclasses.field(default_factory=list)
    #: the workload's extra figures (``Workload.figures``: key -> best value), None for most
    figures: dict[str, float | None] | None = None

    def to_json(self) -> dict[str, Any]:
        """The row as a JSON object; ``figures`` only where the workload measures any."""
        out = dataclasses.asdict(self)
        if out["figures"] is None:
            del out["figures"]
        return out


def round_figures(repeat: Repeat, messages: int) -> dict[str, float | None]:
    """One round's figures of a row: seconds, msgs/s, and p50/p99 when it has samples."""
    seconds = max(repeat.elapsed_ns, 1) / 1e9
    samples = sorted(repeat.samples)
    return {"seconds": seconds, "msgs_per_s": messages / seconds,
            "p50_ns": percentile(samples, 0.50) if samples else None,
            "p99_ns": percentile(samples, 0.99) if samples else None,
            "ratio": None}


def round_ratio(pymq: Mapping[str, float | None], other: Mapping[str, float | None]) -> tuple[float, str]:
    """pymq's figure over ``other``'s for one round (> 1: pymq faster), and its basis."""
    if pymq["p50_ns"] and other["p50_ns"]:
        return other["p50_ns"] / pymq["p50_ns"], "p50"
    return pymq["msgs_per_s"] / other["msgs_per_s"], "msgs/s"


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def build_rows(workloads: Sequence[Workload], repeats: Mapping[str, Sequence[Repeat]]) -> list[Row]:
    """A row per workload that ran (``repeats`` by ``Workload.name``), with each round's
    ratio to its group's pymq row and the median and min-max of those ratios."""
    rows = []
    for workload in workloads:
        runs = repeats.get(workload.name)
        if not runs:
            continue
        n = workload.message_count()
        rounds = [round_figures(r, n) for r in runs]
        row = Row(workload.group, workload.implementation, workload.operation, n,
                  _median([r["seconds"] for r in rounds]), _median([r["msgs_per_s"] for r in rounds]),
                  p50_ns=_median([r["p50_ns"] for r in rounds]), p99_ns=_median([r["p99_ns"] for r in rounds]),
                  rounds=rounds)
        if workload.figures:
            row.figures = best_figures((r.figures for r in runs), workload.figures)
        rows.append(row)
    _assign_ratios(rows)
    return rows


def _assign_ratios(rows: Sequence[Row]) -> None:
    base = {row.workload: row for row in rows if row.implementation == "pymq"}
    for row in rows:
        pymq = base.get(row.workload)
        if pymq is None:
            continue
        if row is pymq:
            row.ratio = row.ratio_min = row.ratio_max = 1.0
            continue
        ratios = []
        for mine, theirs in zip(pymq.rounds, row.rounds):
            theirs["ratio"], row.ratio_basis = round_ratio(mine, theirs)
            ratios.append(theirs["ratio"])
        if ratios:
            row.ratio, row.ratio_min, row.ratio_max = statistics.median(ratios), min(ratios), max(ratios)


def ratios(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """What the chart shows: per row beside a pymq row, its group, peer, basis, the
    median and min-max of the per-round ratios, and the ratios themselves."""
    return [{"workload": row.workload, "peer": row.implementation, "basis": row.ratio_basis,
             "median": row.ratio, "min": row.ratio_min, "max": row.ratio_max,
             "rounds": [r["ratio"] for r in row.rounds]}
            for row in rows if row.implementation != "pymq" and row.ratio is not None]
