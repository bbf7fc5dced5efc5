"""pytest-benchmark view of the write workloads of :mod:`pymq.benchmark`.

One benchmark per (workload group, implementation), grouped by workload so pymq and its
peers print side by side. The workload code, sizes and settings are those of ``pymq bench``;
each round is one ``Workload.run(n)`` on a fresh, warmed-up store (setup and teardown are
not measured).

    pytest bench/ --benchmark-enable
    PYMQ_BENCH_ARGS="--messages 100000 --repeat 5" pytest bench/ --benchmark-enable

``PYMQ_BENCH_ARGS`` takes ``pymq bench`` options; ``--repeat`` sets the rounds.
"""

import os
import shlex

import pytest

from pymq import benchmark as pb

OPTIONS = pb.parse_args(shlex.split(os.environ.get("PYMQ_BENCH_ARGS", "")))
PUT_WORKLOADS = [w for w in pb.WORKLOADS if w.group.startswith("put")]


def _finish(workload):
    """pedantic teardown: verify the round's writes, then close and delete the store."""
    try:
        workload.check()
    finally:
        workload.teardown()


@pytest.mark.parametrize("workload_type", PUT_WORKLOADS, ids=lambda w: f"{w.group}-{w.implementation}")
def test_put(benchmark, workload_type, tmp_path):
    workload = workload_type(OPTIONS)
    reason = workload.unavailable()
    if reason is not None:
        pytest.skip(reason)
    n = workload.message_count()
    benchmark.group = workload.group
    benchmark.extra_info.update(implementation=workload.implementation, messages=n,
                                operation=workload.operation, settings=workload.note())
    try:
        benchmark.pedantic(workload.run, args=(n,), rounds=OPTIONS.repeat,
                           setup=lambda: workload.setup(tmp_path),
                           teardown=lambda *_: _finish(workload))
    finally:
        workload.teardown()  # pedantic skips teardown with --benchmark-disable or on errors
    if benchmark.stats is not None:
        benchmark.extra_info["msgs_per_s"] = round(n / benchmark.stats.stats.min)
