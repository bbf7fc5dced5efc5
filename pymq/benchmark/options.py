"""The command line of ``pymq bench``: its options, and turning them into :class:`BenchOptions`.

Sizes and ``--repeat`` left unset take the default run's values
(:data:`~pymq.benchmark.headline.HEADLINE_SIZES`, :data:`~pymq.benchmark.headline.HEADLINE_ROUNDS`)
when neither ``--full`` nor ``--workload`` is given, and ``BenchOptions``' own defaults
(the full sizes, :data:`~pymq.benchmark.headline.FULL_ROUNDS`) otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Sequence

from .base import BenchOptions
from .catalogue import groups
from .headline import FULL_ROUNDS, HEADLINE_ROUNDS, HEADLINE_SIZES, is_headline


def _int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse ``type`` accepting integers >= ``minimum``."""

    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    parse.__name__ = "int"  # argparse names the type in its "invalid int value" message
    return parse


#: (flag, BenchOptions field, minimum, metavar, what) of the size options
_SIZES: tuple[tuple[str, str, int, str, str], ...] = (
    ("--messages", "messages", 1, "N", "messages per repeat of the single-message workloads"),
    ("--batch-messages", "batch_messages", 1, "N", "messages per repeat of the batched workloads"),
    ("--batch", "batch", 1, "N", "messages per put_messages / putmulti call"),
    ("--body-size", "body_size", 1, "BYTES", "message body size"),
    ("--warmup", "warmup", 0, "N", "untimed messages written before each repeat"),
    ("--lookups", "lookups", 1, "N", "time lookups per repeat"),
    ("--lookup-queue-size", "lookup_queue_size", 1, "N", "entries of the queue the time lookup searches"),
    ("--queries", "queries", 1, "N", "key lookups per repeat"),
    ("--query-store-size", "query_store_size", 1, "N", "messages with distinct keys in the queried stores"),
    ("--delivery-messages", "delivery_messages", 1, "N",
     "delayed and timer messages per repeat of the delivery workloads"),
    ("--delivery-window-ms", "delivery_window_ms", 1, "MS",
     "timer messages are due within it, delayed ones are put over a quarter of it"),
    ("--pending-timers", "pending_timers", 0, "N", "timer messages pending in the put_with_timers store"),
    ("--put-with-timers-messages", "put_with_timers_messages", 1, "N",
     "put_message calls per repeat of put_with_timers"),
    ("--real-messages", "real_messages", 1, "N", "messages per phase of the real_* workloads"),
    ("--real-queries", "real_queries", 1, "N", "key lookups of real_query"),
    ("--pending-halves", "pending_halves", 0, "N", "open half messages in the put_with_halves broker"),
    ("--cleaning-segments", "cleaning_segments", 1, "N",
     "old 16 MiB segments the put_while_cleaning store holds"),
    ("--cleaning-messages", "cleaning_messages", 1, "N", "put_message calls per repeat of put_while_cleaning"),
    ("--commits", "commits", 1, "N", "offset commits per repeat of commit_offset"),
    ("--durable-commits", "durable_commits", 1, "N", "Consumer.commit() calls per repeat of commit_durable"),
    ("--many-queues", "many_queues", 1, "N", "queues of many_queues, 10 per topic"),
    ("--many-queue-messages", "many_queue_messages", 1, "N", "messages many_queues puts into each queue"),
    ("--replication-messages", "replication_messages", 1, "N",
     "put_message calls per repeat of each replication row (SYNC_MASTER, ASYNC_MASTER, no slave)"),
    ("--replication-bytes", "replication_bytes", 1, "N",
     "commit-log bytes a new slave catches up on in the replication workload (1 GiB: 1073741824)"),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the benchmark's options to ``parser`` (shared by ``pymq bench`` and :func:`parse_args`)."""
    d = BenchOptions()
    add = parser.add_argument
    add("--full", action="store_true",
        help="every workload and peer at the full sizes (long: tens of minutes); "
             "default: the headline workloads against their strongest peer, about two minutes")
    add("--workload", dest="workloads", action="append", choices=groups(), default=None,
        help="run only this workload group, every implementation of it, at the full sizes "
             "(repeatable)")
    add("--repeat", type=_int_at_least(1), default=None, metavar="N",
        help=f"interleaved rounds, each running every workload once (default {HEADLINE_ROUNDS}; "
             f"{FULL_ROUNDS} with --full or --workload)")
    add("--out", dest="out_dir", default=None, metavar="DIR",
        help="write bench.json and bench.png into DIR (created if missing; default "
             "./pymq-bench-<date>-<time>/ unless --json or --plot name the files)")
    add("--json", dest="json_path", default=None, metavar="FILE",
        help="write the JSON report to FILE (the chart goes beside it unless --plot or --out)")
    add("--plot", dest="plot_path", default=None, metavar="FILE.png",
        help="draw the chart into FILE.png (the JSON goes beside it unless --json or --out)")
    add("--dir", dest="directory", default=None, metavar="DIR",
        help="parent directory of the temporary stores (default: the system temp dir)")
    add("--flush-disk-type", choices=("ASYNC_FLUSH", "SYNC_FLUSH"), default=d.flush_disk_type,
        help="pymq's flush_disk_type; SYNC_FLUSH also opens lmdb with sync=True (default ASYNC_FLUSH)")
    add("--commitlog-file-size", type=_int_at_least(1), default=None, metavar="BYTES",
        help="pymq's commit-log segment size (default: StoreConfig's, 1 GiB)")
    for flag, field, minimum, metavar, what in _SIZES:
        full = getattr(d, field)
        default = f"default {full:,}"
        if field in HEADLINE_SIZES:
            default = f"default {HEADLINE_SIZES[field]:,}; {full:,} with --full or --workload"
        add(flag, dest=field, type=_int_at_least(minimum), default=None, metavar=metavar,
            help=f"{what} ({default})")


def options_from_args(args: argparse.Namespace) -> BenchOptions:
    """Build :class:`BenchOptions` from arguments parsed with :func:`add_arguments`; unset
    sizes and rounds take the default run's or the full run's values."""
    defaults = BenchOptions()
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(BenchOptions) if hasattr(args, f.name)}
    values["workloads"] = tuple(values.get("workloads") or ())
    values["full"] = bool(values.get("full"))
    headline = is_headline(BenchOptions(workloads=values["workloads"], full=values["full"]))
    preset = {**HEADLINE_SIZES, "repeat": HEADLINE_ROUNDS} if headline else {"repeat": FULL_ROUNDS}
    for name, value in values.items():
        if value is None:
            values[name] = preset.get(name, getattr(defaults, name))
    return BenchOptions(**values)


def parse_args(argv: Sequence[str] | None = None) -> BenchOptions:
    """Parse benchmark options from a command line (``sys.argv[1:]`` when None)."""
    parser = argparse.ArgumentParser(prog="pymq bench", description="pymq next to its peers, side by side")
    add_arguments(parser)
    return options_from_args(parser.parse_args(argv))


def command_line(options: BenchOptions) -> str:
    """``pymq bench`` with the flags that differ from the run's defaults, for the record
    (the output paths and ``--dir`` left out: they do not change a figure)."""
    unset = {f.name: None for f in dataclasses.fields(BenchOptions)}
    defaults = options_from_args(argparse.Namespace(**{**unset, "workloads": options.workloads,
                                                       "full": options.full}))
    words = ["pymq", "bench"]
    if options.full:
        words.append("--full")
    words += [w for group in options.workloads for w in ("--workload", group)]
    flags = [("--repeat", "repeat"), ("--flush-disk-type", "flush_disk_type"),
             ("--commitlog-file-size", "commitlog_file_size")] + [(f, name) for f, name, *_ in _SIZES]
    for flag, name in flags:
        value = getattr(options, name)
        if value != getattr(defaults, name):
            words += [flag, str(value)]
    return " ".join(words)
