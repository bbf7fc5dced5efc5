"""Benchmark building blocks: options, the Workload lifecycle, shared helpers."""

from __future__ import annotations

import abc
import dataclasses
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any, ClassVar

import pymq

from .figures import Figure

TOPIC = "BenchTopic"
PEERS = ("lmdb", "queuelib")   # pip-installed peers; sqlite3 and bisect come with Python
_MiB = 1 << 20


@dataclasses.dataclass(frozen=True)
class BenchOptions:
    """Settings of one benchmark run. These defaults are the sizes of ``--full`` and
    ``--workload`` runs; a plain ``pymq bench`` replaces some of them with
    :data:`~pymq.benchmark.headline.HEADLINE_SIZES` (``options_from_args``)."""

    messages: int = 1_000_000        # per repeat, single-message workloads
    batch_messages: int = 2_000_000  # per repeat, batched workloads
    batch: int = 1000
    body_size: int = 100
    repeat: int = 3                  # interleaved rounds (each workload once per round)
    warmup: int = 10_000
    workloads: tuple[str, ...] = ()  # groups to run; empty runs every group
    directory: str | None = None     # parent of the temporary directories
    json_path: str | None = None
    plot_path: str | None = None
    out_dir: str | None = None       # where bench.json and bench.png go (--out)
    full: bool = False               # every workload and peer, not just the headline pairs
    flush_disk_type: str = "ASYNC_FLUSH"
    commitlog_file_size: int | None = None  # None keeps StoreConfig's default (1 GiB)
    lookups: int = 200_000                # time_lookup: lookups per repeat
    lookup_queue_size: int = 1_000_000    # time_lookup: entries in the queue searched
    queries: int = 100_000                # query_message: lookups per repeat
    query_store_size: int = 1_000_000     # query_message: messages (distinct keys) stored
    delivery_messages: int = 1_000        # delivery: delayed / timer messages per repeat
    delivery_window_ms: int = 2_000       # delivery: timers due within it; delayed puts over 1/4 of it
    pending_timers: int = 100_000         # put_with_timers: timer messages pending in the store
    put_with_timers_messages: int = 500_000  # put_with_timers: put_message calls per repeat
    pending_halves: int = 10_000          # put_with_halves: open half messages in the broker
    real_messages: int = 200_000          # real_*: messages per phase (realistic messages)
    real_queries: int = 5_000             # real_query: key lookups
    cleaning_segments: int = 8            # put_while_cleaning: old 16 MiB segments to delete
    cleaning_messages: int = 300_000      # put_while_cleaning: put_message calls per repeat
    commits: int = 200_000                # commit_offset: offset commits per repeat (in memory)
    durable_commits: int = 300            # commit_durable: Consumer.commit() calls per repeat
    many_queues: int = 10_000             # many_queues: queues written (10 per topic)
    many_queue_messages: int = 10         # many_queues: messages put into each queue
    replication_messages: int = 20_000    # replication: put_message calls per repeat of each row
    replication_bytes: int = 64 << 20     # replication: commit-log bytes a new slave catches up on

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
    latency: ClassVar[bool] = False  # run() records per-call nanoseconds in self.samples
    sync_before_run: ClassVar[bool] = True  # False: before_run() syncs itself, then works on
    warm_up: ClassVar[bool] = True  # False: no --warmup run before the timed one
    #: figures measure_figures() returns beside the timed rate (Row.figures)
    figures: ClassVar[tuple[Figure, ...]] = ()

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
            self.prefill()
            warmup = min(self.options.warmup, self.message_count()) if self.warm_up else 0
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

    def prefill(self) -> None:
        """Load the data a read workload reads (untimed); writes need none."""

    def before_run(self, n: int) -> None:
        """Untimed preparation right before the timed ``run(n)``."""

    def measure_figures(self) -> dict[str, float | None]:
        """The values of :attr:`figures`, measured after :meth:`check` on what the timed
        run wrote (the workload times what it times itself); none by default."""
        return {}

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
