"""How one pop takes messages from one queue, and how expired messages past their
retries are dead-lettered.

Order of what a pop hands out from a queue: first the in-flight messages whose deadline
passed (redelivered, ``reconsume_times`` + 1, or dead-lettered when their retries are
used up), then (FIFO) messages that waited for their message group, then new messages
from the group's cursor. For a FIFO group a message whose message group already has a
message in flight, or an earlier one waiting, is not handed out: it is recorded as
waiting and the cursor moves past it, so other message groups behind it go on. Messages
without a message group are never held back.

Everything one pop takes from a queue is written as one ``ck`` record, then applied to
the state (:mod:`pymq.broker.pop_state`).
"""

from __future__ import annotations

import logging
import sys
from typing import Optional

from pymq.errors import StoreStateError
from pymq.status import GetMessageStatus, PutMessageStatus

from .pop_state import PopEntry, QueuePopState
from .receipt_handle import encode_receipt_handle

log = logging.getLogger("pymq")

MAX_PAGES = 16          # consume-queue pages one pop reads from a queue at most
MAX_WAITING = 10_000    # FIFO: messages held back per queue before the cursor stops
POP_CK = "POP_CK"       # MessageConst.PROPERTY_POP_CK: the receipt handle

_SKIP = (GetMessageStatus.NO_MATCHED_MESSAGE, GetMessageStatus.OFFSET_TOO_SMALL,
         GetMessageStatus.OFFSET_FOUND_NULL, GetMessageStatus.MESSAGE_WAS_REMOVING)
_FOUND = GetMessageStatus.FOUND


class PopBatch:
    """The inputs of one pop from one queue, and the messages it took."""

    __slots__ = ("service", "group", "topic", "queue_id", "now", "deadline", "fifo", "max_rt", "tags",
                 "queue_group", "messages")

    def __init__(self, service, group: str, topic: str, queue_id: int, now: int, deadline: int, fifo: bool,
                 max_rt: int, tags: Optional[str], queue_group: Optional[str] = None) -> None:
        self.service = service
        self.group = group
        self.topic = topic
        self.queue_id = queue_id
        self.now = now
        self.deadline = deadline
        self.fifo = fifo
        self.max_rt = max_rt
        self.tags = tags
        #: FIFO: the message group of every message of the queue (a lite topic's queue is
        #: one group), instead of each message's own
        self.queue_group = queue_group
        self.messages: list = []


def read_one(broker, topic: str, queue_id: int, offset: int):
    """The message at queue offset ``offset``, or None when it is gone."""
    r = broker.get_message(None, topic, queue_id, offset, 1)
    if r.status is _FOUND and r.messages and r.messages[0].queue_offset == offset:
        return r.messages[0]
    return None


def pop_queue(b: PopBatch, need: int):
    """Take up to ``need`` messages of one queue into ``b.messages``; returns the put
    result of the last record written (None when nothing was written). Call with the
    service's lock held."""
    svc = b.service
    broker = svc.broker
    key = (b.group, b.topic, b.queue_id)
    s = svc.state.get(key)
    registered = s is not None
    last_put = None
    if s is None:
        committed = broker.query_offset(b.group, b.topic, b.queue_id)
        s = QueuePopState(committed if committed >= 0 else broker.get_min_offset_in_queue(b.topic, b.queue_id))
    elif s.next_offset > broker.get_max_offset_in_queue(b.topic, b.queue_id):
        # the queue is shorter than the group's cursor: the topic was deleted (and maybe
        # created again); its old offsets mean nothing now
        last_put = reset_queue(svc, key)
        s = svc.state.get(key)
    msgs = b.messages
    offsets: list = []
    groups: list = []
    bases: list = []
    taken: set = set()

    def take(m, o: int, mg: Optional[str], base: int) -> None:
        msgs.append(m)
        offsets.append(o)
        groups.append(mg)
        bases.append(base)
        if mg is not None:
            taken.add(mg)

    # 1. expired deliveries
    expired: list = []
    nd = s.next_deadline()
    if nd is not None and nd <= b.now:
        expired = s.take_expired(b.now)
        keep = []
        for o in expired:
            e = s.inflight.get(o)
            if e is None:
                continue
            if len(msgs) >= need:
                keep.append(o)
                continue
            m = read_one(broker, b.topic, b.queue_id, o)
            if m is None:                      # cleaned away meanwhile
                s.remove(o, e.pop_id)
                continue
            if e.base + e.attempts > b.max_rt:
                last_put = dead_letter(svc, key, s, o, e, m) or last_put
                continue
            m.reconsume_times = e.base + e.attempts
            take(m, o, e.message_group, e.base)
        s.set_ready(keep)

    try:
        # 2. FIFO messages that waited for their message group
        if s.waiting and len(msgs) < need:
            for o in sorted(s.waiting):
                if len(msgs) >= need:
                    break
                mg = s.waiting[o]
                if b.fifo and (mg in s.blocked or mg in taken):
                    continue
                m = read_one(broker, b.topic, b.queue_id, o)
                if m is None:
                    s.unhold(o)
                    continue
                take(m, o, mg if b.fifo else None, m.reconsume_times)

        # 3. new messages from the cursor
        cursor = s.next_offset
        held: list = []
        held_groups: set = set()
        pages = 0
        fifo = b.fifo
        while len(msgs) < need and pages < MAX_PAGES:
            if fifo and len(s.waiting) + len(held) >= MAX_WAITING:
                break
            pages += 1
            r = broker.get_message(b.group, b.topic, b.queue_id, cursor, 32 if fifo else need - len(msgs), b.tags)
            if r.status is _FOUND:
                stop = None
                for m in r.messages:
                    o = m.queue_offset
                    if len(msgs) >= need or (fifo and len(s.waiting) + len(held) >= MAX_WAITING):
                        stop = o
                        break
                    mg = (b.queue_group or m.message_group) if fifo else None
                    if mg is not None and (mg in taken or mg in held_groups or s.is_blocked(mg)):
                        held.append([o, mg])
                        held_groups.add(mg)
                        continue
                    take(m, o, mg, m.reconsume_times)
                cursor = stop if stop is not None else r.next_begin_offset
            elif r.status in _SKIP and r.next_begin_offset > cursor:
                cursor = r.next_begin_offset
            else:
                break

        if not offsets and not held:
            if cursor != s.next_offset:        # only filtered-out messages: memory only
                s.next_offset = cursor
                if not registered:
                    svc.state.queues[key] = s
            return last_put
        pop_id = svc._new_id()
        doc = {"g": b.group, "t": b.topic, "q": b.queue_id, "id": pop_id, "dl": b.deadline, "c1": cursor,
               "o": offsets}
        if any(mg is not None for mg in groups):
            doc["m"] = groups
        if any(bases):
            doc["r"] = bases
        if held:
            doc["w"] = held
        put = svc.revive_log.append("ck", doc)
    except BaseException:
        s.set_ready(o for o in expired if o in s.inflight and s.inflight[o].deadline <= b.now)
        del msgs[len(msgs) - len(offsets):]
        raise
    if not registered:
        svc.state.queues[key] = s
    svc.state.apply("ck", doc)
    svc._records += 1
    group, topic, qid = key
    first = len(msgs) - len(offsets)
    for i, o in enumerate(offsets):
        msgs[first + i].properties[POP_CK] = encode_receipt_handle(group, topic, qid, o, pop_id)
    return put


