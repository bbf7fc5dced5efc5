"""Delivery workloads: how late delayed and timer messages arrive, and what pending
timers cost ordinary puts.

``delivery``
    Lateness of delivery: the delivered record's store timestamp minus the time the
    message was due, both milliseconds of the store's clock, reported as p50/p99 in the
    ns columns (1 ms = 1,000,000 ns; a timestamp has 1 ms resolution).
    ``pymq``: ``--delivery-messages`` messages with ``delay_level`` 1 and 2 alternately
    on a store with ``message_delay_level="1s 2s"``, put at an even pace over a quarter
    of ``--delivery-window-ms`` (so deliveries are spread too), due at store time + 1 s
    or 2 s (the consume-queue tagsCode). ``pymq-timer``: as many ``deliver_time_ms``
    messages put at once, due at random times within ``--delivery-window-ms``. The timed
    part is putting and waiting until every message was delivered, so its msgs/s column
    says nothing; the lateness percentiles do. A repeat with an early or a missing or a
    repeated delivery fails the run. No warm-up run (it would be seconds of waiting):
    the warm-up writes ordinary messages to another topic instead.
``put_with_timers``
    ``put_message`` throughput (as in ``put_message``) on a store holding
    ``--pending-timers`` timer messages due in one to two hours (``pymq``), next to the
    same store holding as many ordinary messages instead (``pymq-no-timers``; both
    prefilled with one ``put_message`` each, so the logs are about the same size, the
    timer records carrying their four timer properties more); the second row's pymq/peer ratio is the speed kept with
    timers pending (target >= 0.95). The prefill and the timer service's intake of it
    are not timed; the commit log is flushed after it, and in both rows the part of the
    segment the timed puts will write is faulted in (``MappedFile.warm``): on these VMs
    the kernel zeroes fresh page-cache pages at very different speeds from one run to
    the next (pages the host took back must be backed again), which, not the timers,
    decided the ratio before. So these rows put faster than ``put_message``'s.

Unless ``--commitlog-file-size`` is given, these stores use smaller commit-log files
(64 MiB for delivery, 256 MiB for put_with_timers; nothing rolls over): deleting the
default 1 GiB fallocated files after each repeat would take most of the run's time.
"""

from __future__ import annotations

import dataclasses
import os
import random
import time
from typing import Any

import pymq

from .base import TOPIC, _expect, store_config
from .read import _wait_dispatched
from .write import PymqPutMessage, _PymqWorkload

DELAY_LEVELS = "1s 2s"
_DELAY_MS = {1: 1000, 2: 2000}
OTHER_TOPIC = "BenchOther"
TIMER_TOPIC = "rmq_sys_wheel_timer"
_NS_PER_MS = 1_000_000
DELIVERY_SEGMENT = 64 << 20         # commit-log file size of the delivery stores (a few MB written)
PUT_SEGMENT = 256 << 20             # of the put_with_timers stores (about 150 MB written)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _config(options, segment: int, **overrides) -> Any:
    """The run's StoreConfig, with ``segment``-byte commit-log files unless
    ``--commitlog-file-size`` says otherwise: deleting a 1 GiB fallocated file (and the
    pre-allocated next one) after every repeat costs seconds and measures nothing here."""
    if options.commitlog_file_size is None:
        overrides["commitlog_file_size"] = segment
    return dataclasses.replace(store_config(options), **overrides)


class _Delivery(_PymqWorkload):
    """Put ``n`` messages that are due later, wait for all of them, record lateness."""

    group = "delivery"
    latency = True

    def message_count(self) -> int:
        return self.options.delivery_messages

    def config(self) -> Any:
        return _config(self.options, DELIVERY_SEGMENT, message_delay_level=DELAY_LEVELS)

    def open(self, path: str) -> None:
        self.last, self.written = None, 0
        self.store = pymq.MessageStore(os.path.join(path, "store"), self.config())
        self.store.start()
        self.timed = False
        self.rounds = 0
        self.samples: list[int] = []
        self.problems: list[str] = []

    def before_run(self, n: int) -> None:
        self.timed = True

    def run(self, n: int) -> None:
        if not self.timed:                     # warm-up: ordinary puts, nothing to wait for
            store, Message, body = self.store, pymq.Message, self.body
            for _ in range(n):
                store.put_message(Message(topic=OTHER_TOPIC, body=body))
            return
        due = self.put_all(n)                  # uniq key -> due ms
        self.wait_delivered(n, max(due.values()))
        self.record(due)
        self.rounds += 1

    def put_all(self, n: int) -> dict[str, int]:
        raise NotImplementedError

    def wait_delivered(self, n: int, last_due_ms: int) -> None:
        store = self.store
        deadline = time.monotonic() + max(0.0, (last_due_ms - _now_ms()) / 1000.0) + 30.0
        while True:
            have = store.get_max_offset_in_queue(TOPIC, 0)
            if have >= n or time.monotonic() > deadline:
                break
            store.wait_message(TOPIC, 0, have, 0.05)

    def record(self, due: dict[str, int]) -> None:
        store, offset, seen = self.store, 0, set()
        samples = self.samples = []
        while True:
            r = store.get_message("bench", TOPIC, 0, offset, 32)
            if not r.messages:
                break
            for m in r.messages:
                key = m.properties.get("UNIQ_KEY")
                if key not in due:
                    self.problems.append(f"unexpected message {key!r}")
                elif key in seen:
                    self.problems.append(f"{key} delivered twice")
                else:
                    seen.add(key)
                    late = m.store_timestamp - due[key]
                    if late < 0:
                        self.problems.append(f"{key} delivered {-late} ms early")
                    samples.append(late * _NS_PER_MS)
            offset = r.next_begin_offset
        if len(seen) != len(due):
            self.problems.append(f"{len(due) - len(seen)} of {len(due)} messages not delivered")

    def check(self) -> None:
        _expect(self.rounds == 1 and not self.problems, "; ".join(self.problems[:5]) or "no timed run")


