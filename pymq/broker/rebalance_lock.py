"""RebalanceLockManager: which client of a group may consume a queue in order.

RocketMQ 4.x orderly consumers lock the queues they are assigned (``LOCK_BATCH_MQ``)
before they pull, renew the locks every 20 s, and release them when a rebalance takes a
queue away (``UNLOCK_BATCH_MQ``). The broker grants a queue to one client id per group;
a lock not renewed for ``max_live_ms`` (60 s, ``rocketmq.broker.rebalance.lockMaxLiveTime``)
may be taken by another client. A queue is ``(topic, broker_name, queue_id)``.
"""

from __future__ import annotations

import threading
import time
from typing import Iterable, Optional

REBALANCE_LOCK_MAX_LIVE_MS = 60_000


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class RebalanceLockManager:
    """Queue locks of consumer groups (thread-safe)."""

    def __init__(self, max_live_ms: int = REBALANCE_LOCK_MAX_LIVE_MS) -> None:
        self.max_live_ms = max_live_ms
        self._lock = threading.Lock()
        self._table: dict[str, dict[tuple, list]] = {}      # group -> queue -> [client_id, last_ms]

    def try_lock_batch(self, group: str, queues: Iterable[tuple], client_id: str,
                       now_ms: Optional[int] = None) -> list[tuple]:
        """Lock (or renew) ``queues`` for ``client_id``; returns the ones it holds now."""
        now = _now_ms() if now_ms is None else now_ms
        out = []
        with self._lock:
            locks = self._table.setdefault(group, {})
            for q in queues:
                entry = locks.get(q)
                if entry is None or entry[0] == client_id or now - entry[1] > self.max_live_ms:
                    locks[q] = [client_id, now]
                    out.append(q)
        return out

    def unlock_batch(self, group: str, queues: Iterable[tuple], client_id: str) -> None:
        """Release the locks ``client_id`` holds on ``queues``."""
        with self._lock:
            locks = self._table.get(group)
            if not locks:
                return
            for q in queues:
                entry = locks.get(q)
                if entry is not None and entry[0] == client_id:
                    del locks[q]

    def unlock_client(self, client_id: str) -> None:
        """Release every lock of a client that went away."""
        with self._lock:
            for locks in self._table.values():
                for q in [q for q, e in locks.items() if e[0] == client_id]:
                    del locks[q]

    def owner(self, group: str, queue: tuple, now_ms: Optional[int] = None) -> Optional[str]:
        """The client holding ``queue`` for ``group``, or None (also when expired)."""
        now = _now_ms() if now_ms is None else now_ms
        entry = self._table.get(group, {}).get(queue)
        if entry is None or now - entry[1] > self.max_live_ms:
            return None
        return entry[0]
