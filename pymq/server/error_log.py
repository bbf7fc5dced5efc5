"""Request failures of a protocol adapter, logged at most once a minute per kind.

A request that fails because of the store (a full disk refusing pop state, a closed
store at shutdown) fails the same way for every client that asks, hundreds of times a
second; a request that is garbage can come as fast as a client sends it. Neither is an
episode of one background service (:class:`pymq.store.episode_log.EpisodeLog`), since
successes interleave with the failures, so the servers log one record per kind and
window and count the rest into the next record.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Optional

#: at most one record per kind in this many seconds
ERROR_WINDOW_S = 60.0


class RequestErrorLog:
    """``note(kind, message, exc)``: log the first failure of a kind in each window,
    count the others and name the count in the next record of that kind."""

    def __init__(self, logger: logging.Logger, window_s: float = ERROR_WINDOW_S) -> None:
        self.logger = logger
        self.window_s = window_s
        self.noted = 0                                      # every failure noted
        self._kinds: dict[str, list] = {}                   # kind -> [suppressed, window start]
        self._lock = threading.Lock()

    def note(self, kind: str, message: str, exc: Optional[BaseException] = None) -> bool:
        """Count a failure of ``kind``; returns True when it was logged."""
        now = time.monotonic()
        with self._lock:
            self.noted += 1
            entry = self._kinds.get(kind)
            if entry is not None and now - entry[1] < self.window_s:
                entry[0] += 1
                return False
            suppressed = entry[0] if entry is not None else 0
            self._kinds[kind] = [0, now]
        more = f" ({suppressed} more since the last report)" if suppressed else ""
        self.logger.warning("%s%s", message, more, exc_info=exc)
        return True