def reset_queue(svc, key: tuple, start: Optional[int] = None):
    """Forget the group's state of a queue: an ``rst`` record, the cursor at ``start``, by
    default the queue's first offset; a deleted topic's queues are reset to 0 without
    asking the store (a read of a queue creates it, and would bring the topic back).
    Returns the record's put result."""
    if start is None:
        start = svc.broker.get_min_offset_in_queue(key[1], key[2])
    doc = {"g": key[0], "t": key[1], "q": key[2], "c1": start}
    put = svc.revive_log.append("rst", doc)
    svc.state.apply("rst", doc)
    svc._records += 1
    return put


def dead_letter_expired(svc, key: tuple, s: QueuePopState, now: int, max_rt: int):
    """Dead-letter the expired entries of ``s`` that used up their retries; keep the
    others ready for the next pop. Returns (how many, last put result)."""
    n = 0
    last_put = None
    keep = []
    for o in s.take_expired(now):
        e = s.inflight.get(o)
        if e is None:
            continue
        if e.base + e.attempts <= max_rt:
            keep.append(o)
            continue
        m = read_one(svc.broker, key[1], key[2], o)
        if m is None:
            s.remove(o, e.pop_id)
            continue
        last_put = dead_letter(svc, key, s, o, e, m) or last_put
        n += 1
    s.set_ready(keep)
    return n, last_put


def dead_letter(svc, key: tuple, s: QueuePopState, offset: int, e: PopEntry, m, retry: bool = True):
    """Move a message that used up its retries to ``%DLQ%{group}``, then record it done
    (an ``ack`` record with ``"r": "dlq"``). Returns that record's put result, or None
    when the dead-letter put failed (with ``retry``, the entry then stays expired and is
    tried again later; without, the error propagates)."""
    if svc.slave:               # a slave puts nothing: held back instead (:mod:`.slave_pop`)
        if not retry:
            raise StoreStateError("a slave cannot put to the dead-letter queue")
        svc.revive_log.park(svc, key, s, offset, e)
        return None
    group = key[0]
    m.reconsume_times = e.reconsume_times
    m.properties.pop(POP_CK, None)
    try:
        put_dead_letter(svc.broker, group, m)
    except Exception:
        if not retry:
            raise
        svc.dead_letter_errors.failed(f"{key[1]} queue {key[2]} offset {offset} for {group}: "
                                      f"{sys.exc_info()[1]!r} (retried later)", exc_info=True)
        s.set_ready([offset])
        return None
    svc.dead_letter_errors.succeeded()
    doc = {"g": group, "t": key[1], "q": key[2], "o": offset, "id": e.pop_id, "r": "dlq"}
    put = svc.revive_log.append("ack", doc)
    svc.state.apply("ack", doc)
    svc._records += 1
    return put


def put_dead_letter(broker, group: str, m) -> None:
    """Put ``m`` (its ``reconsume_times`` the last delivery's) to ``%DLQ%{group}`` through
    the broker's send-back service (which creates the write-only DLQ topic, keeps the
    properties, sets ``RETRY_TOPIC`` / ``ORIGIN_MESSAGE_ID`` and adds 1 to
    ``reconsume_times``); raises when the put fails."""
    r = broker.send_back_service.dead_letter(group, m)
    if r.status is not PutMessageStatus.PUT_OK and r.status is not PutMessageStatus.FLUSH_DISK_TIMEOUT:
        raise StoreStateError(f"dead-letter put to %DLQ%{group} failed: {r.status.name}")
