"""Realistic messages: what an application sends, in the order it sends it.

One scenario in four timed phases, each next to lmdb doing the same amount of work
(``sync=False, metasync=False``):

``real_put``
    ``put_message`` of ``--real-messages`` messages of 100 random bytes, each with one
    key (so UNIQ_KEY, KEYS and the index are in play); lmdb: one transaction per put of
    (key, body); queuelib: one ``push`` of key and body per message (it has no keys).
``real_put_messages``
    as many prebuilt messages (with keys) through ``put_messages`` in batches of
    ``--batch``, into a second topic, while the dispatcher is still indexing the first:
    the first phase's puts run (untimed) right before the timed batches, with no sync
    or pause between them; lmdb: ``putmulti`` of the same batches (prebuilt tuples),
    right after its own first phase.
``real_get_message``
    a full read of the first topic by ``get_message`` pages of 32, touching ``.body``;
    lmdb: a cursor over (key, value), touching the value.
``real_query``
    ``query_message(topic, key, max_num=1)`` for ``--real-queries`` random keys of the
    first topic, p50/p99 per call; lmdb: ``txn.get(key)``.

The earlier phases are the later phases' untimed prefill. Bodies are random (so nothing
compresses or dedups), keys are ``order-<n>``-style strings of realistic length, made
before the timed loops (an application has its keys; formatting them is no store's work).
Message objects (pymq) and encoded keys (lmdb, queuelib) are made inside the timed loops.
"""

from __future__ import annotations

import os
import random
import time
from typing import Any

import pymq

from .base import Workload, _expect, _MiB
from .read import _wait_dispatched, pull_pages

TOPIC_A = "OrderEvents"
TOPIC_B = "OrderEventsBatch"


def _bodies(n: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(100) for _ in range(n)]


def _key(i: int) -> str:
    return f"order-{i:010d}"


def _keys(n: int) -> list[str]:
    return [_key(i) for i in range(n)]


class _Phases:
    """The phases shared by both implementations: which one is timed."""

    phase = 0          # 1 put, 2 put_messages, 3 read, 4 query

    def message_count(self) -> int:
        return self.options.real_queries if self.phase == 4 else self.options.real_messages


class PymqReal(_Phases, Workload):
    implementation = "pymq"
    store: Any = None

    def note(self) -> str:
        return "StoreConfig(commitlog_file_size=256 MiB), other fields default (index on)"

    def open(self, path: str) -> None:
        n = self.options.real_messages
        self.bodies = _bodies(n, 1)
        self.keys = _keys(n)
        self.behind_at_start = -1
        self.store = pymq.MessageStore(os.path.join(path, "store"),
                                       pymq.StoreConfig(commitlog_file_size=256 * _MiB,
                                                        flush_disk_type=self.options.flush_disk_type))
        self.store.start()
        self.done = 0
        self.warm = True

    def _put_phase(self, n: int) -> None:
        put, Message, bodies, keys = self.store.put_message, pymq.Message, self.bodies, self.keys
        r = None
        for i in range(n):
            r = put(Message(topic=TOPIC_A, body=bodies[i], keys=[keys[i]]))
        self.last = r

    def _batch_phase(self, n: int) -> None:
        store, batch = self.store, self.options.batch
        prebuilt = self.prebuilt
        r = None
        for start in range(0, n, batch):
            r = store.put_messages(prebuilt[start:start + batch])
        self.last = r

    def before_run(self, n: int) -> None:
        self.warm = False               # the timed run; the warm-up run before it was skipped
        if self.phase == 2:             # the first phase, then at once the timed batches
            os.sync()
            self._put_phase(self.options.real_messages)
            _expect(self.last is not None and self.last.is_ok(), f"first-phase put returned {self.last!r}")
            self.behind_at_start = self.store.dispatch_behind_bytes()

    def prefill(self) -> None:
        n = self.options.real_messages
        if self.phase >= 2:
            self.prebuilt = [pymq.Message(topic=TOPIC_B, body=b, keys=[k]) for b, k in zip(self.bodies, self.keys)]
        if self.phase >= 3:
            self._put_phase(n)
            self._batch_phase(n)
            _wait_dispatched(self.store, 300.0)
        if self.phase == 4:
            rng = random.Random(7)
            self.queries = [self.keys[rng.randrange(n)] for _ in range(self.options.real_queries)]

    def run(self, n: int) -> None:
        if self.warm:
            return                      # no warm-up: the phases are the scenario
        if self.phase == 1:
            self._put_phase(n)
        elif self.phase == 2:
            self._batch_phase(n)
        elif self.phase == 3:
            _offset, read, touched = pull_pages(self.store, TOPIC_A, 0, n)
            _expect(read == n and touched == 100 * n, f"read {read} of {n} messages")
        else:
            query, keys, clock = self.store.query_message, self.queries, time.perf_counter_ns
            samples = self.samples = []
            found = 0
            for key in keys[:n]:
                t0 = clock()
                found += len(query(TOPIC_A, key, 1))
                samples.append(clock() - t0)
            _expect(found == n, f"found {found} of {n} keys")
        self.done += n

    def check(self) -> None:
        if self.phase in (1, 2):
            _expect(self.last is not None and self.last.is_ok(), f"last put returned {self.last!r}")

    def close(self) -> None:
        store, self.store = self.store, None
        if store is not None:
            store.shutdown()


