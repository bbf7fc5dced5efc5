"""Interleaved rounds: every workload once per round, pymq and its peers side by side.

A run of ``--repeat`` rounds goes round by round; within a round, group by group, each
implementation of the group runs one repeat (:func:`~pymq.benchmark.measure.time_repeat`).
The order inside a group rotates from one round to the next (pymq, peer; then peer,
pymq; ...), so neither side always goes first, and pymq and its peer always run next to
each other: a ratio is taken between figures measured seconds apart, and the spread of
the ratios over the rounds shows how much the machine moved during the run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from .base import Workload
from .measure import Repeat, time_repeat
from .progress import Progress
from .rows import round_figures, round_ratio


@dataclasses.dataclass(frozen=True)
class Step:
    """One repeat of one workload in round ``round`` (0-based)."""

    round: int
    workload: Workload


def plan(workloads: Sequence[Workload], rounds: int) -> list[Step]:
    """The steps of a run: per round, per group (in order), the group's workloads rotated
    by the round number."""
    by_group: dict[str, list[Workload]] = {}
    for workload in workloads:
        by_group.setdefault(workload.group, []).append(workload)
    steps = []
    for r in range(rounds):
        for members in by_group.values():
            k = r % len(members)
            steps += [Step(r, w) for w in members[k:] + members[:k]]
    return steps


def _result_text(workload: Workload, figures: dict, pymq_figures: dict | None) -> str:
    """A step's figures for its progress line: rate, p50, and its ratio to pymq's
    repeat of the same round when that ran already."""
    rate = figures["msgs_per_s"]
    text = f"{rate / 1e6:.3g}M/s" if rate >= 1e6 else f"{rate:,.0f}/s"
    if figures["p50_ns"] is not None:
        text += f", p50 {figures['p50_ns'] / 1000:,.2f} us"
    if pymq_figures is not None and workload.implementation != "pymq":
        text += f", pymq/peer {round_ratio(pymq_figures, figures)[0]:.2f}"
    return text


def run_rounds(workloads: Sequence[Workload], rounds: int,
               progress_stream=None) -> dict[str, list[Repeat]]:
    """Run ``rounds`` interleaved rounds of ``workloads``; each workload's repeats by
    ``Workload.name``, in round order. Progress goes to ``progress_stream`` (a bar on a
    terminal, one line per step otherwise; nothing when None)."""
    steps = plan(workloads, rounds)
    progress = Progress([s.workload.name for s in steps], progress_stream)
    repeats: dict[str, list[Repeat]] = {w.name: [] for w in workloads}
    pymq_round: dict[tuple[int, str], dict] = {}   # (round, group) -> pymq's figures
    try:
        for step in steps:
            workload = step.workload
            label = f"round {step.round + 1}/{rounds} {workload.name}"
            progress.begin(label)
            n = workload.message_count()
            repeat = time_repeat(workload, n)
            repeats[workload.name].append(repeat)
            figures = round_figures(repeat, n)
            if workload.implementation == "pymq":
                pymq_round[(step.round, workload.group)] = figures
            progress.end(label, _result_text(workload, figures, pymq_round.get((step.round, workload.group))))
    finally:
        progress.close()
    return repeats
