"""``pymq bench --plot FILE``: the report as a PNG bar chart (needs matplotlib).

One panel per workload group, pymq first: throughput groups show operations per second
labelled with the pymq/peer ratio; latency groups show p50 over a lighter p99 bar.
"""

from __future__ import annotations

import math
from typing import Sequence


def plot_report(rows: Sequence, path: str, title: str = "pymq bench") -> None:
    """Write a PNG chart of ``rows`` (:class:`pymq.benchmark.Row`) to ``path``."""
    try:
        import matplotlib
    except ImportError as exc:
        raise RuntimeError("--plot needs matplotlib: pip install 'pymq[bench]'") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = list(dict.fromkeys(r.workload for r in rows))
    cols = min(3, len(groups)) or 1
    nrows = math.ceil(len(groups) / cols) or 1
    fig, axes = plt.subplots(nrows, cols, figsize=(5.2 * cols, 3.4 * nrows), squeeze=False)
    for ax in axes.flat[len(groups):]:
        ax.axis("off")
    for ax, group in zip(axes.flat, groups):
        grows = [r for r in rows if r.workload == group]
        latency = all(r.p50_ns is not None for r in grows)
        names = [r.implementation for r in grows]
        colors = ["#d1495b" if r.implementation == "pymq" else "#66a182" for r in grows]
        if latency:     # p99 as a light bar behind the p50 bar, both in µs
            p50 = [r.p50_ns / 1000 for r in grows]
            p99 = [r.p99_ns / 1000 for r in grows]
            ax.barh(names, p99, color=colors, alpha=0.35)
            ax.barh(names, p50, color=colors)
            labels = [f"p50 {a:,.2f} / p99 {b:,.2f}" for a, b in zip(p50, p99)]
            top = max(p99)
            ax.set_xlabel("latency, µs (lower is better)", fontsize=8)
        else:
            values = [r.msgs_per_s / 1e6 for r in grows]
            ax.barh(names, values, color=colors)
            labels = [f"{v:.2f}" + (f"  (pymq {r.ratio:.2f}x)" if r.implementation != "pymq" and r.ratio else "")
                      for v, r in zip(values, grows)]
            p99 = values
            top = max(values)
            ax.set_xlabel("M msgs/s (higher is better)", fontsize=8)
        ax.invert_yaxis()
        ax.set_title(group, fontsize=10)
        ax.tick_params(labelsize=8)
        for i, (label, end) in enumerate(zip(labels, p99)):
            ax.text(end, i, " " + label, va="center", fontsize=7)
        ax.set_xlim(0, (top or 1) * 1.7)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
