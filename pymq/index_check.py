"""The index part of ``pymq check``: every index file's header, slots and entries.

Called by :class:`pymq.checker.StoreChecker` after the commit-log walk
(:class:`pymq.log_check.LogWalk`), whose acceptance rule judges the record each entry
points at. Each file is read as bytes (``IndexFile``'s layout: a 40-byte header whose
``indexCount`` is at offset 36, ``slots`` slots of 4 bytes, then 20-byte entries of
``hash, phyOffset, timeDiff, prevIndex``) and checked: the structure by the store's own rule (``IndexFile.first_problem``: count,
slots, chain links, log order, header), every entry pointing at a record that passes the
rule and has a key hashing to the entry's hash. An entry pointing into a hole of the
log is counted with the hole; one pointing at or past where the walk stopped is "not
yet" beside a running writer (damage without one).

Beside a running writer, the newest file is being written while it is read: what looks
wrong is read again a moment later, and only what is still wrong is reported.
"""

from __future__ import annotations

import os
import struct
import time
from typing import Callable, Optional, Protocol

from pymq._core import record
from pymq._core.index_file import IndexFile, index_file_size
from pymq._core.mapped_file import MappedFile
from pymq.config import StoreConfig
from pymq.log_check import LogWalk
from pymq.store_sizes import numbered_files

__all__ = ["check_index"]

_HEADER = 40
_ENTRY = struct.Struct(">iqii")


class Report(Protocol):
    """Where findings go (:class:`pymq.checker.CheckReport`)."""

    index_files: int
    index_entries: int
    cleaned_index_entries: int
    not_yet_index_entries: int
    notes: list[str]

    def add(self, kind: str, where: str, detail: str) -> None: ...


def check_index(path: str, config: StoreConfig, walk: LogWalk, min_offset: int, report: Report,
                progress: Callable[[str, int, int], None] = lambda stage, done, total: None) -> None:
    """Check the index files of the store at ``path`` (sizes from ``config``) against the
    log ``walk``; entries below ``min_offset`` belong to records cleaning deleted."""
    d = os.path.join(path, "index")
    names = numbered_files(d)
    size = index_file_size(config.index_hash_slots, config.index_max_entries)
    report.index_files = len(names)
    for fi, name in enumerate(names):
        progress("index", fi, len(names))
        file_path = os.path.join(d, name)
        try:
            length = os.path.getsize(file_path)
            if length != size:
                report.add("index", name, f"{length} bytes, expected {size} for {config.index_hash_slots} slots "
                           f"and {config.index_max_entries} entries (pass the sizes)")
                continue
            _IndexFileCheck(file_path, name, config, walk, min_offset, report).run()
        except FileNotFoundError:
            report.notes.append(f"index/{name} was deleted while it was checked (a writer's cleaning)")
        except Exception as e:              # a check reports; it does not stop at a file
            report.add("index", name, f"cannot be checked ({type(e).__name__}: {e})")


class _IndexFileCheck:
    def __init__(self, path: str, name: str, config: StoreConfig, walk: LogWalk, min_offset: int,
                 report: Report) -> None:
        self.path, self.name, self.walk, self.min_offset, self.report = path, name, walk, min_offset, report
        self.slots, self.entries = config.index_hash_slots, config.index_max_entries

    def _read(self) -> tuple[bytes, bytes]:
        """The header and the entries its ``indexCount`` says are written, read in that
        order (a writer raises the count after writing an entry). The slots are checked on
        the mapped file (``_structure``); the file's unwritten rest, most of its size, is
        not read."""
        with open(self.path, "rb") as f:
            header = f.read(_HEADER)
            count, _ = self._count(header)
            f.seek(_HEADER + self.slots * 4)
            return header, f.read(count * _ENTRY.size)

    def run(self) -> None:
        data = self._read()
        found = self._problems(data, count_entries=True) + self._structure()
        if found and self.walk.writer_running:
            time.sleep(0.05)                  # a writer between an entry and its header or slot
            data = self._read()
            again = self._problems(data, count_entries=False) + self._structure()
            found = [p for p in found if p in again]
        for detail in found:
            self.report.add("index", self.name, detail)

    def _structure(self) -> list[str]:
        """The store's own structural check of the file (``IndexFile.first_problem``, the
        rule a writer rebuilds by): chains, slots, order, header."""
        mf = MappedFile(self.path, index_file_size(self.slots, self.entries), writable=False)
        try:
            problem = IndexFile(mf, self.slots, self.entries).first_problem()
        finally:
            mf.close()
        return [f"{problem} (a writer rebuilds the file from the log)"] if problem else []

    def _count(self, data: bytes) -> tuple[int, list[str]]:
        count = max(struct.unpack_from(">i", data, 36)[0], 1)
        if count > self.entries:
            return self.entries, [f"indexCount {count} > {self.entries} entries"]
        return count, []

    def _problems(self, data: tuple[bytes, bytes], count_entries: bool) -> list[str]:
        """What is wrong in ``data`` (header, entries); with ``count_entries``, the
        entries are also counted (into the report and into the holes they point into)."""
        header, entries = data
        count, out = self._count(header)
        for n in range(1, count):
            h, phy, _diff, prev = _ENTRY.unpack_from(entries, n * _ENTRY.size)
            why = self._entry_problem(n, h, phy, prev, count_entries)
            if why:
                out.append(why)
        return out

    def _entry_problem(self, n: int, h: int, phy: int, prev: int, count_entries: bool) -> Optional[str]:
        report, walk = self.report, self.walk
        if count_entries:
            report.index_entries += 1
        if phy < self.min_offset:                   # its segment was deleted by cleaning
            if count_entries:
                report.cleaned_index_entries += 1
            return None
        hole = walk.hole_at(phy)
        if hole is not None:
            if count_entries:
                hole.index_entries += 1
            return None
        if phy >= walk.end:
            if walk.writer_running:
                if count_entries:
                    report.not_yet_index_entries += 1
                return None
            return f"entry {n} points at {phy}, past the end of the log ({walk.end})"
        m = walk.record_at(phy)
        if m is None:
            return f"entry {n} points at {phy}: no record there"
        keys = list(m.keys or []) + ([m.uniq_key] if m.uniq_key else [])
        if h not in {record.index_key_hash(f"{m.topic}#{k}") for k in keys}:
            return f"entry {n}: hash {h} matches no key of the record at {phy}"
        return None
