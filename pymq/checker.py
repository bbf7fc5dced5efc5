"""StoreChecker: verify a store without changing it (``pymq check``).

A client of :class:`pymq.MessageStore` (like :mod:`pymq.admin`), not a store component.

Opened read-only (no lock, no recovery), it checks:

* the commit log: segment sizes and names, every record whole with a matching body CRC,
  every full segment closed by its end-of-file blank;
* the consume queues: every entry points at a whole record of its topic and queue, with
  the entry's size, queue offset and tagsCode (Java hash of TAGS, or the due time in the
  schedule and timer topics);
* the index files: header counts within bounds, every chain link pointing to an older
  entry, every entry pointing at a whole record that has a key hashing to the entry's hash;
* the ``abort`` marker (a writer running or crashed) and the checkpoint;
* the side files (docs/recovery.md, "Damaged side files"), each read with the loader the
  store uses, without changing anything (:mod:`pymq.side_file_check`):
  ``config/consumerOffset.json``, ``delayOffset.json``, ``timerCheckpoint.json``,
  ``topicDeletions.json`` and ``storeSizes.json``, the ``checkpoint`` file, the
  ``timerwheel`` (its length, and that it indexes the newest pending timers), and the
  shape of the broker's ``topics.json`` and ``subscriptionGroup.json``. A damaged one is a
  problem of kind ``sidefile``, with a note saying what an open would do about it (load
  the ``.bak``, reset the table to its documented default, rebuild the wheel).

Each finding is a :class:`Problem`; the report says what was checked.
"""

from __future__ import annotations

import dataclasses
import os
import struct
from typing import Callable, Optional

from pymq._core import record
from pymq._core.index_file import index_file_size
from pymq.config import StoreConfig
from pymq.store_sizes import config_for_store, infer_sizes, numbered_files, recorded_sizes
from pymq.errors import PymqError
from pymq.message_store import MessageStore
from pymq.side_file_check import check_side_files, set_aside_files

_UNIT_SCHEDULE = ("SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer")


@dataclasses.dataclass
class Problem:
    """One finding: ``kind`` (commitlog, consumequeue, index, sidefile, store), where, what.

    ``where`` of a ``sidefile`` problem is the file's path in the store (``config/...``)."""

    kind: str
    where: str
    detail: str


@dataclasses.dataclass
class CheckReport:
    path: str
    problems: list[Problem] = dataclasses.field(default_factory=list)
    records: int = 0
    segments: int = 0
    queues: int = 0
    queue_entries: int = 0
    index_files: int = 0
    index_entries: int = 0
    min_commitlog_offset: int = -1       # where the log begins (cleaning deletes its head)
    cleaned_index_entries: int = 0       # index entries of records cleaning deleted
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def add(self, kind: str, where: str, detail: str) -> None:
        self.problems.append(Problem(kind, where, detail))

    def to_json(self) -> dict:
        return dataclasses.asdict(self) | {"ok": self.ok}


def infer_config(path: str, base: Optional[StoreConfig] = None) -> StoreConfig:
    """A config whose file sizes match the store's files: those recorded in
    ``config/storeSizes.json``, and the commit-log segment size and consume-queue entries
    per file read off the files themselves (a store written by RocketMQ has no record)."""
    cfg = dataclasses.replace(base) if base is not None else config_for_store(path)
    index_slots, index_entries = cfg.index_hash_slots, cfg.index_max_entries
    infer_sizes(path, cfg)
    if recorded_sizes(path)[0] or base is not None:     # recorded index sizes win over the ratio guess
        cfg.index_hash_slots, cfg.index_max_entries = index_slots, index_entries
    return cfg


