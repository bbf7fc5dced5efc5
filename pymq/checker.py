"""StoreChecker: verify a store without changing it (``pymq check``).

A client of :class:`pymq.MessageStore` (like :mod:`pymq.admin`), not a store component.

Opened read-only (no lock, no recovery), it checks:

* the commit log (:mod:`pymq.log_check`): every segment walked with the store's one
  acceptance rule for records (layout, PHYSICALOFFSET where the record lies, body CRC);
  where damage stops the walk it resynchronises at the next valid record, as recovery
  does, and reports the stretch between as a *hole* with its offsets and the records it
  took (the consume-queue entries pointing into it); every full segment closed by its
  end-of-file blank; bytes after the last record of the last segment;
* the consume queues: every entry points at a record that passes the rule, of its topic
  and queue, with the entry's size, queue offset and tagsCode (Java hash of TAGS, or the
  due time in the schedule and timer topics);
* the index files (:mod:`pymq.index_check`): header counts within bounds, every chain
  link pointing to an older entry, every entry pointing at a record that passes the rule
  and has a key hashing to the entry's hash;
* the ``abort`` marker (a writer running or crashed) and the checkpoint;
* the side files (docs/recovery.md, "Damaged side files"), each read with the loader the
  store uses, without changing anything (:mod:`pymq.side_file_check`):
  ``config/consumerOffset.json``, ``delayOffset.json``, ``timerCheckpoint.json``,
  ``topicDeletions.json`` and ``storeSizes.json`` (also against the files' sizes), the
  ``checkpoint`` file, the ``timerwheel`` (its length, and that it indexes the newest
  pending timers), and the shape of the broker's ``topics.json`` and
  ``subscriptionGroup.json``. A damaged one is a problem of kind ``sidefile``, with a note
  saying what an open would do about it (load the ``.bak``, reset the table to its
  documented default, rebuild the wheel).

It never stops at damage: whatever a part of the check meets (an exception included) is
a problem of the report, and the rest is checked. Beside a running writer (another
process holds the store's lock) it checks what the writer had written when the walk
reached the end of the log: queue and index entries pointing past that are counted as
"not yet", never as damage.

Each finding is a :class:`Problem`; the report says what was checked.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from typing import Callable, Optional

from pymq._core import record
from pymq._core.cq_unit import read_unit_raw
from pymq.config import StoreConfig
from pymq.errors import PymqError
from pymq.index_check import check_index
from pymq.log_check import Hole, LogWalk
from pymq.message_store import MessageStore
from pymq.side_file_check import SideFileFindings, check_side_files, set_aside_files, writer_lock_held
from pymq.store.lmq import is_lmq, multi_queue_offset
from pymq.store_sizes import config_for_store, infer_sizes, recorded_sizes

_UNIT_SCHEDULE = ("SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer")
CQ_UNIT = 20                 # bytes of a consume-queue entry
LOST_SIZE = 0x7FFFFFFF       # the size of a lost marker (RocketMQ's blank entry)


@dataclasses.dataclass
class Problem:
    """One finding: ``kind`` (commitlog, consumequeue, index, sidefile, store), where, what.

    ``where`` of a ``sidefile`` problem is the file's path in the store (``config/...``)."""

    kind: str
    where: str
    detail: str


