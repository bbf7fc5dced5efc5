"""MapCache: at most ``max_mapped_queue_files`` consume-queue files mapped at once.

Every ``mmap`` is one entry of the process's map table, which Linux limits to
``vm.max_map_count`` (65,530 by default): a store of 50,000 queues that kept each queue's
file mapped would leave almost no room for anything else, and one more queue file, segment
or thread stack would fail with ENOMEM. So consume-queue files are mapped on demand and
let go when idle: when more than ``cap`` are mapped, the least recently used are *evicted*
(``MappedFile.evict``: the mapping goes; the file, its positions and its reserved bytes
stay) and mapped again by their next access, a dispatcher's write (``CqAppender``), a
read (``get_message``, time lookups, recovery, cleaning, ``pymq check``), or a flush
(``fdatasync`` without a mapping). Commit-log, index and timer files are few and always
mapped.

Which file goes is CLOCK, the usual O(1) approximation of LRU: mapped files sit in a line;
the sweep takes them from its front, gives a second chance (to the back) to a file used
since it last looked, and evicts the first that was not. A read marks the file it reads
once per pull (``MappedFile.used``); a write is seen from the file's wrote position having
moved, so the dispatcher's per-entry path pays nothing for it. A file joins at the front:
one mapped for a single look (recovery's passes over every queue at open, cleaning,
``pymq check``) goes first and does not push out the files in use, unless it is used
before the next sweep. The sweep runs when a file is mapped (under this cache's lock, from whichever
thread maps it) and after each dispatch pass, and only at the cap.

Never evicted: a pinned file (a reader or a C path inside it), a file with exported buffers
(memoryviews), and the file a routed appender writes while the dispatcher runs without the
GIL (``CqRouter.evict``, the ``evictor`` of a writer). Those are skipped for the next
candidate; if all are busy the cap is exceeded until the next sweep (by at most one file
per reader and the 256 queues of the dispatcher's table of routes).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Callable, Optional

from pymq._core.mapped_file import MappedFile


class MapCache:
    """The consume-queue files of one store that are mapped, and the cap on them.

    ``cap`` 0 means no cap (files stay mapped, as RocketMQ keeps them). ``evictor(mf,
    appender) -> bool`` unmaps a file when it may (default ``mf.evict()``); a writer's
    store sets the dispatcher's ``CqRouter.evict``.
    """

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.evictor: Optional[Callable[[MappedFile, object], bool]] = None
        self.evictions = 0              # files unmapped by the sweep since the store opened
        self.remaps = 0                 # evicted files mapped again
        self.skipped = 0                # candidates kept because they were pinned or written
        self.peak = 0                   # most files mapped at once
        # mapped files in sweep order (the front is the next candidate) -> [owner (the
        # queue's CqAppender), wrote position at the last look]
        self._ring: OrderedDict[MappedFile, list] = OrderedDict()
        self._lock = threading.Lock()

    def member(self, owner) -> "QueueMaps":
        """The cache as the files of one queue see it (``owner``: the queue's appender)."""
        return QueueMaps(self, owner)

    @property
    def mapped(self) -> int:
        """Consume-queue files mapped now."""
        return len(self._ring)

    def trim(self) -> int:
        """Evict down to the cap (the dispatcher calls this after each pass: candidates it
        was writing were skipped meanwhile). Returns how many files are mapped."""
        if 0 < self.cap < len(self._ring):
            with self._lock:
                self._sweep(self.cap)
        return len(self._ring)

    # -- called through QueueMaps --------------------------------------------------------------

    def _add(self, mf: MappedFile, owner, remapped: bool) -> None:
        with self._lock:
            if 0 < self.cap <= len(self._ring):
                self._sweep(self.cap - 1)           # room for it first: it is not a candidate
            self._ring[mf] = [owner, mf.wrote_position]
            self._ring.move_to_end(mf, last=False)
            if len(self._ring) > self.peak:
                self.peak = len(self._ring)
            if remapped:
                self.remaps += 1

    def _discard(self, mf: MappedFile) -> None:
        with self._lock:
            self._ring.pop(mf, None)

    def _sweep(self, limit: int) -> None:
        """CLOCK over the line until at most ``limit`` files are mapped, looking at each
        file at most twice (once to clear its use, once to evict it). The caller holds the
        lock."""
        ring = self._ring
        evict = self.evictor
        budget = 2 * len(ring) + 2
        while len(ring) > limit and budget > 0:
            budget -= 1
            mf, entry = ring.popitem(last=False)
            if mf.closed:
                continue                # closed meanwhile (its close() will find it gone)
            wrote = mf.wrote_position
            if mf.used or wrote > entry[1]:     # read or written since the last look
                mf.used = False         # second chance
                entry[1] = wrote
                ring[mf] = entry
                continue
            if not (evict(mf, entry[0]) if evict is not None else mf.evict()):
                self.skipped += 1       # pinned, exported, or being written
                ring[mf] = entry
                continue
            self.evictions += 1


class QueueMaps:
    """One queue's view of the map cache (``MappedFile.map_cache``): its files register
    when the queue opens or creates them (``add``), and tell the cache when they are
    mapped again (``mapped``) or closed (``closed``)."""

    __slots__ = ("cache", "owner")

    def __init__(self, cache: MapCache, owner) -> None:
        self.cache = cache
        self.owner = owner

    def add(self, mf: MappedFile) -> None:
        """A file the queue just mapped (loaded, created, or found by a follower)."""
        mf.map_cache = self
        self.cache._add(mf, self.owner, False)

    def mapped(self, mf: MappedFile) -> None:
        self.cache._add(mf, self.owner, True)

    def closed(self, mf: MappedFile) -> None:
        self.cache._discard(mf)


def entry_written(mf: MappedFile, pos: int) -> bool:
    """Whether the 20-byte entry at byte ``pos`` of an evicted file holds anything, read
    with ``pread`` instead of mapping the file (a follower's look for growth at every
    queue's end: an idle queue stays unmapped). False when the file is gone."""
    if pos + 20 > mf.file_size:
        return False
    try:
        fd = os.open(mf.file_name, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        return any(os.pread(fd, 20, pos))
    finally:
        os.close(fd)
