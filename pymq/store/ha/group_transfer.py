"""GroupTransferService: puts of a SYNC_MASTER waiting for a slave to have their bytes.

RocketMQ's ``HAService.GroupTransferService``: a put's request (the offset just past its
record) completes when a slave's acknowledged offset reaches it, or fails
(FLUSH_SLAVE_TIMEOUT) at its deadline (``sync_flush_timeout``). Acknowledgements complete
requests on the connection's reader thread as they arrive; this thread only expires the
requests of callers that do not wait themselves (``async_put_message``'s futures).
"""

from __future__ import annotations

import threading
import time

from pymq.store.flush_service import GroupCommitRequest


class GroupTransferService:
    """Requests waiting for the slaves' acknowledged offset."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: list[tuple[GroupCommitRequest, float]] = []
        self.acked = 0                   # RocketMQ's push2SlaveMaxOffset: the highest ack
        self._stop = threading.Event()
        self._thread = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="pymq-GroupTransferService", daemon=True)
            self._thread.start()

    def put_request(self, request: GroupCommitRequest, timeout_s: float) -> None:
        """Complete ``request`` once a slave acknowledged ``request.next_offset``; fail it
        after ``timeout_s`` (the caller's own ``wait`` may fail it first)."""
        with self._lock:
            if self.acked >= request.next_offset:
                done = True
            else:
                done = False
                self._requests.append((request, time.monotonic() + timeout_s))
        if done:
            request.complete(True)

    def notify_transfer(self, offset: int) -> None:
        """A slave acknowledged ``offset``: complete every request it covers."""
        with self._lock:
            if offset <= self.acked:
                return
            self.acked = offset
            if not self._requests:
                return
            done = [r for r, _ in self._requests if r.next_offset <= offset]
            if done:
                self._requests = [(r, d) for r, d in self._requests if r.next_offset > offset]
        for r in done:
            r.complete(True)

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self.expire(time.monotonic())

    def expire(self, now: float) -> None:
        """Fail the requests whose deadline passed (and drop those already completed)."""
        with self._lock:
            if not self._requests:
                return
            late = [r for r, d in self._requests if d <= now]
            self._requests = [(r, d) for r, d in self._requests if d > now and not r._done.is_set()]
        for r in late:
            r.complete(False)

    def pending(self) -> int:
        return len(self._requests)

    def shutdown(self) -> None:
        """Stop; waiting requests fail (FLUSH_SLAVE_TIMEOUT), as at their deadline."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        self.expire(float("inf"))
