"""StoreStatsService: put and get rates over 10 s, 1 min and 10 min (RocketMQ's StoreStatsService).

RocketMQ counts every put and get, and a thread samples the totals once a second into
rings from which ``getPutTps(10)``, ``(60)`` and ``(600)`` are computed. pymq does the
same without adding work to the put path: the totals are counters the compiled code
keeps anyway, read once a second:

* messages in: the appender's ``put_count`` (every append, system topics included); in a
  read-only store, which sees another process's puts, the growth of all consume queues;
* bytes in: the growth of the commit log (records and the blanks that end segments);
* gets: the compiled reader's ``found_count``, ``miss_count``, ``got_messages`` and
  ``got_bytes`` (the pulls this process served).

Totals count from the store's opening in this process. A rate over a window longer than
the samples kept covers what there is; each window says how many seconds it covers.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Callable

from .service_thread import ServiceThread

#: (name, seconds) of the rate windows
WINDOWS = (("10s", 10), ("1m", 60), ("10m", 600))
#: the counters sampled, in sample order (after the monotonic time)
COUNTERS = ("put_messages", "put_bytes", "get_found", "get_miss", "get_messages", "get_bytes")
_RATES = (("put_tps", 0), ("put_bytes_per_s", 1), ("get_found_tps", 2), ("get_miss_tps", 3),
          ("get_transferred_tps", 4), ("get_bytes_per_s", 5))


def counters_of(store) -> Callable[[], tuple]:
    """The function that reads ``store``'s counters (see the module docstring)."""
    commit_log = store.commit_log
    qr = store.reader.queue_reader
    base_bytes = commit_log.get_max_offset()
    if store.read_only:
        queues = store.consume_queues

        def dispatched() -> int:
            return sum(cq.get_max_offset_in_queue() for cq in queues.queues())

        base_msgs = dispatched()

        def sample() -> tuple:
            return (dispatched() - base_msgs, commit_log.get_max_offset() - base_bytes,
                    qr.found_count, qr.miss_count, qr.got_messages, qr.got_bytes)
    else:
        appender = commit_log.appender
        base_msgs = appender.put_count

        def sample() -> tuple:
            return (appender.put_count - base_msgs, commit_log.get_max_offset() - base_bytes,
                    qr.found_count, qr.miss_count, qr.got_messages, qr.got_bytes)
    return sample


class StoreStatsService(ServiceThread):
    """Samples ``sample()`` (a tuple in :data:`COUNTERS` order) every second into a ring
    of ten minutes and answers the totals and the rates over :data:`WINDOWS`."""

    name = "StoreStatsService"

    def __init__(self, sample: Callable[[], tuple], interval_s: float = 1.0, keep_s: int = 600) -> None:
        super().__init__(interval_s)
        self._sample = sample
        self._ring: collections.deque = collections.deque(maxlen=int(keep_s / interval_s) + 2)
        self._lock = threading.Lock()
        self.opened_at = time.monotonic()
        self.take()

    def take(self) -> tuple:
        """Sample now into the ring; returns the sample ``(monotonic s, *counters)``."""
        s = (time.monotonic(), *self._sample())
        with self._lock:
            self._ring.append(s)
        return s

    def run_once(self) -> None:
        self.take()

    def totals(self) -> dict:
        """The counters now, by name."""
        return dict(zip(COUNTERS, self._sample()))

    def rates(self) -> dict:
        """``{window: {"seconds": covered, "put_tps": ..., "put_bytes_per_s": ...,
        "get_found_tps": ..., "get_miss_tps": ..., "get_transferred_tps": ...,
        "get_bytes_per_s": ...}}`` from the ring and a sample taken now."""
        now = (time.monotonic(), *self._sample())
        with self._lock:
            ring = list(self._ring)
        out = {}
        for name, seconds in WINDOWS:
            base = ring[0]
            for s in reversed(ring):           # the newest sample at least `seconds` old
                if now[0] - s[0] >= seconds:
                    base = s
                    break
            dt = now[0] - base[0]
            window = {"seconds": round(dt, 3)}
            for key, i in _RATES:
                window[key] = round((now[i + 1] - base[i + 1]) / dt, 3) if dt > 0 else 0.0
            out[name] = window
        return out
