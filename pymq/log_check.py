"""The commit-log part of ``pymq check``: every segment walked with the store's one
acceptance rule, and where the log has holes.

A client of the store's public pieces (like :mod:`pymq.checker`, which calls it): the
walk uses the compiled record codec's ``scan_segment`` (whole records passing
``record_at``: layout, PHYSICALOFFSET where the record lies, body CRC) and, where a walk
stops at damage, ``next_record`` to resynchronise at the next record that passes the same
rule (or the segment's end-of-file blank), as recovery does. The stretch between is a
:class:`Hole`: recovery fences it (keeps it on disk, skips it), and the check reports it
with the records it took, counted later by the queue and index passes (``take``).

Beside a running writer (another process holds the store's lock) the last segment is
still being written: where its walk stops, the rest is *not yet* written rather than
damage, unless a valid record follows that is still there when the stopping point is
looked at again (records are written in order, so a record wholly visible after a stop
means the stop was not a record being written). Queue and index entries pointing at or
past :attr:`LogWalk.end` are "not yet" to the passes after this one.
"""

from __future__ import annotations

import bisect
import dataclasses
import os
import time
from typing import Callable, Optional

from pymq._core import record
from pymq.store.log_walk import written_end

__all__ = ["Hole", "LogWalk"]

#: how long a stop in the live last segment is looked at again before it is called damage
_LIVE_RECHECKS = (0.0, 0.02, 0.1)


@dataclasses.dataclass
class Hole:
    """A damaged stretch of the commit log between valid records, ``[start, end)`` in
    commit-log offsets, beginning in segment ``segment`` (a stretch that runs over a
    segment's end into the next segment is one hole). ``records`` counts the consume-queue
    entries pointing into it (the records it took: a record without an entry is not
    counted), ``queues`` their queue offsets (``"topic/queue"`` -> ``[first, last,
    count]``), ``index_entries`` the index entries pointing into it."""

    segment: str
    start: int
    end: int
    #: "hole"; "torn tail": damage at the end of the last segment with nothing valid after
    #: it, the last writer crashed (an open cuts it, keeping its bytes aside; ``end`` is past
    #: its last non-zero byte); "damaged tail": the same after a clean exit (an open fences it)
    kind: str = "hole"
    records: int = 0
    index_entries: int = 0
    queues: dict[str, list[int]] = dataclasses.field(default_factory=dict)

    @property
    def size(self) -> int:
        return self.end - self.start

    def take(self, queue: str, queue_offset: int) -> None:
        """Count a consume-queue entry of ``queue`` (``topic/id``) pointing into the hole."""
        self.records += 1
        seen = self.queues.get(queue)
        if seen is None:
            self.queues[queue] = [queue_offset, queue_offset, 1]
        else:
            seen[0], seen[1], seen[2] = min(seen[0], queue_offset), max(seen[1], queue_offset), seen[2] + 1

    def describe(self) -> str:
        """One line: the offsets, the size, and the records it took."""
        took = f"{self.records} record(s) lost"
        if self.queues:
            parts = [f"{q} offset {a}" if n == 1 else f"{q} offsets {a}..{b} ({n})"
                     for q, (a, b, n) in sorted(self.queues.items())]
            took += " (" + ", ".join(parts[:8]) + (f", and {len(parts) - 8} more queues" if len(parts) > 8 else "") + ")"
        elif not self.records:
            took = "no consume-queue entry points into it"
        if self.index_entries:
            took += f"; {self.index_entries} index entries point into it"
        if self.kind == "torn tail":
            return (f"torn tail from commit-log offset {self.start} to {self.end} ({self.size} bytes): no valid "
                    f"record in it or after it (a writer's open cuts it and keeps its bytes aside, "
                    f"docs/recovery.md): {took}")
        if self.kind == "damaged tail":
            return (f"damaged tail from commit-log offset {self.start} to {self.end} ({self.size} bytes): no valid "
                    f"record in it or after it, and the last writer exited cleanly, so no torn write (a writer's "
                    f"open fences it: kept on disk, new records go after it, docs/recovery.md): {took}")
        return (f"hole from commit-log offset {self.start} to {self.end} ({self.size} bytes) with no valid "
                f"record, valid records after it (recovery fences it: kept on disk, skipped): {took}")


