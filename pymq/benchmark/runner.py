"""Running workloads, collecting rows and printing the report (``pymq bench``)."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

import pymq

from .aio import (PymqAioPut, PymqAioSyncPut, PymqAioWakeup, PymqThreadPut, PymqThreadSyncPut,
                  PymqThreadWakeup)
from .base import PEERS, BenchOptions, Workload, store_config
from .commit import (PymqCommitOffset, PymqConsumerCommit, PymqConsumerCommitThreads, SqliteCommitOffset,
                     SqliteDurableCommit)
from .read import (BisectTimeLookup, LmdbCursorRead, PymqDispatch, PymqGetMessage, PymqGetMessageNoCrc,
                   PymqPutMessagesReference, PymqTimeLookup, QueuelibPop)
from .delivery import PymqDelayDelivery, PymqPutWithoutTimers, PymqPutWithTimers, PymqTimerDelivery
from .figures import Figure, best_figures, format_figures
from .machine import environment
from .many_queues import LmdbManyQueues, PymqManyQueues
from .pop import LitequeuePopDone, PersistQueueAck, PymqPopAck
from .query import LmdbGet, PymqQueryMessage, SqliteSelect
from .realistic import REALISTIC
from .retention import PymqPutNotCleaning, PymqPutWhileCleaning
from .transaction import PymqPutWithHalves, PymqPutWithoutHalves
from .sqlite import SqliteExecutemany, SqliteInsertPerTxn, SqliteReadPages
from .write import (LmdbPutMulti, LmdbPutPerTxn, PymqPutMessage, PymqPutMessageNoRecordCrc, PymqPutMessages,
                    PymqPutMessagesNoRecordCrc, QueuelibPush)

#: Every workload, in output order; a group's pymq row comes first.
WORKLOADS: tuple[type[Workload], ...] = (
    PymqPutMessage, PymqPutMessageNoRecordCrc, LmdbPutPerTxn, QueuelibPush, SqliteInsertPerTxn,
    PymqPutMessages, PymqPutMessagesNoRecordCrc, LmdbPutMulti, SqliteExecutemany,
    PymqDispatch, PymqPutMessagesReference,
    PymqGetMessage, PymqGetMessageNoCrc, QueuelibPop, LmdbCursorRead, SqliteReadPages,
    PymqTimeLookup, BisectTimeLookup,
    PymqQueryMessage, LmdbGet, SqliteSelect,
    PymqDelayDelivery, PymqTimerDelivery,
    PymqPutWithTimers, PymqPutWithoutTimers,
    PymqPutWhileCleaning, PymqPutNotCleaning,
    PymqPutWithHalves, PymqPutWithoutHalves,
    PymqPopAck, PersistQueueAck, LitequeuePopDone,
    PymqCommitOffset, SqliteCommitOffset,
    PymqConsumerCommit, PymqConsumerCommitThreads, SqliteDurableCommit,
    PymqAioPut, PymqThreadPut,
    PymqAioSyncPut, PymqThreadSyncPut,
    PymqAioWakeup, PymqThreadWakeup,
    *REALISTIC,
    PymqManyQueues, LmdbManyQueues,
)


def groups() -> list[str]:
    """Workload group names, in output order."""
    return list(dict.fromkeys(w.group for w in WORKLOADS))


# -- measuring ---------------------------------------------------------------------------


@dataclasses.dataclass
class Row:
    """The best repeat of one workload."""

    workload: str
    implementation: str
    operation: str
    messages: int
    seconds: float
    msgs_per_s: float
    ratio: float | None = None  # pymq msgs/s / this row's msgs/s, within the group
    p50_ns: float | None = None  # per-operation latency, for latency workloads
    p99_ns: float | None = None
    #: the workload's extra figures (``Workload.figures``: key -> value), None for most
    figures: dict[str, float | None] | None = None

    def to_json(self) -> dict[str, Any]:
        """The row as a JSON object; ``figures`` only where the workload measures any."""
        out = dataclasses.asdict(self)
        if out["figures"] is None:
            del out["figures"]
        return out


@dataclasses.dataclass
class Report:
    """Everything one run produced: environment, options, rows, skipped workloads."""

    environment: dict[str, str]
    options: BenchOptions
    rows: list[Row]
    skipped: list[dict[str, str]]
    settings: dict[str, str]  # implementation -> durability/configuration note

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable view of the report."""
        return {
            "environment": self.environment,
            "options": dataclasses.asdict(self.options),
            "settings": self.settings,
            "rows": [row.to_json() for row in self.rows],
            "skipped": self.skipped,
        }


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


