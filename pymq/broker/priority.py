"""Priority messages (RocketMQ 5.4+): the queue id is the priority.

A PRIORITY message carries its priority (an int >= 0) in property ``_SYS_MSG_PRIORITY_``.
The broker files it in queue ``min(priority, write queue number - 1)`` of its topic
(RocketMQ's ``SendMessageProcessor``; a priority past the last queue shares the last
queue), so one queue holds one priority level and stays in send order. Delivery does the
rest: a pop of a topic declared PRIORITY (:mod:`.topic_message_type`) looks at the queues
from the highest queue id down (``priorityOrderAsc``, the default: 0 is the lowest
priority; false turns it around) and takes what it needs from the first queues that have
messages, so a backlog drains highest priority first. The consumer group's
``priority.factor`` attribute (0..100, default 100) is the share of pops that do so: pop
number ``n`` of a group and topic scans in priority order when ``n % 100 < factor``
(RocketMQ's ``PopConsumerService``), the others rotate over the queues like any topic, so
that low priorities are not starved when the factor is below 100. FIFO groups never scan
by priority.

pymq redelivers an expired message from its own queue (there is no retry topic), so a
retried message keeps its priority: RocketMQ's behaviour with ``useSeparateRetryQueue``.
"""

from __future__ import annotations

PROPERTY_PRIORITY = "_SYS_MSG_PRIORITY_"        # MessageConst.PROPERTY_PRIORITY
PRIORITY_FACTOR_ATTRIBUTE = "priority.factor"   # SubscriptionGroupAttributes.PRIORITY_FACTOR_ATTRIBUTE
DEFAULT_PRIORITY_FACTOR = 100


def priority_queue_id(priority: int, write_queue_nums: int) -> int:
    """The queue a message of ``priority`` goes to."""
    if priority < 0:
        raise ValueError("a priority is >= 0")
    return min(priority, max(write_queue_nums, 1) - 1)


def priority_of(props: dict) -> int:
    """A message's priority (``Message.getPriority``): the ``_SYS_MSG_PRIORITY_`` number, -1
    when it has none or it is not a number."""
    text = props.get(PROPERTY_PRIORITY)
    try:
        return int(text) if text is not None else -1
    except ValueError:
        return -1


def apply_priority(props: dict, other_type: bool, queue_id: int, write_queue_nums: int) -> int:
    """The queue of a message sent to a broker directly (RocketMQ 5.4's ``SendMessageProcessor``):
    one with a priority >= 0 goes to its priority's queue when its properties make it a
    PRIORITY message (``other_type`` False: not transactional, delayed or FIFO, which come
    first), whatever type its topic declares; otherwise it loses its priority (``props``
    changed in place) and keeps ``queue_id``."""
    priority = priority_of(props)
    if priority < 0:
        return queue_id
    if not other_type:
        return priority_queue_id(priority, write_queue_nums)
    del props[PROPERTY_PRIORITY]
    return queue_id


def priority_factor(group_config) -> int:
    """A group's ``priority.factor`` (0..100; the default when unset or not a number)."""
    attrs = getattr(group_config, "attributes", None) or {}
    try:
        value = int(attrs.get(PRIORITY_FACTOR_ATTRIBUTE, DEFAULT_PRIORITY_FACTOR))
    except (TypeError, ValueError):
        return DEFAULT_PRIORITY_FACTOR
    return min(max(value, 0), 100)


def use_priority_mode(request_count: int, factor: int) -> bool:
    """Whether pop number ``request_count`` of a group scans in priority order."""
    return request_count % 100 < factor


def scan_order(queue_ids: list, start: int, priority_mode: bool, order_asc: bool = True) -> list:
    """The order a pop looks at ``queue_ids`` (sorted ascending): in priority mode highest
    first (``order_asc``) or lowest first, else a rotation beginning at ``start``."""
    n = len(queue_ids)
    if not n:
        return []
    if priority_mode:
        return list(reversed(queue_ids)) if order_asc else list(queue_ids)
    return [queue_ids[(start + i) % n] for i in range(n)]
