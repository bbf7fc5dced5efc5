"""ServiceThread: a named daemon thread with a stop flag and a wake-up (RocketMQ's ServiceThread)."""

from __future__ import annotations

import logging
import threading

log = logging.getLogger("pymq")


class ServiceThread:
    """Runs ``run_once`` in a loop every ``interval_s`` until stopped.

    ``wakeup()`` cuts the current wait short. Exceptions from ``run_once`` are logged and
    kept in ``last_error``; the loop goes on, as a store's background services must.
    """

    name = "ServiceThread"

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: BaseException | None = None

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

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception as e:  # a failing pass must not kill the service
                self.last_error = e
                log.exception("%s failed", self.name)
            if not self._stop.is_set():
                self.wait_for_running(self.interval_s)
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