class StoreChecker:
    """Checks the store at ``path``; ``config`` gives the file sizes (inferred if None)."""

    def __init__(self, path: str, config: Optional[StoreConfig] = None,
                 progress: Optional[Callable[[str, int, int], None]] = None) -> None:
        self.path = os.path.abspath(path)
        self.config = config or infer_config(self.path)
        self.progress = progress or (lambda stage, done, total: None)

    def run(self) -> CheckReport:
        report = CheckReport(self.path)
        if not os.path.isdir(os.path.join(self.path, "commitlog")):
            raise PymqError(f"{self.path} holds no store (no commitlog/ directory)")
        if os.path.exists(os.path.join(self.path, "abort")):
            report.notes.append("abort marker present: a writer is running, or crashed (recovery will run)")
        side_files = check_side_files(self.path, self.config, report)
        try:
            store = MessageStore(self.path, self.config, read_only=True)
        except PymqError as e:
            report.add("store", self.path, f"cannot be opened: {e}")
            return report
        # what the read-only open noted about a file reported above already is left out
        report.notes.extend(n for n in store.open_report if not any(p in n for p in side_files.reported))
        report.notes.extend(f"damaged file set aside by an earlier open: {p}" for p in set_aside_files(self.path))
        try:
            self._check_commit_log(store, report)
            if side_files.checkpoint_zero and report.records:
                report.notes.append("checkpoint holds no times (all zero) although the log holds records: "
                                    "if the last writer crashed, recovery starts at the first segment")
            self._check_queues(store, report)
            self._check_index(store, report)
        finally:
            store.shutdown()
        return report

    # -- commit log --------------------------------------------------------------------------

    def _check_commit_log(self, store, report: CheckReport) -> None:
        files = store.commit_log.mapped_file_queue.mapped_files
        fs = store.commit_log.file_size
        report.segments = len(files)
        report.min_commitlog_offset = store.commit_log.get_min_offset()
        for i, mf in enumerate(files):
            self.progress("commitlog", i, len(files))
            name = os.path.basename(mf.file_name)
            last = i == len(files) - 1
            pos, blank = 0, False
            while True:
                pos, count, blank = record.scan_segment(mf, pos, fs, True)
                report.records += count
                if blank or pos >= fs:
                    break
                whole = record.read_record_bytes(mf, pos) if pos + 8 <= mf.wrote_position else None
                if whole is None:
                    break
                # structurally whole, so the body CRC is what failed: report it, go on
                report.add("commitlog", name, f"body CRC mismatch in the record at offset "
                           f"{mf.file_from_offset + pos}")
                pos += len(whole)
            if not blank and not last:
                report.add("commitlog", name, f"no whole record at position {pos}; "
                           "the segment is not closed by its end-of-file blank")
            elif last and not blank and pos < fs:
                tail = mf.read(pos, min(8, fs - pos))
                if tail.strip(b"\0"):
                    report.add("commitlog", name, f"bytes after the last whole record at position {pos} "
                               "(a torn record, damage or garbage)")

    # -- consume queues ----------------------------------------------------------------------

    def _check_queues(self, store, report: CheckReport) -> None:
        cl = store.commit_log
        queues = store.consume_queues.queues()
        report.queues = len(queues)
        for qi, cq in enumerate(queues):
            self.progress("consumequeue", qi, len(queues))
            where = f"{cq.topic}/{cq.queue_id}"
            if cq.load_error:
                report.add("consumequeue", where, f"files not readable: {cq.load_error}")
                continue
            low, high = cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()
            for index in range(low, high):
                unit = cq.get_unit(index)
                if unit is None:
                    report.add("consumequeue", where, f"entry {index} unreadable")
                    break
                phy, size, tags_code = unit
                if size == 0x7FFFFFFF:               # pre-filled blank of a queue started past 0
                    continue
                report.queue_entries += 1
                try:
                    m = cl.look_message_by_offset(phy)
                except PymqError as e:
                    m, why = None, str(e)
                else:
                    why = "no record there"
                if m is None:
                    report.add("consumequeue", where, f"entry {index} points at {phy}: {why}")
                    continue
                bad = []
                if m.store_size != size:
                    bad.append(f"size {size} != record {m.store_size}")
                if m.topic != cq.topic or m.queue_id != cq.queue_id:
                    bad.append(f"record is {m.topic}/{m.queue_id}")
                if m.queue_offset != index:
                    bad.append(f"record queue offset {m.queue_offset}")
                if cq.topic not in _UNIT_SCHEDULE:
                    want = record.java_hash_code(m.tags) if m.tags else 0
                    if tags_code != want:
                        bad.append(f"tagsCode {tags_code} != hash of {m.tags!r} ({want})")
                if bad:
                    report.add("consumequeue", where, f"entry {index} ({phy}): " + "; ".join(bad))

    # -- index -------------------------------------------------------------------------------

    def _check_index(self, store, report: CheckReport) -> None:
        cfg = self.config
        d = os.path.join(self.path, "index")
        names = numbered_files(d)
        size = index_file_size(cfg.index_hash_slots, cfg.index_max_entries)
        report.index_files = len(names)
        cl = store.commit_log
        min_phy = cl.get_min_offset()
        for fi, name in enumerate(names):
            self.progress("index", fi, len(names))
            path = os.path.join(d, name)
            if os.path.getsize(path) != size:
                report.add("index", name, f"{os.path.getsize(path)} bytes, expected {size} for "
                           f"{cfg.index_hash_slots} slots and {cfg.index_max_entries} entries (pass the sizes)")
                continue
            with open(path, "rb") as f:
                data = f.read()
            slots, entries = cfg.index_hash_slots, cfg.index_max_entries
            count = struct.unpack_from(">i", data, 36)[0]
            count = max(count, 1)
            if count > entries:
                report.add("index", name, f"indexCount {count} > {entries} entries")
                count = entries
            base = 40 + slots * 4
            for slot in range(slots):
                v = struct.unpack_from(">i", data, 40 + slot * 4)[0]
                if v < 0 or v >= max(count, 2) and v != 0 and v > count:
                    report.add("index", name, f"slot {slot} points at entry {v}, beyond {count - 1}")
            for n in range(1, count):
                h, phy, diff, prev = struct.unpack_from(">iqii", data, base + n * 20)
                report.index_entries += 1
                if prev < 0 or prev >= n:
                    report.add("index", name, f"entry {n} links to {prev} (must be older: 0..{n - 1})")
                if phy < min_phy:                 # its segment was deleted by cleaning
                    report.cleaned_index_entries += 1
                    continue
                m = None
                try:
                    m = cl.look_message_by_offset(phy)
                except PymqError:
                    pass
                if m is None:
                    report.add("index", name, f"entry {n} points at {phy}: no record there")
                    continue
                keys = list(m.keys or []) + ([m.uniq_key] if m.uniq_key else [])
                if h not in {record.index_key_hash(f"{m.topic}#{k}") for k in keys}:
                    report.add("index", name, f"entry {n}: hash {h} matches no key of the record at {phy}")
