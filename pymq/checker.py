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
  store uses, without changing anything: ``config/consumerOffset.json``,
  ``delayOffset.json``, ``timerCheckpoint.json``, ``topicDeletions.json`` and
  ``storeSizes.json``, the ``checkpoint`` file, the ``timerwheel`` (its length, and that it
  indexes the newest pending timers), and the shape of the broker's ``topics.json`` and
  ``subscriptionGroup.json``. A damaged one is a problem of kind ``sidefile``, with a note
  saying what an open would do about it (load the ``.bak``, reset the table to its
  documented default, rebuild the wheel).

Each finding is a :class:`Problem`; the report says what was checked.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import time
from typing import Callable, Optional

from pymq._core import record
from pymq._core.index_file import index_file_size
from pymq.config import StoreConfig, config_for_store, infer_sizes, recorded_sizes, sizes_path
from pymq.errors import PymqError
from pymq.message_store import MessageStore
from pymq.store.checkpoint import StoreCheckpoint
from pymq.store.config_manager import _MISSING, ConfigManager, loads_fastjson
from pymq.store.consumer_offsets import ConsumerOffsetManager
from pymq.store.delay_offsets import DelayOffsetManager
from pymq.store.timer_service import MAGIC_DEFAULT, SLOT, TIMER_TOPIC, UNIT, UNIT_SIZE, TimerCheckpoint
from pymq.store.topic_deletions import TopicDeletions

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


