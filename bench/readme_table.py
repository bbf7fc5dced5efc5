"""Print the Markdown table of README.md's benchmark section from one run's bench.json.

    python bench/readme_table.py pymq-bench-<date>-<time>/bench.json

One line per peer row: pymq's and the peer's medians over the rounds (msgs/s, or p50 for
latency workloads) and the pymq/peer ratio, median and min-max over the rounds, then a
line naming the run (date, machine, load, wall time, command), so that the README's
numbers are exactly those of the run whose chart it shows.
"""

from __future__ import annotations

import json
import sys


def _rate(value: float) -> str:
    return f"{value / 1e6:.2f} M/s" if value >= 1e5 else f"{value:,.0f}/s"


def _figure(row: dict, basis: str) -> str:
    if basis == "p50":
        us = row["p50_ns"] / 1000
        return f"p50 {us:,.0f} µs" if us >= 100 else f"p50 {us:.2f} µs"
    return _rate(row["msgs_per_s"])


def table(report: dict) -> str:
    """The README table and the line naming the run."""
    rows = {(r["workload"], r["implementation"]): r for r in report["rows"]}
    lines = [f"| workload | peer | pymq | peer | pymq/peer: median (min–max of {report['rounds']} rounds) |",
             "|---|---|---|---|---|"]
    for ratio in report["ratios"]:
        pymq, peer = rows[(ratio["workload"], "pymq")], rows[(ratio["workload"], ratio["peer"])]
        lines.append(f"| {ratio['workload']} | {ratio['peer']} | {_figure(pymq, ratio['basis'])} | "
                     f"{_figure(peer, ratio['basis'])} | **{ratio['median']:.2f}x** "
                     f"({ratio['min']:.2f}–{ratio['max']:.2f}) |")
    env, load = report["environment"], report.get("load") or ["?", "?"]
    lines += ["", f"Run of {report['started']}: `{report['command']}`, {report['wall_s']:.0f} s wall; "
              f"{env['cpu_model']}, {env['cores']} cores, {env['memory']}, stores on {env['filesystem']}, "
              f"{env['python']}, pymq {env['pymq']}; 1-minute load average {load[0]} at the start, "
              f"{load[1]} at the end."]
    return "\n".join(lines)


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        print(table(json.load(f)))