class PymqDelayDelivery(_Delivery):
    """pymq: delay_level messages (levels "1s 2s"), lateness after their due time."""

    @property
    def operation(self) -> str:   # type: ignore[override]
        files = "" if self.options.commitlog_file_size else f", {DELIVERY_SEGMENT >> 20} MiB files"
        return f"delay_level 1|2 (levels \"1s 2s\"{files}): store time at delivery - due"

    def put_all(self, n: int) -> dict[str, int]:
        store, Message, body = self.store, pymq.Message, self.body
        spread_ms = self.options.delivery_window_ms / 4
        due = {}
        start = time.monotonic()
        for i in range(n):
            wait = start + spread_ms * i / n / 1000.0 - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            level = 1 + (i & 1)
            r = store.put_message(Message(topic=TOPIC, body=body, delay_level=level))
            _expect(r.is_ok(), f"delayed put returned {r!r}")
            due[r.uniq_key] = r.store_timestamp + _DELAY_MS[level]
        return due


class PymqTimerDelivery(_Delivery):
    """pymq: deliver_time_ms messages at random times, lateness after their time."""

    implementation = "pymq-timer"
    operation = "deliver_time_ms within the window: store time at delivery - due"

    def note(self) -> str:
        cfg = self.config()
        return (f"StoreConfig(commitlog_file_size={cfg.commitlog_file_size:,}, "
                f"flush_disk_type={cfg.flush_disk_type}, message_delay_level={cfg.message_delay_level!r}), "
                "other fields default; timers due within --delivery-window-ms")

    def put_all(self, n: int) -> dict[str, int]:
        store, Message, body = self.store, pymq.Message, self.body
        rng = random.Random(n)
        window = self.options.delivery_window_ms
        start = _now_ms()
        due = {}
        for _ in range(n):
            at = start + rng.randint(min(10, window), window)
            r = store.put_message(Message(topic=TOPIC, body=body, deliver_time_ms=at))
            _expect(r.is_ok(), f"timer put returned {r!r}")
            due[r.uniq_key] = at
        return due


# -- put_message with timers pending -----------------------------------------------------


class PymqPutWithTimers(PymqPutMessage):
    """pymq: put_message on a store holding ``--pending-timers`` timers due in 1-2 h."""

    group = "put_with_timers"
    pending_timers = True

    @property
    def operation(self) -> str:   # type: ignore[override]
        what = "timer messages pending" if self.pending_timers else "ordinary messages stored"
        files = "" if self.options.commitlog_file_size else f", {PUT_SEGMENT >> 20} MiB files"
        return f"store.put_message(Message(...)), {self.options.pending_timers:,} {what}{files}"

    def message_count(self) -> int:
        return self.options.put_with_timers_messages

    def open(self, path: str) -> None:
        self.last, self.written = None, 0
        self.store = pymq.MessageStore(os.path.join(path, "store"), _config(self.options, PUT_SEGMENT))
        self.store.start()

    def prefill(self) -> None:
        store, Message, body = self.store, pymq.Message, self.body
        n = self.options.pending_timers
        hour = 3_600_000
        first = _now_ms() + hour
        with_timers = self.pending_timers
        for j in range(n):                       # timers one to two hours ahead, evenly spread
            r = store.put_message(Message(topic=OTHER_TOPIC, body=body,
                                          deliver_time_ms=first + j * hour // n if with_timers else None))
            _expect(r.is_ok(), f"prefill put returned {r!r}")
        _wait_dispatched(store)
        if with_timers:
            timers = store.timer_service
            deadline = time.monotonic() + 120.0
            while timers.checkpoint.enqueue_offset < n and time.monotonic() < deadline:
                time.sleep(0.005)
            _expect(timers.checkpoint.enqueue_offset == n,
                    f"the timer service took in {timers.checkpoint.enqueue_offset} of {n} timers")
        store.flush()          # the prefill's dirty pages are not written back while timed
        # fault in the commit log the timed puts will write, in both rows: how fast the
        # VM hands out fresh page-cache pages varies twofold from run to run and would
        # decide the ratio instead of the pending timers
        seg = store.commit_log.mapped_file_queue.get_last_mapped_file()
        seg.warm(seg.wrote_position)

    def check(self) -> None:
        super().check()
        if self.pending_timers:
            store = self.store
            _expect(store.get_max_offset_in_queue(TIMER_TOPIC, 0) == self.options.pending_timers
                    and store.timer_service.delivered == 0, "the pending timers are not all pending")


class PymqPutWithoutTimers(PymqPutWithTimers):
    """pymq: the same, on a store holding as many ordinary messages instead."""

    implementation = "pymq-no-timers"
    pending_timers = False

    def note(self) -> str:
        cfg = _config(self.options, PUT_SEGMENT)
        return (f"StoreConfig(commitlog_file_size={cfg.commitlog_file_size:,}, "
                f"flush_disk_type={cfg.flush_disk_type}), other fields default; as many ordinary "
                "messages stored as the pymq row has timers pending")
