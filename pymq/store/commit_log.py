"""CommitLog: the append-only log of every message (RocketMQ's ``CommitLog``).

A ``MappedFileQueue`` of segments under ``commitlog/`` plus the compiled append path
(``pymq._core.appender.CommitLogAppender``: put lock, topic-queue table, encoding into the
mapped segment). This module owns loading, the rescan that finds the end of the log on
reopen, reads by offset, and rolling to a new segment.

Differences from RocketMQ: the append path and the record scan are compiled (no
``AppendMessageCallback`` objects); segments are created one ahead by
``AllocateMappedFileService`` and pre-faulted; there is no transient store pool.
"""

from __future__ import annotations

import errno
import os
import time
from typing import Optional

from pymq._core import record
from pymq._core.layout import END_FILE_MIN_BLANK_LENGTH
from pymq._core.appender import CommitLogAppender
from pymq._core.mapped_file import MappedFile
from pymq.config import StoreConfig
from pymq.errors import CorruptRecordError, DiskFullError

from .allocate_service import AllocateMappedFileService
from . import log_walk
from .damage import DamageLedger
from .mapped_file_queue import MappedFileQueue
from .prefault_service import PrefaultService


class CommitLog:
    """The commit log of one store directory."""

    def __init__(self, store_path: str, config: StoreConfig,
                 allocate_service: Optional[AllocateMappedFileService] = None,
                 read_only: bool = False) -> None:
        self.config = config
        self.file_size = config.commitlog_file_size
        self.mapped_file_queue = MappedFileQueue(os.path.join(store_path, "commitlog"), self.file_size,
                                                 allocate_service, read_only,
                                                 reserve_chunk=config.commitlog_reserve_bytes, readahead=True)
        self.appender = CommitLogAppender(self._roll, self.file_size, config.store_host,
                                          config.max_message_size, config.topic_validation)
        self.appender.prop_crc = config.enabled_append_prop_crc
        self.appender.on_disk_full = self._disk_full
        self.disk_guard = None          # set by the store (DiskGuard) for writers
        self.damage = DamageLedger()    # holes fenced, damage met by reads
        # writers: the pages ahead of the writes populated by a thread (started by the store)
        self.prefault_service: Optional[PrefaultService] = None
        # not on a SLAVE: its log is written by replication through the file, not the
        # mapping, and populating the pages those writes fill contends with them (an empty
        # slave copied 1 GiB at 600-840 MiB/s with the window, 2,450 without)
        if not read_only and config.commitlog_prefault_window > 0 and config.broker_role != "SLAVE":
            self.prefault_service = PrefaultService(self.mapped_file_queue, config.commitlog_prefault_window)
            self.mapped_file_queue.on_create = self.prefault_service.segment_created

    # -- lifecycle -------------------------------------------------------------------------

    def load(self) -> None:
        """Map the segments; a writer makes sure ``commitlog/`` exists (``ensureDirOK``),
        so a store killed before its first put is still a store."""
        os.makedirs(self.mapped_file_queue.store_path, exist_ok=True)
        self.mapped_file_queue.load()

    def _scan_end(self, mf: MappedFile) -> int:
        """How far recovery may read in ``mf``: the file size, or for a last segment found
        short (and extended) its original length, so zeros cannot complete a cut record."""
        mfq = self.mapped_file_queue
        short = mfq.short_last_file
        if short is not None and mfq.mapped_files and mf is mfq.mapped_files[-1]:
            return min(short, self.file_size)
        return self.file_size

    def recover_abnormally(self, min_timestamp: int, check_crc: bool = True) -> tuple[int, int]:
        """Recovery after a crash (``recoverAbnormally``): start at the newest segment whose
        first record is a v1 record stored no later than ``min_timestamp`` (segment 0 when
        none is), walk whole, CRC-checked records from there, and cut the log at the first
        position that does not hold one. Returns (end of the log, where the walk started):
        everything from the start is dispatched again."""
        mfq = self.mapped_file_queue
        files = mfq.mapped_files
        if not files:
            mfq.flushed_where = 0
            self.appender.set_current(None)
            return 0, 0
        index = 0
        for i in range(len(files) - 1, -1, -1):
            try:
                m = record.read_message(files[i], 0)
            except CorruptRecordError:
                m = None
            ts = m.store_timestamp if m is not None else 0
            if ts != 0 and ts <= min_timestamp:
                index = i
                break
        start = files[index].file_from_offset
        return self._walk_and_cut(index, check_crc), start

    def recover_normally(self, check_crc: bool = False) -> int:
        """Find the end of the log after a clean shutdown and cut anything after it.

        Walks whole records from the third-last segment (RocketMQ's ``recoverNormally``),
        crossing segments at end-of-file blanks, and stops at the first position that does
        not hold a whole record. Returns that offset (the new max physical offset).
        """
        mfq = self.mapped_file_queue
        files = mfq.mapped_files
        if not files:
            mfq.flushed_where = 0
            self.appender.set_current(None)
            return 0
        return self._walk_and_cut(max(0, len(files) - 3), check_crc, fence_tail=True)

    def _walk_and_cut(self, index: int, check_crc: bool, fence_tail: bool = False) -> int:
        """Walk records from segment ``index`` (``log_walk.walk``: holes are fenced and
        the walk goes on after them), cut the log where nothing valid follows, keeping the
        cut bytes aside, and return that offset. With ``fence_tail`` (a clean exit, which
        leaves no torn write) bad bytes at the end of the last written segment are fenced
        as a hole instead: the log goes on after them."""
        mfq = self.mapped_file_queue
        files = mfq.mapped_files
        process, seg, pos = log_walk.walk(files, index, check_crc, self._scan_end, self.damage, "recovery")
        if files and fence_tail and pos < files[seg].file_size:
            mf = files[seg]
            end = log_walk.damaged_tail_end(mf, pos, self._scan_end(mf))
            if end > mf.file_size - END_FILE_MIN_BLANK_LENGTH:
                end = mf.file_size            # no room left for the end-of-file blank
            if end > pos:
                self.damage.add_hole(mf.file_from_offset + pos, mf.file_from_offset + end,
                                     "recovery after a clean exit")
                process, pos = mf.file_from_offset + end, end
        if files:
            log_walk.keep_torn_tail(files, seg, pos, self._scan_end, self.damage)
        mfq.flushed_where = process
        mfq.truncate_dirty_files(process)
        self.appender.set_current(mfq.get_last_mapped_file())
        return process

    def follow(self) -> int:
        """Read-only stores: find how far another process has written, and return the max
        offset. Records past the end of the segment being written are taken in (holes the
        writer's recovery fenced are stepped over, see ``_follow_segment``); a segment
        closed by its end-of-file blank leads to the next one. Segments the writer only
        pre-allocated are not looked at until it moves into them."""
        mfq = self.mapped_file_queue
        while True:
            for mf in mfq.mapped_files:
                if not mf.is_full():
                    pos, blank = self._follow_segment(mf, mf.wrote_position)
                    mf.wrote_position = self.file_size if blank else pos
                    if not blank:
                        return mfq.get_max_offset()
            if mfq.follow(limit=1) == 0:
                return mfq.get_max_offset()

    def _follow_segment(self, mf: MappedFile, start: int) -> tuple[int, bool]:
        """Walk accepted records of ``mf`` from ``start``, stepping over holes: bytes that
        are not a record but are followed by a valid one (magic, size, position and CRC
        all agree; the writer appends in order, so a valid record after them means they
        will never become one). Returns (position, reached the end-of-file blank)."""
        pos = start
        while True:
            pos, _count, blank = record.scan_segment(mf, pos, self.file_size, False)
            if blank or pos >= self.file_size:
                return self.file_size, True
            moved_on = self._writer_moved_on(mf)
            if mf.read(pos, 8) == bytes(8) and not moved_on:
                return pos, False               # the end of what is written so far
            q = record.next_record(mf, pos + 1, self.file_size)
            if q < 0:
                if not moved_on:
                    return pos, False
                q = self.file_size              # damage ran to the segment's end
            else:
                # the bytes at pos may have been a record still being written when they were
                # read: the writer appends in order, so with the record at q complete, every
                # one before it is too. Read them again; only what still fails is a hole.
                again, _count, blank = record.scan_segment(mf, pos, q, False)
                if blank:
                    return self.file_size, True
                if again >= q:
                    pos = q
                    continue
                pos = again
            self.damage.add_hole(mf.file_from_offset + pos, mf.file_from_offset + q, "follower")
            if q >= self.file_size:
                return self.file_size, True
            pos = q

    def _writer_moved_on(self, mf: MappedFile) -> bool:
        """Whether the next segment holds data (the writer left ``mf`` behind)."""
        path = os.path.join(self.mapped_file_queue.store_path, f"{mf.file_from_offset + self.file_size:020d}")
        try:
            with open(path, "rb") as f:
                return f.read(8) != bytes(8)
        except OSError:
            return False

    def load_read_only(self) -> None:
        """Map the segments for reading; segments before the third-last are taken as full
        (closed by their blank), the rest are scanned, and pre-allocated ones dropped."""
        mfq = self.mapped_file_queue
        mfq.load()
        files = mfq.mapped_files
        for mf in files[max(0, len(files) - 3):]:
            mf.set_positions(0)
        for mf in files[max(0, len(files) - 3):]:
            pos, blank = self._follow_segment(mf, 0)
            mf.wrote_position = self.file_size if blank else pos
            if not blank:
                mfq.keep_through(mf)
                break
        self.follow()

    def _roll(self, next_offset: int) -> MappedFile:
        """The appender's next segment. With a disk guard, only when the disk has room for
        it below the warning ratio. A refused allocation, or one that failed on a full disk,
        makes the guard refuse puts (SERVICE_NOT_AVAILABLE) until space returns; other
        failures (a file-size limit) leave CREATE_MAPEDFILE_FAILED to this put only."""
        guard = self.disk_guard
        # this segment, unless it was allocated ahead, and the next one allocated ahead
        if guard is not None and not guard.room_for(2 * self.file_size):
            guard.refuse()
            raise DiskFullError(errno.ENOSPC, f"no room for a {self.file_size}-byte commit-log segment")
        try:
            return self.mapped_file_queue.create_mapped_file(next_offset)
        except DiskFullError:
            if guard is not None:
                guard.check()        # refuses puts if the disk is really full (not a quota)
            raise

    def unreserved_bytes(self) -> int:
        """What the segment being written still lacks of its blocks (sparse segments)."""
        mf = self.mapped_file_queue.get_last_mapped_file()
        return 0 if mf is None or mf.closed else mf.file_size - mf.reserved_bytes

    def _disk_full(self) -> None:
        """Reserving blocks of the current (sparse) segment met a full disk: the guard
        measures, and refuses puts if the disk is really full (not a quota)."""
        if self.disk_guard is not None:
            self.disk_guard.check()

    def delete_expired_files(self, reserved_ms: float, clean_immediately: bool, max_count: int,
                             pause=None, now_ms: Optional[float] = None) -> list[str]:
        """Delete the oldest segments whose last write (the file's mtime, as RocketMQ's
        ``getLastModifiedTimestamp``) is more than ``reserved_ms`` ago, or any old segment
        with ``clean_immediately``; never the segment being written; stops at the first
        segment too young (``deleteExpiredFileByTime``). Returns the paths deleted."""
        now = time.time() * 1000 if now_ms is None else now_ms

        def expired(mf: MappedFile) -> bool:
            if clean_immediately:
                return True
            try:
                return os.stat(mf.file_name).st_mtime * 1000 + reserved_ms <= now
            except FileNotFoundError:
                return True
        return self.mapped_file_queue.delete_first_files(expired, max_count, pause)

    def stop_writes(self) -> None:
        """No append from here on: the appender closed, the write window's thread stopped."""
        self.appender.close()
        if self.prefault_service is not None:
            self.prefault_service.shutdown()

    def shutdown(self) -> None:
        self.stop_writes()
        self.mapped_file_queue.shutdown()

    # -- writing ---------------------------------------------------------------------------

    def put_message(self, msg):
        return self.appender.put(msg)

    def put_messages(self, msgs):
        return self.appender.put_batch(msgs)

    def flush(self, least_pages: int = 0) -> bool:
        return self.mapped_file_queue.flush(least_pages)

    # -- reading ---------------------------------------------------------------------------

    def get_min_offset(self) -> int:
        """First offset still stored, -1 when the log is empty."""
        mf = self.mapped_file_queue.get_first_mapped_file()
        if mf is None:
            return -1
        if not mf.available:
            return self.roll_next_file(mf.file_from_offset)
        return mf.file_from_offset

    def get_max_offset(self) -> int:
        return self.mapped_file_queue.get_max_offset()

    def roll_next_file(self, offset: int) -> int:
        return offset + self.file_size - offset % self.file_size

    def look_message_by_offset(self, offset: int):
        """The ``MessageExt`` at ``offset``, or None when no record passing the acceptance
        rule starts there (a record whose body fails its CRC is reported and not returned)."""
        if offset < 0:
            return None
        mf = self.mapped_file_queue.find_mapped_file_by_offset(offset, offset == 0)
        if mf is None or offset < mf.file_from_offset:
            return None
        pos = offset - mf.file_from_offset
        if record.accept_record(mf, pos, -1, False) <= 0:
            return None                        # no record starts there (or not one that passes)
        try:
            return record.read_message(mf, pos, self.config.check_crc_on_read)
        except CorruptRecordError:
            self.damage.crc_error(offset)      # altered: never returned
            return None

    def get_message_bytes(self, offset: int) -> Optional[bytes]:
        """The raw bytes of the record at ``offset`` (RocketMQ's selectOneMessageByOffset)."""
        mf = self.mapped_file_queue.find_mapped_file_by_offset(offset, offset == 0)
        if mf is None or offset < mf.file_from_offset:
            return None
        return record.read_record_bytes(mf, offset - mf.file_from_offset)
