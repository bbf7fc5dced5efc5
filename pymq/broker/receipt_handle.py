"""Receipt handles: what a popped message carries so that its consumer can ack it.

RocketMQ 5 hands every popped message a receipt handle (the ``POP_CK`` property, read back
by :attr:`pymq.MessageExt.receipt_handle`) naming the checkpoint and the entry it belongs
to. pymq's handle names one *delivery* of one message to one consumer group: the group,
the topic, the queue, the queue offset and the id of the pop (or the change of invisible
time) that made this delivery. The broker acks only the current delivery of an offset,
so a handle of an earlier delivery (the message was redelivered meanwhile, or its
invisible time was changed, which issues a new handle) is refused: it never acks the new
delivery.

Clients treat the text as opaque. It is ``1 {id:x} {queue_id} {offset:x} {len(topic)}
{topic}{group}``: a version, hex numbers, then the topic length so that names may hold
any character.
"""

from __future__ import annotations

from typing import NamedTuple

from pymq.errors import PymqError

_VERSION = "1"


class InvalidReceiptHandleError(PymqError, ValueError):
    """A receipt handle that is malformed, or names a delivery that is no longer current
    (already acked, redelivered after its invisible time, or replaced by a change of
    invisible time). RocketMQ answers ``INVALID_RECEIPT_HANDLE`` / ``NO_EXIST``."""


class ReceiptHandle(NamedTuple):
    """The decoded content of a receipt handle."""

    group: str
    topic: str
    queue_id: int
    offset: int
    pop_id: int

    def encode(self) -> str:
        """The opaque text form."""
        return encode_receipt_handle(self.group, self.topic, self.queue_id, self.offset, self.pop_id)


def encode_receipt_handle(group: str, topic: str, queue_id: int, offset: int, pop_id: int) -> str:
    """The handle of the delivery ``pop_id`` of (topic, queue_id, offset) to ``group``."""
    return f"{_VERSION} {pop_id:x} {queue_id} {offset:x} {len(topic)} {topic}{group}"


def decode_receipt_handle(handle: str) -> ReceiptHandle:
    """Parse a handle; raises :class:`InvalidReceiptHandleError` when it is malformed."""
    if not isinstance(handle, str):
        raise InvalidReceiptHandleError(f"a receipt handle is a str, not {type(handle).__name__}")
    try:
        version, pop_id, queue_id, offset, rest = handle.split(" ", 4)
        tlen, names = rest.split(" ", 1)
        tlen_i = int(tlen)
        topic, group = names[:tlen_i], names[tlen_i:]
        if version != _VERSION or tlen_i <= 0 or len(topic) != tlen_i or not group:
            raise ValueError(handle)
        return ReceiptHandle(group, topic, int(queue_id), int(offset, 16), int(pop_id, 16))
    except ValueError:
        raise InvalidReceiptHandleError(f"malformed receipt handle {handle!r}") from None
