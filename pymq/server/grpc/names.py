"""Checks of the names clients send: topics, groups, tags, keys, message groups.

RocketMQ 5's proxy (``GrpcValidator``) rejects a bad name before touching the broker, with a
code of its own per kind of name; these checks give the same codes.
"""

from __future__ import annotations

from pymq.broker.validators import group_problem, is_system_group, is_system_topic, topic_problem

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
    """A tag may not be blank or contain ``|`` (it is the expression separator)."""
    if tag and (not tag.strip() or "|" in tag or any(c in tag for c in "\x00\r\n")):
        raise RequestError(Code.ILLEGAL_MESSAGE_TAG, f"tag {tag!r} is illegal")
    return tag


def check_key(key: str) -> str:
    """A key may not be blank or contain a space (keys are stored space-separated)."""
    if not key.strip() or " " in key or "\x00" in key:
        raise RequestError(Code.ILLEGAL_MESSAGE_KEY, f"key {key!r} is illegal")
    return key


def check_message_group(group: str) -> str:
    """A message group is non-blank, at most 64 characters."""
    if not group.strip() or len(group) > MESSAGE_GROUP_MAX_LENGTH or "\x00" in group:
        raise RequestError(Code.ILLEGAL_MESSAGE_GROUP, f"message group {group!r} is illegal")
    return group


def check_property(key: str, value: str) -> None:
    """User property keys and values may not hold the characters that separate them in a
    stored record (``\\x01``, ``\\x02``)."""
    if not key or len(key) > PROPERTY_KEY_MAX_LENGTH or any(c in key for c in "\x00\x01\x02"):
        raise RequestError(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property key {key!r} is illegal")
    if any(c in value for c in "\x00\x01\x02"):
        raise RequestError(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"value of property {key!r} is illegal")
