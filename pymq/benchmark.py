"""Write throughput of pymq next to embedded peers, measured in one process run.

This module is what ``pymq bench`` (and ``python -m pymq bench``) runs; the pytest-benchmark
suite in the repository's ``bench/`` directory drives the same :class:`Workload` classes.

How a workload is timed
-----------------------
Each repeat starts from a fresh temporary directory: ``Workload.setup`` opens the store,
database or queue there and writes ``--warmup`` messages; ``time.perf_counter_ns`` brackets
one ``Workload.run(n)``, a plain loop that builds every message or record object inside
the loop as a user's code would; ``Workload.check`` verifies the writes and
``Workload.teardown`` closes (final flush, shutdown) and deletes everything, untimed. The
best of ``--repeat`` repeats is reported. The garbage collector stays enabled.

Workload groups; the ratio column is pymq's msgs/s divided by the row's msgs/s
-----------------------------------------------------------------------------------
``put_message``
    pymq ``store.put_message(Message(topic, body))`` per message; lmdb one write
    transaction per message (``txn.put(key, body)``, 8-byte big-endian counter keys);
    queuelib ``FifoDiskQueue.push(body)`` (one ``write(2)`` per push).
``put_messages``
    pymq ``store.put_messages([...])`` per batch of ``--batch`` messages; lmdb one write
    transaction per batch with ``cursor.putmulti(items, append=True)``.

Durability: pymq runs a started store with the default ``StoreConfig`` (1 GiB segments,
``ASYNC_FLUSH``: a put returns once the message is in the mapped commit log); lmdb is
opened with ``sync=False, metasync=False`` (no fsync per commit either); queuelib never
fsyncs. ``--flush-disk-type SYNC_FLUSH`` opens lmdb with ``sync=True, metasync=True``.

Adding a workload: subclass :class:`Workload` (``group``, ``implementation``,
``operation``, ``open``/``run``/``check``/``close``) and append it to :data:`WORKLOADS`.
"""

from __future__ import annotations

import abc
import argparse
import dataclasses
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar, TextIO

import pymq
from pymq._version import __version__

TOPIC = "BenchTopic"
PEERS = ("lmdb", "queuelib")
_MiB = 1 << 20


@dataclasses.dataclass(frozen=True)
class BenchOptions:
    """Settings of one benchmark run; the defaults take about 30 s on a 2-core machine."""

    messages: int = 1_000_000        # per repeat, single-message workloads
    batch_messages: int = 2_000_000  # per repeat, batched workloads
    batch: int = 1000
    body_size: int = 100
    repeat: int = 3
    warmup: int = 10_000
    workloads: tuple[str, ...] = ()  # groups to run; empty runs every group
    directory: str | None = None     # parent of the temporary directories
    json_path: str | None = None
    flush_disk_type: str = "ASYNC_FLUSH"
    commitlog_file_size: int | None = None  # None keeps StoreConfig's default (1 GiB)

    @property
    def sync_flush(self) -> bool:
        """True when every write should reach the disk before it returns."""
        return self.flush_disk_type == "SYNC_FLUSH"


def store_config(options: BenchOptions) -> Any:
    """The pymq ``StoreConfig`` of a run: RocketMQ's defaults unless the options override."""
    overrides: dict[str, Any] = {"flush_disk_type": options.flush_disk_type}
    if options.commitlog_file_size is not None:
        overrides["commitlog_file_size"] = options.commitlog_file_size
    return pymq.StoreConfig(**overrides)


def _batch_sizes(total: int, batch: int) -> Iterator[int]:
    """Split ``total`` messages into batches of ``batch``; the last one may be smaller."""
    full, rest = divmod(total, batch)
    for _ in range(full):
        yield batch
    if rest:
        yield rest


class BenchCheckError(AssertionError):
    """A workload's writes did not all succeed; its timing would be meaningless."""


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise BenchCheckError(message)


# -- workloads ---------------------------------------------------------------------------


