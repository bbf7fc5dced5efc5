"""sqlite3 as a peer of the put and read workloads (the query workload has its own).

The table is ``messages(id INTEGER PRIMARY KEY, body BLOB)`` in a file database in WAL mode
with ``synchronous=OFF``: like pymq's ASYNC_FLUSH and lmdb's ``sync=False``, a commit does
not wait for the disk.
"""

from __future__ import annotations

import os
import sqlite3
from typing import Any

from .base import Workload, _batch_sizes, _expect


class _Sqlite(Workload):
    implementation = "sqlite3"
    requires = "sqlite3"
    db: Any = None

    def note(self) -> str:
        return "sqlite3 file database, journal_mode=WAL, synchronous=OFF"

    def open(self, path: str) -> None:
        self.db = sqlite3.connect(os.path.join(path, "messages.db"), isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=OFF")
        self.db.execute("CREATE TABLE messages (id INTEGER PRIMARY KEY, body BLOB)")
        self.written = 0

    def check(self) -> None:
        (n,) = self.db.execute("SELECT count(*) FROM messages").fetchone()
        _expect(n == self.written, f"sqlite holds {n} rows, wrote {self.written}")

    def close(self) -> None:
        db, self.db = self.db, None
        if db is not None:
            db.close()


class SqliteInsertPerTxn(_Sqlite):
    """sqlite3: one INSERT per transaction (autocommit)."""

    group = "put_message"
    operation = "INSERT (body), 1 txn/msg"

    def run(self, n: int) -> None:
        execute, body = self.db.execute, self.body
        for _ in range(n):
            execute("INSERT INTO messages (body) VALUES (?)", (body,))
        self.written += n


class SqliteExecutemany(_Sqlite):
    """sqlite3: executemany of a batch in one transaction."""

    group = "put_messages"
    operation = "executemany(INSERT) x batch, 1 txn/batch"
    batched = True

    def run(self, n: int) -> None:
        db, body = self.db, self.body
        for size in _batch_sizes(n, self.options.batch):
            db.execute("BEGIN")
            db.executemany("INSERT INTO messages (body) VALUES (?)", [(body,) for _ in range(size)])
            db.execute("COMMIT")
        self.written += n


class SqliteReadPages(_Sqlite):
    """sqlite3: pages of 32 rows by primary key, bodies touched."""

    group = "get_message"
    operation = "SELECT id, body WHERE id > ? LIMIT 32"

    def prefill(self) -> None:
        db, body = self.db, self.body
        total = min(self.options.warmup, self.message_count()) + self.message_count()
        for size in _batch_sizes(total, 1000):
            db.execute("BEGIN")
            db.executemany("INSERT INTO messages (body) VALUES (?)", [(body,) for _ in range(size)])
            db.execute("COMMIT")
        self.written = total
        self.last_id = 0

    def run(self, n: int) -> None:
        cur, last, read, touched = self.db.cursor(), self.last_id, 0, 0
        sql = "SELECT id, body FROM messages WHERE id > ? ORDER BY id LIMIT 32"
        while read < n:
            rows = cur.execute(sql, (last,)).fetchall()
            if not rows:
                break
            for rid, body in rows:
                touched += len(body)
            read += len(rows)
            last = rows[-1][0]
        self.last_id = last
        self.read = read

    def check(self) -> None:
        _expect(self.read > 0, "nothing read")
