"""Read-side workloads: dispatch, get_message and the time lookup, next to peers.

``dispatch``
    pymq's ReputMessageService turning records into consume-queue entries (the records
    are appended, untimed, with the dispatcher stopped; the timed part dispatches them),
    next to pymq's own ``put_messages`` rate: dispatch must keep up with appends.
``get_message``
    pymq pulls of 32 messages (``MessageExt`` objects with their bodies, each body touched)
    with the body CRC checked (the default) and without (``pymq-no-crc``: the check's
    cost), next to queuelib ``FifoDiskQueue.pop`` and an lmdb read cursor (``iternext``).
``time_lookup``
    ``get_offset_in_queue_by_time`` on one queue of ``--lookup-queue-size`` entries, random
    times, LOWER and UPPER alternately, with per-call latency percentiles; next to
    ``bisect`` over an in-memory list of the same timestamps.
"""

from __future__ import annotations

import bisect
import os
import random
import time
from typing import Any

import pymq

from .base import TOPIC, Workload, _batch_sizes, _expect
from .write import PymqPutMessages, _LmdbWorkload, _PymqWorkload


def _fill(store, n: int, body: bytes, batch: int = 1000) -> None:
    for size in _batch_sizes(n, batch):
        r = store.put_messages([pymq.Message(topic=TOPIC, body=body) for _ in range(size)])
        _expect(r.is_ok(), f"prefill put returned {r!r}")


