"""Consume-queue entries after damage: lost markers, gaps, and rebuilding from the log.

A consume queue is derived data, rebuilt from the commit log whenever it is wrong. Two
rules keep that honest:

* **A queue offset is never handed out twice.** When the log lost records (a torn tail
  cut at open, a hole), their entries are not cut from the queue (which would hand their
  offsets to new messages): they become *lost markers*, RocketMQ's blank entry
  ``(0, Integer.MAX_VALUE, 0)``, so the queue keeps its length. A read that meets one
  skips it and reports it (``GetMessageResult.damaged``, ``stats()["damage"]``, one
  log line). The same marker fills a *gap*: a record dispatched at queue offset ``k``
  while the queue ends at ``j < k`` (the records between were in a hole).
* **A bad entry is rebuilt, not skipped.** An entry that does not describe its record
  (topic, queue id, queue offset, PHYSICALOFFSET) makes the reader stop before it; the
  queue is cut at that entry and the dispatcher replays the log from the end of the
  entry before it, writing every later entry again from the records themselves (their
  queue offsets are in the records). Other queues skip what they hold.

Layout of an entry (20 bytes, big-endian)::

    0   8  commit-log offset      (0 in a lost marker)
    8   4  record size            (0x7FFFFFFF in a lost marker)
    12  8  tags code              (0 in a lost marker)
"""

from __future__ import annotations

import logging
import struct

from pymq._core.cq_unit import read_unit

log = logging.getLogger("pymq")

CQ_STORE_UNIT_SIZE = 20
LOST_SIZE = 0x7FFFFFFF
LOST_UNIT = struct.pack(">qiq", 0, LOST_SIZE, 0)


def mark_lost_past(cq, phy_offset: int) -> int:
    """Turn every entry of ``cq`` whose record starts at or after ``phy_offset`` (the
    log was cut there) into a lost marker; returns how many. The queue keeps its length."""
    marked = 0
    with cq._lock:
        # entries are in commit-log order: walk back from the end to the first one below the cut
        for mf in reversed(cq.mapped_file_queue.mapped_files):
            low = max(0, cq.min_logic_offset - mf.file_from_offset)
            pos = mf.wrote_position - CQ_STORE_UNIT_SIZE
            while pos >= low:
                unit = read_unit(mf, pos)
                if unit is not None and unit[1] != LOST_SIZE:
                    if unit[1] > 0 and unit[0] >= 0 and unit[0] + unit[1] <= phy_offset:
                        break
                    mf.write_at(pos, LOST_UNIT)
                    marked += 1
                pos -= CQ_STORE_UNIT_SIZE
            if pos >= low:
                break
        max_phy = _last_real_end(cq)
        cq.appender.set_state(cq.mapped_file_queue.get_last_mapped_file(), max_phy)
    if marked:
        log.error("consume queue %s-%d: %d entries point past the end of the recovered commit log (%d); "
                  "marked lost, their queue offsets are not reused", cq.topic, cq.queue_id, marked, phy_offset)
    return marked


def mark_lost_at(cq, index: int) -> bool:
    """Entry ``index`` of ``cq`` describes a record that was destroyed: make it a lost
    marker (the caller holds ``cq._lock``). True when it was written."""
    pos = index * CQ_STORE_UNIT_SIZE
    mf = cq.mapped_file_queue.find_mapped_file_by_offset(pos)
    if mf is None or pos - mf.file_from_offset + CQ_STORE_UNIT_SIZE > mf.wrote_position:
        return False
    mf.write_at(pos - mf.file_from_offset, LOST_UNIT)
    log.error("consume queue %s-%d: the record of entry %d was destroyed; the entry is marked lost, its offset "
              "kept", cq.topic, cq.queue_id, index)
    return True


def replace_marker(cq, index: int, phy: int, size: int, tags_code: int) -> bool:
    """A record at ``phy`` arrives for entry ``index``, which the queue already has: when
    that entry is a lost marker and the record fits between the real entries around it
    (log order), the record turned up after all (a marker set on a guess, e.g. a hole's
    salvaged queue offset): the marker is replaced by its entry. The caller holds
    ``cq._lock``. True when it was replaced."""
    unit = cq.get_unit(index)
    if unit is None or unit[1] != LOST_SIZE:
        return False
    before, after = nearest_real(cq, index, -1), nearest_real(cq, index, 1)
    if (before is not None and before[0] + before[1] > phy) or (after is not None and after[0] < phy + size):
        return False
    pos = index * CQ_STORE_UNIT_SIZE
    mf = cq.mapped_file_queue.find_mapped_file_by_offset(pos)
    if mf is None:
        return False
    mf.write_at(pos - mf.file_from_offset, struct.pack(">qiq", phy, size, tags_code))
    if phy + size > cq.appender.max_physic_offset:
        cq.appender.set_state(cq.mapped_file_queue.get_last_mapped_file(), phy + size)
    log.warning("consume queue %s-%d: the record of entry %d turned up at commit-log offset %d; its lost marker "
                "is replaced", cq.topic, cq.queue_id, index, phy)
    return True


