"""Commit-log flushing: FlushRealTimeService (ASYNC_FLUSH) and GroupCommitService (SYNC_FLUSH).

ASYNC_FLUSH: every ``flush_interval_commitlog`` ms, flush if at least
``flush_commitlog_least_pages`` pages are dirty; every ``flush_commitlog_thorough_interval``
ms flush whatever is dirty; at shutdown flush until nothing is left. The consume queues
are flushed the same way, but at shutdown a store of many queues syncs their file system
once (``syncfs``) instead of each file.

SYNC_FLUSH (group commit): a put waits until the log is flushed past its record. Waiting
puts are served together: the service swaps the request list, flushes once (twice when a
record spans into the next segment) and completes every request it covered. A request
not completed within ``sync_flush_timeout`` ms comes back as FLUSH_DISK_TIMEOUT (the
record stays in the log, as in RocketMQ).
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from typing import Callable, Optional

from pymq._core.mapped_file import sync_file_system
from pymq.status import PutMessageStatus

from .mapped_file_queue import MappedFileQueue
from .service_thread import ServiceThread

log = logging.getLogger("pymq")

#: At shutdown, this many consume queues or more are synced with one ``syncfs``.
SYNC_FS_QUEUES = 64


class PeriodicFlushService(ServiceThread):
    """Every ``interval_ms``, flush what has at least ``least_pages`` dirty pages; every
    ``thorough_interval_ms``, everything dirty; at shutdown, everything."""

    def __init__(self, interval_ms: int, least_pages: int, thorough_interval_ms: int) -> None:
        super().__init__(interval_ms / 1000.0)
        self.least_pages = least_pages
        self.thorough_interval_s = thorough_interval_ms / 1000.0
        self._last_thorough = time.monotonic()

    def run_once(self) -> None:
        pages = self.least_pages
        now = time.monotonic()
        if now - self._last_thorough >= self.thorough_interval_s:
            self._last_thorough = now
            pages = 0
        self.flush(pages)

    def flush(self, least_pages: int) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


class FlushRealTimeService(PeriodicFlushService):
    """Periodic commit-log flush for ASYNC_FLUSH (one segment per pass, as RocketMQ)."""

    name = "FlushRealTimeService"

    def __init__(self, mapped_file_queue: MappedFileQueue, interval_ms: int, least_pages: int,
                 thorough_interval_ms: int, checkpoint=None) -> None:
        super().__init__(interval_ms, least_pages, thorough_interval_ms)
        self.mapped_file_queue = mapped_file_queue
        self.checkpoint = checkpoint

    def flush(self, least_pages: int) -> None:
        mfq = self.mapped_file_queue
        mfq.flush(least_pages)
        if least_pages == 0 and self.checkpoint is not None and mfq.store_timestamp:
            self.checkpoint.physic_msg_timestamp = mfq.store_timestamp

    def on_shutdown(self) -> None:
        self.mapped_file_queue.flush_all()


class GroupCommitRequest:
    """One put waiting for its bytes (up to ``next_offset``) to reach the disk.

    A waiting thread calls :meth:`wait`; code that must not block (``async_put_message``)
    passes ``callback(ok)`` instead, which the flushing thread calls on completion.
    """

    __slots__ = ("next_offset", "_done", "ok", "callback")

    def __init__(self, next_offset: int, callback: Optional[Callable[[bool], None]] = None) -> None:
        self.next_offset = next_offset
        self._done = threading.Event()
        self.ok = False
        self.callback = callback

    def complete(self, ok: bool) -> None:
        if not self._done.is_set():
            self.ok = ok
            self._done.set()
            if self.callback is not None:
                self.callback(ok)

    def wait(self, timeout_s: float) -> bool:
        """True when flushed within ``timeout_s``; the first completion wins."""
        self._done.wait(timeout_s)
        self.complete(False)
        return self.ok


def flushed_future(group_commit: Optional["GroupCommitService"], result) -> Future:
    """A running :class:`concurrent.futures.Future` of the put ``result``: done now when
    there is nothing to wait for (``group_commit`` None: ``ASYNC_FLUSH``, or the put
    failed), else when the group commit has the record on disk (``FLUSH_DISK_TIMEOUT``
    when that flush failed). Its ``put_result`` is the result it will be done with."""
    fut: Future = Future()
    fut.set_running_or_notify_cancel()      # a running future cannot be cancelled
    fut.put_result = result
    if group_commit is None or result.status is not PutMessageStatus.PUT_OK:
        fut.set_result(result)
        return fut

    def flushed(ok: bool) -> None:
        if not ok:
            result.set_status(PutMessageStatus.FLUSH_DISK_TIMEOUT)
        fut.set_result(result)

    group_commit.put_request(GroupCommitRequest(result.commitlog_offset + result.wrote_bytes, flushed))
    return fut


class GroupCommitService(ServiceThread):
    """Flushes for waiting SYNC_FLUSH puts, many at a time."""

    name = "GroupCommitService"

    def __init__(self, mapped_file_queue: MappedFileQueue, checkpoint=None) -> None:
        super().__init__(0.010)
        self.mapped_file_queue = mapped_file_queue
        self.checkpoint = checkpoint
        self._lock = threading.Lock()
        self._requests: list[GroupCommitRequest] = []

    def put_request(self, request: GroupCommitRequest) -> None:
        with self._lock:
            self._requests.append(request)
        self.wakeup()

    def run_once(self) -> None:
        with self._lock:
            requests, self._requests = self._requests, []
        mfq = self.mapped_file_queue
        if not requests:
            mfq.flush(0)
            return
        for req in requests:
            ok = mfq.flushed_where >= req.next_offset
            for _ in range(2):
                if ok:
                    break
                mfq.flush(0)
                ok = mfq.flushed_where >= req.next_offset
            req.complete(ok)
        if self.checkpoint is not None and mfq.store_timestamp:
            self.checkpoint.physic_msg_timestamp = mfq.store_timestamp

    def on_shutdown(self) -> None:
        self.run_once()
        self.mapped_file_queue.flush_all()


class FlushConsumeQueueService(PeriodicFlushService):
    """Periodic flush of every consume queue (RocketMQ's FlushConsumeQueueService)."""

    name = "FlushConsumeQueueService"

    def __init__(self, consume_queues, interval_ms: int, least_pages: int, thorough_interval_ms: int,
                 checkpoint=None, last_dispatched=None) -> None:
        super().__init__(interval_ms, least_pages, thorough_interval_ms)
        self.consume_queues = consume_queues
        self.checkpoint = checkpoint
        self.last_dispatched = last_dispatched   # () -> store time of the newest dispatched record

    def flush(self, least_pages: int) -> None:
        # as RocketMQ: take the time before flushing, record it once the queues are on disk
        logics = self.last_dispatched() if self.last_dispatched is not None else 0
        self.consume_queues.flush(least_pages)
        if least_pages == 0 and self.checkpoint is not None:
            if logics > 0:
                self.checkpoint.logics_msg_timestamp = logics
            self.checkpoint.flush()

    def on_shutdown(self) -> None:
        queues = self.consume_queues.queues()
        if len(queues) >= SYNC_FS_QUEUES:
            # one syncfs instead of an msync per queue file (each a journal commit: 10,000
            # queues took seconds to close)
            try:
                sync_file_system(self.consume_queues.root)
            except OSError as e:
                log.warning("syncfs failed (%s); flushing the queue files one by one", e)
            else:
                for cq in queues:
                    cq.mapped_file_queue.mark_flushed()
                return
        for cq in queues:
            cq.mapped_file_queue.flush_all()
