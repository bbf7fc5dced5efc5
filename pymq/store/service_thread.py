"""ServiceThread: a named daemon thread with a stop flag and a wake-up (RocketMQ's ServiceThread)."""

from __future__ import annotations

import logging
import threading

from .episode_log import EpisodeLog

log = logging.getLogger("pymq")


class ServiceThread:
    """Runs ``run_once`` in a loop every ``interval_s`` until stopped.

    ``wakeup()`` cuts the current wait short. A failing ``run_once`` never kills the
    service: the error is kept in ``last_error``, the pass is retried with an exponential
    back-off (from ``interval_s`` up to ``MAX_BACKOFF_S``), and each failure episode is
    logged by an :class:`~pymq.store.episode_log.EpisodeLog`: its first error, with the
    traceback, a reminder with the count every ten minutes while it lasts, and its end
    ("recovered after N failed attempts"). A full disk makes a service fail for as long
    as it lasts; this keeps the log readable and the CPU free meanwhile.
    """

    name = "ServiceThread"
    MAX_BACKOFF_S = 1.0
    initial_delay_s = 0.0      # wait this long before the first pass

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.episode_log = EpisodeLog(log, self.name)

    # failure counts (see EpisodeLog): consecutive failed passes (0: healthy), failed
    # passes since the start, failure episodes since the start, the last error
    failing = property(lambda self: self.episode_log.failing)
    failures = property(lambda self: self.episode_log.failures)
    episodes = property(lambda self: self.episode_log.episodes)

    @property
    def last_error(self) -> BaseException | None:
        return self.episode_log.last_error

    @last_error.setter
    def last_error(self, error: BaseException | None) -> None:
        self.episode_log.last_error = error

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name=f"pymq-{self.name}", daemon=True)
        self._thread.start()

    def wakeup(self) -> None:
        self._wake.set()

    def wait_for_running(self, timeout_s: float) -> None:
        """Sleep up to ``timeout_s`` or until woken or stopped."""
        self._wake.wait(timeout_s)
        self._wake.clear()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def run_guarded(self) -> bool:
        """One pass of ``run_once`` with the failure bookkeeping; True if it succeeded."""
        try:
            self.run_once()
        except Exception as e:  # a failing pass must not kill the service
            self.episode_log.failed(e, exc_info=True)
            return False
        self.episode_log.succeeded()
        return True

    def backoff_s(self) -> float:
        """How long to wait after the current run of failures."""
        return min(max(self.interval_s, 0.001) * (2 ** min(self.failing, 30)), self.MAX_BACKOFF_S)

    def _loop(self) -> None:
        if self.initial_delay_s > 0:
            self._stop.wait(self.initial_delay_s)
        while not self._stop.is_set():
            ok = self.run_guarded()
            if self._stop.is_set():
                break
            if ok:
                self.wait_for_running(self.interval_s)
            else:
                self._wake.wait(self.backoff_s())
                self._wake.clear()
        try:
            self.on_shutdown()
        except Exception as e:
            self.last_error = e
            log.exception("%s failed at shutdown", self.name)

    def run_once(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def on_shutdown(self) -> None:
        """Called once in the service thread after the loop ends."""

    def shutdown(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