class LmdbReal(_Phases, Workload):
    implementation = "lmdb"
    requires = "lmdb"
    env: Any = None

    def note(self) -> str:
        return "lmdb.open(sync=False, metasync=False): key -> 100-byte body"

    def open(self, path: str) -> None:
        import lmdb
        n = self.options.real_messages
        self.bodies = _bodies(n, 1)
        self.keys = _keys(n)
        self.env = lmdb.open(os.path.join(path, "lmdb"), map_size=4 * n * 300 + 64 * _MiB, sync=False,
                             metasync=False, max_dbs=2)
        self.db_a = self.env.open_db(b"a")
        self.db_b = self.env.open_db(b"b")
        self.warm = True

    def _put_phase(self, n: int) -> None:
        env, db, bodies, keys = self.env, self.db_a, self.bodies, self.keys
        for i in range(n):
            with env.begin(write=True, db=db) as txn:
                txn.put(keys[i].encode(), bodies[i], db=db)

    def _batch_phase(self, n: int) -> None:
        env, db, batch, items = self.env, self.db_b, self.options.batch, self.prebuilt
        for start in range(0, n, batch):
            with env.begin(write=True, db=db) as txn:
                txn.cursor(db=db).putmulti(items[start:start + batch], append=True)

    def before_run(self, n: int) -> None:
        self.warm = False
        if self.phase == 2:             # as pymq: the first phase, then at once the batches
            os.sync()
            self._put_phase(self.options.real_messages)

    def prefill(self) -> None:
        n = self.options.real_messages
        if self.phase >= 2:
            self.prebuilt = [(k.encode(), b) for k, b in zip(self.keys, self.bodies)]
        if self.phase >= 3:
            self._put_phase(n)
            self._batch_phase(n)
        if self.phase == 4:
            rng = random.Random(7)
            self.queries = [self.keys[rng.randrange(n)].encode() for _ in range(self.options.real_queries)]

    def run(self, n: int) -> None:
        if self.warm:
            return
        if self.phase == 1:
            self._put_phase(n)
        elif self.phase == 2:
            self._batch_phase(n)
        elif self.phase == 3:
            touched = 0
            with self.env.begin(db=self.db_a) as txn:
                for _k, v in txn.cursor(db=self.db_a).iternext():
                    touched += len(v)
            _expect(touched == 100 * n, f"read {touched // 100} of {n}")
        else:
            clock = time.perf_counter_ns
            samples = self.samples = []
            found = 0
            with self.env.begin(db=self.db_a) as txn:
                get = txn.get
                for key in self.queries[:n]:
                    t0 = clock()
                    found += get(key) is not None
                    samples.append(clock() - t0)
            _expect(found == n, f"found {found} of {n}")

    def check(self) -> None:
        if self.phase in (1, 2):
            n = self.options.real_messages
            db = self.db_a if self.phase == 1 else self.db_b
            _expect(self.env.stat() is not None and self.env.begin(db=db).stat(db)["entries"] == n,
                    "lmdb lost entries")

    def close(self) -> None:
        env, self.env = self.env, None
        if env is not None:
            env.close()


class QueuelibReal(_Phases, Workload):
    """queuelib, first phase only: one push of key and body per message."""

    implementation = "queuelib"
    requires = "queuelib"
    queue: Any = None

    def note(self) -> str:
        return "FifoDiskQueue defaults; one write(2) per push, never fsyncs"

    def open(self, path: str) -> None:
        from queuelib import FifoDiskQueue

        n = self.options.real_messages
        self.bodies = _bodies(n, 1)
        self.keys = _keys(n)
        self.queue = FifoDiskQueue(os.path.join(path, "queue"))
        self.warm = True

    def before_run(self, n: int) -> None:
        self.warm = False

    def run(self, n: int) -> None:
        if self.warm:
            return
        push, bodies, keys = self.queue.push, self.bodies, self.keys
        for i in range(n):
            push(keys[i].encode() + bodies[i])

    def check(self) -> None:
        n = self.options.real_messages
        _expect(len(self.queue) == n, f"queue holds {len(self.queue)} of {n}")

    def close(self) -> None:
        queue, self.queue = self.queue, None
        if queue is not None:
            queue.close()


def _phase(base: type, phase: int, group: str, operation: str, latency: bool = False) -> type:
    attrs = {"phase": phase, "group": group, "operation": operation, "latency": latency,
             "batched": phase == 2, "__doc__": f"{base.__doc__ or ''} {group}"}
    if phase == 2:
        attrs["sync_before_run"] = False       # before_run syncs, then runs the first phase
    return type(f"{base.__name__}{group.title().replace('_', '')}", (base,), attrs)


PymqRealPut = _phase(PymqReal, 1, "real_put", "put_message(Message(body=100 random bytes, keys=[key]))")
LmdbRealPut = _phase(LmdbReal, 1, "real_put", "1 txn per put(key, body)")
QueuelibRealPut = _phase(QueuelibReal, 1, "real_put", "FifoDiskQueue.push(key + body)")
PymqRealPutMessages = _phase(PymqReal, 2, "real_put_messages",
                             "put_messages(1000 prebuilt) right after real_put, while indexing")
LmdbRealPutMessages = _phase(LmdbReal, 2, "real_put_messages",
                             "putmulti(1000 prebuilt), 1 txn/batch, right after real_put")
PymqRealGetMessage = _phase(PymqReal, 3, "real_get_message", "get_message(32) over the first topic, .body")
LmdbRealGetMessage = _phase(LmdbReal, 3, "real_get_message", "cursor.iternext(), values touched")
PymqRealQuery = _phase(PymqReal, 4, "real_query", "query_message(topic, key, max_num=1)", latency=True)
LmdbRealQuery = _phase(LmdbReal, 4, "real_query", "txn.get(key)", latency=True)

REALISTIC = (PymqRealPut, LmdbRealPut, QueuelibRealPut, PymqRealPutMessages, LmdbRealPutMessages,
             PymqRealGetMessage, LmdbRealGetMessage, PymqRealQuery, LmdbRealQuery)
