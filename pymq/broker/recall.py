"""Recall: cancel a delayed message before its delivery time (RocketMQ 5.3's RecallMessage).

A send of a message with a delivery time in the future returns a *recall handle*. Given
back with the topic, it makes the broker put a delete mark into the timer wheel, due at
the same millisecond: when that second is delivered, the message and the mark are both
dropped (:mod:`pymq.store.timer_service`). A recall after the delivery time is refused;
a recall of a message that was never sent, or recalled already, only adds a mark that
drops nothing. The mark is a record of the commit log like any timer message, so it
survives a crash and a wheel rebuild.

The handle, as RocketMQ writes it: URL-safe base64 (no padding) of the text::

    v1 <topic> <broker name> <delivery time, ms> <message id (the UNIQ_KEY)>
"""

from __future__ import annotations

import base64
import binascii
import time
from typing import NamedTuple

from pymq._core.message import Message
from pymq.errors import PymqError
from pymq.store.timer_service import TIMER_DEL_UNIQKEY

_VERSION = "v1"


class InvalidRecallHandleError(PymqError, ValueError):
    """A recall handle that is malformed or names another topic."""


class RecallTooLateError(PymqError, ValueError):
    """The message's delivery time has passed: it was delivered, and cannot be recalled."""


class RecallHandle(NamedTuple):
    """The decoded content of a recall handle."""

    topic: str
    broker_name: str
    deliver_ms: int
    message_id: str


def encode_recall_handle(topic: str, broker_name: str, deliver_ms: int, message_id: str) -> str:
    """The recall handle of the message ``message_id`` of ``topic`` due at ``deliver_ms``."""
    text = f"{_VERSION} {topic} {broker_name} {deliver_ms} {message_id}"
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_recall_handle(handle: str) -> RecallHandle:
    """The fields of ``handle``; :class:`InvalidRecallHandleError` when it is not one."""
    if not isinstance(handle, str) or not handle or len(handle) > 4096:
        raise InvalidRecallHandleError("recall handle is empty or not a string")
    try:
        text = base64.urlsafe_b64decode(handle + "=" * (-len(handle) % 4)).decode()
    except (binascii.Error, ValueError):
        raise InvalidRecallHandleError(f"recall handle {handle[:64]!r} is not base64 text") from None
    parts = text.split(" ")
    if len(parts) != 5 or parts[0] != _VERSION or not all(parts[1:]) or not parts[3].isdigit():
        raise InvalidRecallHandleError(f"recall handle {handle[:64]!r} is malformed")
    return RecallHandle(parts[1], parts[2], int(parts[3]), parts[4])


def delete_mark(topic: str, handle: str, now_ms: int | None = None) -> Message:
    """The delete mark that recalls the message of ``handle``, a message of ``topic``.
    Raises :class:`InvalidRecallHandleError` (malformed, another topic) or
    :class:`RecallTooLateError` (its delivery time has passed)."""
    h = decode_recall_handle(handle)
    if h.topic != topic:
        raise InvalidRecallHandleError(f"the recall handle is of topic {h.topic!r}, not {topic!r}")
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if h.deliver_ms <= now:
        raise RecallTooLateError(f"message {h.message_id} was due at {h.deliver_ms}: delivered, not recallable")
    return Message(topic, b"recall", properties={"TIMER_DELIVER_MS": str(h.deliver_ms),
                                                  TIMER_DEL_UNIQKEY: f"{topic}+{h.message_id}"})
