"""TimerMessageService: delivery at any millisecond (RocketMQ 5's timer messages).

A message put with ``deliver_time_ms`` (or the TIMER_DELAY_SEC / TIMER_DELAY_MS /
TIMER_DELIVER_MS properties) is stored in ``rmq_sys_wheel_timer`` queue 0 with
``TIMER_OUT_MS`` = its due time, which the dispatcher makes its consume-queue tagsCode.
This service takes those entries in (enqueue) and writes each message to its real topic
when due (deliver).

On disk, RocketMQ-5-like::

    timerwheel       slots of 32 bytes: second i64 | first i64 | last i64 | num i32 | magic i32
                     slot = second % slots, slots = max(2 * timer_wheel_days days, the max delay
                     plus a day) in seconds (``timer_files.wheel_slots``); a slot whose second
                     is not the one asked for is empty (its bucket was delivered long ago)
    timerlog/        append-only 32-byte units: prev i64 | due ms i64 | commitlog offset i64 |
                     size i32 | magic i32; ``prev`` chains the units of one second backwards
    config/timerCheckpoint.json
                     {"enqueueOffset": next timer-queue offset to take in,
                      "second": the second being delivered, "delivered": [offsets done in it]}

Enqueue appends a unit and links it into the slot of its second. Delivery walks the
slot of the current second, sorts its units by due time, writes each to its real topic
at its millisecond, then moves to the next second. The service sleeps until the next due
millisecond or until the dispatcher reports a new timer message, so the cost of pending
messages is nil until their second comes: millions can wait without being scanned.

Exactly once in the normal case: the checkpoint is written every
``flush_delay_offset_interval`` ms and at shutdown, with the offsets already delivered in
the current second. After a crash, messages enqueued or delivered since the last
checkpoint are taken in again and delivered again (at least once; duplicates of one
second are dropped before delivery, so only messages delivered before the crash repeat).

Recall (RocketMQ 5.3): a delete mark is a timer message due at the same millisecond as
the one it recalls, with ``TIMER_DEL_UNIQKEY`` = ``{topic}+{uniq key}``. When a
millisecond comes, the records of its units are read together and the marks among them
collected (a record is decoded for it only when its bytes hold the mark's name); the
messages they name and the marks themselves are never delivered. A mark
that comes in before its millisecond is among them (a new unit makes the second be read
again).

The files are read through the pure functions of :mod:`pymq.store.timer_files`, which
``pymq check`` uses too.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
import time
from typing import Callable, Optional

from pymq._core.appender import TIMER_DEL_UNIQKEY     # a recall's delete mark: "{topic}+{uniq key}"
from pymq._core.mapped_file import MappedFile
from pymq._core.message import Message
from pymq.errors import CorruptRecordError, CorruptStoreError, SegmentSizeError

from .config_manager import disk_full, log_unsaved_at_shutdown
from .episode_log import EpisodeLog
from .mapped_file_queue import MappedFileQueue
from .service_thread import ServiceThread
from .timer_checkpoint import TimerCheckpoint
from .timer_files import MAGIC_DEFAULT, SLOT, UNIT, UNIT_SIZE, read_slot, units_end, wheel_damage, wheel_slots
from .timer_gate import TimerGate, need_room

log = logging.getLogger("pymq")

TIMER_TOPIC = "rmq_sys_wheel_timer"
#: The wheel and the timer log keep RocketMQ's sizes but are sparse: the log's blocks are
#: reserved this many bytes ahead of its units, the wheel's a 4 KiB granule per slot written.
TIMER_RESERVE_BYTES = 65_536
_MARK_NAME = TIMER_DEL_UNIQKEY.encode()
_DROP_ON_DELIVERY = ("REAL_TOPIC", "REAL_QID", "TIMER_DELAY_SEC", "TIMER_DELAY_MS")


def convert_message(msg, enqueue_ms: int, dequeue_ms: int) -> Message:
    """The message to write to the real topic (5.x ``convertMessage``): REAL_TOPIC and
    REAL_QID restored and removed, TIMER_ENQUEUE_MS / TIMER_DEQUEUE_MS added; relative
    timer properties removed so the delivered message is not delayed again."""
    props = dict(msg.properties)
    topic, qid = props["REAL_TOPIC"], int(props["REAL_QID"])
    for name in _DROP_ON_DELIVERY:
        props.pop(name, None)
    props["TIMER_ENQUEUE_MS"] = str(enqueue_ms)
    props["TIMER_DEQUEUE_MS"] = str(dequeue_ms)
    return Message(topic, msg.body, properties=props, queue_id=qid, flag=msg.flag,
                   born_timestamp=msg.born_timestamp, born_host=msg.born_host, sys_flag=msg.sys_flag & 0xC,
                   reconsume_times=msg.reconsume_times)


class TimerMessageService(ServiceThread):
    """Takes timer messages in and delivers each at its millisecond."""

    name = "TimerMessageService"

    def __init__(self, store_root: str, config, consume_queues, commit_log,
                 put: Callable[[Message], object]) -> None:
        super().__init__(1.0)
        self.persist_interval_s = config.flush_delay_offset_interval / 1000.0
        self._last_persist = time.monotonic()
        self.root = store_root
        self.slots_total = wheel_slots(config)       # one slot per second (timer_files)
        self.consume_queues = consume_queues
        self.commit_log = commit_log
        self.put = put
        self.checkpoint = TimerCheckpoint(store_root)
        self.timer_log = MappedFileQueue(os.path.join(store_root, "timerlog"), config.timer_log_file_size,
                                         reserve_chunk=TIMER_RESERVE_BYTES)
        self.wheel: Optional[MappedFile] = None
        self.disk_guard = None          # set by the store (DiskGuard): room for new files
        self.gate: Optional[TimerGate] = None     # set by gate_puts: timer puts refused without files
        self.files_errors = EpisodeLog(log, "timer wheel and log")
        self._files_lock = threading.Lock()     # the timer thread and timer puts open the files
        self.delivered = 0
        self.recalled = 0               # messages a delete mark kept from delivery
        # (real topic, commit-log offset) -> True when the topic was deleted after the put
        self.stale: Callable[[str, int], bool] = lambda topic, offset: False
        self.load_problem: Optional[str] = None       # what a damaged wheel made load rebuild
        self._skip_before_ms = -1
        # timer-log file start -> the latest second any of its units is filed under
        self._file_seconds: dict[int, int] = {}
        self._opened_second = -1
        self._wait_s = 1.0
        self.delivery_errors = EpisodeLog(log, "TimerMessageService delivery")
        self._due: list = []            # sorted (due ms, offset, size) of the current second
        self._due_second = None
        self._group_due: Optional[int] = None     # the millisecond whose marks were collected
        self._group_marks: set = set()             # and their keys

    # -- files -------------------------------------------------------------------------------

    def load(self) -> None:
        """Open the wheel, log and checkpoint if this store ever had timer messages.

        A wheel of the wrong length (truncated, emptied) is rebuilt unless ``strict``:
        wheel and timer log are set aside, and the timer queue is taken in again from its
        start; timers due in seconds the checkpoint says were delivered are skipped."""
        self.checkpoint.load()
        if os.path.exists(os.path.join(self.root, "timerwheel")):
            try:
                self._open_files()
                why = self._wheel_damage()
                if why is not None:
                    if self.checkpoint.strict:
                        raise CorruptStoreError(why)
                    self.wheel.close()
                    self.timer_log.shutdown()
                    self.wheel = None
                    self._rebuild(why)
            except SegmentSizeError as e:
                if self.checkpoint.strict:
                    raise
                self._rebuild(str(e))
        if self.checkpoint.second < 0:
            self.checkpoint.update(second=int(time.time()) - 1)
        self._opened_second = self.checkpoint.second

    def delete_unneeded_files(self) -> int:
        """Retention: delete the timer-log files (oldest first, never the one appended
        to) whose units are all filed under seconds delivered already. Returns how many.

        A unit is filed under its due second, or under the second being delivered when it
        came in late; the latest such second of each file is noted as units are appended
        (files from before the last open count every unit's due second and the second
        delivered at that open). Pending chains never cross a deleted file."""
        delivered = self.checkpoint.second          # seconds before it are all delivered
        return len(self.timer_log.delete_first_files(lambda mf: self._file_second(mf) < delivered))

    def _file_second(self, mf) -> int:
        second = self._file_seconds.get(mf.file_from_offset)
        if second is None:                          # a file from before this open
            second = self._opened_second
            pos = 0
            while pos + UNIT_SIZE <= mf.wrote_position:
                second = max(second, UNIT.unpack(mf.read(pos, UNIT_SIZE))[1] // 1000)
                pos += UNIT_SIZE
            self._file_seconds[mf.file_from_offset] = second
        return second

    def _wheel_damage(self) -> Optional[str]:
        """Why the wheel does not index the newest units of the timer log (zeroed or
        garbage slots), or None: ``timer_files.wheel_damage`` on the mapped files."""
        why = wheel_damage(self.wheel.read, self.slots_total,
                           ((mf.read, mf.wrote_position) for mf in reversed(self.timer_log.mapped_files)),
                           self.checkpoint.second)
        return None if why is None else f"{self.wheel.file_name} {why}"

    def _rebuild(self, why: str) -> None:
        stamp = int(time.time() * 1000)
        for name in ("timerwheel", "timerlog"):
            path = os.path.join(self.root, name)
            if os.path.exists(path):
                os.replace(path, f"{path}.corrupt-{stamp}")
        delivered_before = self.checkpoint.second if self.checkpoint.load_problem is None else -1
        self._skip_before_ms = delivered_before * 1000 if delivered_before > 0 else -1
        self.checkpoint.update(enqueue_offset=0)
        self.load_problem = (f"{why}: the timer wheel is rebuilt from the timer queue (damaged files kept "
                             f"as *.corrupt-{stamp})")
        log.error("%s", self.load_problem)

    def _open_files(self) -> None:
        path = os.path.join(self.root, "timerwheel")
        wheel = MappedFile(path, self.slots_total * SLOT.size, create=True, reserve_chunk=TIMER_RESERVE_BYTES)
        try:
            self.timer_log.load()
        except BaseException:
            wheel.close()
            raise
        wheel.set_positions(wheel.file_size)
        self.wheel = wheel
        files = self.timer_log.mapped_files
        if files:                        # units are whole or zero: find the end of the last file
            last = files[-1]
            last.set_positions(units_end(last.read, last.file_size))

    def gate_puts(self, appender) -> TimerGate:
        """Refuse the appender's timer puts while the files cannot be created or opened
        (:mod:`pymq.store.timer_gate`)."""
        self.gate = TimerGate(self.ensure_files, appender.set_timers_writeable, self.files_errors)
        appender.timer_gate = self.gate.check
        return self.gate

    def ensure_files(self):
        """Open the wheel and the log, creating what is missing, and return the timer-log
        file the next unit goes to. Raises ``DiskFullError`` when the disk has no room
        for a new wheel below its warning ratio (``DiskGuard.room_for``), or for a new
        timer-log file with 1 % of it left free (``DiskGuard.fits``, as index files), and
        ``OSError`` or ``CorruptStoreError`` when a file cannot be created or opened."""
        with self._files_lock:
            if self.wheel is None:
                if not os.path.exists(os.path.join(self.root, "timerwheel")):
                    need_room(self.disk_guard, self.slots_total * SLOT.size, "the timer wheel", True)
                self._open_files()
            mf = self.timer_log.get_last_mapped_file(0)
            if mf is None or mf.is_full():
                need_room(self.disk_guard, self.timer_log.file_size, "a timer-log file", False)
                mf = self.timer_log.get_last_mapped_file(0, need_create=True)
            return mf

    def _slot(self, second: int) -> tuple[int, int, int]:
        if self.wheel is None:
            return (-1, -1, 0)
        return read_slot(self.wheel.read, self.slots_total, second)

    def _enqueue_unit(self, due_ms: int, offset: int, size: int) -> None:
        mf = self.ensure_files()
        # a second already delivered will not be walked again: a late unit joins the current one
        second = max(due_ms // 1000, self.checkpoint.second)
        first, last, num = self._slot(second)
        self._file_seconds[mf.file_from_offset] = max(self._file_seconds.get(mf.file_from_offset, -1), second)
        pos = mf.file_from_offset + mf.wrote_position
        slot_pos = (second % self.slots_total) * SLOT.size
        self.wheel.reserve_range(slot_pos, slot_pos + SLOT.size)   # sparse: blocks before the unit
        mf.append_message(UNIT.pack(last, due_ms, offset, size, MAGIC_DEFAULT))
        self.wheel.write_at(slot_pos, SLOT.pack(second, first if first >= 0 else pos, pos, num + 1, 0))
        if second == self._due_second:
            self._due_second = None      # the current second got a new unit: re-read it

    def _units(self, second: int) -> list:
        """The units of ``second``, by due time, duplicates (a re-enqueue) dropped."""
        _first, pos, num = self._slot(second)
        seen, out = set(), []
        steps = 0
        while pos >= 0 and steps < num:
            mf = self.timer_log.find_mapped_file_by_offset(pos)
            if mf is None:
                break
            prev, due, offset, size, magic = UNIT.unpack(mf.read(pos - mf.file_from_offset, UNIT_SIZE))
            if magic != MAGIC_DEFAULT:
                break
            if offset not in seen:
                seen.add(offset)
                out.append((due, offset, size))
            pos, steps = prev, steps + 1
        out.sort()
        return out

    def _read_group(self, due: int) -> None:
        """Collect the delete marks among the units due at millisecond ``due`` of the
        current second: a mark is due at the same millisecond as the message it recalls.
        A record is decoded only when its bytes hold the mark's property name."""
        lo = bisect.bisect_left(self._due, (due,))
        hi = bisect.bisect_left(self._due, (due + 1,))
        marks = set()
        for _due, offset, _size in self._due[lo:hi]:
            try:
                raw = self.commit_log.get_message_bytes(offset)
            except CorruptRecordError:
                continue                    # delivery reports it
            if raw is not None and _MARK_NAME in raw:
                msg = self.commit_log.look_message_by_offset(offset)
                key = msg.properties.get(TIMER_DEL_UNIQKEY) if msg is not None else None
                if key:
                    marks.add(key)
        self._group_marks, self._group_due = marks, due

    # -- the two halves ----------------------------------------------------------------------

    def enqueue(self) -> int:
        """Take in the timer queue's new entries; returns how many."""
        cq = self.consume_queues.find_consume_queue(TIMER_TOPIC, 0, create=False)
        if cq is None:
            return 0
        offset = max(self.checkpoint.enqueue_offset, cq.get_min_offset_in_queue())
        high = cq.get_max_offset_in_queue()
        n = 0
        while offset < high:
            unit = cq.get_unit(offset)
            if unit is None:
                break
            phy, size, due = unit
            if due >= self._skip_before_ms:      # a rebuild skips what was delivered already
                try:
                    self._enqueue_unit(due, phy, size)
                except (OSError, CorruptStoreError) as e:   # no room for the files: the rest waits
                    if self.gate is None:
                        raise
                    self.gate.failed(e)
                    break
            offset += 1
            n += 1
        if n and self.gate is not None:
            self.gate.try_files()       # a file filled up: the next one now, or refuse timer puts
        if n:
            self.checkpoint.update(enqueue_offset=offset)
        return n

    def deliver_due(self) -> Optional[int]:
        """Deliver what is due; return the ms time of the next due message or second."""
        cp = self.checkpoint
        while not self.stopped:
            now = int(time.time() * 1000)
            second = cp.second
            if second * 1000 > now:
                return second * 1000
            if self._due_second != second:
                self._due = self._units(second)
                self._due_second = second
                self._group_due = None          # a mark may have joined: read the group again
            for due, offset, _size in self._due:
                if offset in cp.delivered:
                    continue
                now = int(time.time() * 1000)
                if due > now:
                    return due
                if due != self._group_due:
                    self._read_group(due)
                msg = self.commit_log.look_message_by_offset(offset)
                if msg is None or "REAL_TOPIC" not in msg.properties:
                    log.warning("timer: no message at %d; skipped", offset)
                elif self.stale(msg.properties["REAL_TOPIC"], offset):
                    pass                    # its topic was deleted after it was put: dropped
                elif TIMER_DEL_UNIQKEY in msg.properties:
                    pass                    # a delete mark: for the wheel only
                elif self._group_marks and f"{msg.properties['REAL_TOPIC']}+{msg.properties.get('UNIQ_KEY')}" \
                        in self._group_marks:
                    self.recalled += 1      # recalled before its time
                else:
                    r = self.put(convert_message(msg, msg.store_timestamp, now))
                    if not r.is_ok():
                        self.delivery_errors.failed(f"timer delivery put refused ({r.status.name})")
                        return now + 100
                    self.delivered += 1
                    self.delivery_errors.succeeded()
                with cp._lock:
                    cp.delivered.add(offset)
                    cp._mark_changed()
            # close a second only once it is over: until then new messages may still be due in it
            if (second + 1) * 1000 > int(time.time() * 1000):
                return (second + 1) * 1000
            cp.update(second=second + 1, delivered=set())
            self._due_second = None
            self._group_due = None
        return None

    def run_once(self) -> None:
        if self.gate is not None and self.gate.reason is not None:
            self.gate.check(put=False)           # space may have returned: reopen timer puts
        self.enqueue()
        nxt = self.deliver_due()
        self._wait_s = 1.0 if nxt is None else max(0.0, (nxt - time.time() * 1000) / 1000.0)
        if time.monotonic() - self._last_persist >= self.persist_interval_s:
            self._last_persist = time.monotonic()
            self.persist()

    def persist(self) -> None:
        """Flush the log and wheel, then write the checkpoint that describes them."""
        if self.wheel is not None:
            self.timer_log.flush_all()
            self.wheel.flushed_position = 0     # written anywhere: sync the whole wheel
            self.wheel.flush(0)
        if self.checkpoint.dirty:
            self.checkpoint.persist()

    def wait_for_running(self, timeout_s: float) -> None:
        super().wait_for_running(min(timeout_s, self._wait_s))

    def on_arrived(self, arrived: dict) -> None:
        if (TIMER_TOPIC, 0) in arrived:
            self.wakeup()

    def on_shutdown(self) -> None:
        try:
            self.persist()
        except OSError as e:
            if not disk_full(e):
                raise
            # a full disk at shutdown: the checkpoint file keeps its previous text (and no
            # tmp file is left); one line, not the traceback the service thread would log
            self.last_error = e
            log_unsaved_at_shutdown(self.name, self.checkpoint.config_file_path(), e,
                                    "timers delivered since may be delivered again")

    def close(self) -> None:
        self.timer_log.shutdown()
        if self.wheel is not None:
            self.wheel.close()
