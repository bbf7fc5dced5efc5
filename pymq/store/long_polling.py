"""Waking readers when messages arrive (RocketMQ's PullRequestHoldService, in-process).

A reader waiting for a queue blocks on that queue's condition; the reput service calls
``notify`` with the queues it just extended, so a waiter wakes within the dispatch
latency (about a millisecond) instead of polling on a timer.

Waiters that are not threads (an asyncio server's parked pulls, :mod:`pymq.aio`'s tasks)
add a *listener* instead, for every topic or for some: it is called on the dispatcher's
thread with each batch of arrivals (or None when every waiter must look again, e.g. at
shutdown) and must hand the work to its own loop quickly (``call_soon_threadsafe``). A
listener that raises is logged once per episode and never stops the dispatcher.

At shutdown the store closes the notifier (``close``) first: every blocked waiter wakes at once
and raises :class:`pymq.StoreStateError`, and so does every wait begun after it;
listeners get None (and :mod:`pymq.aio`'s waiters then raise the same error).
"""

from __future__ import annotations

import itertools
import logging
import threading
from typing import Callable, Iterable, Optional

from pymq.errors import StoreStateError

from .arguments import check_queue_id, check_queue_offsets
from .episode_log import EpisodeLog

log = logging.getLogger("pymq")

Listener = Callable[[Optional[dict]], None]


