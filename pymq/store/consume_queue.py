"""ConsumeQueue: the 20-byte-entry index of one (topic, queue_id) (RocketMQ's ``ConsumeQueue``).

Files live in ``consumequeue/{topic}/{queueId}/``, named by the byte offset of their first
entry, ``consume_queue_entries`` entries each. Entry ``i`` of the queue is at byte
``i * 20``. The common append runs in C (``pymq._core.cq_unit.CqAppender``); this class
holds the rest: loading and recovery, the rarer append cases, bounds, truncation and the
search by time.

Differences from RocketMQ: no ConsumeQueueExt (LMQ queues: :mod:`.lmq`); the time search
picks the file by the store times of its first and last entries (RocketMQ 5.x) and bisects
for the boundary (see ``cq_unit``).
"""

from __future__ import annotations

import logging
import os
import struct
import threading
from typing import Optional

from pymq._core.cq_unit import CqAppender, offset_by_time, read_unit, read_unit_raw, scan_shape, verify_entries
from pymq.errors import CorruptStoreError, SegmentSizeError
from pymq.status import BoundaryType

from .lmq import is_lmq
from .log_walk import written_end
from .map_cache import entry_written
from .mapped_file_queue import MappedFileQueue
from .queue_repair import LOST_SIZE, fill_gap, gap_is_possible, mark_lost_at, replace_marker

log = logging.getLogger("pymq")

CQ_STORE_UNIT_SIZE = 20
_UNIT = struct.Struct(">qiq")
_BLANK_UNIT = _UNIT.pack(0, 0x7FFFFFFF, 0)