class Workload(abc.ABC):
    """One timed write loop of one implementation on a fresh temporary directory.

    Lifecycle per repeat: :meth:`setup` (create the directory, :meth:`open`, warm up),
    :meth:`run` (the timed part), :meth:`check`, :meth:`teardown` (:meth:`close`, delete
    the directory). Subclasses set the class attributes and implement the four hooks.
    """

    group: ClassVar[str]           # rows of one group are compared with its pymq row
    implementation: ClassVar[str]  # "pymq", "lmdb", ...
    operation: ClassVar[str]       # what one step of the timed loop calls
    requires: ClassVar[str] = ""   # module that must be importable, else skipped
    batched: ClassVar[bool] = False

    def __init__(self, options: BenchOptions) -> None:
        self.options = options
        self.body = b"x" * options.body_size
        self._workdir: str | None = None

    @property
    def name(self) -> str:
        """``group/implementation``, unique among :data:`WORKLOADS`."""
        return f"{self.group}/{self.implementation}"

    def message_count(self) -> int:
        """Messages written by one timed repeat."""
        return self.options.batch_messages if self.batched else self.options.messages

    def note(self) -> str:
        """The implementation's durability/configuration settings, for the output."""
        return ""

    def unavailable(self) -> str | None:
        """Why this workload cannot run here (a missing package), or None."""
        if self.requires and importlib.util.find_spec(self.requires) is None:
            return f"{self.requires} is not installed"
        return None

    def setup(self, parent: str | os.PathLike[str] | None = None) -> None:
        """Open the implementation in a new directory under ``parent`` and warm it up."""
        self._workdir = tempfile.mkdtemp(prefix="pymq-bench-", dir=parent)
        try:
            self.open(self._workdir)
            warmup = min(self.options.warmup, self.message_count())
            if warmup:
                self.run(warmup)
        except BaseException:
            self.teardown()
            raise

    def teardown(self) -> None:
        """Close the implementation and delete its directory; safe to call twice."""
        if self._workdir is None:
            return
        try:
            self.close()
        finally:
            shutil.rmtree(self._workdir)
            self._workdir = None

    @abc.abstractmethod
    def open(self, path: str) -> None:
        """Create the store/database/queue inside the empty directory ``path``."""

    @abc.abstractmethod
    def run(self, n: int) -> None:
        """Write ``n`` messages, building each message object inside the loop."""

    @abc.abstractmethod
    def check(self) -> None:
        """Raise :class:`BenchCheckError` unless every write so far succeeded."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release what :meth:`open` acquired; must tolerate a partial :meth:`open`."""


class _PymqWorkload(Workload):
    implementation = "pymq"
    store: Any = None
    last: Any = None  # the PutMessageResult of the last put
    written = 0

    def note(self) -> str:
        cfg = store_config(self.options)
        return (f"StoreConfig(commitlog_file_size={cfg.commitlog_file_size:,}, "
                f"flush_disk_type={cfg.flush_disk_type}), other fields default; "
                "store started, so its background services run alongside the puts")

    def unavailable(self) -> str | None:
        if not hasattr(pymq, "MessageStore"):
            return "pymq.MessageStore is not available (is the core built?)"
        return None

    def open(self, path: str) -> None:
        self.last, self.written = None, 0
        self.store = pymq.MessageStore(os.path.join(path, "store"), store_config(self.options))
        self.store.start()

    def check(self) -> None:
        """The last put succeeded and its queue offsets end at the number of messages written."""
        last = self.last
        _expect(last is not None and last.is_ok() and last.queue_offset + last.msg_num == self.written,
                f"wrote {self.written} messages, last put returned {last!r}")

    def close(self) -> None:
        store, self.store = self.store, None
        if store is not None:
            store.shutdown()


class PymqPutMessage(_PymqWorkload):
    """pymq: one ``put_message`` per message."""

    group = "put_message"
    operation = "store.put_message(Message(...))"

    def run(self, n: int) -> None:
        store, Message, body = self.store, pymq.Message, self.body
        result = None
        for _ in range(n):
            result = store.put_message(Message(topic=TOPIC, body=body))
        self.last = result
        self.written += n


class PymqPutMessages(_PymqWorkload):
    """pymq: one ``put_messages`` per batch."""

    group = "put_messages"
    operation = "store.put_messages([Message(...) x batch])"
    batched = True

    def run(self, n: int) -> None:
        store, Message, body = self.store, pymq.Message, self.body
        result = None
        for size in _batch_sizes(n, self.options.batch):
            result = store.put_messages([Message(topic=TOPIC, body=body) for _ in range(size)])
        self.last = result
        self.written += n


class _LmdbWorkload(Workload):
    implementation = "lmdb"
    requires = "lmdb"
    env: Any = None

    def note(self) -> str:
        sync = self.options.sync_flush
        return (f"lmdb.open(sync={sync}, metasync={sync}), other settings default"
                + ("" if sync else "; no fsync per commit, comparable to ASYNC_FLUSH"))

    def open(self, path: str) -> None:
        import lmdb

        sync = self.options.sync_flush
        self.next_key = 0
        self.env = lmdb.open(os.path.join(path, "lmdb"), map_size=self._map_size(),
                             sync=sync, metasync=sync)

    def _map_size(self) -> int:
        """Room for warm-up and run with half-full B-tree pages, plus slack."""
        records = self.options.warmup + self.message_count()
        return 2 * records * (self.options.body_size + 64) + 64 * _MiB

    def check(self) -> None:
        entries = self.env.stat()["entries"]
        _expect(entries == self.next_key, f"lmdb holds {entries} entries, wrote {self.next_key}")

    def close(self) -> None:
        env, self.env = self.env, None
        if env is not None:
            env.close()


class LmdbPutPerTxn(_LmdbWorkload):
    """lmdb: one write transaction per message."""

    group = "put_message"
    operation = "txn.put(key, body), 1 txn/msg"

    def run(self, n: int) -> None:
        env, body, first = self.env, self.body, self.next_key
        for i in range(first, first + n):
            with env.begin(write=True) as txn:
                txn.put(i.to_bytes(8, "big"), body)
        self.next_key = first + n


