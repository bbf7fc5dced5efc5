"""ReplicaLog: a slave's commit log, appended byte for byte from its master's frames.

RocketMQ's ``DefaultMessageStore.appendToCommitLog`` / ``CommitLog.appendData``: the bytes
of each frame go into the segment at the frame's offset (a new segment is created at a
segment boundary, so a slave that started empty holds a log whose first segment is the
master's last one when it connected, not segment 0).

The bytes are written into the segment's file (spliced from a pipe by ``FrameReader``),
not stored through the mapping: the page cache the mapping shows is the same, but a store through a fresh
mapping faults each page in and zeroes it first (reading the unwritten extent), which
measured three to five times slower than ``pwrite`` of whole pages on this machine
(docs/replication.md, "Figures").

Frames are cut wherever the master's batch size cut them, often inside a record. Two ends
are kept apart:

* ``received_end``: how far bytes arrived (where the next frame must start);
* the commit log's visible end (``applied_end``: the segment's wrote position): moved
  only over whole records and the END_FILE blank, as the store's one record parser
  (``record.scan_segment``, the rule recovery, dispatch and reads use) accepts them, by
  ``apply`` (once per burst of frames, and before a frame opens the next segment). The
  dispatcher, reads, recovery and the slave's acknowledgements see only this end.

Bytes that can never become an accepted record (the record at the visible end is whole
by its own length and still fails the rule, or claims a length past the segment) raise
``ReplicaMismatch``: the connection is closed and, after a reconnect, replication starts
again from the visible end.
"""

from __future__ import annotations

import os
from typing import Callable, Optional

from pymq._core import record
from pymq._core.layout import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE


class ReplicaMismatch(Exception):
    """The master's bytes do not continue this log (wrong offset, or not records)."""


class ReplicaLog:
    """Appends a master's commit-log bytes to the local commit log."""

    def __init__(self, commit_log, check_crc: bool = True,
                 on_applied: Optional[Callable[[], None]] = None) -> None:
        self.commit_log = commit_log
        self.mfq = commit_log.mapped_file_queue
        self.file_size = commit_log.file_size
        self.check_crc = check_crc
        self.on_applied = on_applied
        self.received_end = self.applied_end
        self.records_applied = 0
        self._mf = None             # the segment frames are written into
        self._fd = -1               # its file, opened for pwrite

    @property
    def applied_end(self) -> int:
        """The commit log's visible end (whole records): what the slave reports."""
        return self.commit_log.get_max_offset()

    def reset(self) -> int:
        """A new connection: bytes past the visible end are forgotten (the master sends
        them again). Returns the offset to report."""
        self.close()
        self.received_end = self.applied_end
        return self.received_end

    def close(self) -> None:
        """Let go of the segment's file (the connection ended)."""
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = -1
        self._mf = None

    def check_frame(self, phy_offset: int, body_size: int) -> None:
        """ReplicaMismatch unless a frame of ``body_size`` bytes at ``phy_offset`` continues
        the log (an empty log takes any segment boundary) within one segment; then make
        the segment it goes into ready (``write_window``: where its body may go)."""
        if body_size < 0:
            raise ReplicaMismatch(f"negative frame size {body_size}")
        if phy_offset != self.received_end:
            if self.mfq.mapped_files or phy_offset < 0 or phy_offset % self.file_size:
                raise ReplicaMismatch(f"master sent offset {phy_offset}, the slave's log ends at "
                                      f"{self.received_end}")
            self.received_end = phy_offset       # an empty slave starts where the master does
        in_segment = phy_offset % self.file_size
        if in_segment + body_size > self.file_size:
            raise ReplicaMismatch(f"frame at {phy_offset} of {body_size} bytes crosses a segment end")
        if not body_size:
            return
        mf = self._mf
        if mf is None or mf.file_from_offset != phy_offset - in_segment:
            mf = self._open(phy_offset)
        end = in_segment + body_size
        if mf.reserve_chunk and end > mf.reserved:
            mf.reserve(end)                    # sparse segment: its blocks before the bytes

    def write_window(self) -> tuple[int, int, int]:
        """Where frame bodies may go without another ``check_frame``: ``(fd, segment
        start, offset limit)`` of the segment being written (its end, or the end of its
        blocks reserved so far), ``(-1, 0, -1)`` before the first frame."""
        mf = self._mf
        if mf is None:
            return -1, 0, -1
        room = mf.reserved if mf.reserve_chunk else self.file_size
        return self._fd, mf.file_from_offset, mf.file_from_offset + min(room, self.file_size)

    def apply(self) -> int:
        """Move the visible end over the whole records received; how many became visible."""
        mf = self._mf
        if mf is None:
            return 0
        return self._apply(mf, self.received_end - mf.file_from_offset)

    def _open(self, phy_offset: int):
        """The segment holding ``phy_offset`` (rolled when it is a new one), its file open."""
        self.apply()                           # the segment being left: its END_FILE blank
        self.close()
        mf = self._segment_for(phy_offset)
        self._fd = os.open(mf.file_name, os.O_WRONLY)
        self._mf = mf
        return mf

    def _segment_for(self, phy_offset: int):
        files = self.mfq.mapped_files
        if files and files[-1].file_from_offset <= phy_offset < files[-1].file_from_offset + self.file_size:
            return files[-1]
        if files and not files[-1].is_full():
            raise ReplicaMismatch(f"segment {files[-1].file_from_offset} ends at "
                                  f"{files[-1].file_from_offset + files[-1].wrote_position} without its "
                                  f"END_FILE blank, and the master moved on to {phy_offset}")
        mf = self.commit_log._roll(phy_offset - phy_offset % self.file_size)
        self.commit_log.appender.set_current(mf)
        return mf

    def _apply(self, mf, received: int) -> int:
        """Advance ``mf``'s wrote position over the accepted records in [wrote, received)."""
        start = mf.wrote_position
        if received <= start:
            return 0
        pos, count, blank = record.scan_segment(mf, start, received, self.check_crc)
        if blank:
            mf.wrote_position = self.file_size
        elif pos > start:
            mf.wrote_position = pos
        if count or blank:
            self.records_applied += count
            if self.on_applied is not None:
                self.on_applied()
        if not blank and received - pos >= 8:
            self._check_pending(mf, pos, received)
        return count

    def _check_pending(self, mf, pos: int, received: int) -> None:
        """The bytes at ``pos`` were not accepted: fine while the record there is still
        arriving; ReplicaMismatch when it is complete (or claims a size no record has)."""
        total = mf.get_int(pos)
        magic = mf.get_int(pos + 4)
        room = self.file_size - pos
        if magic == BLANK_MAGIC_CODE:
            bad = total != room
        elif magic == MESSAGE_MAGIC_CODE:
            bad = total <= 0 or total > room or received - pos >= total
        else:
            bad = True
        if bad:
            raise ReplicaMismatch(f"the master's bytes at {mf.file_from_offset + pos} are not a record "
                                  f"this store accepts (size {total}, magic {magic & 0xffffffff:#x})")