class ConsumeQueue:
    """The consume queue of one topic and queue id."""

    def __init__(self, topic: str, queue_id: int, root: str, entries_per_file: int,
                 commit_log, read_only: bool = False, reserve_chunk: int = 0, map_cache=None) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.file_size = entries_per_file * CQ_STORE_UNIT_SIZE
        self.commit_log = commit_log
        self.store_path = os.path.join(root, "consumequeue", topic, str(queue_id))
        # files are sparse, with disk reserved ``reserve_chunk`` bytes ahead of the entries
        # (0: allocated whole, as RocketMQ does)
        self.mapped_file_queue = MappedFileQueue(self.store_path, self.file_size, read_only=read_only,
                                                 reserve_chunk=reserve_chunk)
        self.appender = CqAppender(self, self.file_size, self.mapped_file_queue)
        if map_cache is not None:               # MapCache: idle files are unmapped (map_cache.py)
            self.mapped_file_queue.map_cache = map_cache.member(self.appender)
        self.load_error: Optional[str] = None   # why a read-only open could not map the files
        self.claimed_elsewhere = None           # set by the store: header_witness.claimed_elsewhere
        self._lock = threading.RLock()

    @property
    def min_logic_offset(self) -> int:
        """Byte offset of the first live entry (kept on the C appender for the readers)."""
        return self.appender.min_logic_offset

    @min_logic_offset.setter
    def min_logic_offset(self, value: int) -> None:
        self.appender.min_logic_offset = value

    # -- load and recovery -------------------------------------------------------------------

    def load(self) -> bool:
        """Map the queue's files. A file of the wrong length (damage: files are always
        allocated whole) is deleted with everything after it, since a consume queue can be
        rebuilt from the commit log; returns False when that happened."""
        mfq = self.mapped_file_queue
        try:
            mfq.load()
            return True
        except (SegmentSizeError, CorruptStoreError) as e:
            if mfq.read_only:
                log.warning("consume queue %s-%d: %s; not read", self.topic, self.queue_id, e)
                self.load_error = str(e)
                return False
            log.warning("consume queue %s-%d: %s; dropping it from there to rebuild it", self.topic,
                        self.queue_id, e)
        names = sorted(n for n in os.listdir(self.store_path) if n.isdigit())
        keep = []
        for name in names:
            path = os.path.join(self.store_path, name)
            if os.path.getsize(path) != self.file_size or (keep and int(name) != int(keep[-1]) + self.file_size):
                break
            keep.append(name)
        for name in names[len(keep):]:
            os.remove(os.path.join(self.store_path, name))
        mfq.load()
        return False

    def recover(self) -> bool:
        """Find the last whole entry (``ConsumeQueue.recover``): from the third-last file,
        read entries while their offset >= 0 and size > 0; cut everything after. pymq also
        ends the scan at an entry that cannot describe a record: past the end of the log's
        files, or before the end of the queue's previous record (entries are in log order).
        Returns False when the cut dropped entries that were followed by more data
        (damage): the queue must then be refilled from the commit log, from the end of the
        last good entry."""
        mfq = self.mapped_file_queue
        files = mfq.mapped_files
        if not files:
            self.appender.set_state(None, -1)
            return True
        log_files = self.commit_log.mapped_file_queue.mapped_files
        log_extent = (log_files[-1].file_from_offset + log_files[-1].file_size) if log_files else 0
        index = max(0, len(files) - 3)
        process = files[index].file_from_offset
        max_phy = -1
        before_last = last_at = -1              # max_phy before the newest real entry, and where it is
        while index < len(files):
            mf = files[index]
            # an entry out of log order takes the one before it back: a good entry cut is
            # refilled from the log, a bad one kept would make the refill skip the records
            # it claims to cover
            pos, complete, max_phy, before_last, last_at = scan_shape(mf, 0, log_extent, max_phy, before_last,
                                                                      last_at, LOST_SIZE)
            while pos < 0:                      # the entry before is in an earlier file
                index -= 1
                mf = files[index]
                pos = last_at - mf.file_from_offset
            process = mf.file_from_offset + pos
            if not complete:
                break
            index += 1
        whole = not self._data_after(process)
        if not whole:
            self.commit_log.damage.queue_rebuilt(self.topic, self.queue_id, process // CQ_STORE_UNIT_SIZE,
                                                 "cannot describe a record (bad shape, past the log, or out of order)")
        mfq.flushed_where = process
        mfq.truncate_dirty_files(process, zero=not whole)     # whole: nothing but zeros after it
        self.appender.set_state(mfq.get_last_mapped_file(), max_phy)
        return whole

    def _data_after(self, offset: int) -> bool:
        """Whether anything but zeros follows byte ``offset`` of the queue (a later file, or
        a non-zero entry further on in the same file)."""
        mfq = self.mapped_file_queue
        mf = mfq.find_mapped_file_by_offset(offset)
        if mf is None:
            return False
        if mfq.mapped_files[-1] is not mf:
            return True
        pos = offset - mf.file_from_offset
        # by the file's extents first: the unwritten rest of a sparse file is not read
        return written_end(mf, pos, self.file_size) > pos

    def verify_tail(self, last_files: int = 0, witness=None, min_phy: int = 0) -> bool:
        """Check entries against the commit log (in C, about 0.1 us an entry) and cut at
        the first that does not describe its record: every entry after a crash, the
        ``last_files`` newest files after a clean exit. Returns False when it cut.
        RocketMQ rescans only the last three files, and only for entry shape.
        Files whose records all lie before ``min_phy`` are skipped.
        ``witness(topic, queue_id, index, phy, size)`` judges a bad entry first
        (``header_witness``): "keep" (its record's header was altered) and "lost" (its
        record was destroyed: the entry becomes a lost marker) go on after it."""
        mfq = self.mapped_file_queue
        cl = self.commit_log
        if is_lmq(self.topic):
            # its entries point at records filed under their parent queue (``lmq``): no
            # header to compare; entries past the log's end are cut by ``truncate_dirty``
            self.correct_min_offset(cl.get_min_offset())
            return True
        files = mfq.mapped_files[-last_files:] if last_files > 0 else mfq.mapped_files
        topic = self.topic.encode("utf-8")
        # entries of segments cleaning deleted are gone, not damage: start after them
        self.correct_min_offset(cl.get_min_offset())
        for mf in files:
            last = read_unit(mf, mf.wrote_position - CQ_STORE_UNIT_SIZE)
            if last is not None and last[1] != LOST_SIZE and 0 <= last[0] < min_phy:
                continue                        # all its records lie before the rescanned log
            start = max(0, self.min_logic_offset - mf.file_from_offset)
            while True:
                bad = verify_entries(mf, start, mf.wrote_position, cl.mapped_file_queue.mapped_files,
                                     cl.file_size, topic, self.queue_id)
                unit = read_unit(mf, bad) if bad < mf.wrote_position else None
                verdict = None if unit is None or witness is None else witness(
                    self.topic, self.queue_id, (mf.file_from_offset + bad) // CQ_STORE_UNIT_SIZE, unit[0], unit[1])
                if verdict is None:
                    break
                if verdict == "lost":           # its record was destroyed: keep the offset
                    mark_lost_at(self, (mf.file_from_offset + bad) // CQ_STORE_UNIT_SIZE)
                start = bad + CQ_STORE_UNIT_SIZE
            if bad < mf.wrote_position:
                cl.damage.queue_rebuilt(self.topic, self.queue_id, (mf.file_from_offset + bad) // CQ_STORE_UNIT_SIZE,
                                        "does not describe its record in the commit log")
                self.truncate_to(mf.file_from_offset + bad)
                return False
        return True

    def truncate_to(self, byte_offset: int) -> None:
        """Cut the queue at ``byte_offset`` (zeroing what follows in that file)."""
        mfq = self.mapped_file_queue
        mfq.truncate_dirty_files(byte_offset)
        max_phy = -1
        mf = mfq.get_last_mapped_file()
        if mf is not None:
            pos = mf.wrote_position - CQ_STORE_UNIT_SIZE
            while pos >= 0:
                unit = read_unit(mf, pos)
                if unit is not None and unit[1] != 0x7FFFFFFF:
                    max_phy = unit[0] + unit[1]
                    break
                pos -= CQ_STORE_UNIT_SIZE
        self.appender.set_state(mf, max_phy)

    def follow(self) -> int:
        """Read-only stores: find the entries another process appended (new files, whole
        entries past each file's known end). Returns the queue's max offset."""
        mfq = self.mapped_file_queue
        if self.load_error:
            return self.get_max_offset_in_queue()
        mfq.follow()
        # an entry whose record this follower has not scanned yet is "not yet": the queue
        # ends before it until the log is followed that far (an offset far beyond is
        # damage, left to the reader to report)
        log_end = self.commit_log.get_max_offset()
        horizon = log_end + 2 * self.commit_log.file_size
        for mf in mfq.mapped_files:
            if mf.is_full():
                continue
            pos = mf.wrote_position
            if mf.evicted and not entry_written(mf, pos):
                break                           # idle: not mapped again to find that out
            while pos + CQ_STORE_UNIT_SIZE <= self.file_size:
                unit = read_unit_raw(mf, pos)
                if unit[0] < 0 or unit[1] <= 0:
                    break
                if unit[1] != LOST_SIZE and log_end < unit[0] + unit[1] and unit[0] < horizon:
                    break
                pos += CQ_STORE_UNIT_SIZE
            mf.wrote_position = pos
            if pos < self.file_size:
                break
        return self.get_max_offset_in_queue()

    def load_read_only(self) -> None:
        mfq = self.mapped_file_queue
        if not self.load():
            return                       # damaged: reported through load_error, not read
        files = mfq.mapped_files
        for mf in files[max(0, len(files) - 3):]:
            mf.set_positions(0)
        self.follow()
        first = mfq.get_first_mapped_file()
        if first is not None:                  # a queue that starts past 0 (pre-filled blanks)
            pos = 0
            while pos + CQ_STORE_UNIT_SIZE <= first.wrote_position and read_unit_raw(first, pos)[1] == 0x7FFFFFFF:
                pos += CQ_STORE_UNIT_SIZE
            self.min_logic_offset = first.file_from_offset + pos if pos else 0

    # -- appending ---------------------------------------------------------------------------

    def put_message_position_info(self, offset: int, size: int, tags_code: int, cq_offset: int) -> bool:
        """Append the entry of the record at ``offset`` as queue index ``cq_offset``."""
        return self.appender.put(offset, size, tags_code, cq_offset)

    def _put_slow(self, offset: int, size: int, tags_code: int, cq_offset: int) -> bool:
        """The append cases the C fast path leaves: a new or full file, a queue that starts
        past 0 (blank pre-fill), a duplicate or a gap."""
        with self._lock:
            expect = cq_offset * CQ_STORE_UNIT_SIZE
            mfq = self.mapped_file_queue
            if cq_offset != 0 and not mfq.mapped_files and self.claimed_elsewhere is not None:
                holder = self.claimed_elsewhere(self.topic, self.queue_id, cq_offset, offset)
                if holder is not None:
                    # the record would open this queue, but another queue holds it at that
                    # offset: its header was altered (``header_witness``); not filed here
                    self.commit_log.damage.header_altered(holder[0], holder[1], cq_offset, offset,
                                                          f"{self.topic}-{self.queue_id}")
                    return True
            mf = mfq.get_last_mapped_file(expect, need_create=True)
            if mf is None:
                return False
            if mf.first_create_in_queue and cq_offset != 0 and mf.wrote_position == 0:
                self.min_logic_offset = expect
                mfq.flushed_where = expect
                blanks = (expect % self.file_size) // CQ_STORE_UNIT_SIZE
                if blanks:
                    mf.append_message(_BLANK_UNIT * blanks)
            current = mf.file_from_offset + mf.wrote_position
            if expect < current:
                # already there (offset 0 included: never appended again), unless a lost
                # marker holds the place of this very record (``queue_repair.replace_marker``)
                replace_marker(self, cq_offset, offset, size, tags_code)
                return True
            if cq_offset != 0:
                if expect != current:
                    if not gap_is_possible(self, expect, offset):
                        log.error("consume queue %s-%d: the record at commit-log offset %d claims queue offset %d, "
                                  "more than the log could have lost since entry %d; its header is damaged, "
                                  "not dispatched", self.topic, self.queue_id, offset, cq_offset,
                                  current // CQ_STORE_UNIT_SIZE)
                        return True
                    # the records of the offsets between were lost to damage: mark them
                    if not fill_gap(self, expect):
                        return False
                    mf = mfq.get_last_mapped_file(expect, need_create=True)
                    if mf is None:
                        return False
            if not mf.append_message(_UNIT.pack(offset, size, tags_code)):
                return False
            self.appender.note_put(mf, offset + size)
            return True

    # -- bounds and reading ------------------------------------------------------------------

    def get_max_offset_in_queue(self) -> int:
        """Next index to be written (pre-filled blanks included)."""
        return self.mapped_file_queue.get_max_offset() // CQ_STORE_UNIT_SIZE

    def get_min_offset_in_queue(self) -> int:
        """First live index: the min logic offset, and never below the first file (its
        predecessors may have been deleted by retention)."""
        first = self.mapped_file_queue.get_first_mapped_file()
        low = max(self.min_logic_offset, first.file_from_offset if first is not None else 0)
        return low // CQ_STORE_UNIT_SIZE

    @property
    def max_physic_offset(self) -> int:
        return self.appender.max_physic_offset

    def get_unit(self, index: int):
        """``(commitlog offset, size, tagsCode)`` of entry ``index``, or None."""
        pos = index * CQ_STORE_UNIT_SIZE
        if index < 0 or pos < self.min_logic_offset:
            return None
        mf = self.mapped_file_queue.find_mapped_file_by_offset(pos)
        if mf is None:
            return None
        return read_unit(mf, pos - mf.file_from_offset)

    def roll_next_file(self, index: int) -> int:
        per_file = self.file_size // CQ_STORE_UNIT_SIZE
        return index + per_file - index % per_file

    def get_last_offset(self) -> int:
        """End (offset + size) of the last entry, -1 when empty."""
        mf = self.mapped_file_queue.get_last_mapped_file()
        if mf is None or mf.wrote_position < CQ_STORE_UNIT_SIZE:
            return -1
        unit = read_unit(mf, mf.wrote_position - CQ_STORE_UNIT_SIZE)
        return unit[0] + unit[1]

    def correct_min_offset(self, phy_min_offset: int) -> None:
        """Move the min past entries whose records the commit log no longer has."""
        for mf in self.mapped_file_queue.mapped_files:
            pos = max(0, self.min_logic_offset - mf.file_from_offset)
            while pos + CQ_STORE_UNIT_SIZE <= mf.wrote_position:
                unit = read_unit(mf, pos)
                if unit is None:
                    return
                if unit[1] != 0x7FFFFFFF and unit[0] >= phy_min_offset:
                    self.min_logic_offset = max(self.min_logic_offset, mf.file_from_offset + pos)
                    return
                pos += CQ_STORE_UNIT_SIZE
            if mf.wrote_position < self.file_size:
                # every entry so far is gone: the queue starts at its end
                self.min_logic_offset = max(self.min_logic_offset, mf.file_from_offset + mf.wrote_position)
                return
            self.min_logic_offset = max(self.min_logic_offset, mf.file_from_offset + self.file_size)

    def delete_expired_files(self, phy_min_offset: int, pause=None) -> int:
        """Retention: move the min past entries whose records are gone, then delete the
        files whose last entry points below ``phy_min_offset`` (never the last file),
        RocketMQ's ``correctMinOffset`` and ``deleteExpiredFile``. Readers see
        OFFSET_TOO_SMALL for the deleted range. Returns how many files were deleted."""
        self.correct_min_offset(phy_min_offset)
        last = self.file_size - CQ_STORE_UNIT_SIZE

        def expired(mf) -> bool:
            unit = read_unit(mf, last)
            return unit is not None and unit[0] < phy_min_offset
        with self._lock:
            return len(self.mapped_file_queue.delete_first_files(expired, pause=pause))

    # -- time --------------------------------------------------------------------------------

    def get_offset_in_queue_by_time(self, timestamp: int, boundary: BoundaryType = BoundaryType.LOWER) -> int:
        """RocketMQ 5.x ``getOffsetInQueueByTime``: LOWER, the first index whose store time
        is >= ``timestamp`` (the max offset when every message is older); UPPER, the last
        index whose store time is <= ``timestamp`` (0 when every message is newer)."""
        cl = self.commit_log
        return offset_by_time(self.appender, timestamp, boundary is BoundaryType.UPPER,
                              cl.mapped_file_queue.mapped_files, cl.file_size)

    # -- flushing and teardown ---------------------------------------------------------------

    def flush(self, least_pages: int) -> bool:
        return self.mapped_file_queue.flush(least_pages)

    def shutdown(self) -> None:
        self.mapped_file_queue.shutdown()

    def destroy(self) -> None:
        self.mapped_file_queue.destroy()
        self.min_logic_offset = 0
        self.appender.set_state(None, -1)
