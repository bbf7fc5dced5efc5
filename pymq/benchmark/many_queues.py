"""Tens of thousands of queues holding little each (issue 23): puts, reopening, footprint.

``many_queues``
    ``--many-queues`` queues (default 10,000: topics ``T0000``, ``T0001``, ... of 10
    queues each) receive ``--many-queue-messages`` messages each (default 10), round
    robin: one message into every queue, then the next round. The row's msgs/s is the put
    rate; beside it the row carries figures measured afterwards on what was written
    (``Row.figures``, printed in a table of their own under the main one):

    ``dispatch_wait_s``
        pymq: the part of the timed put loop spent after the last put returned, waiting
        for the dispatcher to file every message in its queue (creating each queue's
        file); lmdb: ``-`` (a committed put is readable).
    ``close_s``
        closing the writer after the puts: ``store.shutdown()``; ``env.close()``.
    ``reopen_s``
        the writer closed, the time to open it again until it could go on writing every
        queue. pymq: ``MessageStore(path).start()`` (finds each queue's next offset);
        lmdb: ``lmdb.open`` and, in one read transaction, a cursor to each queue's last
        key (what a writer needs to know to continue a queue).
    ``read_only_open_s``
        the same for a reader: ``MessageStore(path, read_only=True).start()``;
        ``lmdb.open(readonly=True)`` and the same last-key lookups.
    ``disk_mib``; ``commitlog_disk_mib``, ``queue_disk_mib``, ``index_disk_mib``
        MiB of disk blocks the directory takes once everything is closed, as ``du``
        counts them (``st_blocks`` x 512 of every file and directory, hard links once,
        not lengths: pymq's queue files are sparse); then pymq's ``commitlog/``,
        ``consumequeue/`` and ``index/`` parts of it (lmdb keeps everything in one
        file: ``-``).
    ``maps``
        mappings of files under the directory while the reopened writer is open: lines of
        ``/proc/self/maps``, which is what ``vm.max_map_count`` limits (pymq maps every
        queue's file; lmdb its data and lock files).

    pymq: ``put_message(Message(topic, body, queue_id=q))``; the clock stops once the
    dispatcher has filed every message in its queue (creating a queue's file is part of
    putting into a new queue), so the rate includes that work. lmdb: one write
    transaction per put of key = queue number (4 bytes, big-endian) + queue offset (8
    bytes), one environment for all queues. No warm-up run: the scenario starts on an
    empty directory. Both verify what they stored before any figure counts: every queue's
    next offset after the reopen, and the last message of a few queues through the
    read-only open. The page cache is warm for every open (no cold figures: dropping the
    cache needs root).

pymq runs with the run's ``StoreConfig`` (:func:`~pymq.benchmark.base.store_config`:
1 GiB commit-log segments unless ``--commitlog-file-size``), lmdb as in the write rows.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pymq

from .base import BenchOptions, _expect, _MiB
from .figures import Figure
from .read import _wait_dispatched
from .write import _LmdbWorkload, _PymqWorkload

QUEUES_PER_TOPIC = 10
GROUP = "bench"          # consumer group of the verifying pulls

FIGURES = (
    Figure("dispatch_wait_s", "dispatch wait s"),
    Figure("close_s", "close s"),
    Figure("reopen_s", "writer reopen s"),
    Figure("read_only_open_s", "read-only open s"),
    Figure("disk_mib", "disk MiB", "{:,.1f}"),
    Figure("commitlog_disk_mib", "commitlog/", "{:,.1f}"),
    Figure("queue_disk_mib", "consumequeue/", "{:,.1f}"),
    Figure("index_disk_mib", "index/", "{:,.1f}"),
    Figure("maps", "maps", "{:,.0f}"),
)


def queue_names(count: int) -> list[tuple[str, int]]:
    """``(topic, queue_id)`` of ``count`` queues, 10 to a topic: ``("T0000", 0)``, ...."""
    return [(f"T{i // QUEUES_PER_TOPIC:04d}", i % QUEUES_PER_TOPIC) for i in range(count)]


def sample_queues(count: int) -> list[int]:
    """Indexes of the few queues whose last message is read back: ends, middle, a stride."""
    return sorted({0, count // 2, count - 1, *range(7, count, max(1, count // 8))})


def disk_bytes(path: str) -> int:
    """Bytes of disk blocks under ``path``, as ``du`` counts them: ``st_blocks`` x 512 of
    the directory itself, every directory and file below it, each inode once."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for root, dirs, files in os.walk(path):
        for name in (".", *dirs, *files):
            st = os.lstat(os.path.join(root, name))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def mapped_regions(path: str) -> int | None:
    """Mappings (lines of ``/proc/self/maps``) of files under ``path``; None where the
    process has no ``/proc/self/maps``."""
    prefix = os.path.realpath(path) + os.sep
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            return sum(1 for line in maps if (line.split(maxsplit=5)[5:] or [""])[0].startswith(prefix))
    except OSError:
        return None


