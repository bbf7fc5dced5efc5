"""What a hole of the commit log held: the queue offsets of the records damage destroyed.

A hole (``damage.DamageLedger``) is fenced and its records are never returned. But each
of them was acknowledged with a queue offset, and when one was the newest record of its
queue and the dispatcher had not reached it before a crash, nothing else remembers that
offset: the next put of that queue would get it again. So before the dispatcher steps over
a hole it reads what it can of the records in it, only to learn ``(topic, queue id, queue
offset)``: the damaged bytes are taken as records whose own size (or, for the last, the
hole's end) bounds them, with the magic code, size and PHYSICALOFFSET fields set to what
they must be, and passed to the one record parser (``record.decode_message``, the body
CRC not asked). A record that still does not parse ends the salvage (what follows it in
the hole cannot be delimited); its queue id and queue offset fields are still taken, and
every queue of that id whose next offset that is gets the marker (the topic is gone).

The queue then gets lost markers up to and including that offset, when the offset is the
queue's next one or within what the hole could have held (91 bytes a record at least):
``queue_repair.fill_gap``. When the offset field itself is garbage but the record lies
after everything its queue holds, it took the queue's next offset, which is marked. A
topic or queue id that is itself garbage names no existing queue and changes nothing.

Bytes at a position of the record (v1 layout, big-endian)::

    0 TOTALSIZE i32 | 4 MAGICCODE i32 | 8 BODYCRC i32 | 12 QUEUEID i32 | 16 FLAG i32 |
    20 QUEUEOFFSET i64 | 28 PHYSICALOFFSET i64 | 36 SYSFLAG i32 | ... body, topic, props
"""

from __future__ import annotations

import struct
from typing import Optional

from pymq._core.record import decode_message
from pymq.errors import CorruptRecordError

from .queue_repair import CQ_STORE_UNIT_SIZE, LOST_SIZE, MIN_RECORD_SIZE, fill_gap

_MAGIC_V1 = -626843481
_HEAD = struct.Struct(">ii")
_PHY = struct.Struct(">q")
_IDS = struct.Struct(">i4xq")          # QUEUEID, (FLAG), QUEUEOFFSET at +12


def salvage_records(data: bytes, start: int) -> list[tuple[int, Optional[str], int, int]]:
    """``(commit-log offset, topic, queue id, queue offset)`` of the records that the
    hole ``data`` (at commit-log offset ``start``) held, as far as they can be delimited;
    the topic is None for a last record whose layout is gone (its queue id and offset
    fields are taken as they are)."""
    out = []
    pos = 0
    while len(data) - pos >= MIN_RECORD_SIZE:
        left = len(data) - pos
        claimed = _HEAD.unpack_from(data, pos)[0]
        found = None
        for size in dict.fromkeys((claimed, left)):
            if not MIN_RECORD_SIZE <= size <= left:
                continue
            rec = bytearray(data[pos:pos + size])
            _HEAD.pack_into(rec, 0, size, _MAGIC_V1)
            _PHY.pack_into(rec, 28, start + pos)
            try:
                m = decode_message(bytes(rec), 0, False)
            except CorruptRecordError:
                continue
            if m is not None:
                found = (size, m)
                break
        if found is None:
            # the layout is gone (the topic with it): keep the queue id and offset fields
            queue_id, queue_offset = _IDS.unpack_from(data, pos + 12)
            out.append((start + pos, None, queue_id, queue_offset))
            break
        size, m = found
        out.append((start + pos, m.topic, m.queue_id, m.queue_offset))
        pos += size
    return out


def mark_salvaged(consume_queues, data: bytes, start: int) -> int:
    """Give every queue whose records the hole ``[start, start + len(data))`` held lost
    markers through their queue offsets, so none is handed out again. Returns how many
    queue offsets were marked."""
    marked = 0
    room = len(data) // MIN_RECORD_SIZE
    for offset, topic, queue_id, queue_offset in salvage_records(data, start):
        if topic is not None:
            cq = consume_queues.find_consume_queue(topic, queue_id, create=False)
            if cq is None:
                continue
            with cq._lock:
                nxt = cq.get_max_offset_in_queue()
                if not nxt <= queue_offset < nxt + room:
                    unit = cq.get_unit(queue_offset) if 0 <= queue_offset < nxt else None
                    if offset < cq.max_physic_offset or (unit is not None and unit[1] == LOST_SIZE) \
                            or (unit is not None and unit[0] == offset):
                        continue                 # its offset is represented in the queue already
                    # its queue-offset field is damaged, but it lies after everything the
                    # queue holds: it took the queue's next offset
                    queue_offset = nxt
                if fill_gap(cq, (queue_offset + 1) * CQ_STORE_UNIT_SIZE):   # logs what it marked
                    marked += queue_offset + 1 - nxt
            continue
        # the topic is unknown: every queue of that id whose next offset it is (a queue
        # wrongly named loses one offset to a marker, never a message: when its own
        # record arrives the marker gives way, ``queue_repair.replace_marker``)
        for cq in [cq for cq in consume_queues.queues() if cq.queue_id == queue_id]:
            with cq._lock:
                nxt = cq.get_max_offset_in_queue()
                if nxt == queue_offset and fill_gap(cq, (queue_offset + 1) * CQ_STORE_UNIT_SIZE):
                    marked += 1                  # fill_gap logs what it marked
    return marked
