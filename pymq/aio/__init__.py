"""pymq for asyncio: awaitable puts and long polls, async consumers.

Nothing here blocks the loop or parks a thread per waiter. Calls that return at once (an
append under ``ASYNC_FLUSH``, a pull, a pop that finds messages) run on the loop; waits
for messages are futures resolved by the store's arrival notifier through
``loop.call_soon_threadsafe``; a ``SYNC_FLUSH`` put awaits the group commit's future.

    import pymq, pymq.aio

    async with pymq.aio.AsyncStore(pymq.MessageStore(path)) as store:
        await store.put_message(pymq.Message("TopicTest", b"hello"))
        await store.wait_message("TopicTest", 0, offset=0, timeout_s=5)
        async for msg in pymq.aio.Consumer(store, "g1", "TopicTest"):
            ...

See ``docs/aio.md``.
"""

from .consumer import Consumer
from .simple_consumer import SimpleConsumer
from .store import AsyncStore, open_broker, open_store

__all__ = ["AsyncStore", "Consumer", "SimpleConsumer", "open_broker", "open_store"]
