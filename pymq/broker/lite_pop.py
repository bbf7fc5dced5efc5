"""Receiving from lite topics: a pop over the LMQs a lite consumer subscribed to.

RocketMQ's ``PopLiteMessageProcessor`` pops for one client across the lite topics it is
subscribed to (those with new messages first), FIFO within each: a lite topic's queue is
held by the group while a batch of it is in flight. pymq pops the client's LMQs in turn
(the first looked at rotates) with the pop service's FIFO rule, the whole LMQ being one
message group: a group has one message of a lite topic in flight at a time, the next
comes when it is acked (or its invisible time passes, when it comes again, its
``reconsume_times`` one higher). Offsets are LMQ offsets (:func:`.lite_writer.read_lmq`);
the group's progress is its consumer offset of ``%LMQ%$parent$lite`` queue 0. A lite
topic never popped by the group starts at its first message still stored.
"""

from __future__ import annotations

from pymq.store.lmq import LMQ_QUEUE_ID

from .pop_queue import PopBatch, pop_queue
from .pop_service import PopResult, PopStatus


def pop_lite(svc, group: str, lmqs, max_nums: int, invisible_time_ms: int) -> PopResult:
    """Take up to ``max_nums`` messages for ``group`` from the LMQs ``lmqs`` (a
    :class:`PopResult`; each message's ``POP_CK`` is its receipt handle)."""
    broker = svc.broker
    order = sorted(lmq for lmq in lmqs if broker.has_queue(lmq, LMQ_QUEUE_ID))
    _fifo, max_rt = svc.group_settings(group)
    msgs: list = []
    last_put = None
    with svc._lock:
        now = svc.clock()
        if order:
            key = (group, "%LMQ%")
            start = svc._rr.get(key, 0)
            svc._rr[key] = start + 1
            n = len(order)
            for i in range(n):
                need = max_nums - len(msgs)
                if need <= 0:
                    break
                lmq = order[(start + i) % n]
                batch = PopBatch(svc, group, lmq, LMQ_QUEUE_ID, now, now + invisible_time_ms, True, max_rt, None,
                                 queue_group=lmq)
                put = pop_queue(batch, need)
                if put is not None:
                    last_put = put
                msgs.extend(batch.messages)
    svc.revive_log.wait_durable(last_put)
    return PopResult(PopStatus.FOUND if msgs else PopStatus.NO_NEW_MSG, msgs, now, invisible_time_ms)


def lite_wait_condition(svc, group: str, lmqs, timeout_s: float) -> tuple:
    """``(ready, timeout_s)`` for waiting after a lite pop of ``group`` found nothing (see
    ``PopMessageService.wait_condition``): ``ready()`` turns true when one of ``lmqs`` has
    a message past the group's cursor or a pop may find more; the timeout is cut to the
    next deadline of the group's in-flight messages of those LMQs."""
    broker = svc.broker
    wanted = set(lmqs)
    versions = {lmq: svc.wake_version(lmq) for lmq in wanted}
    cursors: dict = {}
    next_deadline = None
    with svc._lock:
        for (g, t, _q), s in svc.state.queues.items():
            if g == group and t in wanted:
                cursors[t] = s.next_offset
                d = s.next_deadline()
                if d is not None and (next_deadline is None or d < next_deadline):
                    next_deadline = d
    if next_deadline is not None:
        timeout_s = min(timeout_s, max(next_deadline - svc.clock(), 1) / 1000.0)

    def ready() -> bool:
        for lmq in wanted:
            if svc.wake_version(lmq) != versions[lmq]:
                return True
            if (broker.has_queue(lmq, LMQ_QUEUE_ID)         # (a read would make an empty one)
                    and cursors.get(lmq, 0) < broker.get_max_offset_in_queue(lmq, LMQ_QUEUE_ID)):
                return True
        return False

    return ready, timeout_s
