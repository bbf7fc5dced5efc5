"""TimerGate: timer messages are accepted only while the wheel and the timer log can take them.

A timer message (``deliver_time_ms``, the TIMER_* properties, a recall's delete mark) is
stored in the timer topic and delivered by the timer service through the timer wheel and
the timer log (:mod:`pymq.store.timer_service`). When those files cannot be created or
opened (a full disk: the wheel is allocated whole, tens of MiB, and so is each timer-log
file), a message put anyway would sit in the timer topic, acknowledged and undelivered,
for as long as the disk stays full. So the appender refuses timer puts with
``WHEEL_TIMER_NOT_ENABLE`` (RocketMQ 5's status for a broker whose wheel is off) and an
``error`` that says why, while other puts, delay levels included, go on.

The gate starts closed and unchecked: the first timer put after an open asks
:meth:`check`, which opens the files, creating them if needed (a store that never gets a
timer message never gets the files). From then on a timer put costs one flag test. The
gate closes when the files cannot be created (:meth:`check`) or the timer service finds
the log cannot grow (:meth:`failed`); while it is closed, a timer put tries again at most
every ``retry_s`` seconds (otherwise it gets the last reason at once), and so does the
timer service on its passes, so timer puts resume by themselves once space returns, and
the timer messages stored before the episode are taken in and delivered. Each episode is
logged once (:class:`~pymq.store.episode_log.EpisodeLog`: its start, a reminder every ten
minutes, its end) and counted in ``store.stats()["services"]``.
"""

from __future__ import annotations

import errno
import logging
import threading
import time
from typing import Callable, Optional

from pymq.errors import DiskFullError

from .episode_log import EpisodeLog

log = logging.getLogger("pymq")

__all__ = ["TimerGate", "need_room"]


def need_room(guard, nbytes: int, what: str, below_warning: bool) -> None:
    """Raise ``DiskFullError`` unless the store's disk (``guard``, a
    :class:`~pymq.store.disk_guard.DiskGuard`, or None) has room for a new file of
    ``nbytes``: below the warning ratio for the wheel (``room_for``, as commit-log
    segments: a wheel must not be what stops every put), with 1 % of the disk left free
    for a timer-log file (``fits``, as index files: it holds messages already accepted)."""
    if guard is not None and not (guard.room_for(nbytes) if below_warning else guard.fits(nbytes)):
        usage = guard.last.describe() if guard.last is not None else "the disk cannot be measured"
        raise DiskFullError(errno.ENOSPC, f"no room for {what} ({nbytes / 1048576:.1f} MiB): {usage}")


class TimerGate:
    """Opens and closes the appender's timer puts (module docstring).

    ``ensure_files()`` opens or creates the wheel and a timer-log file with room for a
    unit, raising ``OSError`` (or a :class:`~pymq.errors.PymqError`) when it cannot;
    ``set_timers_writeable(flag, reason)`` is the appender's. ``errors`` counts the
    episodes.
    """

    def __init__(self, ensure_files: Callable[[], None], set_timers_writeable: Callable[..., None],
                 errors: EpisodeLog, retry_s: float = 1.0) -> None:
        self._ensure_files = ensure_files
        self._set_timers_writeable = set_timers_writeable
        self.errors = errors
        self.retry_s = retry_s
        self.reason: Optional[str] = None     # why timer puts are refused now (None: not refused)
        self.refused = 0                      # timer puts refused since the open
        self._next_try = 0.0
        self._lock = threading.Lock()
        set_timers_writeable(False, "the timer files are not open yet")

    def check(self, put: bool = True) -> Optional[str]:
        """Open or create the timer files; None when timer puts may go on (the gate is
        then open), else why not. Called by the appender for a timer put while the gate
        is closed (``put``: a refusal is counted), and by the timer service; tries the
        files at most every ``retry_s`` seconds while they fail."""
        with self._lock:
            if self.reason is None or time.monotonic() >= self._next_try:
                try:
                    self._ensure_files()
                except Exception as e:             # OSError (ENOSPC), a damaged file
                    self._close(e)
                else:
                    self.errors.succeeded()       # logs the end of an episode, if one was on
                    self.reason = None
                    self._set_timers_writeable(True)
                    return None
            self.refused += put
            return self.reason

    def try_files(self) -> None:
        """Open or create the files now (the timer service, after a timer-log file filled
        up): refuse timer puts at once if the next file cannot be had."""
        try:
            self._ensure_files()
        except Exception as e:
            self.failed(e)

    def failed(self, error: BaseException) -> None:
        """The timer service could not open or extend the files: refuse timer puts."""
        with self._lock:
            self._close(error)

    def _close(self, error: BaseException) -> None:
        what = error.strerror if isinstance(error, DiskFullError) and error.strerror else error
        self.reason = (f"timer messages are refused: the timer wheel or timer log cannot be created "
                       f"or opened ({what}); they are accepted again once it can")
        self._next_try = time.monotonic() + self.retry_s
        self._set_timers_writeable(False, self.reason)
        self.errors.failed(self.reason)