class LogWalk:
    """Walks the segments ``files`` (mapped read-only, ordered) of ``file_size`` bytes.

    After :meth:`run`: ``records`` (whole records walked), ``holes``, ``tail`` (a torn
    tail, without a running writer), ``end`` (the commit-log offset the walk reached in
    the last segment: beside a running writer, entries at or past it are not yet
    written when the walk passed)."""

    def __init__(self, files: list, file_size: int, writer_running: bool, clean_exit: bool = False) -> None:
        self.files = list(files)
        self.file_size = file_size
        self.writer_running = writer_running
        self.clean_exit = clean_exit
        self.records = 0
        self.holes: list[Hole] = []
        self.tail: Optional[Hole] = None
        self.end = self.files[-1].file_from_offset + file_size if self.files else 0
        self._hole_starts: list[int] = []

    # -- the walk ----------------------------------------------------------------------------

    def run(self, progress: Callable[[str, int, int], None] = lambda stage, done, total: None) -> None:
        for i, mf in enumerate(self.files):
            progress("commitlog", i, len(self.files))
            self._walk_segment(mf, last=i == len(self.files) - 1)
        # a stretch running over a segment's end into the next one is one hole, as recovery sees it
        merged: list[Hole] = []
        for hole in sorted(self.holes, key=lambda h: h.start):
            if merged and merged[-1].end == hole.start:
                merged[-1].end = hole.end
            else:
                merged.append(hole)
        self.holes = merged
        self._hole_starts = [h.start for h in self.holes]

    def _walk_segment(self, mf, last: bool) -> None:
        fs = self.file_size
        live = last and self.writer_running
        name = os.path.basename(mf.file_name)
        pos = 0
        while True:
            pos, count, blank = record.scan_segment(mf, pos, fs, True)
            self.records += count
            if blank or pos >= fs:
                return
            # the rest of a sparse segment is not read: past its last data extent it is zero,
            # where no record starts (as recovery's resync, :func:`log_walk.written_end`)
            written = written_end(mf, pos, fs)
            nxt = record.next_record(mf, pos + 1, fs) if written > pos else -1
            if live:
                last_byte = written - 1 if nxt < 0 and written > pos else -1
                if nxt < 0 and last_byte < 0:
                    self.end = mf.file_from_offset + pos          # not yet written
                    return
                if self._written_meanwhile(mf, pos):
                    continue                                    # a record being written: walk on
                if nxt < 0:
                    # bytes that stay no record at the writer's end: damage its open fenced
                    # after a clean exit (a cut after a crash leaves zeros)
                    nxt = last_byte + 1
            elif nxt < 0:
                if not last:
                    nxt = fs                                    # the rest of the segment, blank included
                else:
                    self.end = mf.file_from_offset + pos
                    last_byte = written - 1 if written > pos else -1
                    if last_byte >= 0:
                        self.tail = Hole(name, self.end, mf.file_from_offset + last_byte + 1,
                                         "damaged tail" if self.clean_exit else "torn tail")
                    return
            self.holes.append(Hole(name, mf.file_from_offset + pos, mf.file_from_offset + nxt))
            pos = nxt

    @staticmethod
    def _written_meanwhile(mf, pos: int) -> bool:
        """Whether the stop at ``pos`` of the live last segment was a record still being
        written: a record (or the blank of a roll) passes there now, looked at a few times."""
        for pause in _LIVE_RECHECKS:
            time.sleep(pause)
            if record.accept_record(mf, pos, mf.file_size, True) >= 0:
                return True
        return False

    # -- what the queue and index passes ask -------------------------------------------------

    def hole_at(self, offset: int) -> Optional[Hole]:
        """The hole (or torn tail) holding commit-log ``offset``, if any."""
        i = bisect.bisect_right(self._hole_starts, offset) - 1
        if i >= 0 and offset < self.holes[i].end:
            return self.holes[i]
        tail = self.tail
        return tail if tail is not None and tail.start <= offset < tail.end else None

    def hole_between(self, start: int, end: Optional[int]) -> Optional[Hole]:
        """The first hole (or torn tail) with bytes in ``[start, end)`` (``end`` None: no
        bound): where a record lost between two queue entries lay."""
        i = max(bisect.bisect_right(self._hole_starts, start) - 1, 0)
        for hole in self.holes[i:] + ([self.tail] if self.tail is not None else []):
            if end is not None and hole.start >= end:
                return None
            if hole.end > start:
                return hole
        return None

    def record_at(self, offset: int):
        """The ``MessageExt`` of the record starting at commit-log ``offset`` when one that
        passes the acceptance rule (CRC included) starts there, else None."""
        if not self.files or offset < 0:
            return None
        first = self.files[0].file_from_offset
        i = (offset - first) // self.file_size
        if offset < first or i >= len(self.files):
            return None
        mf = self.files[i]
        pos = offset - mf.file_from_offset
        if record.accept_record(mf, pos, self.file_size, True) <= 0:
            return None
        return record.decode_message(mf, pos)
