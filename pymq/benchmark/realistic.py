"""Realistic messages: what an application sends, in the order it sends it.

One scenario in four timed phases, each next to lmdb doing the same amount of work
(``sync=False, metasync=False``):

``real_put``
    ``put_message`` of ``--real-messages`` messages of 100 random bytes, each with one
    key (so UNIQ_KEY, KEYS and the index are in play); lmdb: one transaction per put of
    (key, body).
``real_put_messages``
    as many prebuilt messages (with keys) through ``put_messages`` in batches of
    ``--batch``, into a second topic, right after the first phase, while the dispatcher
    is still indexing it; lmdb: ``putmulti`` of the same batches (prebuilt tuples).
``real_get_message``
    a full read of the first topic by ``get_message`` pages of 32, touching ``.body``;
    lmdb: a cursor over (key, value), touching the value.
``real_query``
    ``query_message(topic, key, max_num=1)`` for ``--real-queries`` random keys of the
    first topic, p50/p99 per call; lmdb: ``txn.get(key)``.

The earlier phases are the later phases' untimed prefill. Bodies are random (so nothing
compresses or dedups), keys are ``order-<n>``-style strings of realistic length.
"""

from __future__ import annotations

import os
import random
import time
from typing import Any

import pymq

from .base import Workload, _expect, _MiB
from .read import pull_pages

TOPIC_A = "OrderEvents"
TOPIC_B = "OrderEventsBatch"


def _bodies(n: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(100) for _ in range(n)]


def _key(i: int) -> str:
    return f"order-{i:010d}"


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
        self.store = pymq.MessageStore(os.path.join(path, "store"),
                                       pymq.StoreConfig(commitlog_file_size=256 * _MiB,
                                                        flush_disk_type=self.options.flush_disk_type))
        self.store.start()
        self.done = 0
        self.warm = True

    def _put_phase(self, n: int) -> None:
        store, Message, bodies = self.store, pymq.Message, self.bodies
        r = None
        for i in range(n):
            r = store.put_message(Message(topic=TOPIC_A, body=bodies[i], keys=[_key(i)]))
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

    def prefill(self) -> None:
        n = self.options.real_messages
        if self.phase >= 2:
            self._put_phase(n)
        if self.phase == 2:
            self.prebuilt = [pymq.Message(topic=TOPIC_B, body=b, keys=[_key(i)]) for i, b in enumerate(self.bodies)]
        if self.phase >= 3:
            self.prebuilt = [pymq.Message(topic=TOPIC_B, body=b, keys=[_key(i)]) for i, b in enumerate(self.bodies)]
            self._batch_phase(n)
            deadline = time.monotonic() + 300
            while self.store.dispatch_behind_bytes() and time.monotonic() < deadline:
                time.sleep(0.01)
        if self.phase == 4:
            rng = random.Random(7)
            self.keys = [_key(rng.randrange(n)) for _ in range(self.options.real_queries)]

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
            query, keys, clock = self.store.query_message, self.keys, time.perf_counter_ns
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
        self.env = lmdb.open(os.path.join(path, "lmdb"), map_size=4 * n * 300 + 64 * _MiB, sync=False,
                             metasync=False, max_dbs=2)
        self.db_a = self.env.open_db(b"a")
        self.db_b = self.env.open_db(b"b")
        self.warm = True

    def _put_phase(self, n: int) -> None:
        env, db, bodies = self.env, self.db_a, self.bodies
        for i in range(n):
            with env.begin(write=True, db=db) as txn:
                txn.put(_key(i).encode(), bodies[i], db=db)

    def _batch_phase(self, n: int) -> None:
        env, db, batch, items = self.env, self.db_b, self.options.batch, self.prebuilt
        for start in range(0, n, batch):
            with env.begin(write=True, db=db) as txn:
                txn.cursor(db=db).putmulti(items[start:start + batch], append=True)

    def before_run(self, n: int) -> None:
        self.warm = False

    def prefill(self) -> None:
        n = self.options.real_messages
        if self.phase >= 2:
            self._put_phase(n)
            self.prebuilt = [(_key(i).encode(), b) for i, b in enumerate(self.bodies)]
        if self.phase >= 3:
            self._batch_phase(n)
        if self.phase == 4:
            rng = random.Random(7)
            self.keys = [_key(rng.randrange(n)).encode() for _ in range(self.options.real_queries)]

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
                for key in self.keys[:n]:
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


def _phase(base: type, phase: int, group: str, operation: str, latency: bool = False) -> type:
    return type(f"{base.__name__}{group.title().replace('_', '')}", (base,),
                {"phase": phase, "group": group, "operation": operation, "latency": latency,
                 "batched": phase == 2, "__doc__": f"{base.__doc__ or ''} {group}"})


PymqRealPut = _phase(PymqReal, 1, "real_put", "put_message(Message(body=100 random bytes, keys=[key]))")
LmdbRealPut = _phase(LmdbReal, 1, "real_put", "1 txn per put(key, body)")
PymqRealPutMessages = _phase(PymqReal, 2, "real_put_messages", "put_messages(1000 prebuilt) while indexing")
LmdbRealPutMessages = _phase(LmdbReal, 2, "real_put_messages", "putmulti(1000 prebuilt), 1 txn/batch")
PymqRealGetMessage = _phase(PymqReal, 3, "real_get_message", "get_message(32) over the first topic, .body")
LmdbRealGetMessage = _phase(LmdbReal, 3, "real_get_message", "cursor.iternext(), values touched")
PymqRealQuery = _phase(PymqReal, 4, "real_query", "query_message(topic, key, max_num=1)", latency=True)
LmdbRealQuery = _phase(LmdbReal, 4, "real_query", "txn.get(key)", latency=True)

REALISTIC = (PymqRealPut, LmdbRealPut, PymqRealPutMessages, LmdbRealPutMessages,
             PymqRealGetMessage, LmdbRealGetMessage, PymqRealQuery, LmdbRealQuery)
