"""The chart every ``pymq bench`` writes: pymq / peer per comparison, with its spread.

One horizontal bar per peer row, from 1 to the median of the per-round ratios on a log
scale (green where pymq is faster in every round, red where the peer is, grey where the
rounds disagree), the min-max over the rounds as an error bar, each round's ratio as a
dot, and the numbers beside it. The title says what a ratio is; the caption names the
machine (CPU, cores, memory, filesystem), Python, pymq, when the run started, the load
and the command. Needs matplotlib.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

FASTER, SLOWER, TIE = "#4c9a6a", "#c8553d", "#9a9a9a"


def caption(environment: Mapping[str, str], started: str, command: str,
            load: Sequence[float] | None = None) -> str:
    """The lines under the chart: the machine, then when, how busy and what command."""
    env = environment
    busy = f", load average {load[0]:g} -> {load[1]:g}" if load else ""
    return (f"{env.get('cpu_model', env.get('cpu', '?'))}, {env.get('cores', '?')} cores, "
            f"{env.get('memory', '?')}; stores on {env.get('filesystem', '?')}; {env.get('python', '?')}; "
            f"pymq {env.get('pymq', '?')}\n" + textwrap.fill(f"{started}{busy}: {command}", 150))


def plot_ratios(ratios: Sequence[Mapping[str, Any]], path: str, rounds: int, note: str) -> None:
    """Write the chart of ``ratios`` (:meth:`Report.ratios`) to ``path`` as a PNG;
    ``note`` is the caption (:func:`caption`)."""
    try:
        import matplotlib
    except ImportError as exc:
        raise RuntimeError("the chart needs matplotlib: pip install matplotlib") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    n = max(len(ratios), 1)
    fig, ax = plt.subplots(figsize=(8.6, 1.5 + 0.48 * n))
    lows = [r["min"] for r in ratios] or [1.0]
    highs = [r["max"] for r in ratios] or [1.0]
    left, right = min(0.5, min(lows) / 1.6), max(2.0, max(highs) * 4.0)
    for y, r in enumerate(ratios):
        median, lo, hi = r["median"], r["min"], r["max"]
        color = TIE if lo < 1 < hi else FASTER if median >= 1 else SLOWER
        ax.barh(y, median - 1, left=1, height=0.6, color=color, alpha=0.45)
        ax.errorbar([median], [y], xerr=[[median - lo], [hi - median]], fmt="o", color="black",
                    markersize=4, capsize=4, linewidth=1.2)
        dots = [v for v in r.get("rounds", []) if v is not None]
        ax.scatter(dots, [y] * len(dots), s=9, color="#555555", alpha=0.6, zorder=3)
        ax.text(max(hi, 1.0) * 1.12, y, f"{median:.2f}x  ({lo:.2f}-{hi:.2f})", va="center", fontsize=8.5)
    ax.axvline(1.0, color="#333333", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlim(left, right)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax.set_yticks(range(len(ratios)))
    ax.set_yticklabels([f"{r['workload']}\nvs {r['peer']}" + (" (p50)" if r.get("basis") == "p50" else "")
                        for r in ratios], fontsize=8.5)
    ax.set_ylim(len(ratios) - 0.5, -0.5)
    ax.set_xlabel("pymq / peer (log scale; > 1: pymq faster)", fontsize=9)
    ax.set_title(f"pymq bench: pymq / peer, median and min-max of {rounds} interleaved round(s)",
                 fontsize=10.5)
    ax.tick_params(axis="x", labelsize=8)
    ax.grid(axis="x", which="both", color="#dddddd", linewidth=0.5)
    ax.set_axisbelow(True)
    fig.text(0.01, 0.01, note, fontsize=7.5, color="#444444", va="bottom", ha="left")
    lines = note.count("\n") + 1
    fig.tight_layout(rect=(0, (0.16 * lines + 0.1) / (1.5 + 0.48 * n), 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