class LmdbPutMulti(_LmdbWorkload):
    """lmdb: one write transaction per batch, appended with ``cursor.putmulti``."""

    group = "put_messages"
    operation = "cursor.putmulti(batch, append=True), 1 txn/batch"
    batched = True

    def run(self, n: int) -> None:
        env, body, key = self.env, self.body, self.next_key
        for size in _batch_sizes(n, self.options.batch):
            with env.begin(write=True) as txn:
                txn.cursor().putmulti([(i.to_bytes(8, "big"), body) for i in range(key, key + size)],
                                      append=True)
            key += size
        self.next_key = key


class QueuelibPush(Workload):
    """queuelib: ``FifoDiskQueue.push`` per message."""

    group = "put_message"
    implementation = "queuelib"
    operation = "FifoDiskQueue.push(body)"
    requires = "queuelib"
    queue: Any = None

    def note(self) -> str:
        return "FifoDiskQueue defaults; one write(2) per push, never fsyncs"

    def open(self, path: str) -> None:
        from queuelib import FifoDiskQueue

        self.pushed = 0
        self.queue = FifoDiskQueue(os.path.join(path, "queue"))

    def run(self, n: int) -> None:
        queue, body = self.queue, self.body
        for _ in range(n):
            queue.push(body)
        self.pushed += n

    def check(self) -> None:
        _expect(len(self.queue) == self.pushed, f"queue holds {len(self.queue)}, pushed {self.pushed}")

    def close(self) -> None:
        queue, self.queue = self.queue, None
        if queue is not None:
            queue.close()


#: Every workload, in output order; a group's pymq row comes first.
WORKLOADS: tuple[type[Workload], ...] = (
    PymqPutMessage, LmdbPutPerTxn, QueuelibPush,
    PymqPutMessages, LmdbPutMulti,
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
            "rows": [dataclasses.asdict(row) for row in self.rows],
            "skipped": self.skipped,
        }


def time_once(workload: Workload, n: int) -> int:
    """Nanoseconds of one ``run(n)`` on a freshly set-up workload."""
    workload.setup(workload.options.directory)
    try:
        start = time.perf_counter_ns()
        workload.run(n)
        elapsed = time.perf_counter_ns() - start
        workload.check()
    finally:
        workload.teardown()
    return elapsed


def measure(workload: Workload) -> Row:
    """Time ``--repeat`` repeats of a workload and keep the best one."""
    n = workload.message_count()
    best_ns = min(time_once(workload, n) for _ in range(workload.options.repeat))
    seconds = max(best_ns, 1) / 1e9
    return Row(workload.group, workload.implementation, workload.operation, n, seconds, n / seconds)


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
    if hasattr(pymq, "StoreConfig"):
        store_config(options)


def _say(stream: TextIO | None, line: str) -> None:
    if stream is not None:
        print(line, file=stream, flush=True)


# -- environment -------------------------------------------------------------------------


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, else what :mod:`platform` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if line.startswith(("model name", "Model", "Hardware")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def core_build_info() -> str:
    """What the compiled core reports about its build (CRC-32 implementation)."""
    try:
        record = importlib.import_module("pymq._core.record")
    except ImportError as exc:
        return f"core not importable ({exc})"
    crc32_impl = getattr(record, "crc32_impl", None)
    return f"crc32={crc32_impl()}" if callable(crc32_impl) else "crc32_impl() not available"


def _dist_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def environment() -> dict[str, str]:
    """Python, CPU, pymq and peer versions, for the header and the JSON output."""
    env = {
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "cpu": f"{cpu_model()} ({os.cpu_count()} logical CPUs)",
        "pymq": __version__,
        "pymq_core": core_build_info(),
    }
    env.update({peer: _dist_version(peer) for peer in PEERS})
    return env


# -- output ------------------------------------------------------------------------------

_COLUMNS = (  # header, Row attribute, value format; text columns are left-aligned
    ("workload", "workload", None),
    ("implementation", "implementation", None),
    ("operation", "operation", None),
    ("messages", "messages", "{:,}"),
    ("seconds", "seconds", "{:.3f}"),
    ("msgs/s", "msgs_per_s", "{:,.0f}"),
    ("pymq/peer", "ratio", "{:.2f}"),
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
    lines += [f"skipped {s['workload']}/{s['implementation']}: {s['reason']}" for s in report.skipped]
    return "\n".join(lines)


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
    add("--flush-disk-type", choices=("ASYNC_FLUSH", "SYNC_FLUSH"), default=d.flush_disk_type,
        help="pymq's flush_disk_type; SYNC_FLUSH also opens lmdb with sync=True (default ASYNC_FLUSH)")
    add("--commitlog-file-size", type=_positive_int, default=None, metavar="BYTES",
        help="pymq's commit-log segment size (default: StoreConfig's, 1 GiB)")


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
    report = run_benchmarks(options, progress=sys.stderr)
    print(format_report(report), file=out, flush=True)
    if options.json_path:
        write_json(report, options.json_path)
    return 0


def run(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the benchmark; the exit code."""
    return main(parse_args(argv))
