"""SimpleConsumer: receive, ack and change the invisible duration, as RocketMQ 5's
official clients name them.

Several ``SimpleConsumer`` objects (threads of one process now; processes through a
server later) may share one consumer group: each received message is hidden from the
whole group for its invisible duration, and comes back to some consumer of the group
when it is not acked in time (``delivery_attempt`` one higher), until the group's retry
limit sends it to ``%DLQ%{group}``. A group flagged FIFO gets the messages of one
message group one at a time, in order. Durations are in seconds, as the official
clients take them (floats are fine; the broker keeps milliseconds).

    consumer = pymq.SimpleConsumer(broker, "g1", "TopicTest", await_duration=5)
    for msg in consumer.receive(16, invisible_duration=30):
        handle(msg)
        consumer.ack(msg)
"""

from __future__ import annotations

from typing import Optional, Union

from pymq.filter import parse_tag_expression


def _ms(seconds: float, what: str, minimum: int) -> int:
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"{what} is a number of seconds, not {type(seconds).__name__}")
    ms = int(round(seconds * 1000))
    if ms < minimum:
        raise ValueError(f"{what} must be at least {minimum} ms, not {seconds!r} s")
    return ms


class SimpleConsumer:
    """Receive ``topic`` as consumer ``group`` from ``store`` (a :class:`pymq.Broker`),
    optionally only messages whose tag matches ``tags`` (``"TagA || TagB"``).

    ``await_duration`` (seconds) is how long :meth:`receive` waits for messages when
    there are none (the official clients' ``awaitDuration``; 0, the default here,
    returns at once). The waiting is woken by arrivals, acks and expiries, not a timer.
    """

    def __init__(self, store, group: str, topic: str, tags: Optional[str] = None,
                 await_duration: float = 0.0) -> None:
        if not callable(getattr(store, "pop_message", None)):
            raise TypeError(f"SimpleConsumer receives from a pymq.Broker (pop is the broker's), not "
                            f"{type(store).__name__}")
        if not isinstance(group, str) or not group or not isinstance(topic, str) or not topic:
            raise ValueError("group and topic must be non-empty strings")
        parse_tag_expression(tags)
        if isinstance(await_duration, bool) or not isinstance(await_duration, (int, float)) \
                or not await_duration >= 0:             # NaN too
            raise ValueError("await_duration is a number of seconds >= 0")
        self.store = store
        self.group = group
        self.topic = topic
        self.tags = tags
        self.await_duration = float(await_duration)

    @property
    def consumer_group(self) -> str:
        """The consumer group (the official clients' name)."""
        return self.group

    def receive(self, max_message_num: int, invisible_duration: float) -> list:
        """Up to ``max_message_num`` messages, each hidden from the group for
        ``invisible_duration`` seconds; an empty list when none came within
        ``await_duration``. Each message carries its receipt handle
        (``message.receipt_handle``) and ``delivery_attempt``."""
        invisible_ms = _ms(invisible_duration, "invisible_duration", 1)
        pop_service = getattr(self.store, "pop_service", None)
        if self.await_duration > 0 and pop_service is not None:
            self.store._check_open()
            result = pop_service.pop_message(self.group, self.topic, max_message_num, invisible_ms, self.tags,
                                             timeout_s=self.await_duration)
        else:
            result = self.store.pop_message(self.group, self.topic, max_message_num, invisible_ms, self.tags)
        return result.messages

    def ack(self, message) -> None:
        """Acknowledge a received message (or its receipt handle): it is never delivered
        to the group again. Raises :class:`pymq.InvalidReceiptHandleError` when the
        delivery is no longer current (acked, or redelivered after its invisible
        duration)."""
        self.store.ack_message(_handle(message))

    def change_invisible_duration(self, message, invisible_duration: float) -> str:
        """Hide a received message for ``invisible_duration`` seconds from now. The
        message's receipt handle is replaced by the new one (also returned); the old
        handle is no longer current."""
        ms = _ms(invisible_duration, "invisible_duration", 0)
        new = self.store.change_invisible_time(_handle(message), ms)
        if not isinstance(message, str):
            message.properties["POP_CK"] = new
        return new

    def __repr__(self) -> str:
        return f"SimpleConsumer(group={self.group!r}, topic={self.topic!r}, tags={self.tags!r})"


def _handle(message: Union[str, object]) -> str:
    if isinstance(message, str):
        return message
    handle = getattr(message, "receipt_handle", None)
    if not handle:
        raise ValueError("the message has no receipt handle: it was not received by a SimpleConsumer/pop")
    return handle
