"""Which is wrong, a queue entry or its record's header? Queue entries as witnesses.

RocketMQ's record checks its body by CRC, not its header: damage that changes only
QUEUEID, QUEUEOFFSET or the topic leaves a record that passes the acceptance rule but
names the wrong queue position. A consume-queue entry pointing at such a record does not
describe it, and rebuilding the queue from the log (what a bad entry normally gets) would
file the record under the position its header now names. So before a queue is rebuilt
at a mismatch, the other side is asked:

* the record names ``(topic', queue', offset')``; when that queue's entry ``offset'``
  points at the record, the record is right and the entry that led here is garbage:
  rebuild (``queue_repair.rebuild_from``);
* when the queue it names does not exist, or holds another record at that offset,
  although the dispatcher has passed it, the record's header was altered and the entry is the witness of where it
  belongs: the entry is kept (reads report it as damage and skip it; ``pymq check``
  reports the mismatch) and the record is never filed under the position it names.

The dispatcher asks the same when a record would open a new queue at an offset past 0
(``claimed_elsewhere``): a queue that already holds that record at that offset wins.

And when the record an entry points at is destroyed (``record_destroyed``: no valid
record there, but the entry's bytes lie in a fenced hole or end exactly where a valid
record begins), the entry is right and its record lost: it becomes a lost marker, so its
queue offset is kept and never handed out again (a rebuild would drop it when the
destroyed record was the newest of its queue).
"""

from __future__ import annotations

from typing import Optional

from pymq._core import record


def claimed_fields(commit_log, phy: int) -> Optional[tuple[str, int, int]]:
    """``(topic, queue id, queue offset)`` of the whole record at ``phy`` (acceptance
    rule and body CRC passed), or None."""
    mf = commit_log.mapped_file_queue.find_mapped_file_by_offset(phy)
    if mf is None or phy < mf.file_from_offset:
        return None
    pos = phy - mf.file_from_offset
    if record.accept_record(mf, pos, -1, True) <= 0:
        return None
    m = record.read_message(mf, pos, False)
    return None if m is None else (m.topic, m.queue_id, m.queue_offset)


def holds(consume_queues, topic: str, queue_id: int, index: int, phy: int) -> bool:
    """Whether queue ``topic``/``queue_id`` has entry ``index`` pointing at ``phy``."""
    cq = consume_queues.find_consume_queue(topic, queue_id, create=False)
    unit = cq.get_unit(index) if cq is not None and 0 <= index < cq.get_max_offset_in_queue() else None
    return unit is not None and unit[0] == phy


def header_altered(consume_queues, commit_log, topic: str, queue_id: int, index: int, phy: int,
                   dispatched_to: int) -> bool:
    """Entry ``index`` of ``topic``/``queue_id`` points at ``phy``, whose record names
    another position: True when the record's header is the damaged side (the queue it
    names does not exist, or holds another record at that offset, and the dispatcher has
    passed it); then it is reported to the damage ledger once."""
    if phy >= dispatched_to:
        return False
    claim = claimed_fields(commit_log, phy)
    if claim is None or claim == (topic, queue_id, index):
        return False
    cq = consume_queues.find_consume_queue(claim[0], claim[1], create=False)
    if cq is not None and claim[2] >= cq.get_max_offset_in_queue():
        return False       # the position it names is not there (yet): no judgement, rebuild
    if holds(consume_queues, claim[0], claim[1], claim[2], phy):
        return False
    commit_log.damage.header_altered(topic, queue_id, index, phy, "%s-%d offset %d" % claim)
    return True


def record_destroyed(commit_log, phy: int, size: int) -> bool:
    """Whether the entry ``(phy, size)`` describes a record slot whose bytes were
    destroyed: nothing valid at ``phy`` (a hole, or bytes failing the rule with their
    CRC), while ``phy`` is in a fenced hole or exactly ``size`` bytes on a valid record, a
    segment's end-of-file blank or the end of the data begin. Such an entry is right and
    its record is lost: it becomes a lost marker, its offset kept."""
    if size <= 0 or phy < 0:
        return False
    mf = commit_log.mapped_file_queue.find_mapped_file_by_offset(phy)
    if mf is None or phy < mf.file_from_offset:
        return False
    pos = phy - mf.file_from_offset
    if pos + size > mf.wrote_position or record.accept_record(mf, pos, -1, True) > 0:
        return False
    if commit_log.damage.hole_at(phy) is not None:
        return True
    nxt = pos + size
    return nxt == mf.wrote_position or record.accept_record(mf, nxt, -1, True) >= 0


def claimed_elsewhere(consume_queues, topic: str, queue_id: int, index: int, phy: int) -> Optional[tuple[str, int]]:
    """A record claims ``index`` of a queue that has no files yet: the queue (topic, id)
    whose entry ``index`` already points at it, or None (then it is the queue's first)."""
    for cq in consume_queues.queues():
        if (cq.topic, cq.queue_id) != (topic, queue_id) and holds(consume_queues, cq.topic, cq.queue_id, index, phy):
            return cq.topic, cq.queue_id
    return None
