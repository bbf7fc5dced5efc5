"""asyncio workloads: :mod:`pymq.aio` next to the threaded API, in one run.

``aio_put``
    ``pymq``: one task awaiting ``AsyncStore.put_message(Message(...))`` per message on an
    ``ASYNC_FLUSH`` store (the append runs on the loop); ``pymq-threads``: the same loop
    of ``store.put_message`` on a thread. The ratio is what the coroutine costs.
``aio_sync_put``
    ``SYNC_FLUSH`` puts from 32 concurrent producers: ``pymq`` 32 tasks on one loop, each
    awaiting the group commit's future (no thread waits for the disk); ``pymq-threads`` 32
    threads blocking in ``store.put_message``. Messages per repeat: ``--messages``, at
    most 20,000 (each group commit is an fsync).
``aio_wakeup``
    Latency from a put to the consumer's wake-up, p50/p99 in the ns columns: ``pymq`` a
    task awaiting ``AsyncStore.wait_message`` (woken through ``call_soon_threadsafe``);
    ``pymq-threads`` a thread blocking in ``store.wait_message``. Ping-pong: the producer
    puts the next message only once the consumer has woken, so every put finds the
    consumer waiting; the time covers the dispatcher noticing the record (it passes every
    millisecond) and the wake-up. Before each put both rows pause for the same random
    0-2 ms (``time.sleep``, the consumer waiting meanwhile), so puts fall at random
    points of the dispatcher's cycle alike. Round trips per repeat: ``--messages``, at
    most 1,000; the msgs/s column is round trips per second (pauses included).

Unless ``--commitlog-file-size`` is given, ``aio_sync_put`` and ``aio_wakeup`` stores use
64 MiB commit-log files (a few MB are written; a 1 GiB file per repeat measures nothing).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
import threading
import time
from typing import Any

import pymq

from .base import TOPIC, _expect, store_config
from .write import PymqPutMessage, _PymqWorkload

SEGMENT = 64 << 20
SYNC_PUTS = 20_000
PRODUCERS = 32
WAKEUPS = 1_000
MAX_PAUSE_S = 0.002         # aio_wakeup: a random pause before each put, the same for both rows


def _small(options) -> Any:
    cfg = store_config(options)
    return cfg if options.commitlog_file_size is not None else dataclasses.replace(cfg, commitlog_file_size=SEGMENT)


class _AioWorkload(_PymqWorkload):
    """A started store and, for the asyncio rows, an event loop and an AsyncStore."""

    loop: Any = None
    astore: Any = None

    def config(self) -> Any:
        return store_config(self.options)

    def note(self) -> str:
        cfg = self.config()
        return (f"StoreConfig(commitlog_file_size={cfg.commitlog_file_size:,}, flush_disk_type="
                f"{cfg.flush_disk_type}); asyncio rows: pymq.aio.AsyncStore on one event loop")

    def unavailable(self) -> str | None:
        try:
            import pymq.aio  # noqa: F401
        except ImportError as e:
            return f"pymq.aio is not available ({e})"
        return super().unavailable()

    def open(self, path: str) -> None:
        import pymq.aio
        self.last, self.written = None, 0
        self.ok = self.missed = 0
        self.store = pymq.MessageStore(os.path.join(path, "store"), self.config()).start()
        self.loop = asyncio.new_event_loop()
        self.astore = pymq.aio.AsyncStore(self.store)

    def close(self) -> None:
        loop, self.loop = self.loop, None
        if loop is not None:
            loop.close()
        super().close()


class PymqAioPut(_AioWorkload):
    """pymq.aio: one task awaiting put_message per message."""

    group = "aio_put"
    operation = "await AsyncStore.put_message(Message(...))"

    def run(self, n: int) -> None:
        astore, Message, body = self.astore, pymq.Message, self.body

        async def produce():
            result = None
            for _ in range(n):
                result = await astore.put_message(Message(topic=TOPIC, body=body))
            return result

        self.last = self.loop.run_until_complete(produce())
        self.written += n


class PymqThreadPut(_AioWorkload):
    """The threaded API: store.put_message per message."""

    group = "aio_put"
    implementation = "pymq-threads"
    operation = "store.put_message(Message(...)) on a thread"
    run = PymqPutMessage.run  # the put_message group's timed loop, to the letter


class _SyncPut(_AioWorkload):
    group = "aio_sync_put"

    def message_count(self) -> int:
        return min(self.options.messages, SYNC_PUTS)

    def config(self) -> Any:
        return dataclasses.replace(_small(self.options), flush_disk_type="SYNC_FLUSH")

    def setup(self, parent=None) -> None:
        # the warm-up is one message per producer: SYNC_FLUSH puts are slow and few
        self.options = dataclasses.replace(self.options, warmup=PRODUCERS)
        super().setup(parent)

    def check(self) -> None:
        _expect(self.ok == self.written, f"{self.written - self.ok} of {self.written} SYNC_FLUSH puts failed")

    @staticmethod
    def _shares(n: int) -> list[int]:
        return [n // PRODUCERS + (1 if i < n % PRODUCERS else 0) for i in range(PRODUCERS)]


class PymqAioSyncPut(_SyncPut):
    """pymq.aio: 32 tasks, SYNC_FLUSH puts awaiting the group commit."""

    operation = f"{PRODUCERS} tasks: await AsyncStore.put_message (SYNC_FLUSH)"
    ok = 0

    def run(self, n: int) -> None:
        astore, Message, body = self.astore, pymq.Message, self.body

        async def producer(k: int) -> int:
            good = 0
            for _ in range(k):
                r = await astore.put_message(Message(topic=TOPIC, body=body))
                good += r.status is pymq.PutMessageStatus.PUT_OK
            return good

        async def all_producers() -> int:
            return sum(await asyncio.gather(*(producer(k) for k in self._shares(n))))

        self.ok += self.loop.run_until_complete(all_producers())
        self.written += n


class PymqThreadSyncPut(_SyncPut):
    """The threaded API: 32 threads, SYNC_FLUSH puts blocking until flushed."""

    implementation = "pymq-threads"
    operation = f"{PRODUCERS} threads: store.put_message (SYNC_FLUSH)"
    ok = 0

    def run(self, n: int) -> None:
        store, Message, body = self.store, pymq.Message, self.body
        counts = []

        def producer(k: int) -> None:
            good = 0
            for _ in range(k):
                good += store.put_message(Message(topic=TOPIC, body=body)).status is pymq.PutMessageStatus.PUT_OK
            counts.append(good)

        threads = [threading.Thread(target=producer, args=(k,)) for k in self._shares(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.ok += sum(counts)
        self.written += n


def _pauses(n: int) -> list[float]:
    rnd = random.Random(n)
    return [rnd.uniform(0, MAX_PAUSE_S) for _ in range(n)]


class _Wakeup(_AioWorkload):
    group = "aio_wakeup"
    latency = True

    def message_count(self) -> int:
        return min(self.options.messages, WAKEUPS)

    def config(self) -> Any:
        return _small(self.options)

    def setup(self, parent=None) -> None:
        self.options = dataclasses.replace(self.options, warmup=min(self.options.warmup, 100))
        super().setup(parent)

    def open(self, path: str) -> None:
        super().open(path)
        self.samples: list[int] = []
        self.next_offset = 0

    def check(self) -> None:
        _expect(self.missed == 0, f"{self.missed} wake-ups did not come within 5 s")
        _expect(self.store.get_max_offset_in_queue(TOPIC, 0) == self.next_offset,
                f"queue holds {self.store.get_max_offset_in_queue(TOPIC, 0)} messages, put {self.next_offset}")

    missed = 0


class PymqAioWakeup(_Wakeup):
    """pymq.aio: a task awaiting wait_message, woken through the loop."""

    operation = "put -> task awaiting AsyncStore.wait_message wakes"

    def run(self, n: int) -> None:
        astore, store, Message, body = self.astore, self.store, pymq.Message, self.body
        samples, clock = [], time.perf_counter_ns
        first = self.next_offset

        async def ping_pong() -> int:
            put_at = [0]
            woke = asyncio.Event()
            missed = 0

            async def consumer() -> None:
                nonlocal missed
                for off in range(first, first + n):
                    if await astore.wait_message(TOPIC, 0, off, 5.0):
                        samples.append(clock() - put_at[0])
                    else:
                        missed += 1
                    woke.set()

            task = asyncio.get_running_loop().create_task(consumer())
            await asyncio.sleep(0)                 # the consumer is waiting
            for pause in _pauses(n):
                woke.clear()
                time.sleep(pause)                  # the consumer waits; as the threaded row does
                put_at[0] = clock()
                store.put_message(Message(topic=TOPIC, body=body))
                await woke.wait()
            await task
            return missed

        self.missed += self.loop.run_until_complete(ping_pong())
        self.next_offset += n
        self.samples = samples


class PymqThreadWakeup(_Wakeup):
    """The threaded API: a thread blocking in wait_message."""

    implementation = "pymq-threads"
    operation = "put -> thread blocking in store.wait_message wakes"

    def run(self, n: int) -> None:
        store, Message, body = self.store, pymq.Message, self.body
        samples, clock = [], time.perf_counter_ns
        first = self.next_offset
        put_at = [0]
        woke = threading.Event()
        ready = threading.Event()
        missed = [0]

        def consumer() -> None:
            for off in range(first, first + n):
                ready.set()
                if store.wait_message(TOPIC, 0, off, 5.0):
                    samples.append(clock() - put_at[0])
                else:
                    missed[0] += 1
                woke.set()

        t = threading.Thread(target=consumer)
        t.start()
        for pause in _pauses(n):
            ready.wait()
            ready.clear()
            woke.clear()
            time.sleep(pause)                      # the consumer is inside wait_message
            put_at[0] = clock()
            store.put_message(Message(topic=TOPIC, body=body))
            woke.wait()
        t.join()
        self.missed += missed[0]
        self.next_offset += n
        self.samples = samples