def _last_real_end(cq) -> int:
    """End (offset + size) of the newest entry that is not a marker, -1 when none."""
    for mf in reversed(cq.mapped_file_queue.mapped_files):
        pos = mf.wrote_position - CQ_STORE_UNIT_SIZE
        while pos >= 0:
            unit = read_unit(mf, pos)
            if unit is not None and unit[1] != LOST_SIZE and unit[1] > 0:
                return unit[0] + unit[1]
            pos -= CQ_STORE_UNIT_SIZE
    return -1


#: the smallest v1 record: a gap of more queue offsets than could fit in the log between
#: the queue's last record and the new one is not loss but a damaged queue-offset field
MIN_RECORD_SIZE = 91


def gap_is_possible(cq, expect: int, phy_offset: int) -> bool:
    """Whether records lost between the queue's last record and the one at ``phy_offset``
    could account for the gap up to byte ``expect`` (each took at least 91 bytes)."""
    mf = cq.mapped_file_queue.get_last_mapped_file()
    current = mf.file_from_offset + mf.wrote_position if mf is not None else 0
    last_end = max(cq.appender.max_physic_offset, 0)
    return (expect - current) // CQ_STORE_UNIT_SIZE <= max(0, phy_offset - last_end) // MIN_RECORD_SIZE


def fill_gap(cq, expect: int) -> bool:
    """Lost markers from the queue's end up to byte ``expect`` (a record arrives with a
    queue offset past the end: the ones between were lost). False when a file could not
    be created."""
    mfq = cq.mapped_file_queue
    filled = 0
    while True:
        mf = mfq.get_last_mapped_file(expect, need_create=True)
        if mf is None:
            return False
        current = mf.file_from_offset + mf.wrote_position
        if current >= expect:
            break
        n = min(expect - current, cq.file_size - mf.wrote_position) // CQ_STORE_UNIT_SIZE
        if n <= 0 or not mf.append_message(LOST_UNIT * n):
            return False
        filled += n
    if filled:
        log.error("consume queue %s-%d: %d queue offsets before %d have no record in the commit log (lost to "
                  "damage); marked lost", cq.topic, cq.queue_id, filled, expect // CQ_STORE_UNIT_SIZE)
    return True


def nearest_real(cq, index: int, step: int):
    """The nearest entry before (``step`` -1) or after (+1) entry ``index`` that names a
    real record (not a lost marker or blank), or None."""
    i, low, high = index + step, cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()
    while low <= i < high:
        unit = cq.get_unit(i)
        if unit is not None and unit[1] != LOST_SIZE and 0 < unit[1] and unit[0] >= 0:
            return unit
        i += step
    return None


def replay_start(cq, index: int, log_min: int) -> int:
    """Where the log must be replayed from to rebuild ``cq`` from entry ``index`` on: the
    end of the nearest earlier entry that holds a real record, else the log's start."""
    unit = nearest_real(cq, index, -1)
    return max(unit[0] + unit[1] if unit is not None else 0, log_min, 0)


def rebuild_from(cq, index: int, reput_service, log_min: int) -> bool:
    """Cut ``cq`` at entry ``index`` and replay the log so every later entry is written
    again from its record (under the dispatcher's lock). True when it ran."""
    if index < cq.get_min_offset_in_queue() or index >= cq.get_max_offset_in_queue():
        return False
    start = replay_start(cq, index, log_min)
    with reput_service._lock:
        with cq._lock:
            cq.truncate_to(index * CQ_STORE_UNIT_SIZE)
        if start < reput_service.reput_from_offset:
            reput_service.reput_from_offset = start
        reput_service.do_reput_locked()
    ledger = getattr(reput_service.commit_log, "damage", None)
    if ledger is not None:
        ledger.repaired_entries += 1
    log.warning("consume queue %s-%d: rebuilt from entry %d on (the log replayed from offset %d)",
                cq.topic, cq.queue_id, index, start)
    return True
