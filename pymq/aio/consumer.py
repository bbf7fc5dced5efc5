"""Consumer for asyncio: :class:`pymq.Consumer`'s pulls, with the waiting awaited.

The pulls are the synchronous consumer's own (``get_message`` returns at once, so it runs
on the loop); only the long poll differs: the task awaits a future that the store's
arrival notifier resolves (:mod:`pymq.aio._waiters`), so a hundred consumers cost a
hundred futures, not a hundred threads.

    consumer = pymq.aio.Consumer(store, "g1", "TopicTest")
    async for msg in consumer:          # ends when the store shuts down
        await handle(msg)
        await consumer.commit()         # commits what was handed out, never more; durable
"""

from __future__ import annotations

import asyncio
import collections
from typing import TYPE_CHECKING, Optional, Union

from pymq.consumer import Consumer as _SyncConsumer
from pymq.errors import StoreStateError
from pymq.store.arguments import wait_timeout
from pymq.store.fork_guard import forked

from .store import AsyncStore

if TYPE_CHECKING:
    from pymq._core.appender import PutMessageResult
    from pymq._core.message import MessageExt
    from pymq.broker import Broker
    from pymq.message_store import MessageStore


class Consumer:
    """Consume ``topic`` as ``group`` from an asyncio task (see :class:`pymq.Consumer`
    for the arguments: ``tags``, ``consume_from``, ``pull_batch_size``).

    ``await poll(timeout_s)`` returns the next messages of all queues (possibly none
    after ``timeout_s``); ``async for msg in consumer`` yields them one by one until the
    store shuts down. ``commit()`` stores the positions of what was handed out (a
    message still in the iteration's buffer is not committed), so cancelling the task
    that iterates loses nothing: the next consumer of the group starts at the first
    message not handed out.
    """

    def __init__(self, store: Union[MessageStore, Broker, AsyncStore], group: str, topic: str,
                 tags: Optional[str] = None, consume_from: Union[str, int] = "earliest",
                 pull_batch_size: int = 32) -> None:
        self._astore = AsyncStore(store)
        self._inner = _SyncConsumer(self._astore.store, group, topic, tags, consume_from, pull_batch_size)
        # ((topic, queue id), message)
        self._buffer: collections.deque[tuple[tuple[str, int], MessageExt]] = collections.deque()

    @property
    def group(self) -> str:
        return self._inner.group

    @property
    def topic(self) -> str:
        return self._inner.topic

    @property
    def tags(self) -> Optional[str]:
        return self._inner.tags

    @property
    def positions(self) -> dict[int, int]:
        """Next queue offset to hand out, per queue id of the topic."""
        return {q: off for (t, q), off in self._handed_positions().items() if t == self.topic}

    def seek(self, queue_id: int, offset: int) -> None:
        """Read ``queue_id`` of the topic from ``offset`` next (drops buffered messages of it)."""
        key = (self.topic, queue_id)
        self._buffer = collections.deque(item for item in self._buffer if item[0] != key)
        self._inner.seek(queue_id, offset)

    async def _fill(self, timeout_s: float) -> None:
        """Pull into the buffer, waiting up to ``timeout_s`` when nothing is there."""
        inner, store = self._inner, self._astore.store
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        waiters = self._astore.waiters()
        while True:
            batches = inner._pull_batches()
            if batches:
                self._buffer.extend(((topic, qid), m) for topic, qid, msgs in batches for m in msgs)
                return
            remaining = deadline - loop.time()
            if remaining <= 0 or not store.running:
                return
            topics, ready = store.arrival_condition(*inner._wait_offsets())
            arrived = await waiters.wait(topics, ready, wait_timeout(remaining))
            if not store.running:
                return
            if not arrived and loop.time() >= deadline:
                # timed out, or only filtered-out messages arrived: one more pass
                batches = inner._pull_batches()
                self._buffer.extend(((topic, qid), m) for topic, qid, msgs in batches for m in msgs)
                return

    async def poll(self, timeout_s: float = 1.0) -> list[MessageExt]:
        """The next messages from all queues; waits up to ``timeout_s`` for some to arrive
        (``math.inf``: until some do; NaN or negative: ``ValueError``). Raises
        ``StoreStateError`` when the store shuts down meanwhile, or was shut down."""
        wait_timeout(timeout_s)
        if not self._buffer:
            await self._fill(timeout_s)
        out = [m for _key, m in self._buffer]
        self._buffer.clear()
        return out

    def __aiter__(self) -> "Consumer":
        return self

    async def __anext__(self) -> MessageExt:
        """The next message; the iteration ends when the store shuts down (a store
        fenced in a forked child raises ``StoreStateError`` instead)."""
        store = self._astore.store
        while not self._buffer:
            if not store.running:
                raise StopAsyncIteration
            try:
                await self._fill(1.0)
            except StoreStateError:
                if store._closed and not forked(store):      # shut down: the end
                    raise StopAsyncIteration from None
                raise
        return self._buffer.popleft()[1]

    def _handed_positions(self) -> dict[tuple[str, int], int]:
        positions = dict(self._inner._positions)
        seen = set()
        for key, m in self._buffer:          # the first message of a queue not handed out yet
            if key not in seen:
                seen.add(key)
                positions[key] = m.queue_offset
        return positions

    def commit(self) -> Optional[asyncio.Future[None]]:
        """Store the positions of what was handed out as the group's consumer offsets.

        They are committed in memory at once (as :meth:`pymq.MessageStore.commit_offset`),
        and the write of ``config/consumerOffset.json`` starts on the loop's default
        executor: the returned future is done once the file holds them, so
        ``await consumer.commit()`` is :meth:`pymq.Consumer.commit`'s durable commit
        without blocking the loop (it raises ``OSError`` when the file cannot be written),
        and a bare ``consumer.commit()`` commits without waiting. Commits of many
        consumers at once share writes (group commit). Called with no running loop, it
        writes the file before it returns, and returns None.
        """
        store = self._astore.store
        for (topic, qid), offset in self._handed_positions().items():
            store.commit_offset(self.group, topic, qid, offset)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            store.flush_offsets()
            return None
        return loop.run_in_executor(None, store.flush_offsets)

    async def reconsume_later(self, msg: Union[MessageExt, int], delay_level: int = 0) -> PutMessageResult:
        """Hand ``msg`` back for a later retry (needs a :class:`pymq.Broker`); see
        :meth:`pymq.Consumer.reconsume_later`."""
        return await self._astore.call(self._inner.reconsume_later, msg, delay_level)

    def __repr__(self) -> str:
        return f"pymq.aio.Consumer(group={self.group!r}, topic={self.topic!r}, tags={self.tags!r})"
