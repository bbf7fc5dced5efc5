"""ReputMessageService: tails the commit log and dispatches new records.

RocketMQ's reput thread calls ``doReput`` every millisecond: from ``reput_from_offset`` to
the commit log's readable end it parses each record and feeds the dispatchers (consume
queue, index). pymq parses and appends in C (``pymq._core.dispatch``); this thread only
walks segments, handles the end-of-file blanks and wakes readers waiting for new messages.

A record that fails the acceptance rule (``record.record_at``) is a hole: the dispatcher
steps over it to the next valid record (``record.next_record``), records the hole in the
commit log's ``DamageLedger`` and counts it in ``errors``; the records after it are
dispatched with their own queue offsets (the queue marks the offsets in between lost), and
the queue offsets of the records destroyed in the hole, as far as they can be read, are
marked lost too (``hole_salvage``), so the newest record of a queue lost to a hole never
has its offset handed out again.
Recovery fences the holes it finds before the service starts, so in normal operation this
only runs on replays through them.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Optional

from pymq._core import record
from pymq._core.dispatch import CqRouter, dispatch_segment

from .hole_salvage import mark_salvaged
from .service_thread import ServiceThread

log = logging.getLogger("pymq")


class ReputMessageService(ServiceThread):
    """Background dispatch of the commit log into the consume queues (and index)."""

    name = "ReputMessageService"

    def __init__(self, commit_log, router: CqRouter, on_arrived: Optional[Callable[[dict], None]] = None,
                 idle_sleep_s: float = 0.001) -> None:
        super().__init__(idle_sleep_s)
        self.commit_log = commit_log
        self.router = router
        self.on_arrived = on_arrived
        self.reput_from_offset = 0
        self.errors = 0
        self.consume_queues = None          # set by the store: salvaged queue offsets of holes
        self._lock = threading.Lock()
        self._idle_since = time.monotonic()

    def behind(self) -> int:
        """Bytes written to the commit log and not dispatched yet (``dispatchBehindBytes``)."""
        return max(0, self.commit_log.get_max_offset() - self.reput_from_offset)

    def rewind(self, offset: int) -> None:
        """Dispatch again from ``offset`` (a paused index catching up): the consume
        queues skip what they hold, the index what it holds."""
        with self._lock:
            if 0 <= offset < self.reput_from_offset:
                self.reput_from_offset = offset
        self.wakeup()

    def do_reput(self) -> int:
        """Dispatch everything readable now; returns the number of records dispatched."""
        with self._lock:
            return self.do_reput_locked()

    def do_reput_locked(self) -> int:
        """``do_reput`` for a caller that holds ``_lock`` (a topic deletion)."""
        cl = self.commit_log
        mfq = cl.mapped_file_queue
        total = 0
        min_offset = cl.get_min_offset()
        if min_offset >= 0 and self.reput_from_offset < min_offset:
            self.reput_from_offset = min_offset
        while self.reput_from_offset < cl.get_max_offset():
            mf = mfq.find_mapped_file_by_offset(self.reput_from_offset, self.reput_from_offset == 0)
            if mf is None:
                break
            start = self.reput_from_offset - mf.file_from_offset
            end = mf.read_position
            if start >= end:
                if mf.is_full():
                    self.reput_from_offset = cl.roll_next_file(self.reput_from_offset)
                    continue
                break
            pos, count, state = dispatch_segment(mf, start, end, self.router)
            total += count
            self.reput_from_offset = mf.file_from_offset + pos
            if state == "blank":
                self.reput_from_offset = cl.roll_next_file(mf.file_from_offset)
            elif state == "corrupt":
                # damage: step over it to the next valid record (a hole, fenced); at the end
                # of the data written so far, wait for more
                resume = self._resync(mf, pos, end)
                if resume is None:
                    break
                self.errors += 1
                self.reput_from_offset = resume
            elif pos < end:
                break
        if self.consume_queues is not None:
            # queue files mapped again while this pass wrote without the GIL (not evicted then)
            self.consume_queues.map_cache.trim()
        arrived = self.router.arrived
        if arrived:
            self.router.arrived = {}
            if self.on_arrived is not None:
                self.on_arrived(arrived)
        return total

    def _resync(self, mf, pos: int, end: int):
        """After the bytes at ``pos`` of ``mf`` failed the acceptance rule: the offset of
        the next valid record in ``[pos + 1, end)``, or the next segment's start when this
        one is closed; the stretch between is recorded as a hole. None when nothing valid
        follows yet (the writer's tail)."""
        cl = self.commit_log
        q = record.next_record(mf, pos + 1, end)
        if q >= 0:
            resume = mf.file_from_offset + q
        elif mf is not cl.mapped_file_queue.get_last_mapped_file():
            resume = cl.roll_next_file(mf.file_from_offset)
        else:
            return None
        start = mf.file_from_offset + pos
        cl.damage.add_hole(start, resume, "dispatch")
        if self.consume_queues is not None:
            # the queue offsets of records destroyed in it are never handed out again
            mark_salvaged(self.consume_queues, mf.read(pos, min(resume - start, mf.file_size - pos)), start)
        return resume

    def run_once(self) -> None:
        if self.do_reput():
            self._idle_since = time.monotonic()

    def wait_for_running(self, timeout_s: float) -> None:
        # 1 ms between passes while messages flow; 5 ms after a second without any
        idle = time.monotonic() - self._idle_since > 1.0
        super().wait_for_running(0.005 if idle else timeout_s)
