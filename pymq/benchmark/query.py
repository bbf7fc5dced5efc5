"""Lookup by key: pymq query_message next to lmdb get and sqlite's indexed select.

Each store holds ``--query-store-size`` messages with a distinct business key
(``key-<n>``); the timed part looks up ``--queries`` random existing keys, one call each,
and records per-call latency. pymq returns ``MessageExt`` objects (with the body), lmdb
the value bytes, sqlite the body column.

Two more pymq rows (``--full`` / ``--workload query_message``): ``pymq-no-table``, the
same lookups with ``index_recent_keys=0`` (every lookup reads the key's slot and entry in
the index file, then the record), and ``pymq-absent``, lookups of keys no message has
(the call, the hash and one read of the recent-keys table: the floor of a lookup, which
a hit exceeds by the read of its record).
"""

from __future__ import annotations

import os
import random
import time
from typing import Any

import pymq

from .base import TOPIC, Workload, _batch_sizes, _expect
from .read import _wait_dispatched
from .write import _LmdbWorkload, _PymqWorkload


class _Query(Workload):
    group = "query_message"
    latency = True

    def message_count(self) -> int:
        return self.options.queries

    def keys(self, n: int) -> list[str]:
        rng = random.Random(n)
        size = self.options.query_store_size
        return [f"key-{rng.randrange(size)}" for _ in range(n)]


class PymqQueryMessage(_PymqWorkload, _Query):
    """pymq: query_message(topic, key) on the hash index."""

    operation = "query_message(topic, key, max_num=1)"

    def prefill(self) -> None:
        store, body = self.store, self.body
        key = 0
        for size in _batch_sizes(self.options.query_store_size, 1000):
            r = store.put_messages([pymq.Message(topic=TOPIC, body=body, keys=[f"key-{i}"])
                                    for i in range(key, key + size)])
            _expect(r.is_ok(), f"prefill put returned {r!r}")
            key += size
        _wait_dispatched(store)
        self.found = 0

    def run(self, n: int) -> None:
        query, clock = self.store.query_message, time.perf_counter_ns
        samples = self.samples = []
        found = 0
        for key in self.keys(n):
            t0 = clock()
            found += len(query(TOPIC, key, 1))
            samples.append(clock() - t0)
        self.found += found

    def check(self) -> None:
        _expect(self.found > 0, "no key was found")


class PymqQueryNoTable(PymqQueryMessage):
    """pymq: the same lookups without the table of recent keys."""

    implementation = "pymq-no-table"
    operation = "the same, index_recent_keys=0"
    overrides = {"index_recent_keys": 0}


class PymqQueryAbsent(PymqQueryMessage):
    """pymq: lookups of keys no message has (call, hash, one read of the table)."""

    implementation = "pymq-absent"
    operation = "query_message of absent keys"

    def keys(self, n: int) -> list[str]:
        return [f"absent-{k[4:]}" for k in super().keys(n)]

    def check(self) -> None:
        _expect(self.found == 0, f"{self.found} absent keys were found")


class LmdbGet(_LmdbWorkload, _Query):
    """lmdb: txn.get(key) in one read transaction."""

    operation = "txn.get(key)"

    def message_count(self) -> int:
        return self.options.queries

    def _map_size(self) -> int:
        return 4 * self.options.query_store_size * (self.options.body_size + 64) + 64 * (1 << 20)

    def prefill(self) -> None:
        env, body, key = self.env, self.body, 0
        for size in _batch_sizes(self.options.query_store_size, 1000):
            with env.begin(write=True) as txn:
                for i in range(key, key + size):
                    txn.put(f"key-{i}".encode(), body)
            key += size
        self.next_key = key
        self.txn = env.begin()
        self.found = 0

    def run(self, n: int) -> None:
        get, clock = self.txn.get, time.perf_counter_ns
        samples = self.samples = []
        found = 0
        for key in self.keys(n):
            t0 = clock()
            found += get(key.encode()) is not None
            samples.append(clock() - t0)
        self.found += found

    def check(self) -> None:
        _expect(self.found > 0, "no key was found")


class SqliteSelect(_Query):
    """sqlite3: SELECT body FROM messages WHERE key = ? on an indexed column."""

    implementation = "sqlite3"
    operation = "SELECT body WHERE key = ? (indexed)"
    requires = "sqlite3"
    db: Any = None

    def note(self) -> str:
        return "sqlite3 file database, journal_mode=WAL, synchronous=OFF, index on key"

    def open(self, path: str) -> None:
        import sqlite3

        self.db = sqlite3.connect(os.path.join(path, "messages.db"))
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=OFF")
        self.db.execute("CREATE TABLE messages (id INTEGER PRIMARY KEY, key TEXT, body BLOB)")

    def prefill(self) -> None:
        rows = ((f"key-{i}", self.body) for i in range(self.options.query_store_size))
        self.db.executemany("INSERT INTO messages (key, body) VALUES (?, ?)", rows)
        self.db.execute("CREATE INDEX messages_key ON messages (key)")
        self.db.commit()
        self.found = 0

    def run(self, n: int) -> None:
        cur, clock = self.db.cursor(), time.perf_counter_ns
        samples = self.samples = []
        found = 0
        sql = "SELECT body FROM messages WHERE key = ?"
        for key in self.keys(n):
            t0 = clock()
            found += cur.execute(sql, (key,)).fetchone() is not None
            samples.append(clock() - t0)
        self.found += found

    def check(self) -> None:
        _expect(self.found > 0, "no key was found")

    def close(self) -> None:
        db, self.db = self.db, None
        if db is not None:
            db.close()