def _units_end(f, length: int, chunk: int = 1 << 16) -> int:
    """Where the units of a timer-log file end: the first one without the magic (units
    are whole or zero), as ``TimerMessageService`` finds it."""
    pos = 0
    while pos < length:
        f.seek(pos)
        data = f.read(min(chunk, length - pos))
        if len(data) < UNIT_SIZE:
            return pos
        for n, unit in enumerate(UNIT.iter_unpack(data[:len(data) // UNIT_SIZE * UNIT_SIZE])):
            if unit[4] != MAGIC_DEFAULT:
                return pos + n * UNIT_SIZE
        pos += len(data) // UNIT_SIZE * UNIT_SIZE
    return pos


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


class _BrokerTableShape(ConfigManager):
    """The shape of a broker table (``topics.json``, ``subscriptionGroup.json``), read
    without importing :mod:`pymq.broker`: a fastjson object whose table is an object of
    objects. The broker also checks each entry's fields; this does not. Never written."""

    def __init__(self, root_dir: str, file_name: str, table_key: str, reset_meaning: str) -> None:
        super().__init__()
        self.root_dir, self.file_name, self.table_key = root_dir, file_name, table_key
        self.reset_meaning = reset_meaning

    def config_file_path(self) -> str:
        return os.path.join(self.root_dir, "config", self.file_name)

    def encode(self, pretty: bool = True) -> str:
        raise NotImplementedError("the checker writes nothing")

    def decode(self, text: str) -> None:
        doc = loads_fastjson(text)
        if not isinstance(doc, dict) or not isinstance(doc.get(self.table_key, {}), dict):
            raise ValueError(f"not a {self.table_key}")
        for name, entry in doc.get(self.table_key, {}).items():
            if not isinstance(entry, dict):
                raise ValueError(f"{name!r}: not an object")


_STRICT = "StoreConfig(strict_open=True) refuses to open"


class StoreChecker:
    """Checks the store at ``path``; ``config`` gives the file sizes (inferred if None)."""

    def __init__(self, path: str, config: Optional[StoreConfig] = None,
                 progress: Optional[Callable[[str, int, int], None]] = None) -> None:
        self.path = os.path.abspath(path)
        self.config = config or infer_config(self.path)
        self.progress = progress or (lambda stage, done, total: None)
        self._checkpoint_zero = False     # the checkpoint file holds three zero times
        self._writer_holds_lock = False   # a writer has the store open: side files are its own

    def run(self) -> CheckReport:
        report = CheckReport(self.path)
        if not os.path.isdir(os.path.join(self.path, "commitlog")):
            raise PymqError(f"{self.path} holds no store (no commitlog/ directory)")
        if os.path.exists(os.path.join(self.path, "abort")):
            report.notes.append("abort marker present: a writer is running, or crashed (recovery will run)")
        reported = self._check_side_files(report)
        try:
            store = MessageStore(self.path, self.config, read_only=True)
        except PymqError as e:
            report.add("store", self.path, f"cannot be opened: {e}")
            return report
        # what the read-only open noted about a file reported above already is left out
        report.notes.extend(n for n in store.open_report if not any(p in n for p in reported))
        report.notes.extend(f"damaged file set aside by an earlier open: {p}" for p in self._set_aside())
        try:
            self._check_commit_log(store, report)
            if self._checkpoint_zero and report.records:
                report.notes.append("checkpoint holds no times (all zero) although the log holds records: "
                                    "if the last writer crashed, recovery starts at the first segment")
            self._check_queues(store, report)
            self._check_index(store, report)
        finally:
            store.shutdown()
        return report

    # -- side files --------------------------------------------------------------------------

    def _rel(self, path: str) -> str:
        return os.path.relpath(path, self.path)

    def _check_side_files(self, report: CheckReport) -> set[str]:
        """Read every side file the way an open would, change nothing, and report each
        damaged one (a ``sidefile`` problem and a note on what an open would do). Returns
        the absolute paths reported."""
        reported: set[str] = set()
        self._checkpoint_zero = False
        self._writer_holds_lock = self._writer_lock_held()
        timer_cp = TimerCheckpoint(self.path)
        tables = [
            ConsumerOffsetManager(self.path),
            DelayOffsetManager(self.path),
            timer_cp,
            TopicDeletions(self.path),
            _BrokerTableShape(self.path, "topics.json", "topicConfigTable",
                              "an empty topic table: topics are created again on first use"),
            _BrokerTableShape(self.path, "subscriptionGroup.json", "subscriptionGroupTable",
                              "an empty group table: groups are created again with defaults on first use"),
        ]
        timer_cp_reset = False
        for table in tables:
            path = table.config_file_path()
            try:
                reset = self._check_table(report, table, reported)
            except Exception as e:       # a checker reports; it does not fail on a file
                self._add_side(report, reported, path, f"cannot be checked ({type(e).__name__}: {e})")
                reset = True
            if table is timer_cp:
                timer_cp_reset = reset
        checks = ((sizes_path(self.path), lambda: self._check_store_sizes(report, reported)),
                  (os.path.join(self.path, "checkpoint"), lambda: self._check_checkpoint(report, reported)),
                  (os.path.join(self.path, "timerwheel"),
                   lambda: self._check_timer_wheel(report, reported, timer_cp.second, timer_cp_reset)))
        for path, check in checks:
            try:
                check()
            except Exception as e:
                self._add_side(report, reported, path, f"cannot be checked ({type(e).__name__}: {e})")
        return reported

    def _add_side(self, report: CheckReport, reported: set[str], path: str, detail: str,
                  note: Optional[str] = None) -> None:
        detail = detail.replace(self.path + os.sep, "")
        reported.add(path)
        if self._writer_holds_lock:
            # the writer dealt with the file at its open (its open_report) and writes it
            # again at its next save or flush: not damage of the store on disk
            report.notes.append(f"{self._rel(path)}: {detail} (a writer holds the store: it handled "
                                "this at its open and writes the file again at its next save)")
            return
        report.add("sidefile", self._rel(path), detail)
        if note:
            report.notes.append(f"{self._rel(path)}: {note}")

    def _writer_lock_held(self) -> bool:
        """Whether a writer holds the store's ``lock`` (its ``flock``), read off
        ``/proc/locks`` without taking any lock (False where that cannot be told)."""
        try:
            st = os.stat(os.path.join(self.path, "lock"))
            with open("/proc/locks") as f:
                lines = f.read().splitlines()
        except OSError:
            return False
        inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        return any("FLOCK" in line.split() and inode in line.split() for line in lines)

    @staticmethod
    def _try_load(table: ConfigManager, path: str) -> Optional[str]:
        """What is wrong with ``path`` for ``table`` (None: it loads; ``_MISSING``)."""
        try:
            return table._try_load(path)[0]
        except Exception as e:     # not a file (a directory), no permission, a decode that raised
            return f"unreadable ({type(e).__name__}: {e})"

    def _check_table(self, report: CheckReport, table: ConfigManager, reported: set[str]) -> bool:
        """Check a ConfigManager's file and its ``.bak`` as ``ConfigManager.load`` reads them;
        leave ``table`` holding what an open would load. Returns True when an open would
        reset the table to its default."""
        path = table.config_file_path()
        bak = path + ".bak"
        rel, rel_bak = self._rel(path), self._rel(bak)
        # the .bak first, so that the table ends with what an open loads (a failed decode
        # leaves the table unchanged)
        bak_problem = self._try_load(table, bak)
        main_problem = self._try_load(table, path)
        reset_note = (f"an open sets it aside as *.corrupt-<ms> and starts with {table.reset_meaning}; "
                      f"{_STRICT}")
        if main_problem is None:
            if bak_problem not in (None, _MISSING):
                report.notes.append(f"{rel_bak} is {bak_problem}: not used while {rel} is good "
                                    "(its next save replaces it)")
            return False
        if main_problem is _MISSING:
            if bak_problem is _MISSING:
                return False                      # never written: nothing to load
            if bak_problem is None:
                report.notes.append(f"{rel} is missing: an open loads {rel_bak} and saves {rel} again")
                return False
            self._add_side(report, reported, bak, f"{bak_problem}, and {rel} is missing", reset_note)
            return True
        if bak_problem is None:
            self._add_side(report, reported, path, f"{main_problem}; {rel_bak} is good",
                           f"an open loads {rel_bak} instead (what the last save added is lost) and "
                           f"saves {rel} again")
            return False
        self._add_side(report, reported, path, f"{main_problem}; {rel_bak} is {bak_problem}", reset_note)
        return True

    def _check_store_sizes(self, report: CheckReport, reported: set[str]) -> None:
        why = recorded_sizes(self.path)[1]
        if why:
            self._add_side(report, reported, sizes_path(self.path), why,
                           "an open without a config reads the file sizes off the files (segment length, "
                           "queue file length, index length at four entries per slot); a writer saves "
                           "its sizes again")

    def _check_checkpoint(self, report: CheckReport, reported: set[str]) -> None:
        path = os.path.join(self.path, "checkpoint")
        if not os.path.exists(path):
            return                                # recovery starts at the first segment
        cp = StoreCheckpoint(self.path, read_only=True)
        try:
            if cp.load_problem:
                wrong_length = cp._mf is None
                self._add_side(report, reported, path, cp.load_problem,
                               "an open replaces it with a new checkpoint of unknown times" if wrong_length
                               else "an open takes its times as unknown and writes them again at its next flush")
            elif cp._mf is not None and cp._raw() == (0, 0, 0):
                self._checkpoint_zero = True      # legal (nothing flushed yet); noted after the log is read
        finally:
            cp.close()

    # -- timer wheel -------------------------------------------------------------------------

    def _check_timer_wheel(self, report: CheckReport, reported: set[str], delivered: int,
                           timer_cp_reset: bool) -> None:
        """``TimerMessageService.load``'s checks, read-only: the wheel's length, and that
        its slots index the newest units of the timer log whose second is after the one
        the timer checkpoint is delivering."""
        path = os.path.join(self.path, "timerwheel")
        if not os.path.exists(path):
            return
        cfg = self.config
        slots = max(2 * cfg.timer_wheel_days * 86400, cfg.timer_max_delay_sec + 86400)
        want = slots * SLOT.size
        size = os.path.getsize(path)
        if size != want:
            # the settings are not recorded with the store: a store run with other ones
            # needs its config (StoreConfig), as an open does
            why = (f"{size} bytes, not {want} ({slots} one-second slots of {SLOT.size} bytes for "
                   f"timer_wheel_days={cfg.timer_wheel_days}, timer_max_delay_sec={cfg.timer_max_delay_sec})")
        else:
            why = self._wheel_unindexed(path, slots, delivered)
            if why and os.path.exists(os.path.join(self.path, "abort")):
                time.sleep(0.05)                  # a live writer between a unit and its slot
                why = self._wheel_unindexed(path, slots, delivered)
        if why:
            skip = ("every timer still in the queue is delivered again when due" if timer_cp_reset else
                    "timers of the seconds the timer checkpoint says were delivered are skipped")
            self._add_side(report, reported, path, why,
                           f"an open sets timerwheel and timerlog aside as *.corrupt-<ms> and rebuilds "
                           f"the wheel from the timer queue ({TIMER_TOPIC}): {skip}; {_STRICT}")

    def _wheel_unindexed(self, wheel_path: str, slots: int, delivered: int, sample: int = 1024) -> Optional[str]:
        d = os.path.join(self.path, "timerlog")
        names = sorted(n for n in os.listdir(d) if n.isdigit()) if os.path.isdir(d) else []
        if not names:
            return None
        seen = 0
        with open(wheel_path, "rb") as wheel:
            for i, name in enumerate(reversed(names)):
                with open(os.path.join(d, name), "rb") as f:
                    length = os.fstat(f.fileno()).st_size // UNIT_SIZE * UNIT_SIZE
                    end = _units_end(f, length) if i == 0 else length
                    pos = end - UNIT_SIZE
                    while pos >= 0 and seen < sample:
                        f.seek(pos)
                        _prev, due, _offset, _size, _magic = UNIT.unpack(f.read(UNIT_SIZE))
                        second = due // 1000
                        if second > delivered:
                            wheel.seek((second % slots) * SLOT.size)
                            sec, _first, last, num, _m = SLOT.unpack(wheel.read(SLOT.size))
                            if sec != second or num <= 0 or last < 0:
                                return (f"does not index the timer message due at {due}: the slot of its second "
                                        "holds none of its units")
                        seen += 1
                        pos -= UNIT_SIZE
                if seen >= sample:
                    break
        return None

    def _set_aside(self) -> list[str]:
        """The ``*.corrupt-<ms>`` files an open left when it rebuilt a damaged side file."""
        out = []
        for d in (self.path, os.path.join(self.path, "config")):
            if os.path.isdir(d):
                out.extend(os.path.join(d, n) for n in sorted(os.listdir(d)) if ".corrupt-" in n)
        return out

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
        names = sorted(n for n in os.listdir(d) if n.isdigit()) if os.path.isdir(d) else []
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
