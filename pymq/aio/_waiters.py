"""Waiting for arrivals on an asyncio loop, without a thread per waiter.

(The same bridge carries other news from the store's threads to the loop, coalesced the
same way: :meth:`LoopWaiters.post`, used for the completions of ``SYNC_FLUSH`` puts.)

Every waiter of one loop on one store is a future in :class:`LoopWaiters`, filed under
the topics it waits on. For each topic with waiters, one listener is registered with the
store (``store.add_arrival_listener``). When the dispatcher extends a queue, the listener
runs on the dispatcher's thread, notes the topics and, unless a wake-up is already on its
way, schedules one with ``loop.call_soon_threadsafe``: one write to the loop's self-pipe
per dispatch pass, however many tasks wait. On the loop, the futures of those topics are
resolved and each waiter checks its own condition again (a spurious wake-up, another
queue of the topic or a filtered message, just waits on).

Lost wake-ups cannot happen: a waiter registers its future first and checks its
condition after, all in one step of the loop; an arrival after the check finds the future
registered, and the dispatcher makes a message readable before it calls the listeners.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import Callable, Iterable, Optional

_REGISTRY: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_REGISTRY_LOCK = threading.Lock()


def _expire(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(False)


class LoopWaiters:
    """The waiters of one asyncio loop on one store (see the module docstring)."""

    def __init__(self, store, loop: asyncio.AbstractEventLoop) -> None:
        self._store = store
        self._loop = loop
        self._lock = threading.Lock()       # guards what the dispatcher thread touches
        self._pending: set = set()
        self._everything = False
        self._scheduled = False
        self._futures: dict[str, set] = {}
        self._posted: list = []
        self._removers: dict[str, Callable[[], None]] = {}

    @classmethod
    def of(cls, store) -> "LoopWaiters":
        """The waiters of the running loop on ``store`` (one set per store and loop, so
        any number of consumers share one listener per topic)."""
        loop = asyncio.get_running_loop()
        with _REGISTRY_LOCK:
            per_loop = _REGISTRY.get(store)
            if per_loop is None:
                per_loop = _REGISTRY[store] = weakref.WeakKeyDictionary()
            waiters = per_loop.get(loop)
            if waiters is None:
                waiters = per_loop[loop] = cls(store, loop)
        return waiters

    @property
    def waiting(self) -> int:
        """How many futures are waiting (a task waiting on two topics counts twice)."""
        return sum(len(f) for f in self._futures.values())

    # -- the dispatcher's side ---------------------------------------------------------

    def _on_arrival(self, arrived) -> None:
        with self._lock:
            if arrived:
                self._pending.update(key[0] for key in arrived)
            else:
                self._everything = True
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._drain)
        except RuntimeError:            # the loop is closed: nobody waits any more
            pass

    # -- the loop's side ---------------------------------------------------------------

    def post(self, fn: Callable[[], None]) -> None:
        """Run ``fn()`` on the loop soon; callable from any thread. Posts that come
        before the loop runs them share one wake-up of the loop (a group commit
        completing fifty puts writes to the loop's self-pipe once)."""
        with self._lock:
            self._posted.append(fn)
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._drain)
        except RuntimeError:            # the loop is closed
            pass

    def _drain(self) -> None:
        with self._lock:
            topics, self._pending = self._pending, set()
            everything, self._everything = self._everything, False
            posted, self._posted = self._posted, []
            self._scheduled = False
        for fn in posted:
            fn()
        for topic in (list(self._futures) if everything else topics):
            for fut in self._futures.get(topic, ()):
                if not fut.done():
                    fut.set_result(True)

    def _add(self, topics: Iterable[str], fut: asyncio.Future) -> None:
        for topic in topics:
            futs = self._futures.get(topic)
            if futs is None:
                futs = self._futures[topic] = set()
                self._removers[topic] = self._store.add_arrival_listener(self._on_arrival, (topic,))
            futs.add(fut)

    def _discard(self, topics: Iterable[str], fut: asyncio.Future) -> None:
        for topic in topics:
            futs = self._futures.get(topic)
            if futs is None:
                continue
            futs.discard(fut)
            if not futs:
                del self._futures[topic]
                self._removers.pop(topic)()

    async def wait(self, topics: Iterable[str], ready: Callable[[], bool], timeout_s: Optional[float]) -> bool:
        """Wait until ``ready()`` or ``timeout_s`` passes (None: no limit); returns
        ``ready()``. Woken by arrivals in any of ``topics``. The store's shutdown wakes
        it at once and it raises ``StoreStateError`` (as a wait on a store already shut
        down does). Cancelling the waiting task just removes its registration."""
        store = self._store
        store._check_open()
        if ready():
            return True
        if timeout_s is not None and timeout_s <= 0:
            return False
        topics = tuple(topics)
        loop = self._loop
        deadline = None if timeout_s is None else loop.time() + timeout_s
        while True:
            fut = loop.create_future()
            self._add(topics, fut)
            timer = loop.call_at(deadline, _expire, fut) if deadline is not None else None
            try:
                store._check_open()     # a shutdown that came before the listener was added
                if ready():
                    return True
                await fut
            finally:
                if timer is not None:
                    timer.cancel()
                self._discard(topics, fut)
            store._check_open()
            if ready():
                return True
            if deadline is not None and loop.time() >= deadline:
                return False