def _wait_dispatched(store, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while store.dispatch_behind_bytes() and time.monotonic() < deadline:
        time.sleep(0.005)
    _expect(store.dispatch_behind_bytes() == 0, "the dispatcher did not catch up")


def pull_pages(store, topic: str, offset: int, n: int) -> tuple[int, int, int]:
    """Read ``n`` messages of queue 0 of ``topic`` from ``offset`` with ``get_message``
    pages of 32, touching every body (the timed loop of a read). Returns (next offset,
    messages read, body bytes touched)."""
    get, read, touched = store.get_message, 0, 0
    while read < n:
        r = get("bench", topic, 0, offset, 32)
        for m in r.messages:
            touched += len(m.body)
        read += len(r.messages)
        offset = r.next_begin_offset
        if not r.messages:
            break
    return offset, read, touched


# -- dispatch ------------------------------------------------------------------------------


class PymqDispatch(_PymqWorkload):
    """pymq: dispatch appended records into consume-queue entries."""

    group = "dispatch"
    operation = "reput: records -> consume-queue entries"
    batched = True

    def open(self, path: str) -> None:
        super().open(path)
        self.store.reput_service.shutdown()        # dispatch only when timed
        self.dispatched = 0

    def prefill(self) -> None:
        _fill(self.store, min(self.options.warmup, self.message_count()), self.body)

    def before_run(self, n: int) -> None:
        _fill(self.store, n, self.body)

    def run(self, n: int) -> None:
        self.store.reput_service.do_reput()
        self.dispatched += n

    def check(self) -> None:
        store = self.store
        _expect(store.dispatch_behind_bytes() == 0, "records left undispatched")
        written = store.get_queue_offset_table().get((TOPIC, 0), 0)
        _expect(store.get_max_offset_in_queue(TOPIC, 0) == written,
                f"consume queue holds {store.get_max_offset_in_queue(TOPIC, 0)} entries, log {written}")


class PymqPutMessagesReference(PymqPutMessages):
    """pymq put_messages again, as the rate dispatch has to keep up with."""

    group = "dispatch"
    implementation = "pymq-put_messages"


# -- get_message ---------------------------------------------------------------------------


class PymqGetMessage(_PymqWorkload):
    """pymq: pull pages of 32 with get_message, touching every body."""

    group = "get_message"
    operation = "get_message(..., max_msgs=32), bodies touched"

    def prefill(self) -> None:
        _fill(self.store, min(self.options.warmup, self.message_count()) + self.message_count(), self.body)
        _wait_dispatched(self.store)
        self.offset = 0
        self.read = 0

    def run(self, n: int) -> None:
        offset, read, self.touched = pull_pages(self.store, TOPIC, self.offset, n)
        self.offset, self.read = offset, self.read + read

    def check(self) -> None:
        _expect(self.offset == self.read, f"read {self.read} messages, queue offset {self.offset}")


class PymqGetMessageNoCrc(PymqGetMessage):
    """pymq get_message with ``check_crc_on_read=False``: the same pulls without the
    record CRC check, so the row beside ``pymq`` shows what the check costs."""

    implementation = "pymq-no-crc"
    operation = "get_message(..., max_msgs=32), bodies touched, check_crc_on_read=False"
    overrides = {"check_crc_on_read": False}


class QueuelibPop(Workload):
    """queuelib: FifoDiskQueue.pop per message."""

    group = "get_message"
    implementation = "queuelib"
    operation = "FifoDiskQueue.pop()"
    requires = "queuelib"
    queue: Any = None

    def note(self) -> str:
        return "FifoDiskQueue defaults; one read(2) per pop"

    def open(self, path: str) -> None:
        from queuelib import FifoDiskQueue

        self.queue = FifoDiskQueue(os.path.join(path, "queue"))

    def prefill(self) -> None:
        push, body = self.queue.push, self.body
        for _ in range(min(self.options.warmup, self.message_count()) + self.message_count()):
            push(body)
        self.popped = 0

    def run(self, n: int) -> None:
        pop, touched = self.queue.pop, 0
        for _ in range(n):
            touched += len(pop())
        self.popped += n

    def check(self) -> None:
        _expect(self.popped > 0 and len(self.queue) >= 0, "nothing popped")

    def close(self) -> None:
        queue, self.queue = self.queue, None
        if queue is not None:
            queue.close()


class LmdbCursorRead(_LmdbWorkload):
    """lmdb: a read cursor walking the records in key order."""

    group = "get_message"
    operation = "cursor.iternext(), values touched"

    def prefill(self) -> None:
        env, body, total = self.env, self.body, min(self.options.warmup, self.message_count()) + self.message_count()
        key = 0
        for size in _batch_sizes(total, 1000):
            with env.begin(write=True) as txn:
                txn.cursor().putmulti([(i.to_bytes(8, "big"), body) for i in range(key, key + size)], append=True)
            key += size
        self.next_key = key
        self.txn = env.begin()
        self.items = self.txn.cursor().iternext()
        self.read = 0

    def run(self, n: int) -> None:
        items, touched = self.items, 0
        for _ in range(n):
            touched += len(next(items)[1])
        self.read += n

    def check(self) -> None:
        _expect(self.read > 0, "nothing read")


# -- time lookup ---------------------------------------------------------------------------


class _TimeLookup(Workload):
    latency = True

    def message_count(self) -> int:
        return self.options.lookups

    def _queries(self, n: int, lo: int, hi: int) -> list[int]:
        rng = random.Random(n)
        return [rng.randint(lo - 5, hi + 5) for _ in range(n)]


class PymqTimeLookup(_PymqWorkload, _TimeLookup):
    """pymq: get_offset_in_queue_by_time on one large queue."""

    group = "time_lookup"
    operation = "get_offset_in_queue_by_time(ts, LOWER|UPPER)"

    def prefill(self) -> None:
        _fill(self.store, self.options.lookup_queue_size, self.body)
        _wait_dispatched(self.store)
        s = self.store
        self.lo = s.get_message_store_timestamp(TOPIC, 0, 0)
        self.hi = s.get_message_store_timestamp(TOPIC, 0, s.get_max_offset_in_queue(TOPIC, 0) - 1)
        self.done = 0

    def run(self, n: int) -> None:
        lookup = self.store.get_offset_in_queue_by_time
        lower, upper = pymq.BoundaryType.LOWER, pymq.BoundaryType.UPPER
        clock = time.perf_counter_ns
        samples = self.samples = []
        for i, ts in enumerate(self._queries(n, self.lo, self.hi)):
            t0 = clock()
            lookup(TOPIC, 0, ts, upper if i & 1 else lower)
            samples.append(clock() - t0)
        self.done += n

    def check(self) -> None:
        _expect(self.done > 0, "no lookups ran")


class BisectTimeLookup(_TimeLookup):
    """bisect over an in-memory list of the same timestamps (no files, no decoding)."""

    group = "time_lookup"
    implementation = "bisect-in-memory"
    operation = "bisect_left / bisect_right"

    def open(self, path: str) -> None:
        pass

    def prefill(self) -> None:
        n, now = self.options.lookup_queue_size, int(time.time() * 1000)
        self.times = [now + i // 2000 for i in range(n)]       # ~2000 messages per ms, as measured
        self.lo, self.hi = self.times[0], self.times[-1]
        self.done = 0

    def run(self, n: int) -> None:
        times, bl, br = self.times, bisect.bisect_left, bisect.bisect_right
        clock = time.perf_counter_ns
        samples = self.samples = []
        for i, ts in enumerate(self._queries(n, self.lo, self.hi)):
            t0 = clock()
            (br(times, ts) - 1) if i & 1 else bl(times, ts)
            samples.append(clock() - t0)
        self.done += n

    def check(self) -> None:
        _expect(self.done > 0, "no lookups ran")

    def close(self) -> None:
        self.times = []
