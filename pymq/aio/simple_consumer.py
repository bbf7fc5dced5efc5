"""SimpleConsumer for asyncio: RocketMQ 5's receive / ack / change invisible duration.

``receive`` pops on the loop (under ``ASYNC_FLUSH`` a pop returns at once) and, when
there is nothing, awaits the next arrival, ack or expiry of the group's in-flight
messages as the broker's own long poll would (``PopMessageService.wait_condition``),
woken through the loop, not a thread.

Cancellation is safe: a receive cancelled while it waits has taken nothing; one cancelled
while its pop is on the executor (``SYNC_FLUSH``) either stops it before it starts, or
lets it finish: what it took then stays invisible for its invisible duration and comes
back to the group, as any message received and never acked.

    consumer = pymq.aio.SimpleConsumer(broker, "workers", "Orders", await_duration=5)
    for msg in await consumer.receive(16, invisible_duration=30):
        await handle(msg)
        await consumer.ack(msg)
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Iterable, Optional, Union

from pymq.simple_consumer import SimpleConsumer as _SyncSimpleConsumer
from pymq.simple_consumer import _handle, _ms

from .store import AsyncStore

if TYPE_CHECKING:
    from pymq._core.message import MessageExt
    from pymq.broker import Broker
    from pymq.broker.receipt_handle import InvalidReceiptHandleError


class SimpleConsumer:
    """Receive ``topic`` as consumer ``group`` of a :class:`pymq.Broker` from asyncio
    (arguments as :class:`pymq.SimpleConsumer`: ``tags``, ``await_duration`` seconds)."""

    def __init__(self, store: Union[Broker, AsyncStore], group: str, topic: str, tags: Optional[str] = None,
                 await_duration: float = 0.0) -> None:
        self._astore = AsyncStore(store)
        broker = self._astore.store
        if getattr(broker, "pop_service", None) is None:
            raise TypeError("pymq.aio.SimpleConsumer needs a pymq.Broker (a MessageStore has no pop)")
        self._broker: Broker = broker  # type: ignore[assignment]  # a Broker: it has the pop service
        self._inner = _SyncSimpleConsumer(broker, group, topic, tags, await_duration)

    group = property(lambda self: self._inner.group, doc="The consumer group.")
    consumer_group = group
    topic = property(lambda self: self._inner.topic, doc="The topic received.")
    tags = property(lambda self: self._inner.tags, doc="The tag expression, or None.")
    await_duration = property(lambda self: self._inner.await_duration,
                              doc="Seconds ``receive`` waits when there is nothing.")

    async def receive(self, max_message_num: int, invisible_duration: float) -> list[MessageExt]:
        """Up to ``max_message_num`` messages, each hidden from the group for
        ``invisible_duration`` seconds; an empty list when none came within
        ``await_duration``. Each carries its ``receipt_handle`` and ``delivery_attempt``."""
        invisible_ms = _ms(invisible_duration, "invisible_duration", 1)
        astore = self._astore
        broker = self._broker
        pop = broker.pop_service
        group, topic, tags = self.group, self.topic, self.tags
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.await_duration
        while True:
            version = pop.wake_version(topic)
            result = await astore.call(broker.pop_message, group, topic, max_message_num, invisible_ms, tags)
            remaining = deadline - loop.time()
            if result.messages or remaining <= 0 or not broker.running:
                return result.messages
            ready, wait_s = pop.wait_condition(group, topic, version, remaining)
            await astore.waiters().wait((topic,), ready, wait_s)

    async def ack(self, message: Union[MessageExt, str]) -> None:
        """Acknowledge a received message (or its receipt handle); raises
        :class:`pymq.InvalidReceiptHandleError` when the delivery is no longer current."""
        await self._astore.call(self._broker.ack_message, _handle(message))

    async def ack_messages(self, messages: Iterable[Union[MessageExt, str]]
                           ) -> list[Optional[InvalidReceiptHandleError]]:
        """Acknowledge several messages with one wait for the disk; one entry per
        message: None when acked, else the :class:`pymq.InvalidReceiptHandleError`."""
        handles = [_handle(m) for m in messages]
        broker = self._broker
        broker._check_open()
        return await self._astore.call(broker.pop_service.ack_messages, handles)

    async def change_invisible_duration(self, message: Union[MessageExt, str], invisible_duration: float) -> str:
        """Hide a received message for ``invisible_duration`` seconds from now; returns
        (and sets on the message) its new receipt handle."""
        return await self._astore.call(self._inner.change_invisible_duration, message, invisible_duration)

    def __repr__(self) -> str:
        return f"pymq.aio.SimpleConsumer(group={self.group!r}, topic={self.topic!r}, tags={self.tags!r})"
