"""The text report of ``pymq bench``: header, table and notes, at most 80 columns wide."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from .base import PEERS
from .catalogue import WORKLOADS
from .figures import Figure, format_figures
from .progress import clock_text
from .report import Report
from .rows import Row

WIDTH = 80


def rate_text(value: float | None) -> str:
    """Operations per second, short: ``2.61M``, ``157k``, ``5.2k``, ``333``."""
    if value is None:
        return "-"
    if value >= 1e6:
        return f"{value / 1e6:.2f}M"
    if value >= 1e4:
        return f"{value / 1e3:.0f}k"
    if value >= 1e3:
        return f"{value / 1e3:.1f}k"
    return f"{value:.0f}"


def number_text(value: float | None) -> str:
    """A ratio or a latency in µs with three significant figures or so."""
    if value is None:
        return "-"
    if value < 10:
        return f"{value:.2f}"
    if value < 100:
        return f"{value:.1f}"
    return f"{value:,.0f}"


_COLUMNS = ("workload", "implementation", "ops/s", "p50 us", "pymq/peer", "min-max")


def _cells(row: Row) -> list[str]:
    peer = row.implementation != "pymq" and row.ratio is not None
    return [row.workload, row.implementation, rate_text(row.msgs_per_s),
            number_text(row.p50_ns / 1000) if row.p50_ns is not None else "-",
            number_text(row.ratio) if peer else "-",
            f"{number_text(row.ratio_min)}-{number_text(row.ratio_max)}" if peer else "-"]


def format_table(rows: Sequence[Row]) -> str:
    """Rows as an aligned table, one line per row: workload and implementation
    left-aligned, medians over the rounds and the ratio's min-max right-aligned."""
    table = [list(_COLUMNS)] + [_cells(row) for row in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(_COLUMNS))]
    lines = []
    for line in table:
        cells = [c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths))]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _wrap(text: str, indent: str = "  ") -> list[str]:
    return textwrap.wrap(text, WIDTH, subsequent_indent=indent, break_on_hyphens=False) or [""]


def format_report(report: Report) -> str:
    """The header (run, machine, versions, method, settings), the table, the extra
    figures and the skipped workloads; no line is wider than 80 columns."""
    env, opts = report.environment, report.options
    kind = "headline workloads" if report.headline else "workloads"
    groups = len(dict.fromkeys(row.workload for row in report.rows))
    load = f"; load average {report.load[0]:g} -> {report.load[1]:g}" if report.load else ""
    lines = _wrap(f"pymq bench {report.started}: {groups} {kind} x {report.rounds} interleaved "
                  f"round(s) in {clock_text(report.wall_s)}{load}")
    lines += _wrap(f"machine: {env.get('cpu_model', env.get('cpu', '?'))}, {env.get('cores', '?')} cores, "
                   f"{env.get('memory', '?')}, stores on {env.get('filesystem', '?')}; {env['python']}")
    lines += _wrap(f"pymq {env['pymq']} ({env['pymq_core']}); "
                   + ", ".join(f"{peer} {env.get(peer, '?')}" for peer in PEERS))
    lines += _wrap(
        f"method: {opts.body_size}-byte bodies, batch {opts.batch}; objects built inside the timed "
        f"loop; each round runs every workload once on a fresh temporary store after a "
        f"{opts.warmup:,}-message warm-up (open, warm-up, check and close not timed), a group's "
        "implementations next to each other, their order rotating from round to round. "
        "Figures are medians over the rounds; pymq/peer is pymq's msgs/s over the row's in the "
        "same round (latency rows: the row's p50 over pymq's), > 1: pymq faster, with its "
        "min-max over the rounds.")
    width = max(map(len, report.settings), default=0)
    for impl, note in report.settings.items():
        if note:
            lines += _wrap(f"{impl:<{width}}  {note}", " " * (width + 2))
    lines += ["", format_table(report.rows)]
    figures = format_figures(report.rows, figure_specs(), report.rounds)
    if figures:
        lines += ["", figures]
    for s in report.skipped:
        lines += _wrap(f"skipped {s['workload']}/{s['implementation']}: {s['reason']}")
    return "\n".join(lines)


def figure_specs() -> dict[str, Figure]:
    """Every workload's extra figures by key (how the figures table labels and formats them)."""
    return {spec.key: spec for w in WORKLOADS for spec in w.figures}
