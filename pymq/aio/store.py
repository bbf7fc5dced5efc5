"""AsyncStore: a started :class:`pymq.MessageStore` (or :class:`pymq.Broker`) for asyncio code.

What returns at once runs on the loop itself, as the gRPC server does it: an append
under ``ASYNC_FLUSH`` costs the same microseconds as a call from a thread. What would
block does not block the loop:

* waiting for messages (``wait_message``, ``wait_messages``, consumers' polls) is a future
  resolved by the store's arrival notifier through ``loop.call_soon_threadsafe`` (see
  :mod:`pymq.aio._waiters`): no thread per waiter, no sleep loop;
* a put under ``SYNC_FLUSH`` appends on the loop and awaits the group commit's future
  (``store.async_put_message``): no thread waits for the disk either;
* broker calls that wait for the disk under ``SYNC_FLUSH`` (pop, ack, change of
  invisible time) and opening or shutting a store run on the loop's default executor,
  a bounded pool.
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Union

from pymq.status import PutMessageStatus
from pymq.store.arguments import check_queue_id, wait_timeout

from ._waiters import LoopWaiters

if TYPE_CHECKING:
    from pymq._core.appender import PutMessageResult
    from pymq._core.message import Message
    from pymq.broker import Broker, BrokerConfig
    from pymq.config import StoreConfig
    from pymq.message_store import MessageStore


class AsyncStore:
    """``store`` (started, or started by ``async with``) with awaitable puts and waits.

    Non-blocking reads (``get_message``, offsets, ``query_message`` ...) need no
    wrapper: call them on :attr:`store` from the loop. ``async with`` starts the store
    if needed and shuts it down at the end, off the loop.
    """

    def __init__(self, store: Union[MessageStore, Broker, AsyncStore]) -> None:
        if isinstance(store, AsyncStore):
            store = store.store
        if not callable(getattr(store, "add_arrival_listener", None)):
            raise TypeError(f"AsyncStore wraps a pymq.MessageStore or pymq.Broker, not {type(store).__name__}")
        self.store: MessageStore = store
        self._sync = store.config.sync_flush

    @property
    def sync_flush(self) -> bool:
        """Whether puts wait for the disk (``flush_disk_type == "SYNC_FLUSH"``)."""
        return self._sync

    # -- lifecycle ---------------------------------------------------------------------

    async def __aenter__(self) -> "AsyncStore":
        if not self.store.running:
            await self.run_blocking(self.store.start)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Shut the store down (flush, checkpoint) on the executor."""
        await self.run_blocking(self.store.shutdown)

    async def run_blocking(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on the loop's default executor (a bounded thread pool)."""
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``: on the loop under ``ASYNC_FLUSH``, where broker calls return at
        once; on the executor under ``SYNC_FLUSH``, where they wait for the disk."""
        if not self._sync:
            return fn(*args)
        return await self.run_blocking(fn, *args)

    # -- writing -----------------------------------------------------------------------

    async def put_message(self, msg: Message) -> PutMessageResult:
        """Append ``msg``; a :class:`pymq.PutMessageResult` (as ``store.put_message``).
        Under ``SYNC_FLUSH`` it returns once the record is on disk, or with
        ``FLUSH_DISK_TIMEOUT`` after ``sync_flush_timeout`` ms, without blocking the
        loop. A put whose task is cancelled while it waits for the disk is stored all
        the same (as a put that timed out)."""
        if not self._sync:
            return self.store.put_message(msg)
        return await self._flushed(self.store.async_put_message(msg))

    async def put_messages(self, msgs: Iterable[Message]) -> PutMessageResult:
        """``put_messages`` (one batch of one topic and queue), as :meth:`put_message`."""
        if not self._sync:
            return self.store.put_messages(msgs)
        return await self._flushed(self.store.async_put_messages(msgs))

    async def put_bodies(self, topic: str, bodies: Any, *, queue_id: Optional[int] = None, keys: Any = None,
                         tags: Any = None, properties: Any = None) -> PutMessageResult:
        """``put_bodies`` (raw bodies, one batch of one topic and queue), as :meth:`put_message`."""
        if not self._sync:
            return self.store.put_bodies(topic, bodies, queue_id=queue_id, keys=keys, tags=tags,
                                         properties=properties)
        return await self._flushed(self.store.async_put_bodies(topic, bodies, queue_id=queue_id, keys=keys,
                                                               tags=tags, properties=properties))

    async def _flushed(self, cf):
        """The result of a put whose flush ``cf`` (a concurrent future) completes: the
        group commit posts it to the loop (coalesced, :meth:`LoopWaiters.post`); after
        ``sync_flush_timeout`` ms without it, FLUSH_DISK_TIMEOUT as ``put_message`` says."""
        if cf.done():
            return cf.result()
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        post = self.waiters().post

        def flushed(done) -> None:
            post(lambda: fut.done() or fut.set_result(done.result()))

        timer = loop.call_later(self.store.config.sync_flush_timeout / 1000.0, _flush_timed_out, fut,
                                cf.put_result)
        cf.add_done_callback(flushed)
        try:
            return await fut
        finally:
            timer.cancel()

    # -- waiting -----------------------------------------------------------------------

    def waiters(self) -> LoopWaiters:
        """The running loop's waiters on this store (shared by all its consumers)."""
        return LoopWaiters.of(self.store)

    async def wait_message(self, topic: str, queue_id: int, offset: int, timeout_s: float) -> bool:
        """Long poll: True as soon as queue offset ``offset`` of (topic, queue_id) is
        readable, False after ``timeout_s`` seconds (``math.inf``: no limit; NaN or
        negative: ``ValueError``). Raises ``StoreStateError`` when the store shuts down
        meanwhile, as :meth:`pymq.MessageStore.wait_message` does."""
        timeout = wait_timeout(timeout_s)
        check_queue_id(queue_id)
        store = self.store
        store._check_open()
        cq = store.consume_queues.find_consume_queue(topic, queue_id)
        return await self.waiters().wait(   # find_consume_queue creates the queue: cq is not None
            (topic,), lambda: offset < cq.get_max_offset_in_queue(), timeout)  # type: ignore[union-attr]

    async def wait_messages(self, topic: Union[str, Iterable[str]],
                            offsets: Union[dict[int, int], dict[str, dict[int, int]]], timeout_s: float) -> bool:
        """``store.wait_messages`` awaited: True as soon as a queue in ``offsets`` has a
        message at or after its offset or a new queue of the topic(s) appeared.
        ``timeout_s`` and shutdown as :meth:`wait_message`."""
        timeout = wait_timeout(timeout_s)
        self.store._check_open()
        topics, ready = self.store.arrival_condition(topic, offsets)
        return await self.waiters().wait(topics, ready, timeout)

    def __repr__(self) -> str:
        return f"AsyncStore({self.store!r})"


def _flush_timed_out(fut: asyncio.Future[PutMessageResult], result: PutMessageResult) -> None:
    if not fut.done():          # the disk hangs: as put_message, a timeout status
        result.set_status(PutMessageStatus.FLUSH_DISK_TIMEOUT)
        fut.set_result(result)


async def open_store(path: str | os.PathLike, config: Optional[StoreConfig] = None,
                     read_only: bool = False) -> AsyncStore:
    """Open (recover) and start a :class:`pymq.MessageStore` off the loop."""
    from pymq.message_store import MessageStore

    def build() -> MessageStore:
        return MessageStore(path, config, read_only=read_only).start()

    return AsyncStore(await asyncio.get_running_loop().run_in_executor(None, build))


async def open_broker(path: str | os.PathLike, config: Optional[StoreConfig] = None,
                      broker_config: Optional[BrokerConfig] = None) -> AsyncStore:
    """Open and start a :class:`pymq.Broker` off the loop."""
    from pymq.broker import Broker

    def build() -> Broker:
        return Broker(path, config, broker_config).start()

    return AsyncStore(await asyncio.get_running_loop().run_in_executor(None, build))
