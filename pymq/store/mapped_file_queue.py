"""MappedFileQueue: an ordered run of fixed-size segments forming one logical file.

Mirrors RocketMQ's ``MappedFileQueue``: files named by their 20-digit start offset,
``get_last_mapped_file`` creating the next one when the last is full, lookups by offset,
``flush`` one file per call, and truncation of dirty files after recovery. The list of
segments is replaced, never mutated in place, so readers can use a snapshot of it without
taking the lock. A queue given a ``map_cache`` (consume queues: ``map_cache.QueueMaps``)
registers every segment it maps there, and the cache may unmap idle ones (see
``map_cache``).
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Callable, Optional

from pymq._core.mapped_file import MappedFile, offset_to_file_name
from pymq.errors import CorruptStoreError

from .allocate_service import AllocateMappedFileService

log = logging.getLogger("pymq")


class MappedFileQueue:
    """The segments of one directory, all ``file_size`` bytes long."""

    def __init__(self, store_path: str, file_size: int,
                 allocate_service: Optional[AllocateMappedFileService] = None,
                 read_only: bool = False, reserve_chunk: int = 0, readahead: bool = False) -> None:
        self.store_path = store_path
        self.file_size = file_size
        self.reserve_chunk = reserve_chunk      # > 0: sparse files, disk reserved ahead of writes
        self.readahead = readahead              # files read in order (the commit log)
        self.allocate_service = allocate_service
        self.read_only = read_only
        self.mapped_files: list[MappedFile] = []
        self.flushed_where = 0
        self.store_timestamp = 0          # store time of the last thorough flush (checkpoint)
        self.short_last_file: Optional[int] = None   # original length of a damaged last file
        self.map_cache = None             # QueueMaps: segments are registered, idle ones unmapped
        self.on_create: Optional[Callable[[MappedFile], None]] = None   # told of each new segment
        self._lock = threading.RLock()

    # -- loading ---------------------------------------------------------------------------

    def load(self) -> None:
        """Map every segment of the directory, in name order, as fully written.

        Recovery then sets the real positions. A writer gives a short last segment (a cut
        file) its length back first, but only when the other segments show it belongs to
        segments of ``file_size`` (``_fits_file_size``). Raises ``SegmentSizeError`` when
        a segment's length is not ``file_size`` and ``CorruptStoreError`` when the names
        do not form a gap-free run.
        """
        if not os.path.isdir(self.store_path):
            return
        listing = os.listdir(self.store_path)
        if not self.read_only:
            for n in listing:       # segments whose allocation a crash interrupted
                if n.endswith(".tmp") and n[:-4].isdigit():
                    os.remove(os.path.join(self.store_path, n))
        names = sorted(n for n in listing if n.isdigit())
        if names and not self.read_only:
            last = os.path.join(self.store_path, names[-1])
            size = os.path.getsize(last)
            if size < self.file_size and self._fits_file_size(names):
                # a short last segment is damage (segments are allocated whole): give it its
                # length back so recovery can cut at the last whole record in it
                log.warning("%s is %d bytes, not %d: extending it for recovery", last, size, self.file_size)
                os.truncate(last, self.file_size)
                self.short_last_file = size       # recovery reads no further than this
        files = []
        try:
            for name in names:
                try:
                    mf = MappedFile(os.path.join(self.store_path, name), self.file_size,
                                    writable=not self.read_only, reserve_chunk=self.reserve_chunk,
                                    readahead=self.readahead)
                except FileNotFoundError:
                    if not self.read_only:
                        raise
                    # the writer's cleaning deleted it since the listing: it deletes oldest
                    # first, so every file mapped before it is gone too; start after it
                    for mf in files:
                        mf.close()
                    files = []
                    continue
                mf.set_positions(self.file_size)
                if files and mf.file_from_offset != files[-1].file_from_offset + self.file_size:
                    mf.close()
                    raise CorruptStoreError(
                        f"{self.store_path}: segment {name} does not follow "
                        f"{offset_to_file_name(files[-1].file_from_offset)}")
                files.append(mf)
                if self.map_cache is not None:
                    self.map_cache.add(mf)      # may unmap an idle file (maybe an earlier one of these)
        except BaseException:
            for mf in files:
                mf.close()
            raise
        self.mapped_files = files

    def _fits_file_size(self, names: list[str]) -> bool:
        """Whether the segments ``names`` (sorted) were made ``file_size`` bytes long, as far
        as the ones before the last show: each of them exactly that long, and every name
        (a start offset) a multiple of it, one segment after the other. Only then is a
        short last segment a cut one of this queue, to be given its length back; otherwise
        ``file_size`` is not the size the files were made with (a wrong config), and the
        segment is left as it is for ``load`` to refuse (``SegmentSizeError``): growing it
        would turn the store into one of another size."""
        size = self.file_size
        prev = None
        for name in names:
            start = int(name)
            if start % size or (prev is not None and start != prev + size):
                return False
            prev = start
        for name in names[:-1]:
            try:
                if os.path.getsize(os.path.join(self.store_path, name)) != size:
                    return False
            except OSError:
                return False
        return True

    def follow(self, limit: int = 1 << 30) -> int:
        """Read-only stores: map (at most ``limit``) segments another process created since
        the last look. Returns how many were added."""
        if not os.path.isdir(self.store_path):
            return 0
        with self._lock:
            files = self.mapped_files
            nxt = files[-1].file_from_offset + self.file_size if files else None
            names = sorted(n for n in os.listdir(self.store_path) if n.isdigit())
            added = []
            for name in names:
                start = int(name)
                if nxt is not None and start < nxt:
                    continue
                if (nxt is not None and start != nxt) or len(added) >= limit:
                    break                       # a gap: wait until the writer fills it
                mf = MappedFile(os.path.join(self.store_path, name), self.file_size,
                                writable=not self.read_only)
                if self.map_cache is not None:
                    self.map_cache.add(mf)
                added.append(mf)
                nxt = start + self.file_size
            if added:
                self.mapped_files = files + added
            return len(added)

    def keep_through(self, mf: MappedFile) -> None:
        """Unmap (not delete) the segments after ``mf`` (read-only stores)."""
        with self._lock:
            files = self.mapped_files
            if mf in files:
                i = files.index(mf)
                for later in files[i + 1:]:
                    later.close()
                self.mapped_files = files[:i + 1]

    # -- access ----------------------------------------------------------------------------

    def get_first_mapped_file(self) -> Optional[MappedFile]:
        files = self.mapped_files
        return files[0] if files else None

    def get_last_mapped_file(self, start_offset: int = 0, need_create: bool = False) -> Optional[MappedFile]:
        """The last segment; with ``need_create``, a new one when there is none or it is full."""
        files = self.mapped_files
        last = files[-1] if files else None
        if not need_create or (last is not None and not last.is_full()):
            return last
        if last is None:
            create_offset = start_offset - start_offset % self.file_size
        else:
            create_offset = last.file_from_offset + self.file_size
        return self.create_mapped_file(create_offset)

    def create_mapped_file(self, offset: int) -> MappedFile:
        """Create (or take from the allocator) the segment starting at ``offset``."""
        if self.read_only:
            raise CorruptStoreError("cannot create segments in a read-only store")
        with self._lock:
            files = self.mapped_files
            if files and files[-1].file_from_offset >= offset:
                for mf in files:
                    if mf.file_from_offset == offset:
                        return mf
            os.makedirs(self.store_path, exist_ok=True)
            path = os.path.join(self.store_path, offset_to_file_name(offset))
            if self.allocate_service is not None:
                mf = self.allocate_service.take(path, self.file_size, self.reserve_chunk, self.readahead)
                nxt = os.path.join(self.store_path, offset_to_file_name(offset + self.file_size))
                self.allocate_service.prepare(nxt, self.file_size, self.reserve_chunk, self.readahead)
            else:
                mf = MappedFile(path, self.file_size, create=True, reserve_chunk=self.reserve_chunk,
                                readahead=self.readahead)
            if not files:
                mf.first_create_in_queue = True
            if self.map_cache is not None:
                self.map_cache.add(mf)
            self.mapped_files = files + [mf]
            if self.on_create is not None:
                self.on_create(mf)
            return mf

    def find_mapped_file_by_offset(self, offset: int, return_first_on_not_found: bool = False) -> Optional[MappedFile]:
        """The segment holding ``offset``; the first one (flag) or None when out of range."""
        files = self.mapped_files
        if not files:
            return None
        first, last = files[0], files[-1]
        if offset < first.file_from_offset or offset >= last.file_from_offset + self.file_size:
            return first if return_first_on_not_found else None
        index = offset // self.file_size - first.file_from_offset // self.file_size
        if 0 <= index < len(files):
            mf = files[index]
            if mf.file_from_offset <= offset < mf.file_from_offset + self.file_size:
                return mf
        for mf in files:
            if mf.file_from_offset <= offset < mf.file_from_offset + self.file_size:
                return mf
        return first if return_first_on_not_found else None

    def get_min_offset(self) -> int:
        files = self.mapped_files
        return files[0].file_from_offset if files else -1

    def get_max_offset(self) -> int:
        """End of the readable data: last file's start plus its read position."""
        files = self.mapped_files
        return files[-1].file_from_offset + files[-1].read_position if files else 0

    def get_max_wrote_position(self) -> int:
        return self.get_max_offset()

    def how_much_fall_behind(self) -> int:
        """Bytes written but not yet flushed."""
        return max(0, self.get_max_offset() - self.flushed_where)

    # -- flushing --------------------------------------------------------------------------

    def flush(self, flush_least_pages: int) -> bool:
        """Flush the segment holding ``flushed_where``; True if nothing moved (RocketMQ's
        return value), so callers loop while it returns False."""
        with self._lock:
            mf = self.find_mapped_file_by_offset(self.flushed_where, self.flushed_where == 0)
            if mf is None:
                return True
            ts = mf.store_timestamp
            offset = mf.flush(flush_least_pages)
            where = mf.file_from_offset + offset
            unchanged = where == self.flushed_where
            self.flushed_where = where
            if flush_least_pages == 0 and ts:
                self.store_timestamp = ts
            return unchanged

    def flush_all(self) -> int:
        """Flush every written byte (one segment per ``flush`` call); returns ``flushed_where``.

        RocketMQ retries ``flush(0)`` ten times at shutdown, which with small segments can
        leave data unflushed; this loops until nothing moves."""
        while not self.flush(0):
            pass
        return self.flushed_where

    def mark_flushed(self) -> None:
        """Every written byte is on disk: the whole file system was synced since the
        last write (``sync_file_system``), so no file needs an ``msync`` of its own."""
        with self._lock:
            files = self.mapped_files
            for mf in files:
                mf.flushed_position = mf.wrote_position
            if files:
                last = files[-1]
                self.flushed_where = last.file_from_offset + last.wrote_position
                if last.store_timestamp:
                    self.store_timestamp = last.store_timestamp

    # -- retention -------------------------------------------------------------------------

    def delete_first_files(self, expired: Callable[[MappedFile], bool], max_count: int = 1 << 30,
                           pause: Optional[Callable[[], bool]] = None) -> list[str]:
        """Delete segments from the head while ``expired(segment)`` holds, at most
        ``max_count``, never the last one (it is being written). ``pause()`` runs between
        two deletions (RocketMQ waits 100 ms there) and ends the run when it returns True.

        A segment leaves the list before it is deleted, so new lookups never find it;
        readers holding the old list see it closed (``pin`` refuses it; the unmap waits
        for work in progress), and another process that maps it keeps its pages: the file
        is unlinked, never truncated. Returns the paths deleted.
        """
        deleted: list[str] = []
        while len(deleted) < max_count:
            with self._lock:
                files = self.mapped_files
                if len(files) < 2 or not expired(files[0]):
                    break
                mf = files[0]
                self.mapped_files = files[1:]
                self.flushed_where = max(self.flushed_where, files[1].file_from_offset)
            mf.destroy()
            deleted.append(mf.file_name)
            if pause is not None and len(deleted) < max_count and pause():
                break
        return deleted

    def drop_deleted(self) -> int:
        """Read-only stores: unmap the head segments whose files another process deleted
        (their mappings stay valid until then: deletion unlinks). Returns how many."""
        with self._lock:
            files = self.mapped_files
            n = 0
            while n < len(files) and not os.path.exists(files[n].file_name):
                n += 1
            if n:
                for mf in files[:n]:
                    mf.close()
                self.mapped_files = files[n:]
            return n

    # -- truncation and teardown -----------------------------------------------------------

    def truncate_dirty_files(self, offset: int, zero: bool = True) -> None:
        """Cut everything at and after ``offset``: the segment holding it gets its positions
        set there (and, unless the caller knows only zeros follow, ``zero`` False, its bytes
        after it are zeroed); segments wholly after it are deleted."""
        with self._lock:
            keep = []
            for mf in self.mapped_files:
                tail = mf.file_from_offset + self.file_size
                if tail > offset:
                    if offset >= mf.file_from_offset:
                        pos = offset - mf.file_from_offset
                        mf.set_positions(pos)
                        if not self.read_only and zero:
                            # what was cut must not come back: a later recovery would read
                            # on past new records into the old ones
                            mf.zero_range(pos)
                        keep.append(mf)
                    else:
                        mf.destroy()
                else:
                    keep.append(mf)
            self.mapped_files = keep
            self.flushed_where = min(self.flushed_where, offset)

    def shutdown(self) -> None:
        """Unmap every segment (files stay)."""
        with self._lock:
            for mf in self.mapped_files:
                mf.close()
            self.mapped_files = []

    def destroy(self) -> None:
        """Delete every segment."""
        with self._lock:
            for mf in self.mapped_files:
                mf.destroy()
            self.mapped_files = []
            self.flushed_where = 0
