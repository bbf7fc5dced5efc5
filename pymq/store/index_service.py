"""IndexService: the index files of a store, built by the dispatcher, queried by key.

Mirrors RocketMQ's ``IndexService``: files under ``index/`` named by their creation time
(``yyyyMMddHHmmssSSS``, local time), each ``40 + slots*4 + entries*20`` bytes; a full
file is flushed and a new one created, seeded with the previous file's end offset and
time; queries walk the files newest to oldest, skipping files whose time range does not
overlap the query's, and stop at a file that begins before the range.

Differences from RocketMQ: the build runs in C on each chunk the dispatcher parsed
(``IndexBuilder``); queries check every candidate against its record (see
``index_file``), so they return only messages whose key really matches; file names get a
millisecond bump when two files would be created in the same millisecond.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Optional

from pymq._core.index_builder import IndexBuilder
from pymq._core.index_file import IndexFile, index_file_size
from pymq._core.index_query import IndexQuerier
from pymq._core.mapped_file import MappedFile
from pymq.config import StoreConfig
from pymq.errors import CorruptRecordError, DiskFullError, StoreStateError
from pymq.store.episode_log import EpisodeLog

log = logging.getLogger("pymq")

#: Index files are sparse (RocketMQ's length, blocks where they hold data): entries are
#: reserved this many bytes at a time, slots a 4 KiB granule at a time (``MappedFile``).
INDEX_RESERVE_BYTES = 65_536


def _time_name(ms: int) -> str:
    """``UtilAll.timeMillisToHumanString``: yyyyMMddHHmmssSSS in local time."""
    t = time.localtime(ms // 1000)
    return time.strftime("%Y%m%d%H%M%S", t) + f"{ms % 1000:03d}"


class IndexService:
    """The ``index/`` directory of a store."""

    def __init__(self, root: str, config: StoreConfig, commit_log, read_only: bool = False) -> None:
        self.store_path = os.path.join(root, "index")
        self.hash_slot_num = config.index_hash_slots
        self.index_num = config.index_max_entries
        self.max_msgs_num_batch = config.max_msgs_num_batch
        self.file_size = index_file_size(self.hash_slot_num, self.index_num)
        self.commit_log = commit_log
        self.read_only = read_only
        self.querier = IndexQuerier(self, commit_log.mapped_file_queue, commit_log.file_size,
                                    config.max_msgs_num_batch, config.index_recent_keys)
        self.querier.check_crc = config.check_crc_on_read
        self.querier.damage = commit_log.damage
        self.index_files: list[IndexFile] = []
        self.checkpoint = None                  # set by the store (StoreCheckpoint)
        self._lock = threading.Lock()
        self.builder = IndexBuilder(None, self._roll)
        self.builder.on_full = self._reserve_failed
        self._reserve_paused = False            # paused for blocks of the current file, not a new one
        self.builder.enabled = config.message_index_enable
        self.enabled = config.message_index_enable
        self.disk_guard = None                  # set by the store (DiskGuard) for writers
        self.replay_from: Optional[int] = None  # where the log must be replayed to rebuild damaged files
        self._reput = None                      # set by enable_repair (writers)
        # a pause for want of space is one episode: logged when it starts (ten-minute
        # reminders while it lasts) and when a new index file is created again
        self.pause_log = EpisodeLog(log, "indexing")

    @property
    def index_files(self) -> list[IndexFile]:
        """The index files, oldest first. Replaced, never changed in place: the querier
        holds the same list."""
        return self.querier.files

    @index_files.setter
    def index_files(self, files: list[IndexFile]) -> None:
        self.querier.files = files

    # -- files -------------------------------------------------------------------------------

    def load(self) -> None:
        """Map the existing index files in name (time) order. A file of the wrong size is
        damage: a writer rebuilds it and every later file from the log (``replay_from``)."""
        if not os.path.isdir(self.store_path):
            return
        files = []
        names = sorted(n for n in os.listdir(self.store_path) if n.isdigit())
        for i, name in enumerate(names):
            path = os.path.join(self.store_path, name)
            try:
                mf = MappedFile(path, self.file_size, writable=not self.read_only,
                                reserve_chunk=0 if self.read_only else INDEX_RESERVE_BYTES)
            except Exception as e:      # a wrong size: the index is rebuilt from the log
                if self.read_only:
                    log.warning("index file %s unusable (%s); not read", path, e)
                    continue
                self._note_rebuilt(path, f"unusable ({e})", files)
                for later in names[i:]:
                    os.remove(os.path.join(self.store_path, later))
                break
            mf.hold_fd = not self.read_only     # opened at the first reservation, if any
            files.append(IndexFile(mf, self.hash_slot_num, self.index_num))
        self.index_files = files
        self.builder.set_current(files[-1] if files else None)

    def mark_boundary(self) -> None:
        """Tell the builder which keys the newest indexed record has entries for, so a
        replay through it (at open) adds only the missing ones."""
        files = self.index_files
        b = self.builder
        b.boundary_phy, b.boundary_hashes = -1, None
        if not files:
            return
        phy = files[-1].end_phy_offset
        hashes = set()
        for f in files[-2:]:
            hashes.update(f.hashes_at_end(phy))
        if hashes:
            b.boundary_phy, b.boundary_hashes = phy, hashes

    # -- damage: checked once, rebuilt from the log -------------------------------------------

    def enable_repair(self, reput_service) -> None:
        """Let a damaged file found by a query be rebuilt at once (writers)."""
        self._reput = reput_service

    def verify_newest(self, count: int) -> Optional[int]:
        """At open: check the ``count`` newest files (all when 0); a damaged one is dropped
        with every later file. Returns the commit-log offset the dispatcher must replay
        from to rebuild them, or None. Older files are checked when a query first reaches
        them (``check_file``)."""
        files = self.index_files
        for k in range(max(0, len(files) - count) if count > 0 else 0, len(files)):
            problem = self._problem(files[k])
            if problem is not None:
                return self._drop_from(k, problem)
        return self.replay_from

    def check_file(self, f: IndexFile) -> bool:
        """A query reached ``f`` unchecked: check it once. True when it is whole (or, read
        only, when it can only be reported); False when it was damaged and has been
        rebuilt from the log (the caller starts over)."""
        problem = self._problem(f)
        if problem is None or self.read_only or self._reput is None:
            f.verified = True
            return True
        with self._reput._lock:
            files = self.index_files
            if f not in files:
                return False                 # rebuilt meanwhile by another query
            start = self._drop_from(files.index(f), problem)
            self._reput.reput_from_offset = min(self._reput.reput_from_offset, start)
            self._reput.do_reput_locked()
        return False

    def _problem(self, f: IndexFile) -> Optional[str]:
        cl = self.commit_log
        problem = f.first_problem(cl.mapped_file_queue.mapped_files, cl.file_size)
        if problem is None:
            f.verified = True
        elif self.read_only and not f.verified:
            f.verified = True                # reported once; a writer will rebuild it
            cl.damage.index_damaged(f.mapped_file.file_name, problem, rebuilt=False)
        return problem

    def _drop_from(self, k: int, why: str) -> int:
        """Delete file ``k`` (damaged: ``why``) and every later one; returns where the log
        must be replayed from to rebuild them: the end of file ``k - 1``, else the start."""
        files = self.index_files
        if self.read_only:
            return self.replay_from if self.replay_from is not None else 0
        self._note_rebuilt(files[k].mapped_file.file_name, why, files[:k])
        with self._lock:
            self.index_files = files[:k]
            self.builder.set_current(files[k - 1] if k else None)
            self.builder.boundary_phy, self.builder.boundary_hashes = -1, None   # its entries are gone
        for f in files[k:]:
            f.mapped_file.destroy()
        return self.replay_from

    def _note_rebuilt(self, path: str, why: str, kept: list) -> None:
        start = kept[-1].end_phy_offset if kept else 0
        self.replay_from = start if self.replay_from is None else min(self.replay_from, start)
        self.commit_log.damage.index_damaged(path, why, rebuilt=True, replay_from=start)

    def follow(self) -> None:
        """Read-only stores: map index files another process created since the last look
        (entries of known files are visible at once: the header counts them)."""
        if not os.path.isdir(self.store_path):
            return
        known = {f.mapped_file.file_name for f in self.index_files}
        added = []
        for name in sorted(n for n in os.listdir(self.store_path) if n.isdigit()):
            path = os.path.join(self.store_path, name)
            if path in known:
                continue
            try:
                mf = MappedFile(path, self.file_size, writable=False)
            except Exception:
                continue                         # being created; next time
            added.append(IndexFile(mf, self.hash_slot_num, self.index_num))
        if added:
            self.index_files = self.index_files + added

    def _roll(self) -> Optional[IndexFile]:
        """The file to write next: a new one after the last (full) file; None when the
        disk has no room for one (``DiskGuard.fits``): the builder then
        pauses, and ``resume()`` restarts it when space returns."""
        with self._lock:
            prev = self.index_files[-1] if self.index_files else None
            if prev is not None and not prev.is_write_full():
                return prev
            if not self.builder.enabled:
                # the builder paused on an earlier key of the same record and asks again
                # for each further key: that pause is noted already
                return None
            guard = self.disk_guard
            if guard is not None and not guard.fits(self.file_size):
                self._note_paused(guard.last.describe() if guard.last else "no room")
                return None
            os.makedirs(self.store_path, exist_ok=True)
            ms = int(time.time() * 1000)
            path = os.path.join(self.store_path, _time_name(ms))
            while os.path.exists(path):
                ms += 1
                path = os.path.join(self.store_path, _time_name(ms))
            try:
                mf = MappedFile(path, self.file_size, create=True, reserve_chunk=INDEX_RESERVE_BYTES)
                mf.hold_fd = True               # many reservations ahead, one descriptor
            except DiskFullError as e:
                self._note_paused(str(e))
                return None
            f = IndexFile(mf, self.hash_slot_num, self.index_num,
                          prev.end_phy_offset if prev is not None else 0,
                          prev.end_timestamp if prev is not None else 0)
            f.verified = True                   # written here, from the log
            self.index_files = self.index_files + [f]
            self.pause_log.succeeded()          # ends a pause episode ("recovered after ...")
            if prev is not None:
                threading.Thread(target=self._flush_full, args=(prev,), name="pymq-FlushIndexFile",
                                 daemon=True).start()
            return f

    def unreserved_bytes(self) -> int:
        """What the index file being written still lacks of its blocks (sparse files)."""
        files = self.index_files
        if self.read_only or not files or files[-1].mapped_file.closed:
            return 0
        mf = files[-1].mapped_file
        return mf.file_size - mf.reserved_bytes

    def _note_paused(self, why: str, need: str = "") -> None:
        """Count a failed attempt to create an index file (or reserve blocks of one); the
        first of an episode is logged (``EpisodeLog``), the others are counted until one
        succeeds."""
        need = need or f"a {self.file_size}-byte index file"
        self.pause_log.failed(f"paused, no room for {need} ({why}); "
                              f"messages stay readable by queue and are indexed when space returns")

    def _reserve_failed(self, e: DiskFullError) -> None:
        """The builder paused: the disk had no blocks for an entry of the current file."""
        self._reserve_paused = True
        self._note_paused(str(e), "the blocks of the next index entries")

    @property
    def paused(self) -> bool:
        """Whether indexing is paused for want of space (``paused_at`` >= 0)."""
        return self.paused_at >= 0

    @property
    def pause_reason(self) -> Optional[str]:
        """Why indexing is paused (the last failed attempt), or None."""
        if not self.paused:
            return None
        e = self.pause_log.last_error
        return e if isinstance(e, str) or e is None else str(e)

    @property
    def paused_at(self) -> int:
        """Commit-log offset of the first record not indexed for want of space, or -1."""
        return -1 if self.builder.enabled or not self.enabled else self.builder.paused_at

    def resume(self) -> int:
        """Restart a paused index when the disk has room for a new file. Returns the
        commit-log offset the dispatcher must replay from to fill the gap, or -1."""
        at = self.paused_at
        if at < 0:
            return -1
        guard = self.disk_guard
        if guard is not None and not guard.fits(self.file_size):
            return -1
        # not logged here: the pause episode ends (one record) when a new index file
        # exists (``_roll``); a resume whose file then cannot be allocated continues it
        self.builder.paused_at = -1
        self.builder.enabled = True
        if self._reserve_paused:            # no new file to wait for: the episode ends here
            self._reserve_paused = False
            self.pause_log.succeeded()
        return at

    def delete_expired_files(self, phy_min_offset: int) -> int:
        """Retention: delete the index files (never the last) whose records all lie below
        ``phy_min_offset`` (``IndexService.deleteExpiredFile``). Returns how many."""
        with self._lock:
            files = self.index_files
            n = 0
            while n < len(files) - 1 and files[n].end_phy_offset < phy_min_offset:
                n += 1
            if not n:
                return 0
            self.index_files = files[n:]
        for f in files[:n]:
            f.mapped_file.destroy()
        return n

    def drop_deleted(self) -> int:
        """Read-only stores: unmap the index files another process deleted."""
        files = self.index_files
        gone = [f for f in files if not os.path.exists(f.mapped_file.file_name)]
        if gone:
            self.index_files = [f for f in files if f not in gone]
            for f in gone:
                f.mapped_file.close()
        return len(gone)

    def truncate(self, phy_offset: int) -> int:
        """Delete the newest files that index records at or past ``phy_offset`` (cut by
        recovery); the replay rebuilds their entries. Returns how many were deleted."""
        n = 0
        while self.index_files and self.index_files[-1].end_phy_offset >= phy_offset > 0:
            f = self.index_files[-1]
            self.index_files = self.index_files[:-1]
            f.mapped_file.destroy()
            n += 1
        if phy_offset == 0:
            n = len(self.index_files)
            self.destroy()
        self.builder.set_current(self.index_files[-1] if self.index_files else None)
        return n

    def _flush_full(self, f: IndexFile) -> None:
        """Flush a full file, then record its end time in the checkpoint (RocketMQ). A file
        closed meanwhile needs nothing more (shutdown flushes every file first,
        retention deletes it)."""
        try:
            f.flush()
            end = f.end_timestamp
        except StoreStateError:
            return
        if self.checkpoint is not None:
            self.checkpoint.index_msg_timestamp = end
            self.checkpoint.flush()

    def end_phy_offset(self) -> int:
        """Commit-log offset of the last record indexed (0 with no index)."""
        files = self.index_files
        return files[-1].end_phy_offset if files else 0

    def indexed_through(self) -> int:
        """Commit-log offset just past the last record indexed (0 with no index): where a
        replay that only the index needs would start."""
        files = self.index_files
        if not files or files[-1].index_count <= 1:
            return files[-1].end_phy_offset if files else 0
        end = files[-1].end_phy_offset
        hole = self.commit_log.damage.hole_at(end)
        if hole is not None:                  # the record was destroyed after it was indexed
            return hole[1]
        try:
            raw = self.commit_log.get_message_bytes(end)
        except CorruptRecordError:
            return end
        return end + len(raw) if raw is not None else end

    # -- queries -----------------------------------------------------------------------------

    def query_offsets(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """Offsets of messages of ``topic`` whose key or unique key is ``key``, stored in
        [begin, end], newest first (what ``query_message`` reads)."""
        return [m.commitlog_offset for m in self.querier.query_message(topic, key, max_num, begin, end)]

    # -- lifecycle ---------------------------------------------------------------------------

    def flush(self) -> None:
        for f in self.index_files:
            f.flush()

    def shutdown(self) -> None:
        self.querier.closed = True
        for f in self.index_files:
            f.mapped_file.close()
        self.index_files = []
        self.builder.set_current(None)

    def destroy(self) -> None:
        for f in self.index_files:
            f.mapped_file.destroy()
        self.index_files = []
        self.builder.set_current(None)
