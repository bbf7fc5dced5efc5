"""EpisodeLog: a failure that repeats is logged once per episode, with a count.

A background service that fails keeps trying (a full disk lasts as long as it lasts);
logging every attempt would bury the log and cost the CPU. An episode is a run of
failures ended by a success. Its log records are bounded: the first failure (with the
traceback when there is one), a reminder with the count every ``remind_s`` seconds while
it lasts (ten minutes by default), and its end ("recovered after N failed attempts").
The counts stay readable (``failing``, ``failures``, ``episodes``, ``last_error``) for
``store.stats()`` and the metrics.

Used by :class:`~pymq.store.service_thread.ServiceThread` for every failing pass, and by
services for failures inside a pass that they retry (a delivery put refused on a full
disk, a dead-lettering that failed, a transaction checker that raises).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Optional


class EpisodeLog:
    """Counts failures of ``what`` and logs them once per episode (module docstring)."""

    def __init__(self, logger: logging.Logger, what: str, remind_s: float = 600.0) -> None:
        self.logger = logger
        self.what = what
        self.remind_s = remind_s
        self.failing = 0          # consecutive failures (0: healthy)
        self.failures = 0         # failures since the start
        self.episodes = 0         # failure episodes since the start
        self.last_error: Optional[BaseException | str] = None
        self._lock = threading.Lock()
        self._last_logged = 0.0

    def failed(self, error: BaseException | str, exc_info: bool = False) -> bool:
        """Count a failure; log it if it starts an episode (or a reminder is due).
        Returns True if this failure started an episode."""
        with self._lock:
            self.failures += 1
            self.failing += 1
            self.last_error = error
            now = time.monotonic()
            if self.failing == 1:
                self.episodes += 1
                self._last_logged = now
                first, remind, count = True, False, 1
            else:
                first = False
                remind = now - self._last_logged >= self.remind_s
                if remind:
                    self._last_logged = now
                count = self.failing
        if first:
            self.logger.error("%s failed: %s (retrying; repeats are counted, not logged)", self.what, error,
                              exc_info=exc_info)
        elif remind:
            self.logger.error("%s still failing: %d failed attempts so far (last error: %s)", self.what, count,
                              error)
        return first

    def succeeded(self) -> bool:
        """End the current episode, if any, logging how many attempts it took; returns
        True if an episode ended."""
        if not self.failing:          # the healthy path: one attribute read
            return False
        with self._lock:
            count, self.failing = self.failing, 0
            error = self.last_error
        if count:
            self.logger.warning("%s recovered after %d failed attempts (last error: %s)", self.what, count, error)
        return bool(count)
