"""Running ``pymq bench``: select the workloads, run the rounds, print and write the results.

The pieces live in their own modules: the catalogue of workloads (:mod:`.catalogue`),
the default run's selection and sizes (:mod:`.headline`), one timed repeat
(:mod:`.measure`), the interleaved rounds (:mod:`.rounds`) and their progress
(:mod:`.progress`), rows with medians and spreads (:mod:`.rows`), the report and its
JSON (:mod:`.report`), the text table (:mod:`.table`), the output files
(:mod:`.output`) and the chart (:mod:`.plot`). This module ties them together and
re-exports the names older callers import from it.
"""

from __future__ import annotations

import datetime
import os
import sys
import time
from collections.abc import Sequence
from typing import TextIO

import pymq

from .base import BenchOptions, store_config
from .catalogue import WORKLOADS, groups
from .headline import is_headline, select_workloads
from .machine import environment
from .measure import Repeat, time_once, time_repeat
from .options import add_arguments, command_line, options_from_args, parse_args
from .output import can_plot, check_output_paths, make_parent_dirs, output_paths
from .report import Report, write_json
from .rounds import run_rounds
from .rows import Row, build_rows
from .table import format_report, format_table

__all__ = ["WORKLOADS", "Repeat", "Report", "Row", "add_arguments", "build_rows", "environment", "format_report",
           "format_table", "groups", "main", "options_from_args", "parse_args", "run", "run_benchmarks",
           "select_workloads", "time_once", "time_repeat", "write_json"]


def run_benchmarks(options: BenchOptions, progress: TextIO | None = None) -> Report:
    """Run the selected workloads in ``options.repeat`` interleaved rounds and return the
    report; progress goes to ``progress`` (a bar on a terminal, a line per step otherwise)."""
    _validate(options)
    started = datetime.datetime.now().astimezone()
    t0, load_before = time.monotonic(), _load()
    workloads, skipped, settings = [], [], {}
    for workload in select_workloads(options):
        reason = workload.unavailable()
        if reason is not None:
            skipped.append({"workload": workload.group, "implementation": workload.implementation,
                            "reason": reason})
            continue
        workloads.append(workload)
    repeats = run_rounds(workloads, options.repeat, progress)
    for workload in workloads:      # after the rounds: some notes tell what the last repeat did
        note = workload.note()
        if note and note not in settings.get(workload.implementation, "").split(" | "):
            known = settings.get(workload.implementation)
            settings[workload.implementation] = f"{known} | {note}" if known else note
    rows = build_rows(workloads, repeats)
    return Report(environment(options.directory), options, rows, skipped, settings,
                  started=started.isoformat(timespec="seconds"), wall_s=time.monotonic() - t0,
                  rounds=options.repeat, headline=is_headline(options), command=command_line(options),
                  load=(load_before, _load()))


def _load() -> float:
    """The 1-minute load average (0.0 where the OS does not tell)."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return 0.0


def _validate(options: BenchOptions) -> None:
    """Reject a bad ``--dir``, output path or pymq config override before anything is timed."""
    if options.directory is not None and not os.path.isdir(options.directory):
        raise FileNotFoundError(f"--dir {options.directory!r} is not a directory")
    check_output_paths(options)
    if hasattr(pymq, "StoreConfig"):
        store_config(options)


def main(options: BenchOptions, out: TextIO | None = None) -> int:
    """Run the benchmark with progress on stderr, print the report to ``out`` (stdout),
    write the JSON and the chart (:func:`~pymq.benchmark.output.output_paths`) and say
    where; return 0."""
    out = out if out is not None else sys.stdout
    _validate(options)
    json_path, png_path = output_paths(options, datetime.datetime.now())
    make_parent_dirs(json_path, png_path)
    report = run_benchmarks(options, progress=sys.stderr)
    print(format_report(report), file=out, flush=True)
    write_json(report, json_path)
    print(f"\nfigures: {json_path}", file=out)
    if can_plot():
        from .plot import caption, plot_ratios
        plot_ratios(report.ratios(), png_path, report.rounds,
                    caption(report.environment, report.started, report.command, report.load))
        print(f"chart:   {png_path}", file=out, flush=True)
    else:
        print("chart:   not drawn, matplotlib is not installed (pip install matplotlib)", file=out, flush=True)
    return 0


def run(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the benchmark; the exit code."""
    return main(parse_args(argv))
