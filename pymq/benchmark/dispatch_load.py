"""Batched puts while the dispatcher works through a backlog, next to the same puts with
the dispatcher idle and with the dispatcher held (issue 27: "the dispatcher never makes
the writer wait").

Each repeat opens a store, puts ``--real-messages`` messages of 100 random bytes with one
key each (``put_message``, untimed) while the dispatcher is held back (the benchmark
holds its lock), so they are all still to be filed in their queue and the index, and
then times ``put_messages`` of as many prebuilt keyed messages in batches of
``--batch`` into a second topic:

``pymq``
    the dispatcher is let go right before the timed batches: it files the backlog while
    they run (about 300 ns a record, longer than the batches take);
``pymq-idle``
    the dispatcher caught up with the backlog first; it files only the timed batches;
``pymq-alone``
    the dispatcher stays held until the timed batches are done: the writer alone, the
    floor of the three.

The part of the segment the timed batches write is reserved and faulted in before the
clock starts, in every row (fresh pages cost these VMs a varying amount, which would
otherwise decide the ratio). Beside msgs/s each row reports where the writer's time went
(per message, from the thread's CPU clock and ``/proc/thread-self/schedstat``): its CPU
time, its time runnable but waiting for a CPU, and the rest, time it slept (for the GIL,
a lock or I/O); and how many records the dispatcher filed while the clock ran.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import pymq

from .base import Workload, _batch_sizes, _expect, _MiB
from .figures import Figure
from .read import _wait_dispatched
from .realistic import _bodies, _keys

TOPIC_BACKLOG = "DispatchBacklog"
TOPIC_TIMED = "DispatchTimed"


def _schedstat() -> tuple[int, int] | None:
    """This thread's (CPU ns, runnable-but-waiting ns), or None without schedstats."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as f:
            run, wait, _slices = f.read().split()
        return int(run), int(wait)
    except (OSError, ValueError):
        return None


class _PutMessagesWhileDispatching(Workload):
    group = "dispatch_load"
    operation = "put_messages(1000 prebuilt, keyed) while the dispatcher files a backlog"
    batched = True
    warm_up = False
    sync_before_run = False          # before_run syncs, then puts the backlog
    figures = (
        Figure("writer_cpu_ns", "writer CPU ns/msg", "{:,.0f}"),
        Figure("writer_runnable_ns", "waiting for a CPU", "{:,.0f}"),
        Figure("writer_sleeping_ns", "sleeping (GIL...)", "{:,.0f}"),
        Figure("dispatched", "filed while timed", "{:,.0f}", lower_is_better=False),
    )
    store: Any = None
    #: "busy": let go before the timed batches; "idle": caught up before; "alone": held
    dispatcher = "busy"

    def message_count(self) -> int:
        return self.options.real_messages

    def note(self) -> str:
        return "StoreConfig(commitlog_file_size=256 MiB), other fields default (index on)"

    def open(self, path: str) -> None:
        n = self.options.real_messages
        self.bodies, self.keys = _bodies(n, 1), _keys(n)
        self.prebuilt = [pymq.Message(topic=TOPIC_TIMED, body=b, keys=[k]) for b, k in zip(self.bodies, self.keys)]
        self.store = pymq.MessageStore(os.path.join(path, "store"),
                                       pymq.StoreConfig(commitlog_file_size=256 * _MiB,
                                                        flush_disk_type=self.options.flush_disk_type))
        self.store.start()
        self.held = None
        self.last = None

    def _hold(self) -> None:
        """Keep the dispatcher from starting a pass (it waits for its lock)."""
        self.held = self.store.reput_service._lock
        self.held.acquire()

    def _let_go(self) -> None:
        held, self.held = self.held, None
        if held is not None:
            held.release()

    def before_run(self, n: int) -> None:
        store = self.store
        os.sync()
        self._hold()
        put, Message, bodies, keys = store.put_message, pymq.Message, self.bodies, self.keys
        r = None
        for i in range(n):
            r = put(Message(topic=TOPIC_BACKLOG, body=bodies[i], keys=[keys[i]]))
        _expect(r is not None and r.is_ok(), f"backlog put returned {r!r}")
        seg = store.commit_log.mapped_file_queue.get_last_mapped_file()
        upto = min(seg.file_size, seg.wrote_position + n * 300)
        seg.reserve(upto)
        seg.warm(seg.wrote_position, upto)
        if self.dispatcher == "idle":
            self._let_go()
            _wait_dispatched(store)
        self.dispatched0 = store.router.dispatched
        self.sched0 = _schedstat()
        self.wall0, self.cpu0 = time.perf_counter_ns(), time.thread_time_ns()
        if self.dispatcher == "busy":
            self._let_go()

    def run(self, n: int) -> None:
        store, batch, prebuilt = self.store, self.options.batch, self.prebuilt
        r = None
        start = 0
        for size in _batch_sizes(n, batch):
            r = store.put_messages(prebuilt[start:start + size])
            start += size
        wall, cpu, sched = time.perf_counter_ns(), time.thread_time_ns(), _schedstat()
        self.dispatched1 = store.router.dispatched
        self.last = r
        self.stats = (n, wall - self.wall0, cpu - self.cpu0,
                      sched[1] - self.sched0[1] if sched and self.sched0 else None)

    def check(self) -> None:
        self._let_go()
        n = self.options.real_messages
        _expect(self.last is not None and self.last.is_ok(), f"last put returned {self.last!r}")
        _wait_dispatched(self.store)
        for topic in (TOPIC_BACKLOG, TOPIC_TIMED):
            _expect(self.store.get_max_offset_in_queue(topic, 0) == n, f"{topic} holds fewer than {n} messages")
        key = self.keys[n // 2]
        _expect(len(self.store.query_message(TOPIC_BACKLOG, key)) == 1, f"{key} is not indexed")

    def measure_figures(self) -> dict[str, float | None]:
        n, wall, cpu, runnable = self.stats
        return {"writer_cpu_ns": cpu / n,
                "writer_runnable_ns": None if runnable is None else runnable / n,
                "writer_sleeping_ns": None if runnable is None else max(0, wall - cpu - runnable) / n,
                "dispatched": float(self.dispatched1 - self.dispatched0)}

    def close(self) -> None:
        self._let_go()
        store, self.store = self.store, None
        if store is not None:
            store.shutdown()


class PymqPutMessagesWhileDispatching(_PutMessagesWhileDispatching):
    """pymq: put_messages while the dispatcher files a backlog of keyed messages."""

    implementation = "pymq"


class PymqPutMessagesDispatcherIdle(_PutMessagesWhileDispatching):
    """pymq: the same puts once the dispatcher has caught up."""

    implementation = "pymq-idle"
    dispatcher = "idle"
    operation = "the same, the dispatcher caught up first"


class PymqPutMessagesDispatcherHeld(_PutMessagesWhileDispatching):
    """pymq: the same puts with the dispatcher held: the writer alone."""

    implementation = "pymq-alone"
    dispatcher = "alone"
    operation = "the same, the dispatcher held: the writer alone"


DISPATCH_LOAD = (PymqPutMessagesWhileDispatching, PymqPutMessagesDispatcherIdle, PymqPutMessagesDispatcherHeld)
