"""Write workloads: pymq put_message / put_messages next to lmdb and queuelib.

``pymq-no-record-crc`` rows are pymq with ``enabled_append_prop_crc=False`` (records carry
their BODYCRC only, as RocketMQ 4 writes them): beside ``pymq`` they show what the record's
own CRC costs a put."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import pymq

from .base import TOPIC, Workload, _batch_sizes, _expect, _MiB, store_config


class _PymqWorkload(Workload):
    implementation = "pymq"
    store: Any = None
    last: Any = None  # the PutMessageResult of the last put
    written = 0
    #: StoreConfig fields this row sets beyond the options' (a row beside ``pymq`` that
    #: shows what one setting costs)
    overrides: dict = {}

    def note(self) -> str:
        cfg = store_config(self.options)
        return (f"StoreConfig(commitlog_file_size={cfg.commitlog_file_size:,}, "
                f"flush_disk_type={cfg.flush_disk_type}), other fields default; "
                "store started, so its background services run alongside the puts"
                + "".join(f"; {k}={v}" for k, v in self.overrides.items()))

    def unavailable(self) -> str | None:
        if not hasattr(pymq, "MessageStore"):
            return "pymq.MessageStore is not available (is the core built?)"
        return None

    def open(self, path: str) -> None:
        self.last, self.written = None, 0
        cfg = dataclasses.replace(store_config(self.options), **self.overrides)
        self.store = pymq.MessageStore(os.path.join(path, "store"), cfg)
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


class _NoRecordCrc:
    """Mixin: the same workload on a store that writes no ``__CRC32#`` entry."""

    implementation = "pymq-no-record-crc"
    overrides = {"enabled_append_prop_crc": False}


class PymqPutMessageNoRecordCrc(_NoRecordCrc, PymqPutMessage):
    """``PymqPutMessage`` without the record's own CRC."""

    operation = "store.put_message(Message(...)), enabled_append_prop_crc=False"


class PymqPutMessagesNoRecordCrc(_NoRecordCrc, PymqPutMessages):
    """``PymqPutMessages`` without the record's own CRC."""

    operation = "store.put_messages([Message(...) x batch]), enabled_append_prop_crc=False"


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
        txn = getattr(self, "txn", None)          # a read workload's read transaction
        if txn is not None:
            txn.abort()
            self.txn = None
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