def _percentile(sorted_samples: list[int], q: float) -> float:
    return float(sorted_samples[min(len(sorted_samples) - 1, int(q * len(sorted_samples)))])


def measure(workload: Workload) -> Row:
    """Time ``--repeat`` repeats of a workload and keep the best one (for a latency
    workload, the repeat with the lowest median); each extra figure is its own best
    over the repeats (:func:`~pymq.benchmark.figures.best_figures`)."""
    n = workload.message_count()
    runs = [time_repeat(workload, n) for _ in range(workload.options.repeat)]
    if workload.latency:
        best = min(runs, key=lambda r: sorted(r.samples)[len(r.samples) // 2] if r.samples else r.elapsed_ns)
    else:
        best = min(runs, key=lambda r: r.elapsed_ns)
    seconds = max(best.elapsed_ns, 1) / 1e9
    samples = best.samples
    row = Row(workload.group, workload.implementation, workload.operation, n, seconds, n / seconds)
    if samples:
        samples.sort()
        row.p50_ns, row.p99_ns = _percentile(samples, 0.50), _percentile(samples, 0.99)
    if workload.figures:
        row.figures = best_figures((r.figures for r in runs), workload.figures)
    return row


def assign_ratios(rows: Sequence[Row]) -> None:
    """Set each row's ratio to its group's pymq msgs/s over its own msgs/s."""
    pymq_rate = {row.workload: row.msgs_per_s for row in rows if row.implementation == "pymq"}
    for row in rows:
        base = pymq_rate.get(row.workload)
        row.ratio = base / row.msgs_per_s if base is not None else None


def select_workloads(options: BenchOptions) -> list[Workload]:
    """Instances of the workloads in the selected groups, in output order."""
    chosen = set(options.workloads or groups())
    return [cls(options) for cls in WORKLOADS if cls.group in chosen]


def run_benchmarks(options: BenchOptions, progress: TextIO | None = None) -> Report:
    """Run every selected workload and return the report; progress lines go to ``progress``."""
    _validate(options)
    rows, skipped, settings = [], [], {}
    for workload in select_workloads(options):
        reason = workload.unavailable()
        if reason is not None:
            skipped.append({"workload": workload.group, "implementation": workload.implementation,
                            "reason": reason})
            continue
        _say(progress, f"{workload.name}: {options.repeat} x {workload.message_count():,} messages ...")
        rows.append(measure(workload))
        settings[workload.implementation] = workload.note()
        _say(progress, f"{workload.name}: best {rows[-1].seconds:.3f} s")
    assign_ratios(rows)
    return Report(environment(), options, rows, skipped, settings)


def _validate(options: BenchOptions) -> None:
    """Reject a bad ``--dir``, ``--json`` or pymq config override before anything is timed."""
    if options.directory is not None and not os.path.isdir(options.directory):
        raise FileNotFoundError(f"--dir {options.directory!r} is not a directory")
    if options.json_path and not os.path.isdir(os.path.dirname(os.path.abspath(options.json_path))):
        raise FileNotFoundError(f"--json {options.json_path!r}: no such directory")
    if options.plot_path:
        if not os.path.isdir(os.path.dirname(os.path.abspath(options.plot_path))):
            raise FileNotFoundError(f"--plot {options.plot_path!r}: no such directory")
        if importlib.util.find_spec("matplotlib") is None:
            raise FileNotFoundError("--plot needs matplotlib: pip install 'pymq[bench]'")
    if hasattr(pymq, "StoreConfig"):
        store_config(options)


def _say(stream: TextIO | None, line: str) -> None:
    if stream is not None:
        print(line, file=stream, flush=True)


# -- output ------------------------------------------------------------------------------

_COLUMNS = (  # header, Row attribute, value format; text columns are left-aligned
    ("workload", "workload", None),
    ("implementation", "implementation", None),
    ("operation", "operation", None),
    ("messages", "messages", "{:,}"),
    ("seconds", "seconds", "{:.3f}"),
    ("msgs/s", "msgs_per_s", "{:,.0f}"),
    ("pymq/peer", "ratio", "{:.2f}"),
    ("p50 ns", "p50_ns", "{:,.0f}"),
    ("p99 ns", "p99_ns", "{:,.0f}"),
)


def _cell(value: Any, fmt: str | None) -> str:
    if value is None:
        return "-"
    return fmt.format(value) if fmt else str(value)


def format_table(rows: Sequence[Row]) -> str:
    """Rows as an aligned text table: text left-aligned, numbers right-aligned."""
    table = [[header for header, _, _ in _COLUMNS]]
    table += [[_cell(getattr(row, attr), fmt) for _, attr, fmt in _COLUMNS] for row in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(_COLUMNS))]
    lines = []
    for line in table:
        cells = [cell.rjust(width) if fmt else cell.ljust(width)
                 for cell, width, (_, _, fmt) in zip(line, widths, _COLUMNS)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def format_report(report: Report) -> str:
    """The header (environment, method, settings), the table and the skipped workloads."""
    env, opts = report.environment, report.options
    lines = [
        f"python {env['python']} on {env['platform']}",
        f"cpu    {env['cpu']}",
        f"pymq   {env['pymq']} ({env['pymq_core']}); "
        + ", ".join(f"{peer} {env[peer]}" for peer in PEERS),
        f"method {opts.body_size}-byte bodies, batch {opts.batch}; objects built inside the timed loop; "
        f"best of {opts.repeat} repeat(s), each on a fresh temporary store after a "
        f"{opts.warmup:,}-message warm-up (warm-up, open and close not timed); "
        "pymq/peer = pymq msgs/s / row msgs/s (> 1: pymq faster)",
    ]
    width = max(map(len, report.settings), default=0)
    lines += [f"{impl:<{width}}  {note}" for impl, note in report.settings.items() if note]
    lines += ["", format_table(report.rows)]
    figures = format_figures(report.rows, figure_specs(), opts.repeat)
    if figures:
        lines += ["", figures]
    lines += [f"skipped {s['workload']}/{s['implementation']}: {s['reason']}" for s in report.skipped]
    return "\n".join(lines)


def figure_specs() -> dict[str, Figure]:
    """Every workload's extra figures by key (how the figures table labels and formats them)."""
    return {spec.key: spec for w in WORKLOADS for spec in w.figures}


def write_json(report: Report, path: str) -> None:
    """Write the report as JSON to ``path``."""
    with open(path, "w", encoding="utf-8") as out:
        json.dump(report.to_json(), out, indent=2)
        out.write("\n")


# -- entry points ------------------------------------------------------------------------


def _int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse ``type`` accepting integers >= ``minimum``."""

    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    parse.__name__ = "int"  # argparse names the type in its "invalid int value" message
    return parse


_positive_int = _int_at_least(1)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the benchmark's options to ``parser`` (shared by ``pymq bench`` and :func:`run`)."""
    d = BenchOptions()
    add = parser.add_argument
    add("--messages", type=_positive_int, default=d.messages, metavar="N",
        help=f"messages per repeat of the single-message workloads (default {d.messages:,})")
    add("--batch-messages", type=_positive_int, default=d.batch_messages, metavar="N",
        help=f"messages per repeat of the batched workloads (default {d.batch_messages:,})")
    add("--batch", type=_positive_int, default=d.batch, metavar="N",
        help=f"messages per put_messages / putmulti call (default {d.batch})")
    add("--body-size", type=_positive_int, default=d.body_size, metavar="BYTES",
        help=f"message body size (default {d.body_size})")
    add("--repeat", type=_positive_int, default=d.repeat, metavar="N",
        help=f"repeats per workload; the best is reported (default {d.repeat})")
    add("--warmup", type=_int_at_least(0), default=d.warmup, metavar="N",
        help=f"untimed messages written before each repeat (default {d.warmup:,})")
    add("--workload", dest="workloads", action="append", choices=groups(), default=None,
        help="run only this workload group (repeatable; default: all)")
    add("--dir", dest="directory", default=None, metavar="DIR",
        help="parent directory of the temporary stores (default: the system temp dir)")
    add("--json", dest="json_path", default=None, metavar="FILE", help="also write the results as JSON")
    add("--plot", dest="plot_path", default=None, metavar="FILE.png",
        help="also draw the results as a PNG chart (needs matplotlib)")
    add("--flush-disk-type", choices=("ASYNC_FLUSH", "SYNC_FLUSH"), default=d.flush_disk_type,
        help="pymq's flush_disk_type; SYNC_FLUSH also opens lmdb with sync=True (default ASYNC_FLUSH)")
    add("--commitlog-file-size", type=_positive_int, default=None, metavar="BYTES",
        help="pymq's commit-log segment size (default: StoreConfig's, 1 GiB)")
    add("--lookups", type=_positive_int, default=d.lookups, metavar="N",
        help=f"time lookups per repeat (default {d.lookups:,})")
    add("--lookup-queue-size", type=_positive_int, default=d.lookup_queue_size, metavar="N",
        help=f"entries of the queue the time lookup searches (default {d.lookup_queue_size:,})")
    add("--queries", type=_positive_int, default=d.queries, metavar="N",
        help=f"key lookups per repeat (default {d.queries:,})")
    add("--query-store-size", type=_positive_int, default=d.query_store_size, metavar="N",
        help=f"messages with distinct keys in the queried stores (default {d.query_store_size:,})")
    add("--delivery-messages", type=_positive_int, default=d.delivery_messages, metavar="N",
        help=f"delayed and timer messages per repeat of the delivery workloads (default {d.delivery_messages:,})")
    add("--delivery-window-ms", type=_positive_int, default=d.delivery_window_ms, metavar="MS",
        help=f"timer messages are due within it, delayed ones are put over a quarter of it "
             f"(default {d.delivery_window_ms:,})")
    add("--pending-timers", type=_int_at_least(0), default=d.pending_timers, metavar="N",
        help=f"timer messages pending in the put_with_timers store (default {d.pending_timers:,})")
    add("--put-with-timers-messages", type=_positive_int, default=d.put_with_timers_messages, metavar="N",
        help=f"put_message calls per repeat of put_with_timers (default {d.put_with_timers_messages:,})")
    add("--real-messages", type=_positive_int, default=d.real_messages, metavar="N",
        help=f"messages per phase of the real_* workloads (default {d.real_messages:,})")
    add("--real-queries", type=_positive_int, default=d.real_queries, metavar="N",
        help=f"key lookups of real_query (default {d.real_queries:,})")
    add("--pending-halves", type=_int_at_least(0), default=d.pending_halves, metavar="N",
        help=f"open half messages in the put_with_halves broker (default {d.pending_halves:,})")
    add("--cleaning-segments", type=_positive_int, default=d.cleaning_segments, metavar="N",
        help=f"old 16 MiB segments the put_while_cleaning store holds (default {d.cleaning_segments})")
    add("--cleaning-messages", type=_positive_int, default=d.cleaning_messages, metavar="N",
        help=f"put_message calls per repeat of put_while_cleaning (default {d.cleaning_messages:,})")
    add("--commits", type=_positive_int, default=d.commits, metavar="N",
        help=f"offset commits per repeat of commit_offset (default {d.commits:,})")
    add("--durable-commits", type=_positive_int, default=d.durable_commits, metavar="N",
        help=f"Consumer.commit() calls per repeat of commit_durable (default {d.durable_commits:,})")
    add("--many-queues", type=_positive_int, default=d.many_queues, metavar="N",
        help=f"queues of many_queues, 10 per topic (default {d.many_queues:,})")
    add("--many-queue-messages", type=_positive_int, default=d.many_queue_messages, metavar="N",
        help=f"messages many_queues puts into each queue (default {d.many_queue_messages})")


def options_from_args(args: argparse.Namespace) -> BenchOptions:
    """Build :class:`BenchOptions` from arguments parsed with :func:`add_arguments`."""
    names = {field.name for field in dataclasses.fields(BenchOptions)}
    values = {name: getattr(args, name) for name in names if hasattr(args, name)}
    values["workloads"] = tuple(values.get("workloads") or ())
    return BenchOptions(**values)


def parse_args(argv: Sequence[str] | None = None) -> BenchOptions:
    """Parse benchmark options from a command line (``sys.argv[1:]`` when None)."""
    parser = argparse.ArgumentParser(prog="pymq bench", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return options_from_args(parser.parse_args(argv))


def main(options: BenchOptions, out: TextIO | None = None) -> int:
    """Run the benchmark, print the report to ``out`` (stdout), write ``--json``; return 0."""
    out = out if out is not None else sys.stdout
    # progress lines only for a person watching a terminal
    report = run_benchmarks(options, progress=sys.stderr if sys.stderr.isatty() and out.isatty() else None)
    print(format_report(report), file=out, flush=True)
    if options.json_path:
        write_json(report, options.json_path)
    if options.plot_path:
        from .plot import plot_report
        plot_report(report.rows, options.plot_path,
                    f"pymq bench: {report.environment.get('cpu', '')}, 100-byte bodies".replace(
                        "100", str(options.body_size)))
    return 0


def run(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the benchmark; the exit code."""
    return main(parse_args(argv))
