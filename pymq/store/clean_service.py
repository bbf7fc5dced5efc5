"""CleanResourceService: the store's periodic cleaning pass (RocketMQ's
``cleanFilesPeriodically``, every ``clean_resource_interval`` ms).

Each pass measures the disk (the guard refuses or resumes puts), deletes expired
commit-log segments (``CleanCommitLogService``), then what follows them out
(``CleanConsumeQueueService``), and restarts a paused index when space has returned.
``run_pass(manual=True)`` is the same pass on request (``store.delete_expired_files``).
Deletion runs here, never on the put path.
"""

from __future__ import annotations

import threading
from typing import Callable

from .clean_commit_log_service import CleanCommitLogService
from .clean_consume_queue_service import CleanConsumeQueueService
from .disk_guard import DiskGuard
from .service_thread import ServiceThread


class CleanResourceService(ServiceThread):
    """Runs the cleaning pass periodically, or once on request."""

    name = "CleanResourceService"

    def __init__(self, guard: DiskGuard, clean_commit_log: CleanCommitLogService,
                 clean_consume_queue: CleanConsumeQueueService, index_service,
                 replay_from: Callable[[int], None], interval_ms: int,
                 after_pass: Callable[[], None] = lambda: None) -> None:
        super().__init__(interval_ms / 1000.0)
        self.initial_delay_s = self.interval_s      # start() already looked at the disk
        self.guard = guard
        self.clean_commit_log = clean_commit_log
        self.clean_consume_queue = clean_consume_queue
        self.index_service = index_service
        self.replay_from = replay_from             # rewinds the dispatcher (index catch-up)
        self.after_pass = after_pass               # the store re-decides whether puts go on
        self.passes = 0
        self._pass_lock = threading.Lock()

    def pause(self, seconds: float) -> bool:
        """Wait between two deletions; True when the service is stopping."""
        if seconds > 0:
            self._stop.wait(seconds)
        return self._stop.is_set()

    def run_pass(self, manual: bool = False) -> dict:
        """One cleaning pass; returns how many files of each kind it deleted and the disk
        usage it measured."""
        with self._pass_lock:
            usage = self.guard.check()
            deleted = self.clean_commit_log.run(usage, manual_now=manual)
            out = {"commitlog": len(deleted)}
            out.update(self.clean_consume_queue.run())
            if deleted:
                usage = self.guard.check()     # space may have returned
            at = self.index_service.resume()
            if at >= 0:
                self.replay_from(at)
            self.after_pass()
            self.passes += 1
            out["disk_ratio"] = usage.ratio if usage is not None else None
            return out

    def run_once(self) -> None:
        self.run_pass()

    def wait_for_running(self, timeout_s: float) -> None:
        # a full disk is looked at every second, whatever the cleaning interval
        super().wait_for_running(min(timeout_s, 1.0) if self.guard.full else timeout_s)