class MessageArrivingNotifier:
    """Per-(topic, queue_id) conditions that the dispatcher signals."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conditions: dict[tuple[str, int], threading.Condition] = {}
        self._extra: dict[str, set] = {}       # topic -> conditions of multi-topic waiters
        self._all_listeners: tuple = ()                        # listeners of every topic
        self._listeners: dict[str, dict[int, Listener]] = {}   # topic -> {token: listener}
        self._tokens = itertools.count()
        self.listener_errors = EpisodeLog(log, "arrival listener")
        self.closed = False

    def add_listener(self, fn: Listener, topics: Optional[Iterable[str]] = None) -> Callable[[], None]:
        """Call ``fn(arrived)`` on every ``notify`` that extends a queue of one of
        ``topics`` (of any topic when None; once per pass however many grew) and
        ``fn(None)`` on ``notify_all``. Returns the function that removes this
        registration (``remove_listener(fn)`` removes all of ``fn``'s)."""
        if topics is None:
            with self._lock:
                self._all_listeners = self._all_listeners + (fn,)
            return lambda: self.remove_listener(fn)
        topics = tuple(topics)
        with self._lock:
            key = next(self._tokens)
            for t in topics:
                self._listeners.setdefault(t, {})[key] = fn

        def remove() -> None:
            with self._lock:
                for t in topics:
                    listeners = self._listeners.get(t)
                    if listeners is not None:
                        listeners.pop(key, None)
                        if not listeners:
                            del self._listeners[t]

        return remove

    def remove_listener(self, fn: Listener) -> None:
        """Remove every registration of ``fn`` (compared with ``==``, so a bound method
        fetched again is the same listener)."""
        with self._lock:
            self._all_listeners = tuple(f for f in self._all_listeners if f != fn)
            for t in list(self._listeners):
                listeners = self._listeners[t]
                for key in [k for k, f in listeners.items() if f == fn]:
                    del listeners[key]
                if not listeners:
                    del self._listeners[t]

    def _condition(self, key: tuple[str, int]) -> threading.Condition:
        cond = self._conditions.get(key)
        if cond is None:
            with self._lock:
                cond = self._conditions.setdefault(key, threading.Condition())
        return cond

    def notify(self, arrived: dict) -> None:
        """``arrived`` maps (topic, queue_id) to the queue's new max offset. Waiters on
        a queue and waiters on its whole topic (key ``(topic, None)``) are woken."""
        if self._all_listeners:
            self._call(self._all_listeners, arrived)
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
        if self._listeners:
            with self._lock:
                fns = {i: fn for t in topics for i, fn in self._listeners.get(t, {}).items()}
            self._call(fns.values(), arrived)

    def notify_all(self) -> None:
        """Wake every waiter and listener (the store is shutting down); listeners get
        None, meaning "anything may have changed"."""
        with self._lock:
            extra = [c for waiters in self._extra.values() for c in waiters]
            fns = list(self._all_listeners)
            fns += {i: fn for listeners in self._listeners.values() for i, fn in listeners.items()}.values()
        self._call(fns, None)
        for cond in list(self._conditions.values()) + extra:
            with cond:
                cond.notify_all()

    def close(self) -> None:
        """The store is shutting down: wake every waiter now; they, and every wait
        begun from now on, raise ``StoreStateError``. Listeners get None."""
        self.closed = True
        self.notify_all()

    def _check_closed(self) -> None:
        if self.closed:
            raise StoreStateError("the store is shut down (it shut down while waiting)")

    def _call(self, listeners, arrived: Optional[dict]) -> None:
        for fn in listeners:
            try:
                fn(arrived)
            except Exception as e:      # a broken listener must not stop the dispatcher
                self.listener_errors.failed(f"{fn!r}: {e!r}", exc_info=True)
            else:
                self.listener_errors.succeeded()

    def wait(self, key: tuple, ready: Callable[[], bool], timeout_s: Optional[float]) -> bool:
        """Block until ``ready()`` or ``timeout_s`` passes (None: no limit); returns
        ``ready()``. ``key`` is (topic, queue_id), or (topic, None) to be woken by any
        queue of topic. Raises ``StoreStateError`` once the notifier is closed."""
        self._check_closed()
        if ready():
            return True
        if timeout_s is not None and timeout_s > threading.TIMEOUT_MAX:
            timeout_s = None            # math.inf: a lock cannot wait that long, and need not
        cond = self._condition(key)
        with cond:
            woke = cond.wait_for(lambda: self.closed or ready(), timeout_s)
        self._check_closed()
        return woke

    def wait_any(self, topics, ready: Callable[[], bool], timeout_s: Optional[float]) -> bool:
        """``wait`` woken by any queue of any of ``topics`` (a consumer reading its topic
        and its retry topic)."""
        topics = list(topics)
        if len(topics) == 1:
            return self.wait((topics[0], None), ready, timeout_s)
        self._check_closed()
        if ready():
            return True
        if timeout_s is not None and timeout_s > threading.TIMEOUT_MAX:
            timeout_s = None
        cond = threading.Condition()
        with self._lock:
            for t in topics:
                self._extra.setdefault(t, set()).add(cond)
        try:
            with cond:
                woke = cond.wait_for(lambda: self.closed or ready(), timeout_s)
            self._check_closed()
            return woke
        finally:
            with self._lock:
                for t in topics:
                    waiters = self._extra.get(t)
                    if waiters is not None:
                        waiters.discard(cond)
                        if not waiters:
                            del self._extra[t]


def queue_ready(consume_queues, topic: str, queue_id: int, offset: int) -> Callable[[], bool]:
    """The condition of a wait for one queue: true once queue offset ``offset`` of
    (topic, queue_id) is readable. ``TypeError`` for a queue id that is not an int."""
    check_queue_id(queue_id)
    find = consume_queues.find_consume_queue

    def ready() -> bool:
        # looked up each time: a read-only store replaces a queue it held in memory when
        # the writer creates it on disk
        cq = find(topic, queue_id, create=False)
        return cq is not None and offset < cq.get_max_offset_in_queue()

    return ready


def arrival_condition(consume_queues, topic, offsets: dict) -> tuple:
    """``(topics, ready)`` of a wait over several queues: ``topic`` a name and ``offsets``
    ``{queue_id: offset}``, or a tuple of names and ``{topic: {queue_id: offset}}``.
    ``ready()`` is true once one of the queues has a message at or after its offset, or a
    queue of the topics appeared that was neither known when the wait began nor named.
    ``TypeError`` for a queue id or an offset that is not an int."""
    find = consume_queues.find_consume_queue
    by_topic = {topic: offsets} if isinstance(topic, str) else {t: offsets.get(t, {}) for t in topic}
    for offs in by_topic.values():
        check_queue_offsets(offs)
    known = {t: set(consume_queues.topics().get(t, ())) for t in by_topic}

    def ready() -> bool:
        queues = consume_queues.topics()
        for t, offs in by_topic.items():
            if set(queues.get(t, ())) - known[t] - set(offs):
                return True
            if any(off < find(t, q).get_max_offset_in_queue() for q, off in offs.items()):
                return True
        return False

    return tuple(by_topic), ready
