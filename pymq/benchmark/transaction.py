"""Transaction workload: what open transactions cost ordinary puts.

``put_with_halves``
    ``put_message`` throughput on a :class:`pymq.Broker` holding ``--pending-halves`` open
    half messages (``pymq``), next to the same broker holding none (``pymq-no-halves``).
    Halves are records of the half topic and a table the check service reads every
    ``transaction_check_interval``; nothing of them is on the put path, so the ratio of the
    second row should be 1 (target: >= 0.95). The prefill is not timed.
"""

from __future__ import annotations

import os
import time

import pymq

from .base import _expect, store_config
from .write import PymqPutMessage


class PymqPutWithHalves(PymqPutMessage):
    """pymq: put_message on a broker with open transactions."""

    group = "put_with_halves"
    halves = True

    @property
    def operation(self) -> str:   # type: ignore[override]
        n = self.options.pending_halves if self.halves else 0
        return f"broker.put_message(Message(...)), {n:,} open half messages"

    def message_count(self) -> int:
        return self.options.put_with_timers_messages

    def note(self) -> str:
        return "pymq.Broker, StoreConfig defaults (ASYNC_FLUSH), BrokerConfig defaults"

    def open(self, path: str) -> None:
        self.last, self.written = None, 0
        self.store = pymq.Broker(os.path.join(path, "broker"), store_config(self.options))
        self.store.start()

    def prefill(self) -> None:
        if not self.halves:
            return
        broker, body = self.store, self.body
        for _ in range(self.options.pending_halves):
            r = broker.put_half_message(pymq.Message(topic="BenchTx", body=body))
            _expect(r.is_ok(), f"half put returned {r!r}")
        deadline = time.monotonic() + 60
        while broker.dispatch_behind_bytes() and time.monotonic() < deadline:
            time.sleep(0.005)
        broker.flush()

    def check(self) -> None:
        super().check()
        if self.halves:
            _expect(self.store.get_max_offset_in_queue("RMQ_SYS_TRANS_HALF_TOPIC", 0) == self.options.pending_halves,
                    "the halves are not all stored")


class PymqPutWithoutHalves(PymqPutWithHalves):
    """pymq: the same broker with no open transaction."""

    implementation = "pymq-no-halves"
    halves = False
