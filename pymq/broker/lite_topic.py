"""Lite topics (RocketMQ 5.5): many small ordered queues under one parent topic.

A LITE message is sent to its parent topic (declared ``message.type=LITE``,
:mod:`.topic_message_type`) with the name of its lite topic in property ``__LITE_TOPIC``.
The broker stores it once, in a queue of the parent, and also files it in the light
message queue (:mod:`pymq.store.lmq`) of its lite topic, ``%LMQ%$parent$lite`` queue 0,
naming it in ``INNER_MULTI_DISPATCH`` (RocketMQ's ``SendMessageProcessor``). A lite topic
thus exists once a message was sent to it; there is no retry topic of a lite topic.

Consumers of lite topics are 5.x lite push consumers: a consumer group bound to the parent
(group attribute ``lite.bind.topic``) whose clients say which lite topics they want
(``SyncLiteSubscription``, :mod:`.lite_subscriptions`) and receive from those queues, in
order, each lite topic's messages one batch at a time per group (:mod:`.lite_pop`).

A lite topic's name is 1..64 bytes (the proxy's ``maxLiteTopicSize``) of letters, digits,
``-`` and ``_``; ``$`` is the separator of the LMQ name because no topic may contain it.
"""

from __future__ import annotations

import re
from typing import Optional

from pymq.store.lmq import LMQ_PREFIX

PROPERTY_LITE_TOPIC = "__LITE_TOPIC"            # MessageConst.PROPERTY_LITE_TOPIC
SEPARATOR = "$"                                 # LiteUtil.SEPARATOR
LITE_TOPIC_PREFIX = LMQ_PREFIX + SEPARATOR      # LiteUtil.LITE_TOPIC_PREFIX
MAX_LITE_TOPIC_SIZE = 64                        # ProxyConfig.maxLiteTopicSize

LITE_BIND_TOPIC_ATTRIBUTE = "lite.bind.topic"           # the one parent topic a lite group consumes
LITE_SUB_CLIENT_QUOTA_ATTRIBUTE = "lite.sub.client.quota"
DEFAULT_LITE_SUB_CLIENT_QUOTA = 2000            # lite topics one client of a group may subscribe
LITE_QUOTA_BUFFER = 300                         # the proxy lets a sync exceed the quota by this much
LITE_SUB_MODEL_ATTRIBUTE = "lite.sub.model"     # Shared (default) or Exclusive
LITE_SUB_EXCLUSIVE = "Exclusive"
# Exclusive groups: whether a client that loses a lite topic to another takes the group's
# offset of it back to 0 (the lite topic is consumed again from its start)
LITE_SUB_RESET_OFFSET_EXCLUSIVE_ATTRIBUTE = "lite.sub.reset.offset.exclusive"
# whether a PARTIAL_REMOVE takes the group's offset of the lite topic back to 0
LITE_SUB_RESET_OFFSET_UNSUBSCRIBE_ATTRIBUTE = "lite.sub.reset.offset.unsubscribe"

_LITE_NAME = re.compile(r"[A-Za-z0-9_-]+\Z")


class IllegalLiteTopicError(ValueError):
    """A lite topic name that may not be used (the protocol's ``ILLEGAL_LITE_TOPIC``)."""


def to_lmq_name(parent_topic: str, lite_topic: str) -> str:
    """``%LMQ%$parent$lite`` (``LiteUtil.toLmqName``)."""
    if not parent_topic or not lite_topic:
        raise ValueError("a parent topic and a lite topic are needed")
    return LITE_TOPIC_PREFIX + parent_topic + SEPARATOR + lite_topic


def is_lite_topic_queue(lmq_name: str) -> bool:
    """Whether ``lmq_name`` is the queue of a lite topic (its prefix only)."""
    return lmq_name.startswith(LITE_TOPIC_PREFIX)


def parent_and_lite(lmq_name: str) -> Optional[tuple[str, str]]:
    """``(parent topic, lite topic)`` of a lite topic's queue name, or None."""
    if not is_lite_topic_queue(lmq_name):
        return None
    parts = lmq_name[len(LITE_TOPIC_PREFIX):].split(SEPARATOR)
    if len(parts) != 2 or not parts[0] or not parts[1]:
        return None
    return parts[0], parts[1]


def lite_queues_of(topics, parent_topic: str) -> list[str]:
    """The lite topics' queue names among ``topics`` that belong to ``parent_topic``."""
    prefix = LITE_TOPIC_PREFIX + parent_topic + SEPARATOR
    return [t for t in topics if t.startswith(prefix)]


def check_lite_topic(lite_topic: str, max_size: int = MAX_LITE_TOPIC_SIZE) -> str:
    """``lite_topic`` when it is a legal name, else :class:`IllegalLiteTopicError` with the
    proxy's reason (``GrpcValidator.validateLiteTopic``)."""
    if not lite_topic or not lite_topic.strip():
        raise IllegalLiteTopicError("lite topic cannot be the char sequence of whitespace")
    if len(lite_topic.encode("utf-8")) > max_size:
        raise IllegalLiteTopicError(f"lite topic exceed the max size {max_size}")
    if not _LITE_NAME.match(lite_topic):
        raise IllegalLiteTopicError("lite topic can only contain alphanumeric characters, hyphens(-), "
                                    "and underscores(_)")
    return lite_topic


def lite_bind_topic(group_config) -> Optional[str]:
    """The parent topic a group is bound to (``lite.bind.topic``), or None."""
    attrs = getattr(group_config, "attributes", None) or {}
    return attrs.get(LITE_BIND_TOPIC_ATTRIBUTE) or None


def lite_sub_client_quota(group_config) -> int:
    """How many lite topics one client of the group may subscribe (``lite.sub.client.quota``)."""
    attrs = getattr(group_config, "attributes", None) or {}
    try:
        return max(int(attrs.get(LITE_SUB_CLIENT_QUOTA_ATTRIBUTE, DEFAULT_LITE_SUB_CLIENT_QUOTA)), 0)
    except (TypeError, ValueError):
        return DEFAULT_LITE_SUB_CLIENT_QUOTA


def _attr(group_config, name: str):
    attrs = getattr(group_config, "attributes", None) or {}
    return attrs.get(name)


def is_sub_lite_exclusive(group_config) -> bool:
    """Whether the group's lite topics go to one client each (``lite.sub.model=Exclusive``):
    a client that subscribes a lite topic takes it from the group's other clients."""
    return _attr(group_config, LITE_SUB_MODEL_ATTRIBUTE) == LITE_SUB_EXCLUSIVE


def reset_offset_in_exclusive_mode(group_config) -> bool:
    """``lite.sub.reset.offset.exclusive`` (default false)."""
    return str(_attr(group_config, LITE_SUB_RESET_OFFSET_EXCLUSIVE_ATTRIBUTE)).lower() == "true"


def reset_offset_on_unsubscribe(group_config) -> bool:
    """``lite.sub.reset.offset.unsubscribe`` (default false)."""
    return str(_attr(group_config, LITE_SUB_RESET_OFFSET_UNSUBSCRIBE_ATTRIBUTE)).lower() == "true"
