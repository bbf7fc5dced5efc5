"""Consumer-progress workloads: what a commit of consumer offsets costs.

``commit_offset``
    pymq ``store.commit_offset(group, topic, queue, offset)``, the cheap default (in
    memory; the file is written every 5 s and at shutdown), one call per step over four
    queues, ``--commits`` per repeat; sqlite3 the same row upserted in an offsets table,
    one autocommit transaction per step, ``synchronous=OFF`` (no fsync either).
``commit_durable``
    pymq ``Consumer.commit()`` of a consumer over four queues, one position moved per
    step: it returns once ``config/consumerOffset.json`` holds the offsets (tmp file,
    fsync, rename, fsync of the directory); sqlite3 the same upsert with
    ``synchronous=FULL`` in WAL mode (an fsync of the WAL per commit). A third row,
    ``pymq-8-threads``, is eight threads committing durably at once with consumers of
    their own: the group commit shares one write among the commits waiting, so the
    commits per second go up, not down. Per-commit latency (p50/p99) in every row;
    ``--durable-commits`` commits per repeat.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from typing import Any

import pymq

from .base import TOPIC, Workload, _expect, store_config
from .write import _PymqWorkload

QUEUES = 4
THREADS = 8
_UPSERT = ("INSERT INTO offsets (grp, topic, qid, off) VALUES (?, ?, ?, ?) "
           "ON CONFLICT (grp, topic, qid) DO UPDATE SET off = excluded.off")


class _PymqProgress(_PymqWorkload):
    """A started store whose topic has four (empty) queues."""

    def open(self, path: str) -> None:
        self.store = pymq.MessageStore(os.path.join(path, "store"), store_config(self.options))
        self.store.start()
        for q in range(QUEUES):
            _expect(self.store.put_message(pymq.Message(topic=TOPIC, body=self.body, queue_id=q)).is_ok(),
                    "the queue's first put failed")
        self.step = 0

    def check(self) -> None:
        last = self.step - 1
        _expect(self.store.query_offset("bench", TOPIC, last % QUEUES) == last, "the last commit is not there")


class _Cheap:
    group = "commit_offset"

    def message_count(self) -> int:
        return self.options.commits              # type: ignore[attr-defined]


class PymqCommitOffset(_Cheap, _PymqProgress):
    """pymq: store.commit_offset, in memory."""

    operation = "store.commit_offset(group, topic, queue, offset)"

    def run(self, n: int) -> None:
        commit, step = self.store.commit_offset, self.step
        for i in range(step, step + n):
            commit("bench", TOPIC, i % QUEUES, i)
        self.step = step + n


class _SqliteProgress(Workload):
    implementation = "sqlite3"
    requires = "sqlite3"
    synchronous = "OFF"
    db: Any = None

    def note(self) -> str:
        return "sqlite3 file database, journal_mode=WAL; commit_offset synchronous=OFF, commit_durable FULL"

    def open(self, path: str) -> None:
        self.db = sqlite3.connect(os.path.join(path, "offsets.db"), isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(f"PRAGMA synchronous={self.synchronous}")
        self.db.execute("CREATE TABLE offsets (grp TEXT, topic TEXT, qid INTEGER, off INTEGER, "
                        "PRIMARY KEY (grp, topic, qid))")
        self.step = 0
        self.samples: list[int] = []

    def run(self, n: int) -> None:
        execute, step = self.db.execute, self.step
        samples, clock = [], time.perf_counter_ns
        for i in range(step, step + n):
            t0 = clock()
            execute(_UPSERT, ("bench", TOPIC, i % QUEUES, i))
            samples.append(clock() - t0)
        self.samples = samples
        self.step = step + n

    def check(self) -> None:
        last = self.step - 1
        row = self.db.execute("SELECT off FROM offsets WHERE grp = ? AND topic = ? AND qid = ?",
                              ("bench", TOPIC, last % QUEUES)).fetchone()
        _expect(row is not None and row[0] == last, "the last commit is not there")

    def close(self) -> None:
        db, self.db = self.db, None
        if db is not None:
            db.close()


class SqliteCommitOffset(_Cheap, _SqliteProgress):
    """sqlite3: one upsert per autocommit transaction, synchronous=OFF."""

    operation = "upsert offsets row, 1 txn, synchronous=OFF"


class _Durable:
    group = "commit_durable"
    latency = True

    def message_count(self) -> int:
        return self.options.durable_commits      # type: ignore[attr-defined]


class PymqConsumerCommit(_Durable, _PymqProgress):
    """pymq: Consumer.commit(), on disk when it returns."""

    operation = "Consumer.commit(), 4 queues, durable"

    def open(self, path: str) -> None:
        super().open(path)
        self.consumer = pymq.Consumer(self.store, "bench", TOPIC)
        self.samples: list[int] = []

    def run(self, n: int) -> None:
        seek, commit, step = self.consumer.seek, self.consumer.commit, self.step
        samples, clock = [], time.perf_counter_ns
        for i in range(step, step + n):
            seek(i % QUEUES, i)
            t0 = clock()
            commit()
            samples.append(clock() - t0)
        self.samples = samples
        self.step = step + n


class PymqConsumerCommitThreads(PymqConsumerCommit):
    """pymq: eight threads' Consumer.commit() at once, sharing writes (group commit)."""

    implementation = "pymq-8-threads"
    operation = f"Consumer.commit() from {THREADS} threads, durable"

    def run(self, n: int) -> None:
        store, step = self.store, self.step
        per_thread = [n // THREADS + (1 if t < n % THREADS else 0) for t in range(THREADS)]
        consumers = [pymq.Consumer(store, f"bench-{t}", TOPIC) for t in range(THREADS)]
        results: list[list[int]] = [[] for _ in range(THREADS)]
        start = threading.Barrier(THREADS)

        def committer(t: int) -> None:
            consumer, samples, clock = consumers[t], results[t], time.perf_counter_ns
            start.wait()
            for i in range(step, step + per_thread[t]):
                consumer.seek(i % QUEUES, i)
                t0 = clock()
                consumer.commit()
                samples.append(clock() - t0)

        threads = [threading.Thread(target=committer, args=(t,)) for t in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.samples = [s for r in results for s in r]
        _expect(len(self.samples) == n, "a committer thread failed")
        self.consumer.seek((step + n - 1) % QUEUES, step + n - 1)     # check() reads group "bench"
        self.consumer.commit()
        self.step = step + n


class SqliteDurableCommit(_Durable, _SqliteProgress):
    """sqlite3: one upsert per autocommit transaction, synchronous=FULL (WAL fsync)."""

    operation = "upsert offsets row, 1 txn, synchronous=FULL"
    synchronous = "FULL"
