"""The side-file part of ``pymq check`` (docs/recovery.md, "Damaged side files").

A client of the store (like :mod:`pymq.admin`), called by :class:`pymq.checker.StoreChecker`
before it opens the store read-only. Each side file is read the way an open reads it,
with the store's own loaders, and nothing is changed: ``config/consumerOffset.json``,
``delayOffset.json``, ``timerCheckpoint.json``, ``topicDeletions.json`` and
``storeSizes.json`` (also against the sizes the files show: a record they contradict makes
every open without a config refuse), the ``checkpoint`` file, the ``timerwheel`` (its length, and that it
indexes the newest pending timers, judged by :mod:`pymq.store.timer_files` as
``TimerMessageService`` judges it), and the shape of the broker's ``topics.json`` and
``subscriptionGroup.json`` (read without importing :mod:`pymq.broker`). A damaged one is
a problem of kind ``sidefile``, with a note saying what an open would do about it (load
the ``.bak``, reset the table to its documented default, rebuild the wheel).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Generator
from typing import Callable, Optional, Protocol

from pymq.config import StoreConfig
from pymq.store_sizes import numbered_files, record_conflicts, recorded_sizes, sizes_path
from pymq.store.checkpoint import StoreCheckpoint
from pymq.store.config_manager import MISSING, ConfigManager
from pymq.store.fastjson import loads_fastjson
from pymq.store.consumer_offsets import ConsumerOffsetManager
from pymq.store.delay_offsets import DelayOffsetManager
from pymq.store.timer_files import SLOT, UNIT_SIZE, FileReader, units_end, wheel_damage, wheel_slots
from pymq.store.timer_service import TIMER_TOPIC, TimerCheckpoint
from pymq.store.topic_deletions import TopicDeletions

__all__ = ["Report", "SideFileFindings", "check_side_files", "set_aside_files", "writer_lock_held"]

_STRICT = "StoreConfig(strict_open=True) refuses to open"


class Report(Protocol):
    """Where findings go (:class:`pymq.checker.CheckReport`)."""

    notes: list[str]

    def add(self, kind: str, where: str, detail: str) -> None: ...


@dataclasses.dataclass
class SideFileFindings:
    """What :func:`check_side_files` found besides the problems and notes it reported."""

    #: absolute paths of the files reported (what the read-only open notes of them is left out)
    reported: set[str] = dataclasses.field(default_factory=set)
    #: the checkpoint file holds three zero times (legal; worth a note when the log holds records)
    checkpoint_zero: bool = False


def check_side_files(path: str, config: StoreConfig, report: Report) -> SideFileFindings:
    """Read every side file of the store at ``path`` the way an open would, change
    nothing, and add each damaged one to ``report`` (a ``sidefile`` problem and a note on
    what an open would do). While a writer holds the store, the files are its own: a
    damaged one is only noted."""
    return _SideFileCheck(os.path.abspath(path), config, report).run()


def set_aside_files(path: str) -> list[str]:
    """The ``*.corrupt-<ms>`` files (and directories) an open left in the store's root
    and ``config/`` when it set a damaged side file aside, and what recovery kept in
    ``corrupt/`` (the bytes of a torn commit-log tail it cut)."""
    out: list[str] = []
    for d in (path, os.path.join(path, "config")):
        if os.path.isdir(d):
            out.extend(os.path.join(d, n) for n in sorted(os.listdir(d)) if ".corrupt-" in n)
    kept = os.path.join(path, "corrupt")
    if os.path.isdir(kept):
        out.extend(os.path.join(kept, n) for n in sorted(os.listdir(kept)))
    return out


def writer_lock_held(path: str) -> bool:
    """Whether a writer holds the store's ``lock`` (its ``flock``), read off
    ``/proc/locks`` without taking any lock (False where that cannot be told)."""
    try:
        st = os.stat(os.path.join(path, "lock"))
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return False
    inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    return any("FLOCK" in line.split() and inode in line.split() for line in lines)


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


class _SideFileCheck:
    def __init__(self, path: str, config: StoreConfig, report: Report) -> None:
        self.path, self.config, self.report = path, config, report
        self.found = SideFileFindings()
        self._writer_holds_lock = False   # a writer has the store open: side files are its own

    def run(self) -> SideFileFindings:
        self._writer_holds_lock = writer_lock_held(self.path)
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
                reset = self._check_table(table)
            except Exception as e:       # a checker reports; it does not fail on a file
                self._add(path, f"cannot be checked ({type(e).__name__}: {e})")
                reset = True
            if table is timer_cp:
                timer_cp_reset = reset
        checks: list[tuple[str, Callable[[], None]]] = [
            (sizes_path(self.path), self._check_store_sizes),
            (os.path.join(self.path, "checkpoint"), self._check_checkpoint),
            (os.path.join(self.path, "timerwheel"), lambda: self._check_timer_wheel(timer_cp.second, timer_cp_reset)),
        ]
        for path, check in checks:
            try:
                check()
            except Exception as e:
                self._add(path, f"cannot be checked ({type(e).__name__}: {e})")
        return self.found

    def _rel(self, path: str) -> str:
        return os.path.relpath(path, self.path)

    def _add(self, path: str, detail: str, note: Optional[str] = None) -> None:
        report = self.report
        detail = detail.replace(self.path + os.sep, "")
        self.found.reported.add(path)
        if self._writer_holds_lock:
            # the writer dealt with the file at its open (its open_report) and writes it
            # again at its next save or flush: not damage of the store on disk
            report.notes.append(f"{self._rel(path)}: {detail} (a writer holds the store: it handled "
                                "this at its open and writes the file again at its next save)")
            return
        report.add("sidefile", self._rel(path), detail)
        if note:
            report.notes.append(f"{self._rel(path)}: {note}")

    @staticmethod
    def _probe(table: ConfigManager, path: str) -> Optional[str]:
        """What is wrong with ``path`` for ``table`` (None: it loads; ``MISSING``)."""
        try:
            return table.probe(path)
        except Exception as e:     # not a file (a directory), no permission, a decode that raised
            return f"unreadable ({type(e).__name__}: {e})"

    def _check_table(self, table: ConfigManager) -> bool:
        """Check a ConfigManager's file and its ``.bak`` as ``ConfigManager.load`` reads them;
        leave ``table`` holding what an open would load. Returns True when an open would
        reset the table to its default."""
        path = table.config_file_path()
        bak = path + ".bak"
        rel, rel_bak = self._rel(path), self._rel(bak)
        # the .bak first, so that the table ends with what an open loads (a failed decode
        # leaves the table unchanged)
        bak_problem = self._probe(table, bak)
        main_problem = self._probe(table, path)
        reset_note = (f"an open sets it aside as *.corrupt-<ms> and starts with {table.reset_meaning}; "
                      f"{_STRICT}")
        if main_problem is None:
            if bak_problem not in (None, MISSING):
                self.report.notes.append(f"{rel_bak} is {bak_problem}: not used while {rel} is good "
                                         "(its next save replaces it)")
            return False
        if main_problem is MISSING:
            if bak_problem is MISSING:
                return False                      # never written: nothing to load
            if bak_problem is None:
                self.report.notes.append(f"{rel} is missing: an open loads {rel_bak} and saves {rel} again")
                return False
            self._add(bak, f"{bak_problem}, and {rel} is missing", reset_note)
            return True
        if bak_problem is None:
            self._add(path, f"{main_problem}; {rel_bak} is good",
                      f"an open loads {rel_bak} instead (what the last save added is lost) and saves {rel} again")
            return False
        self._add(path, f"{main_problem}; {rel_bak} is {bak_problem}", reset_note)
        return True

    def _check_store_sizes(self) -> None:
        path = sizes_path(self.path)
        why = recorded_sizes(self.path)[1]
        if why:
            self._add(path, why,
                      "an open without a config reads the file sizes off the files (segment length, "
                      "queue file length, index length at four entries per slot); a writer saves "
                      "its sizes again")
        conflicts = record_conflicts(self.path)
        if conflicts:
            # a problem even beside a writer: it records its sizes only when it opens, so
            # every open without a config is refused until the file is fixed
            rel = self._rel(path)
            self.found.reported.add(path)
            self.report.add("sidefile", rel, "records " + ", ".join(c.recorded for c in conflicts)
                            + ", but the files show " + "; ".join(f"{c.actual} ({c.evidence})" for c in conflicts))
            self.report.notes.append(
                f"{rel}: an open without a config (the CLI, Spark, MessageStore(path)) refuses the store "
                "(SegmentSizeError) and changes nothing; fix or delete the file (the sizes are then read "
                "off the files), or open once with a StoreConfig that has the files' sizes (it records "
                "them again); this check used the files' sizes")

    def _check_checkpoint(self) -> None:
        path = os.path.join(self.path, "checkpoint")
        if not os.path.exists(path):
            return                                # recovery starts at the first segment
        cp = StoreCheckpoint(self.path, read_only=True)
        try:
            if cp.load_problem:
                self._add(path, cp.load_problem,
                          "an open keeps it as checkpoint.corrupt-<ms> and replaces it with a new checkpoint "
                          "of unknown times" if cp.wrong_length else
                          "an open keeps a copy as checkpoint.corrupt-<ms>, takes its times as unknown and "
                          "writes them again at its next flush")
            elif cp.times() == (0, 0, 0):
                self.found.checkpoint_zero = True   # legal (nothing flushed yet); noted after the log is read
        finally:
            cp.close()

    # -- timer wheel -------------------------------------------------------------------------

    def _check_timer_wheel(self, delivered: int, timer_cp_reset: bool) -> None:
        """``TimerMessageService.load``'s checks, read-only: the wheel's length, and that
        its slots index the newest units of the timer log whose second is after the one
        the timer checkpoint is delivering."""
        path = os.path.join(self.path, "timerwheel")
        if not os.path.exists(path):
            return
        cfg = self.config
        slots = wheel_slots(cfg)
        want = slots * SLOT.size
        size = os.path.getsize(path)
        why: Optional[str]
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
            self._add(path, why,
                      f"an open sets timerwheel and timerlog aside as *.corrupt-<ms> and rebuilds "
                      f"the wheel from the timer queue ({TIMER_TOPIC}): {skip}; {_STRICT}")

    def _wheel_unindexed(self, wheel_path: str, slots: int, delivered: int) -> Optional[str]:
        with FileReader(wheel_path) as wheel, contextlib.closing(self._timer_log_newest_first()) as log_files:
            why = wheel_damage(wheel.read, slots, log_files, delivered)
        return None if why is None else f"{why}: the slot of its second holds none of its units"

    def _timer_log_newest_first(self) -> Generator[tuple[Callable[[int, int], bytes], int], None, None]:
        """(reader, end of its units) of each timer-log file, newest first, each opened
        only while it is read."""
        d = os.path.join(self.path, "timerlog")
        names = numbered_files(d)
        for i, name in enumerate(reversed(names)):
            with FileReader(os.path.join(d, name)) as f:
                length = f.size // UNIT_SIZE * UNIT_SIZE
                yield f.read, units_end(f.read, length) if i == 0 else length
