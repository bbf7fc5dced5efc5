"""Waking readers when messages arrive (RocketMQ's PullRequestHoldService, in-process).

A reader waiting for a queue blocks on that queue's condition; the reput service calls
``notify`` with the queues it just extended, so a waiter wakes within the dispatch
latency (about a millisecond) instead of polling on a timer. Waiters that are not threads
(an asyncio server's parked pulls) add a listener instead: it is called on the
dispatcher's thread with each batch of arrivals (or None when every waiter must look
again, e.g. at shutdown) and must hand the work to its own loop quickly.
"""

from __future__ import annotations

import threading
from typing import Callable, Optional


class MessageArrivingNotifier:
    """Per-(topic, queue_id) conditions that the dispatcher signals."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conditions: dict[tuple[str, int], threading.Condition] = {}
        self._extra: dict[str, set] = {}       # topic -> conditions of multi-topic waiters
        self._listeners: tuple = ()

    def add_listener(self, fn: Callable[[Optional[dict]], None]) -> None:
        """Call ``fn(arrived)`` on every ``notify`` and ``fn(None)`` on ``notify_all``."""
        with self._lock:
            self._listeners = self._listeners + (fn,)

    def remove_listener(self, fn) -> None:
        with self._lock:
            self._listeners = tuple(f for f in self._listeners if f is not fn)

    def _condition(self, key: tuple[str, int]) -> threading.Condition:
        cond = self._conditions.get(key)
        if cond is None:
            with self._lock:
                cond = self._conditions.setdefault(key, threading.Condition())
        return cond

    def notify(self, arrived: dict) -> None:
        """``arrived`` maps (topic, queue_id) to the queue's new max offset. Waiters on
        a queue and waiters on its whole topic (key ``(topic, None)``) are woken."""
        for fn in self._listeners:
            fn(arrived)
        topics = set()
        for key in arrived:
            topics.add(key[0])
            cond = self._conditions.get(key)
            if cond is not None:
                with cond:
                    cond.notify_all()
        for topic in topics:
            cond = self._conditions.get((topic, None))
            if cond is not None:
                with cond:
                    cond.notify_all()
            if self._extra:
                with self._lock:
                    extra = list(self._extra.get(topic, ()))
                for cond in extra:
                    with cond:
                        cond.notify_all()

    def notify_all(self) -> None:
        for fn in self._listeners:
            fn(None)
        with self._lock:
            extra = [c for waiters in self._extra.values() for c in waiters]
        for cond in list(self._conditions.values()) + extra:
            with cond:
                cond.notify_all()

    def wait(self, key: tuple, ready: Callable[[], bool], timeout_s: float) -> bool:
        """Block until ``ready()`` or ``timeout_s`` passes; returns ``ready()``.
        ``key`` is (topic, queue_id), or (topic, None) to be woken by any queue of topic."""
        if ready():
            return True
        cond = self._condition(key)
        with cond:
            return cond.wait_for(ready, timeout_s)

    def wait_any(self, topics, ready: Callable[[], bool], timeout_s: float) -> bool:
        """``wait`` woken by any queue of any of ``topics`` (a consumer reading its topic
        and its retry topic)."""
        topics = list(topics)
        if len(topics) == 1:
            return self.wait((topics[0], None), ready, timeout_s)
        if ready():
            return True
        cond = threading.Condition()
        with self._lock:
            for t in topics:
                self._extra.setdefault(t, set()).add(cond)
        try:
            with cond:
                return cond.wait_for(ready, timeout_s)
        finally:
            with self._lock:
                for t in topics:
                    waiters = self._extra.get(t)
                    if waiters is not None:
                        waiters.discard(cond)
                        if not waiters:
                            del self._extra[t]