def _elapsed_s(start_ns: int) -> float:
    return (time.perf_counter_ns() - start_ns) / 1e9


class _ManyQueues:
    """What both implementations share: the queues, the sizes, the figures."""

    group = "many_queues"
    warm_up = False
    figures = FIGURES
    options: BenchOptions

    def _setup_queues(self) -> None:
        o = self.options
        self.queues = queue_names(o.many_queues)
        self.rounds = o.many_queue_messages
        self.operation = f"{type(self).operation}, {o.many_queues:,} queues x {o.many_queue_messages:,}"

    def message_count(self) -> int:
        """Messages of one repeat: every queue's."""
        return self.options.many_queues * self.options.many_queue_messages

    def _rounds_of(self, n: int) -> int:
        _expect(n == self.message_count(), f"many_queues writes {self.message_count()} messages, not {n}")
        return self.rounds


class PymqManyQueues(_ManyQueues, _PymqWorkload):
    """pymq: ``put_message`` with ``queue_id`` into many queues, then reopen and measure."""

    operation = "put_message(Message(topic, body, queue_id=q)) round robin, until dispatched"

    def __init__(self, options: BenchOptions) -> None:
        super().__init__(options)
        self._setup_queues()
        self.store_dir = ""
        self.dispatch_wait_s = 0.0

    def open(self, path: str) -> None:
        super().open(path)
        self.store_dir = os.path.join(path, "store")

    def run(self, n: int) -> None:
        put, Message, body, queues = self.store.put_message, pymq.Message, self.body, self.queues
        result = None
        for _ in range(self._rounds_of(n)):
            for topic, queue_id in queues:
                result = put(Message(topic=topic, body=body, queue_id=queue_id))
        put_ns = time.perf_counter_ns()
        _wait_dispatched(self.store, 600.0)
        self.dispatch_wait_s = _elapsed_s(put_ns)
        self.last = result
        self.written += n

    def _check_offsets(self, store: Any) -> None:
        table = store.get_queue_offset_table()
        short = [q for q in self.queues if table.get(q) != self.rounds]
        _expect(not short, f"{len(short)} of {len(self.queues)} queues do not end at offset {self.rounds}, "
                           f"e.g. {short[:3]} -> {[table.get(q) for q in short[:3]]}")

    def check(self) -> None:
        """The last put succeeded and every queue's next offset is the messages put into it."""
        last = self.last
        _expect(last is not None and last.is_ok() and last.queue_offset == self.rounds - 1,
                f"last put returned {last!r}")
        self._check_offsets(self.store)

    def _check_last_messages(self, store: Any) -> None:
        for i in sample_queues(len(self.queues)):
            topic, queue_id = self.queues[i]
            got = store.get_message(GROUP, topic, queue_id, self.rounds - 1, 2).messages
            _expect(len(got) == 1 and (got[0].topic, got[0].queue_id, got[0].queue_offset, got[0].body)
                    == (topic, queue_id, self.rounds - 1, self.body),
                    f"{topic}/{queue_id}: read {got!r} at offset {self.rounds - 1}")

    def measure_figures(self) -> dict[str, float | None]:
        """Close (timed), reopen the writer (timed; maps counted, offsets checked), close,
        open read-only (timed; last messages read back), close, count the disk."""
        start = time.perf_counter_ns()
        self.close()
        close_s = _elapsed_s(start)
        os.sync()
        start = time.perf_counter_ns()
        store = pymq.MessageStore(self.store_dir).start()
        reopen_s = _elapsed_s(start)
        try:
            maps = mapped_regions(self.store_dir)
            self._check_offsets(store)
        finally:
            store.shutdown()
        os.sync()
        start = time.perf_counter_ns()
        reader = pymq.MessageStore(self.store_dir, read_only=True).start()
        read_only_open_s = _elapsed_s(start)
        try:
            self._check_last_messages(reader)
        finally:
            reader.shutdown()
        part = {key: disk_bytes(os.path.join(self.store_dir, name)) / _MiB
                for key, name in (("commitlog_disk_mib", "commitlog"), ("queue_disk_mib", "consumequeue"),
                                  ("index_disk_mib", "index"))}
        return {"dispatch_wait_s": self.dispatch_wait_s, "close_s": close_s, "reopen_s": reopen_s,
                "read_only_open_s": read_only_open_s, "disk_mib": disk_bytes(self.store_dir) / _MiB, **part,
                "maps": maps}