@dataclasses.dataclass
class CheckReport:
    """What ``pymq check`` found (``to_json`` for scripts); ``ok`` when no problem."""

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
    #: damaged stretches of the log between valid records (each also a ``commitlog`` problem)
    holes: list[Hole] = dataclasses.field(default_factory=list)
    #: damage at the end of the log with nothing valid after it (also a ``commitlog`` problem)
    torn_tail: Optional[Hole] = None
    lost_entries: int = 0                # lost markers in the queues (records lost to earlier damage)
    #: another process held the store's lock: entries past ``log_end`` are "not yet"
    writer_running: bool = False
    log_end: int = -1                    # the commit-log offset where the walk of the log ended
    not_yet_entries: int = 0             # queue entries pointing at or past log_end (beside a writer)
    not_yet_index_entries: int = 0       # index entries pointing at or past log_end (beside a writer)
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
    cfg = dataclasses.replace(base) if base is not None else config_for_store(path, refuse_contradiction=False)
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
        """The report; raises :class:`PymqError` only when ``path`` holds no store."""
        report = CheckReport(self.path)
        if not os.path.isdir(os.path.join(self.path, "commitlog")):
            raise PymqError(f"{self.path} holds no store (no commitlog/ directory)")
        report.writer_running = writer_lock_held(self.path)
        if report.writer_running:
            report.notes.append("a writer holds the store: the check reads what it had written when the "
                                "walk reached the end of the log")
        elif os.path.exists(os.path.join(self.path, "abort")):
            report.notes.append("abort marker present: the last writer crashed (recovery will run)")
        side_files = SideFileFindings()
        try:
            side_files = check_side_files(self.path, self.config, report)
        except Exception as e:            # a check reports; it does not stop
            report.add("store", self.path, f"the side files could not be checked ({type(e).__name__}: {e})")
        try:
            store = MessageStore(self.path, self.config, read_only=True)
        except Exception as e:
            report.add("store", self.path, f"cannot be opened: {e}")
            return report
        # what the read-only open noted about a file reported above already is left out
        report.notes.extend(n for n in store.open_report if not any(p in n for p in side_files.reported))
        report.notes.extend(f"damaged file set aside by an earlier open: {p}" for p in set_aside_files(self.path))
        walk = LogWalk(store.commit_log.mapped_file_queue.mapped_files, store.commit_log.file_size,
                       report.writer_running, not os.path.exists(os.path.join(self.path, "abort")))
        try:
            stages: list[tuple[str, Callable[[], None]]] = [
                ("commit log", lambda: self._check_commit_log(store, walk, report)),
                ("consume queues", lambda: self._check_queues(store, walk, report)),
                ("index", lambda: check_index(self.path, self.config, walk, report.min_commitlog_offset,
                                              report, self.progress)),
            ]
            for stage, check in stages:
                try:
                    check()
                except Exception as e:
                    report.add("store", stage, f"the check of the {stage} stopped early ({type(e).__name__}: {e})")
        finally:
            try:
                store.shutdown()
            except Exception as e:
                report.notes.append(f"closing the read-only store failed ({type(e).__name__}: {e})")
        if side_files.checkpoint_zero and report.records:
            report.notes.append("checkpoint holds no times (all zero) although the log holds records: "
                                "if the last writer crashed, recovery starts at the first segment")
        for hole in walk.holes:           # counted by the queue and index passes
            report.holes.append(hole)
            report.add("commitlog", hole.segment, hole.describe())
        if walk.tail is not None:
            report.torn_tail = walk.tail
            report.add("commitlog", walk.tail.segment, walk.tail.describe())
        if report.lost_entries:
            report.notes.append(f"{report.lost_entries} queue entries are lost markers (records lost to damage "
                                "earlier: an open cut a torn tail, or a queue rebuilt over a hole); their queue "
                                "offsets are never handed out again")
        if report.not_yet_entries or report.not_yet_index_entries:
            report.notes.append(f"{report.not_yet_entries} queue entries and {report.not_yet_index_entries} index "
                                f"entries point at or past commit-log offset {walk.end}, where the walk of the log "
                                "ended: written by the running writer since, not checked (not damage)")
        return report

    # -- commit log --------------------------------------------------------------------------

    def _check_commit_log(self, store, walk: LogWalk, report: CheckReport) -> None:
        report.segments = len(walk.files)
        report.min_commitlog_offset = store.commit_log.get_min_offset()
        walk.run(self.progress)
        report.records = walk.records
        report.log_end = walk.end

    # -- consume queues ----------------------------------------------------------------------

    def _check_queues(self, store, walk: LogWalk, report: CheckReport) -> None:
        queues = store.consume_queues.queues()
        report.queues = len(queues)
        for qi, cq in enumerate(queues):
            self.progress("consumequeue", qi, len(queues))
            where = f"{cq.topic}/{cq.queue_id}"
            try:
                self._check_queue(cq, where, walk, report)
            except Exception as e:
                report.add("consumequeue", where, f"cannot be checked ({type(e).__name__}: {e})")

    def _check_queue(self, cq, where: str, walk: LogWalk, report: CheckReport) -> None:
        if cq.load_error:
            report.add("consumequeue", where, f"files not readable: {cq.load_error}")
            return
        low, high = cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()
        lost: list[int] = []             # lost markers since the last real entry
        prev_end = -1                    # where the last real entry's record ends
        for index, unit in _entries(cq, low, high, walk.writer_running):
            if unit is None:
                if not walk.writer_running:
                    report.add("consumequeue", where, f"entry {index} unreadable")
                break                    # beside a writer: past what the read-only view has mapped
            phy, size, tags_code = unit
            if size == LOST_SIZE:        # a lost marker: its record was lost to damage earlier
                report.lost_entries += 1
                lost.append(index)
                continue
            report.queue_entries += 1
            if lost:
                self._lost_between(walk, where, lost, prev_end, phy)
            prev_end = phy + max(size, 0)
            hole = walk.hole_at(phy)
            if hole is not None:                 # the hole took its record: counted with the hole
                hole.take(where, index)
                continue
            if phy >= walk.end:
                if walk.writer_running:
                    report.not_yet_entries += 1  # written after the walk passed: not yet
                else:
                    report.add("consumequeue", where,
                               f"entry {index} points at {phy}, past the end of the log ({walk.end})")
                continue
            if phy < report.min_commitlog_offset and walk.writer_running:
                continue                         # the writer's cleaning deleted its segment meanwhile
            self._check_entry(cq, where, index, unit, walk, report)
        if lost:
            self._lost_between(walk, where, lost, prev_end, None)

    @staticmethod
    def _lost_between(walk: LogWalk, where: str, lost: list[int], start: int, end: Optional[int]) -> None:
        """Count the lost markers ``lost`` (queue offsets) with the hole their records lay
        in: the first one between the entries around them, when one is there."""
        hole = walk.hole_between(max(start, 0), end)
        if hole is not None:
            for index in lost:
                hole.take(where, index)
        lost.clear()

    @staticmethod
    def _check_entry(cq, where: str, index: int, unit: tuple, walk: LogWalk, report: CheckReport) -> None:
        phy, size, tags_code = unit
        m = walk.record_at(phy)
        if m is None:
            report.add("consumequeue", where, f"entry {index} points at {phy}: no record there")
            return
        bad = []
        if m.store_size != size:
            bad.append(f"size {size} != record {m.store_size}")
        if is_lmq(cq.topic):          # the record names its parent queue, and the LMQ in its properties
            lmq_offset = multi_queue_offset(m.properties, cq.topic)
            if lmq_offset != index:
                bad.append(f"record is not filed in {cq.topic} at {index} (INNER_MULTI_QUEUE_OFFSET: {lmq_offset})")
        else:
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


def _entries(cq, low: int, high: int, writer_running: bool) -> Iterator[tuple[int, Optional[tuple]]]:
    """``(queue offset, entry)`` of ``cq`` from ``low``: those the read-only store sees
    (up to ``high``), then, when no writer runs, those written after them that it leaves
    out because their records lie past the end of the log it scanned (a torn tail, damage):
    they are checked too. Beside a writer those are "not yet"."""
    for index in range(low, high):
        yield index, cq.get_unit(index)
    if writer_running:
        return
    index = max(high, low)
    mfq = cq.mapped_file_queue
    while True:
        pos = index * CQ_UNIT
        mf = mfq.find_mapped_file_by_offset(pos)
        if mf is None or pos < mf.file_from_offset:
            return
        unit = read_unit_raw(mf, pos - mf.file_from_offset)
        if unit == (0, 0, 0) or unit[1] <= 0:
            return
        yield index, unit
        index += 1
