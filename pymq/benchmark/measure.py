"""Timing one repeat of one workload on a fresh store (the unit every round is made of)."""

from __future__ import annotations

import dataclasses
import os
import time

from .base import Workload


@dataclasses.dataclass
class Repeat:
    """What one repeat measured: nanoseconds of ``run(n)``, the per-call samples of a
    latency workload, the values of the workload's extra figures."""

    elapsed_ns: int
    samples: list[int]
    figures: dict[str, float | None]


def time_repeat(workload: Workload, n: int) -> Repeat:
    """One repeat on a freshly set-up workload: time ``run(n)``, check the writes, then
    let the workload measure its extra figures (before teardown)."""
    workload.setup(workload.options.directory)
    try:
        workload.before_run(n)
        if workload.sync_before_run:
            os.sync()  # start with nothing being written back: earlier rows' data must not
        start = time.perf_counter_ns()   # slow this one down (an order effect otherwise)
        workload.run(n)
        elapsed = time.perf_counter_ns() - start
        workload.check()
        samples = list(getattr(workload, "samples", ())) if workload.latency else []
        figures = workload.measure_figures() if workload.figures else {}
    finally:
        workload.teardown()
    return Repeat(elapsed, samples, figures)


def time_once(workload: Workload, n: int) -> tuple[int, list[int]]:
    """Nanoseconds of one ``run(n)`` on a freshly set-up workload, and the per-call
    samples a latency workload recorded."""
    repeat = time_repeat(workload, n)
    return repeat.elapsed_ns, repeat.samples


def percentile(sorted_samples: list[int], q: float) -> float:
    """The ``q`` quantile (0..1) of already sorted samples, nearest rank below."""
    return float(sorted_samples[min(len(sorted_samples) - 1, int(q * len(sorted_samples)))])
