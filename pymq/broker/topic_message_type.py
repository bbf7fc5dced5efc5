"""A topic's message type (RocketMQ 5's ``TopicMessageType``) and the check of a sent
message against it.

A 5.x topic declares the one kind of message it takes in its ``message.type`` attribute
(``topics.json``: ``"attributes": {"message.type": "PRIORITY"}``): NORMAL, FIFO, DELAY,
TRANSACTION, PRIORITY, LITE, or MIXED (any). RocketMQ reads a topic without the attribute
as NORMAL; its proxy refuses a message whose type differs from the topic's
(``MESSAGE_PROPERTY_CONFLICT_WITH_TYPE``, "TopicMessageType validate failed"). A message's
type comes from its properties, the first that applies of: transactional (``TRAN_MSG``),
delayed (``DELAY``, ``TIMER_DELIVER_MS``, ``TIMER_DELAY_SEC``, ``TIMER_DELAY_MS``), FIFO
(``__SHARDINGKEY``), PRIORITY (``_SYS_MSG_PRIORITY_``), LITE (``__LITE_TOPIC``), else NORMAL.

pymq differs for a topic that declares no type: it keeps taking the four 4.x kinds
(NORMAL, FIFO, DELAY, TRANSACTION), as it always did, but not PRIORITY or LITE messages,
whose storage and delivery depend on the topic being declared so (:mod:`.priority`,
:mod:`.lite_topic`).
"""

from __future__ import annotations

from typing import Optional

MESSAGE_TYPE_ATTRIBUTE = "message.type"        # TopicAttributes.TOPIC_MESSAGE_TYPE_ATTRIBUTE

NORMAL = "NORMAL"
FIFO = "FIFO"
DELAY = "DELAY"
TRANSACTION = "TRANSACTION"
PRIORITY = "PRIORITY"
LITE = "LITE"
MIXED = "MIXED"
TOPIC_MESSAGE_TYPES = (NORMAL, FIFO, DELAY, TRANSACTION, PRIORITY, LITE, MIXED)
UNDECLARED_ACCEPTS = (NORMAL, FIFO, DELAY, TRANSACTION)      # pymq: a topic without the attribute


def declared_message_type(topic_config) -> Optional[str]:
    """The ``message.type`` a topic declares, or None (no attribute, or no topic). An
    unknown value is None too (RocketMQ refuses to set one)."""
    if topic_config is None:
        return None
    value = getattr(topic_config, "attributes", {}).get(MESSAGE_TYPE_ATTRIBUTE)
    return value if value in TOPIC_MESSAGE_TYPES else None


def message_type(transactional: bool = False, delayed: bool = False, fifo: bool = False,
                 priority: bool = False, lite: bool = False) -> str:
    """A message's type by RocketMQ's order (``TopicMessageType.parseFromMessageProperty``)."""
    if transactional:
        return TRANSACTION
    if delayed:
        return DELAY
    if fifo:
        return FIFO
    if priority:
        return PRIORITY
    if lite:
        return LITE
    return NORMAL


def accepted_types(declared: Optional[str]) -> tuple:
    """The message types a topic takes: its own, all for MIXED, the 4.x kinds when it
    declares none."""
    if declared is None:
        return UNDECLARED_ACCEPTS
    if declared == MIXED:
        return TOPIC_MESSAGE_TYPES[:-1]
    return (declared,)


def type_conflict(declared: Optional[str], actual: str) -> Optional[str]:
    """Why a message of type ``actual`` may not go to a topic declaring ``declared``
    (RocketMQ's wording), or None when it may."""
    if actual in accepted_types(declared):
        return None
    expected = declared or NORMAL
    return f"TopicMessageType validate failed, the expected type is {expected}, but actual type is {actual}"
