"""DamageLedger: what a store found damaged, fenced or could not return, in one place.

pymq's promise is that nothing acknowledged is lost, altered or *silently* skipped. When
the disk did lose or alter bytes, the store fences the damage instead of cutting the log
at it, and says so: every hole, every record that failed its CRC on a read and every
queue entry that did not describe its record passes through this ledger, which logs it
once, counts it for ``stats()["damage"]`` and keeps the holes for ``store.open_report``
and ``pymq check``.

A **hole** is a stretch ``[start, end)`` of the commit log that holds no record passing
the acceptance rule (``pymq._core.record.record_at``) while a valid record follows it:
recovery, dispatch and followers step over it to that record and keep everything after.
"""

from __future__ import annotations

import logging
import threading
from typing import Optional

log = logging.getLogger("pymq")

#: distinct damaged positions remembered for logging once; past it, counting goes on
_SEEN_CAP = 4096


class DamageLedger:
    """Holes of the commit log and damage met by reads, logged once and counted."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.holes: list[tuple[int, int]] = []      # [start, end) commit-log offsets, sorted
        self.torn_tails: list[tuple[int, int, Optional[str]]] = []   # (offset, bytes, kept as)
        self.crc_errors = 0          # records that failed their body CRC on a read
        self.bad_entries = 0         # queue entries that did not describe their record
        self.lost_entries = 0        # queue entries whose record the log no longer holds
        self.repaired_entries = 0    # queue entries rewritten from the log
        self.altered_headers = 0     # records whose header names a position no queue gives them
        self.rebuilt_queues: list[tuple[str, int, int, str]] = []   # (topic, queue id, from entry, why)
        self.damaged_index_files: list[tuple[str, str, bool]] = []   # (path, why, rebuilt)
        self._seen: set = set()

    # -- holes -------------------------------------------------------------------------------

    def add_hole(self, start: int, end: int, found_by: str) -> bool:
        """Record the hole ``[start, end)``; logs it the first time. Returns True when new."""
        with self._lock:
            for s, e in self.holes:
                if s <= start < e or start <= s < end:
                    return False
            self.holes.append((start, end))
            self.holes.sort()
        log.error("commit log: no valid record in [%d, %d) (%d bytes, found by %s); fenced, the records "
                  "after it are kept", start, end, end - start, found_by)
        return True

    def hole_at(self, offset: int) -> Optional[tuple[int, int]]:
        """The hole holding commit-log ``offset``, or None."""
        for s, e in self.holes:
            if s <= offset < e:
                return s, e
        return None

    def add_torn_tail(self, offset: int, nbytes: int, kept_as: Optional[str]) -> None:
        with self._lock:
            self.torn_tails.append((offset, nbytes, kept_as))
        log.error("commit log: %d bytes after offset %d hold no valid record; cut%s", nbytes, offset,
                  f", kept as {kept_as}" if kept_as else "")

    # -- reads -------------------------------------------------------------------------------

    def _first(self, key) -> bool:
        with self._lock:
            if key in self._seen:
                return False
            if len(self._seen) < _SEEN_CAP:
                self._seen.add(key)
            return True

    def crc_error(self, offset: int, topic: str = "", queue_id: int = -1, queue_offset: int = -1) -> None:
        """A read met a record whose body fails its CRC: it is not returned."""
        self.crc_errors += 1
        if self._first(("crc", offset)):
            log.error("commit log: the record at %d (%s-%d offset %d) fails its body CRC; not returned",
                      offset, topic, queue_id, queue_offset)

    def bad_entry(self, topic: str, queue_id: int, queue_offset: int, what: str) -> None:
        """A queue entry that does not describe its record (``what`` says how)."""
        self.bad_entries += 1
        if self._first(("entry", topic, queue_id, queue_offset)):
            log.error("consume queue %s-%d: entry %d %s", topic, queue_id, queue_offset, what)

    def header_altered(self, topic: str, queue_id: int, queue_offset: int, offset: int, claim: str) -> None:
        """Entry ``queue_offset`` of ``topic``/``queue_id`` points at the record at
        ``offset``, whose header names another position (``claim``) that no queue gives
        it: the header was altered; the record is not returned, the entry kept."""
        self.altered_headers += 1
        if self._first(("header", offset)):
            log.error("commit log: the record at %d is entry %d of %s-%d, but its header names %s (a header field "
                      "the body CRC does not cover was altered); not returned, the entry kept",
                      offset, queue_offset, topic, queue_id, claim)

    def lost_entry(self, topic: str, queue_id: int, queue_offset: int, offset: int) -> None:
        """A queue entry whose record is gone (in a hole, or past a cut tail)."""
        self.lost_entries += 1
        if self._first(("lost", topic, queue_id, queue_offset)):
            log.error("consume queue %s-%d: the record of entry %d (commit-log offset %d) is lost to damage; "
                      "skipped", topic, queue_id, queue_offset, offset)

    def queue_rebuilt(self, topic: str, queue_id: int, index: int, why: str) -> None:
        """Recovery cut a queue at entry ``index`` (``why``); the dispatcher rewrites it
        from the log with the records' own queue offsets."""
        with self._lock:
            self.rebuilt_queues.append((topic, queue_id, index, why))
        log.error("consume queue %s-%d: entry %d %s; cut there and rebuilt from the commit log",
                  topic, queue_id, index, why)

    def index_damaged(self, path: str, why: str, rebuilt: bool, replay_from: int = -1) -> None:
        """An index file whose structure the builder could not have written (``why``);
        a writer drops it with every later file and rebuilds them from the log."""
        with self._lock:
            self.damaged_index_files.append((path, why, rebuilt))
        if rebuilt:
            log.error("index file %s: %s; dropped with the files after it, rebuilt from commit-log offset %d",
                      path, why, replay_from)
        else:
            log.error("index file %s: %s; a query may miss keys it holds until a writer opens the store "
                      "and rebuilds it", path, why)

    # -- reporting ---------------------------------------------------------------------------

    def report_lines(self) -> list[str]:
        """One line per hole, torn tail and rebuilt queue, for ``store.open_report``."""
        lines = [f"commit log: hole [{s}, {e}) of {e - s} bytes fenced; records after it kept"
                 for s, e in self.holes]
        lines += [f"commit log: torn tail of {n} bytes at {o} cut" + (f" (kept as {k})" if k else "")
                  for o, n, k in self.torn_tails]
        lines += [f"consume queue {t}-{q}: entry {i} {why}; rebuilt from the commit log"
                  for t, q, i, why in self.rebuilt_queues]
        lines += [f"index file {p}: {why}; " + ("rebuilt from the commit log" if r else "not rebuilt (read-only)")
                  for p, why, r in self.damaged_index_files]
        return lines

    def stats(self) -> dict:
        return {
            "holes": [{"start": s, "end": e} for s, e in self.holes],
            "hole_bytes": sum(e - s for s, e in self.holes),
            "torn_tails": [{"offset": o, "bytes": n, "kept_as": k} for o, n, k in self.torn_tails],
            "crc_errors": self.crc_errors,
            "bad_entries": self.bad_entries,
            "lost_entries": self.lost_entries,
            "repaired_entries": self.repaired_entries,
            "altered_headers": self.altered_headers,
            "damaged_index_files": [{"path": p, "why": why, "rebuilt": r} for p, why, r in self.damaged_index_files],
            "rebuilt_queues": [{"topic": t, "queue_id": q, "from_entry": i, "why": why}
                               for t, q, i, why in self.rebuilt_queues],
        }
