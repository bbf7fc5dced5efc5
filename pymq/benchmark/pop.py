"""Receive + ack throughput: pymq's pop next to persist-queue and litequeue.

``pop``
    ``pymq``: a :class:`pymq.SimpleConsumer` on a :class:`pymq.Broker` receives batches of
    32 (``receive(32, invisible_duration=60)``) and acks every message
    (``ack(message)``), so each message costs its share of one pop record and one ack
    record in the revive log. ``persist-queue``: ``SQLiteAckQueue.get()`` +
    ``ack(item)`` per message. ``litequeue``: ``LiteQueue.pop()`` + ``done(message_id)``
    per message. Each store is filled (untimed) with warm-up + timed messages first.

Durability: pymq ``ASYNC_FLUSH`` (records in the mapped commit log, flushed in the
background); both SQLite queues in WAL mode with ``synchronous=NORMAL`` (litequeue's own
default; persist-queue's connections are switched from its default FULL, which fsyncs
every commit, so that no row pays for an fsync). With ``--flush-disk-type SYNC_FLUSH``,
pymq waits for the disk on every pop and ack, and both queues run ``synchronous=FULL``.

Message count: ``--messages``, at most 10,000 per repeat (the SQLite queues manage a few
thousand per second). Both SQLite queues keep acked rows in their table (until
``clear_acked_data()`` / ``prune()``, which nothing calls here, as in their defaults), so
their get/pop slows down as a run goes on: their rate depends on the message count. Unless ``--commitlog-file-size`` is given the pymq store uses
64 MiB commit-log files (deleting a fallocated 1 GiB file per repeat measures nothing).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import pymq

from .base import TOPIC, Workload, _expect, store_config

POP_MESSAGES = 10_000          # at most, per repeat
SEGMENT = 64 << 20
GROUP = "bench_pop"


def _synchronous(options) -> str:
    return "FULL" if options.sync_flush else "NORMAL"


class _PopWorkload(Workload):
    group = "pop"

    def message_count(self) -> int:
        return min(self.options.messages, POP_MESSAGES)

    def total(self) -> int:
        return min(self.options.warmup, self.message_count()) + self.message_count()

    def check(self) -> None:
        _expect(self.acked == self.expected, f"acked {self.acked} messages, expected {self.expected}")


class PymqPopAck(_PopWorkload):
    """pymq: SimpleConsumer.receive(32) + ack per message."""

    implementation = "pymq"
    operation = "SimpleConsumer.receive(32, 60) + ack(msg)"
    broker: Any = None

    def unavailable(self) -> str | None:
        try:
            import pymq.broker  # noqa: F401
        except ImportError as e:
            return f"pymq.broker is not available ({e})"
        return None

    def config(self) -> Any:
        cfg = store_config(self.options)
        if self.options.commitlog_file_size is None:
            cfg = dataclasses.replace(cfg, commitlog_file_size=SEGMENT)
        return cfg

    def note(self) -> str:
        cfg = self.config()
        return (f"Broker, StoreConfig(commitlog_file_size={cfg.commitlog_file_size:,}, "
                f"flush_disk_type={cfg.flush_disk_type}); one pop record per receive, one ack record per ack")

    def open(self, path: str) -> None:
        from pymq.broker import Broker
        self.broker = Broker(os.path.join(path, "store"), self.config()).start()
        self.consumer = pymq.SimpleConsumer(self.broker, GROUP, TOPIC)
        self.acked = self.expected = 0

    def prefill(self) -> None:
        b, body, total = self.broker, self.body, self.total()
        for start in range(0, total, 1000):
            r = b.put_messages([pymq.Message(TOPIC, body) for _ in range(min(1000, total - start))])
            _expect(r.is_ok(), f"prefill put failed: {r!r}")
        while b.dispatch_behind_bytes():
            b.wait_message(TOPIC, 0, total - 1, 0.01)

    def run(self, n: int) -> None:
        receive, ack = self.consumer.receive, self.consumer.ack
        done = 0
        while done < n:
            msgs = receive(min(32, n - done), 60)
            if not msgs:
                break
            for m in msgs:
                ack(m)
            done += len(msgs)
        self.acked += done
        self.expected += n

    def close(self) -> None:
        broker, self.broker = self.broker, None
        if broker is not None:
            broker.shutdown()


class PersistQueueAck(_PopWorkload):
    """persist-queue: SQLiteAckQueue.get() + ack(item) per message."""

    implementation = "persist-queue"
    operation = "SQLiteAckQueue.get() + ack(item)"
    requires = "persistqueue"
    queue: Any = None

    def note(self) -> str:
        return f"SQLiteAckQueue(auto_commit=True), WAL, synchronous={_synchronous(self.options)}"

    def _pragma(self, value: str) -> None:
        q = self.queue
        for conn in {id(c): c for c in (getattr(q, "_conn", None), getattr(q, "_getter", None),
                                         getattr(q, "_putter", None)) if c is not None}.values():
            conn.execute(f"PRAGMA synchronous={value}")

    def open(self, path: str) -> None:
        from persistqueue import SQLiteAckQueue
        self.queue = SQLiteAckQueue(os.path.join(path, "queue"), auto_commit=True)
        self.acked = self.expected = 0

    def prefill(self) -> None:
        self._pragma("OFF")                  # the untimed fill pays no fsync
        put, body = self.queue.put, self.body
        for _ in range(self.total()):
            put(body)
        self._pragma(_synchronous(self.options))

    def run(self, n: int) -> None:
        get, ack = self.queue.get, self.queue.ack
        done = 0
        for _ in range(n):
            item = get(block=False)
            ack(item)
            done += 1
        self.acked += done
        self.expected += n

    def close(self) -> None:
        q, self.queue = self.queue, None
        if q is not None:
            for name in ("_conn", "_getter", "_putter"):
                conn = getattr(q, name, None)
                if conn is not None:
                    conn.close()


class LitequeuePopDone(_PopWorkload):
    """litequeue: LiteQueue.pop() + done(message_id) per message."""

    implementation = "litequeue"
    operation = "LiteQueue.pop() + done(message_id)"
    requires = "litequeue"
    queue: Any = None

    def note(self) -> str:
        return f"LiteQueue(file), WAL, synchronous={_synchronous(self.options)}"

    def open(self, path: str) -> None:
        from litequeue import LiteQueue
        self.queue = LiteQueue(os.path.join(path, "queue.db"))
        self.queue.conn.execute(f"PRAGMA synchronous={_synchronous(self.options)}")
        self.acked = self.expected = 0

    def prefill(self) -> None:
        q, body = self.queue, self.body.decode()     # litequeue stores text
        q.conn.execute("BEGIN")
        for _ in range(self.total()):
            q.put(body)
        q.conn.execute("COMMIT")

    def run(self, n: int) -> None:
        pop, done_ = self.queue.pop, self.queue.done
        done = 0
        for _ in range(n):
            m = pop()
            done_(m.message_id)
            done += 1
        self.acked += done
        self.expected += n

    def close(self) -> None:
        q, self.queue = self.queue, None
        if q is not None:
            q.close()