class LmdbManyQueues(_ManyQueues, _LmdbWorkload):
    """lmdb: one key range per queue in one environment, one transaction per put."""

    operation = "1 txn per put(queue number + offset, body) round robin"

    def __init__(self, options: BenchOptions) -> None:
        super().__init__(options)
        self._setup_queues()
        self.prefixes = [i.to_bytes(4, "big") for i in range(len(self.queues))]
        self.env_dir = ""

    def open(self, path: str) -> None:
        super().open(path)
        self.env_dir = os.path.join(path, "lmdb")

    def run(self, n: int) -> None:
        env, body, prefixes = self.env, self.body, self.prefixes
        for offset in range(self._rounds_of(n)):
            for prefix in prefixes:
                with env.begin(write=True) as txn:
                    txn.put(prefix + offset.to_bytes(8, "big"), body)
        self.next_key += n

    def _next_offsets(self, env: Any) -> list[int]:
        """Each queue's next offset, from its last key (a cursor per queue range)."""
        out = []
        with env.begin() as txn:
            cursor = txn.cursor()
            for i, prefix in enumerate(self.prefixes):
                found = cursor.prev() if cursor.set_range((i + 1).to_bytes(4, "big")) else cursor.last()
                key = cursor.key() if found else b""
                out.append(int.from_bytes(key[4:], "big") + 1 if key[:4] == prefix else 0)
        return out

    def _check_offsets(self, offsets: list[int]) -> None:
        short = [i for i, offset in enumerate(offsets) if offset != self.rounds]
        _expect(not short, f"{len(short)} of {len(offsets)} queues do not end at offset {self.rounds}")

    def _check_last_messages(self, env: Any) -> None:
        with env.begin() as txn:
            for i in sample_queues(len(self.queues)):
                key = self.prefixes[i] + (self.rounds - 1).to_bytes(8, "big")
                _expect(txn.get(key) == self.body, f"queue {i}: no message at offset {self.rounds - 1}")

    def measure_figures(self) -> dict[str, float | None]:
        """Close (timed), reopen for writing with every queue's last key (timed; maps
        counted, offsets checked), close, open read-only likewise (timed; last messages
        read back), close, count the disk."""
        import lmdb

        start = time.perf_counter_ns()
        self.close()
        close_s = _elapsed_s(start)
        os.sync()
        sync = self.options.sync_flush
        start = time.perf_counter_ns()
        env = lmdb.open(self.env_dir, map_size=self._map_size(), sync=sync, metasync=sync)
        try:
            offsets = self._next_offsets(env)
            reopen_s = _elapsed_s(start)
            maps = mapped_regions(self.env_dir)
            self._check_offsets(offsets)
        finally:
            env.close()
        os.sync()
        start = time.perf_counter_ns()
        env = lmdb.open(self.env_dir, readonly=True)
        try:
            offsets = self._next_offsets(env)
            read_only_open_s = _elapsed_s(start)
            self._check_offsets(offsets)
            self._check_last_messages(env)
        finally:
            env.close()
        return {"dispatch_wait_s": None, "close_s": close_s, "reopen_s": reopen_s,
                "read_only_open_s": read_only_open_s, "disk_mib": disk_bytes(self.env_dir) / _MiB,
                "commitlog_disk_mib": None,
                "queue_disk_mib": None, "index_disk_mib": None, "maps": maps}
