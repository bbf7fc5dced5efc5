"""Checks of the names clients send: topics, groups, tags, keys, message groups.

RocketMQ 5's proxy (``GrpcValidator``, ``SendMessageActivity``) rejects a bad name before
touching the broker, with a code of its own per kind of name; these checks give the same
codes. Topic and group names must match RocketMQ's character rule as a whole; tags, keys,
message groups and user properties may hold no control character (Java's ``isISOControl``:
U+0000..U+001F, U+007F..U+009F), which also keeps the store's property separators
(``\x01``, ``\x02``) out of a record.
"""

from __future__ import annotations

from pymq.broker.validators import (group_problem, has_control_character, is_system_group, is_system_topic,
                                    topic_problem)

from .status import Code, RequestError

MESSAGE_GROUP_MAX_LENGTH = 64
PROPERTY_KEY_MAX_LENGTH = 1024


def check_topic(name: str, *, for_write: bool = False) -> str:
    """``name`` when it is a valid topic name, else ILLEGAL_TOPIC."""
    why = topic_problem(name)
    if why is not None:
        raise RequestError(Code.ILLEGAL_TOPIC, why)
    if for_write and is_system_topic(name):
        raise RequestError(Code.ILLEGAL_TOPIC, f"topic {name!r} is a system topic")
    return name


def check_group(name: str) -> str:
    """``name`` when it is a valid consumer group name, else ILLEGAL_CONSUMER_GROUP (also
    for the broker's own groups, ``CID_RMQ_SYS_...``, as the proxy does)."""
    why = group_problem(name)
    if why is not None:
        raise RequestError(Code.ILLEGAL_CONSUMER_GROUP, why)
    if is_system_group(name):
        raise RequestError(Code.ILLEGAL_CONSUMER_GROUP, f"consumer group {name!r} is a system group")
    return name


def check_tag(tag: str) -> str:
    """A tag may not be blank, contain ``|`` (the expression separator) or a control
    character."""
    if tag and (not tag.strip() or "|" in tag or has_control_character(tag)):
        raise RequestError(Code.ILLEGAL_MESSAGE_TAG, f"tag {tag!r} is illegal")
    return tag


def check_key(key: str) -> str:
    """A key may not be blank, contain a space (keys are stored space-separated) or a
    control character."""
    if not key.strip() or " " in key or has_control_character(key):
        raise RequestError(Code.ILLEGAL_MESSAGE_KEY, f"key {key!r} is illegal")
    return key


def check_message_group(group: str) -> str:
    """A message group is non-blank, at most 64 characters, free of control characters."""
    if not group.strip() or len(group) > MESSAGE_GROUP_MAX_LENGTH or has_control_character(group):
        raise RequestError(Code.ILLEGAL_MESSAGE_GROUP, f"message group {group!r} is illegal")
    return group


def check_property(key: str, value: str) -> None:
    """User property keys (at most 1024 characters) and values may not hold control
    characters."""
    if not key or len(key) > PROPERTY_KEY_MAX_LENGTH or has_control_character(key):
        raise RequestError(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property key {key!r} is illegal")
    if has_control_character(value):
        raise RequestError(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"value of property {key!r} is illegal")
