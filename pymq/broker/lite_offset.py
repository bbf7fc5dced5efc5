"""Where a lite subscription starts: the offset option of ``SyncLiteSubscription``.

A PARTIAL_ADD may carry an offset option; for each lite topic it names, RocketMQ 5.5's
``LiteSubscriptionRegistryImpl.resetOffset`` moves the group's offset of the lite topic's
LMQ (queue 0) to:

* policy MIN: 0; policy MAX: the LMQ's max offset (only new messages); policy LAST (or no
  option): where it is;
* an offset: that offset;
* tail N: N before the group's current offset, not below 0, and only when the group has
  an offset there;
* a timestamp: nothing (RocketMQ disables it silently).

The same reset to 0 follows an unsubscribe in a group with
``lite.sub.reset.offset.unsubscribe`` and a lost lite topic in an exclusive group with
``lite.sub.reset.offset.exclusive``. A reset also forgets the group's pop state of the LMQ
(RocketMQ removes its order info): what was in flight is not redelivered from there.
"""

from __future__ import annotations

from typing import Optional

from pymq.store.lmq import LMQ_QUEUE_ID

POLICY_MIN, POLICY_MAX = "MIN", "MAX"


def target_offset(kind: str, value, current: int, max_offset: int) -> Optional[int]:
    """The offset a lite topic's LMQ moves to for option ``kind`` (``policy``, ``offset``,
    ``tail_n``, ``timestamp``) and its ``value`` (for ``policy``: ``MIN``, ``MAX`` or
    ``LAST``), from the group's ``current`` offset (-1: none); None: it stays."""
    if kind == "policy":
        if value == POLICY_MIN:
            return 0
        if value == POLICY_MAX:
            return max_offset
        return None
    if kind == "offset":
        return max(int(value), 0)
    if kind == "tail_n":
        return max(0, current - int(value)) if current >= 0 else None
    return None


def current_offset(svc, group: str, lmq: str) -> int:
    """The group's offset of ``lmq``: the first not done by its pops, else its committed
    offset, else -1."""
    with svc._lock:
        s = svc.state.get((group, lmq, LMQ_QUEUE_ID))
        if s is not None:
            return s.low_water()
    return svc.broker.query_offset(group, lmq, LMQ_QUEUE_ID)


def restart_pop_state(svc, group: str, lmq: str, offset: int):
    """``group``'s pop state of ``lmq`` starts over at ``offset``, nothing in flight (an
    ``rst`` record of the pop log); returns the record's put result."""
    doc = {"g": group, "t": lmq, "q": LMQ_QUEUE_ID, "c1": offset}
    with svc._lock:
        put = svc.revive_log.append("rst", doc)
        svc.state.apply("rst", doc)
        svc._records += 1
    return put


def reset_lite_offset(svc, group: str, lmq: str, offset: int) -> None:
    """Move ``group``'s offset of ``lmq`` to ``offset``: its pop state starts over there
    and the committed offset says so."""
    svc.revive_log.wait_durable(restart_pop_state(svc, group, lmq, offset))
    svc.broker.commit_offset(group, lmq, LMQ_QUEUE_ID, offset)
    svc.wake(lmq, LMQ_QUEUE_ID)


def apply_offset_option(svc, group: str, lmq: str, kind: str, value) -> Optional[int]:
    """Reset ``group``'s offset of ``lmq`` by an offset option; returns the new offset, or
    None when it stayed."""
    broker = svc.broker
    max_offset = max(broker.get_max_offset_in_queue(lmq, LMQ_QUEUE_ID), 0) if broker.has_queue(
        lmq, LMQ_QUEUE_ID) else 0
    current = current_offset(svc, group, lmq)
    target = target_offset(kind, value, current, max_offset)
    if target is None or target == current:
        return None
    reset_lite_offset(svc, group, lmq, target)
    return target
