"""Light message queues (LMQ): RocketMQ's queues that hold no record of their own.

A record that names queues in its ``INNER_MULTI_DISPATCH`` property (comma-separated) is
written once to the commit log and filed, besides its own queue, in each of them, at the
queue offset its ``INNER_MULTI_QUEUE_OFFSET`` property gives in the same order (the
writer assigns those offsets before the put, so a replay files it at the same places).
An LMQ's name starts with ``%LMQ%`` and its queue id is always 0; its consume queue is an
ordinary one (``consumequeue/%LMQ%name/0``, 20-byte entries). 5.x lite topics are LMQs
named ``%LMQ%$parent$lite`` (:mod:`pymq.broker.lite_topic`).

An LMQ entry points at a record whose header names another queue (its parent's), so the
header checks that hold for ordinary queues (``ConsumeQueue.verify_tail``, the reader's, a
queue opened past offset 0) do not apply to it; a message read from an LMQ reports its
place there (``queue_id`` 0, ``queue_offset`` the entry's index), not in its parent.
"""

from __future__ import annotations

from pymq._core.dispatch import is_dispatchable_lmq  # noqa: F401  (the rule the dispatcher files by)

LMQ_PREFIX = "%LMQ%"                                    # MixAll.LMQ_PREFIX
LMQ_QUEUE_ID = 0                                        # MixAll.LMQ_QUEUE_ID
LMQ_DISPATCH_SEPARATOR = ","                            # MixAll.LMQ_DISPATCH_SEPARATOR
PROPERTY_INNER_MULTI_DISPATCH = "INNER_MULTI_DISPATCH"
PROPERTY_INNER_MULTI_QUEUE_OFFSET = "INNER_MULTI_QUEUE_OFFSET"


def is_lmq(topic: str) -> bool:
    """Whether ``topic`` names a light message queue (``MixAll.isLmq``)."""
    return topic.startswith(LMQ_PREFIX)


def multi_queue_offset(properties: dict, queue: str) -> int:
    """The queue offset a record's multi-dispatch properties give it in ``queue``, or -1
    when they do not name that queue."""
    names = properties.get(PROPERTY_INNER_MULTI_DISPATCH)
    offsets = properties.get(PROPERTY_INNER_MULTI_QUEUE_OFFSET)
    if not names or not offsets:
        return -1
    names = names.split(LMQ_DISPATCH_SEPARATOR)
    offsets = offsets.split(LMQ_DISPATCH_SEPARATOR)
    if len(names) != len(offsets):
        return -1
    for name, text in zip(names, offsets):
        if name == queue and is_dispatchable_lmq(name) and text.isascii() and text.isdigit() and len(text) <= 18:
            return int(text)
    return -1
