"""pymq.aio: awaitable puts and long polls, async Consumer and SimpleConsumer.

The waits must be woken by the store's notifier through the loop, with no thread per
waiter (threads are counted) and no sleep loop (a waiter wakes within milliseconds of a
put, well before any timeout); a cancelled wait or receive loses no message.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

pytest_asyncio = pytest.importorskip("pytest_asyncio")

import pymq  # noqa: E402
import pymq.aio  # noqa: E402

from conftest import small_config  # noqa: E402

pytestmark = pytest.mark.asyncio


def config(**over):
    values = dict(commitlog_file_size=8 << 20, consume_queue_entries=20_000, index_hash_slots=1024,
                  index_max_entries=8192, message_index_enable=False)
    values.update(over)
    return small_config(**values)


@pytest_asyncio.fixture
async def astore(tmp_path):
    async with pymq.aio.AsyncStore(pymq.MessageStore(tmp_path / "store", config())) as s:
        yield s


@pytest_asyncio.fixture
async def abroker(tmp_path):
    async with pymq.aio.AsyncStore(pymq.Broker(tmp_path / "broker", config())) as s:
        yield s


async def test_wait_message_is_woken_by_a_put_from_another_thread(astore):
    waiter = asyncio.create_task(astore.wait_message("T", 0, 0, timeout_s=10))
    await asyncio.sleep(0.05)
    assert not waiter.done() and astore.waiters().waiting == 1
    t0 = time.monotonic()
    threading.Thread(target=astore.store.put_message, args=(pymq.Message("T", b"x"),)).start()
    assert await asyncio.wait_for(waiter, 5) is True
    assert time.monotonic() - t0 < 1.0              # the dispatcher woke it, not the 10 s timeout
    assert astore.waiters().waiting == 0            # the registration is gone
    assert await astore.wait_message("T", 0, 0, 0) is True
    t0 = time.monotonic()
    assert await astore.wait_message("T", 0, 1, 0.2) is False
    assert 0.15 <= time.monotonic() - t0 < 2


async def test_wait_messages_any_queue_and_new_queues(astore):
    await astore.put_message(pymq.Message("T", b"a", queue_id=0))
    waiter = asyncio.create_task(astore.wait_messages("T", {0: 1}, 10))
    await asyncio.sleep(0.05)
    assert not waiter.done()
    await astore.put_message(pymq.Message("T", b"b", queue_id=3))     # a queue it did not know
    assert await asyncio.wait_for(waiter, 5) is True
    other = asyncio.create_task(astore.wait_messages(("T", "U"), {"T": {0: 1, 3: 1}, "U": {}}, 10))
    await asyncio.sleep(0.05)
    await astore.put_message(pymq.Message("U", b"c"))
    assert await asyncio.wait_for(other, 5) is True


async def test_cancelled_wait_leaves_no_registration(astore):
    waiter = asyncio.create_task(astore.wait_message("T", 0, 0, 30))
    await asyncio.sleep(0.02)
    assert astore.waiters().waiting == 1
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert astore.waiters().waiting == 0
    assert not astore.store.notifier._listeners        # the listener went with the last waiter


async def test_sync_flush_put_awaits_the_disk_without_a_thread(tmp_path):
    store = pymq.MessageStore(tmp_path / "s", config(flush_disk_type="SYNC_FLUSH"))
    async with pymq.aio.AsyncStore(store) as s:
        before = set(threading.enumerate())
        results = await asyncio.gather(*(s.put_message(pymq.Message("T", b"m%d" % i)) for i in range(200)))
        assert all(r.status is pymq.PutMessageStatus.PUT_OK for r in results)
        end = max(r.commitlog_offset + r.wrote_bytes for r in results)
        assert store.commit_log.mapped_file_queue.flushed_where >= end
        batch = await s.put_messages([pymq.Message("T", b"b%d" % i) for i in range(10)])
        assert batch.is_ok() and batch.msg_num == 10
        assert store.commit_log.mapped_file_queue.flushed_where >= batch.commitlog_offset + batch.wrote_bytes
        bodies = await s.put_bodies("T", [b"r%d" % i for i in range(10)], keys=[f"k{i}" for i in range(10)])
        assert bodies.is_ok() and bodies.msg_num == 10
        assert store.commit_log.mapped_file_queue.flushed_where >= bodies.commitlog_offset + bodies.wrote_bytes
        assert set(threading.enumerate()) <= before      # no executor thread was needed


async def test_sync_flush_put_times_out_when_the_disk_hangs(tmp_path):
    store = pymq.MessageStore(tmp_path / "s", config(flush_disk_type="SYNC_FLUSH", sync_flush_timeout=200))
    async with pymq.aio.AsyncStore(store) as s:
        real = store.flush_service.put_request
        store.flush_service.put_request = lambda req: None          # a flush that never comes
        try:
            t0 = time.monotonic()
            r = await s.put_message(pymq.Message("T", b"x"))
        finally:
            store.flush_service.put_request = real
        assert r.status is pymq.PutMessageStatus.FLUSH_DISK_TIMEOUT
        assert 0.15 <= time.monotonic() - t0 < 2


async def test_consumer_iterates_and_commits_only_what_was_handed_out(astore):
    for i in range(10):
        await astore.put_message(pymq.Message("T", b"%d" % i, queue_id=0))
    c = pymq.aio.Consumer(astore, "g", "T")
    got = []
    async for m in c:
        got.append(int(m.body))
        if len(got) == 4:
            break
    c.commit()
    assert got == [0, 1, 2, 3]
    assert astore.store.query_offset("g", "T", 0) == 4          # 6 more sit in the buffer
    rest = await c.poll(1)
    assert [int(m.body) for m in rest] == [4, 5, 6, 7, 8, 9]
    c.commit()
    assert astore.store.query_offset("g", "T", 0) == 10
    later = asyncio.create_task(c.poll(10))
    await asyncio.sleep(0.05)
    assert not later.done()
    await astore.put_message(pymq.Message("T", b"10", queue_id=1))
    assert [m.body for m in await asyncio.wait_for(later, 5)] == [b"10"]


async def test_consumer_cancelled_poll_loses_nothing(astore):
    c = pymq.aio.Consumer(astore, "g", "T")
    poll = asyncio.create_task(c.poll(30))
    await asyncio.sleep(0.05)
    poll.cancel()
    with pytest.raises(asyncio.CancelledError):
        await poll
    await astore.put_message(pymq.Message("T", b"kept"))
    assert [m.body for m in await c.poll(5)] == [b"kept"]
    assert astore.waiters().waiting == 0


async def test_consumer_iteration_ends_when_the_store_shuts_down(tmp_path):
    s = pymq.aio.AsyncStore(pymq.MessageStore(tmp_path / "s", config()).start())
    c = pymq.aio.Consumer(s, "g", "T")

    async def drain():
        return [m async for m in c]

    task = asyncio.create_task(drain())
    await s.put_message(pymq.Message("T", b"one"))
    await asyncio.sleep(0.1)
    await s.aclose()
    assert [m.body for m in await asyncio.wait_for(task, 5)] == [b"one"]


async def test_simple_consumer_receive_ack_and_long_poll(abroker):
    sc = pymq.aio.SimpleConsumer(abroker, "workers", "Jobs", await_duration=10)
    receive = asyncio.create_task(sc.receive(8, 30))
    await asyncio.sleep(0.05)
    assert not receive.done()
    t0 = time.monotonic()
    await abroker.put_message(pymq.Message("Jobs", b"job-1"))
    msgs = await asyncio.wait_for(receive, 5)
    assert time.monotonic() - t0 < 1.0
    assert [m.body for m in msgs] == [b"job-1"] and msgs[0].delivery_attempt == 1
    await sc.ack(msgs[0])
    with pytest.raises(pymq.InvalidReceiptHandleError):
        await sc.ack(msgs[0])
    await abroker.put_messages([pymq.Message("Jobs", b"j%d" % i) for i in range(3)])
    await asyncio.sleep(0.05)
    got = await sc.receive(8, 30)
    assert len(got) == 3
    assert await sc.ack_messages(got) == [None, None, None]
    empty = pymq.aio.SimpleConsumer(abroker, "workers", "Jobs", await_duration=0.2)
    t0 = time.monotonic()
    assert await empty.receive(8, 30) == []
    assert 0.15 <= time.monotonic() - t0 < 2


async def test_simple_consumer_wakes_when_an_invisible_message_expires(abroker):
    await abroker.put_message(pymq.Message("Jobs", b"again"))
    sc = pymq.aio.SimpleConsumer(abroker, "workers", "Jobs", await_duration=10)
    first = await sc.receive(1, invisible_duration=0.5)
    assert [m.body for m in first] == [b"again"]
    t0 = time.monotonic()
    second = await sc.receive(1, 30)            # waits for the first delivery's deadline
    assert [m.body for m in second] == [b"again"] and second[0].delivery_attempt == 2
    assert 0.3 <= time.monotonic() - t0 < 3
    new_handle = await sc.change_invisible_duration(second[0], 0)
    assert new_handle == second[0].receipt_handle


async def test_cancelled_waiting_receive_takes_nothing(abroker):
    sc = pymq.aio.SimpleConsumer(abroker, "workers", "Jobs", await_duration=30)
    receive = asyncio.create_task(sc.receive(4, 30))
    await asyncio.sleep(0.05)
    receive.cancel()
    with pytest.raises(asyncio.CancelledError):
        await receive
    await abroker.put_message(pymq.Message("Jobs", b"mine"))
    got = await pymq.aio.SimpleConsumer(abroker, "workers", "Jobs", await_duration=5).receive(4, 30)
    assert [m.body for m in got] == [b"mine"] and got[0].delivery_attempt == 1


async def test_receive_cancelled_during_a_sync_flush_pop_returns_the_message_later(tmp_path):
    broker = pymq.Broker(tmp_path / "b", config(flush_disk_type="SYNC_FLUSH"))
    async with pymq.aio.AsyncStore(broker) as b:
        await b.put_message(pymq.Message("Jobs", b"precious"))
        assert await b.wait_message("Jobs", 0, 0, 5)       # dispatched: the pop will find it
        held, real = [], broker.flush_service.put_request
        broker.flush_service.put_request = held.append     # the disk stalls: the pop waits for it
        sc = pymq.aio.SimpleConsumer(b, "workers", "Jobs", await_duration=5)
        receive = asyncio.create_task(sc.receive(1, invisible_duration=1))
        deadline = time.monotonic() + 5
        while not held:                                    # the pop took it and waits for the disk
            assert time.monotonic() < deadline
            await asyncio.sleep(0.005)
        receive.cancel()
        with pytest.raises(asyncio.CancelledError):
            await receive                                  # at once: the loop is not blocked
        broker.flush_service.put_request = real
        for req in held:
            real(req)
        assert broker.stats()["pop"][0]["inflight"] == 1
        t0 = time.monotonic()
        got = await sc.receive(1, 30)           # invisible for its 1 s, then back
        assert [m.body for m in got] == [b"precious"]
        assert got[0].delivery_attempt == 2 and time.monotonic() - t0 >= 0.3
        await sc.ack(got[0])


async def test_service_of_100_tasks_consumes_100k_messages_without_thread_per_waiter(abroker):
    """The acceptance scenario: 100 receiving tasks, one producing task, 100,000 messages."""
    total, tasks = 100_000, 100
    got: list[int] = []
    done = asyncio.Event()
    base = threading.active_count()
    peak = [base]
    names: set[str] = set()
    base_threads = set(threading.enumerate())
    base_names = {t.name for t in base_threads}

    async def worker() -> None:
        sc = pymq.aio.SimpleConsumer(abroker, "workers", "Jobs", await_duration=0.5)
        while not done.is_set():
            msgs = await sc.receive(32, 60)
            if msgs:
                assert await sc.ack_messages(msgs) == [None] * len(msgs)
                got.extend(int(m.body) for m in msgs)
                if len(got) >= total:
                    done.set()
            peak[0] = max(peak[0], threading.active_count())
            names.update(t.name for t in threading.enumerate())

    async def producer() -> None:
        for start in range(0, total, 500):
            r = await abroker.put_messages([pymq.Message("Jobs", b"%d" % i, queue_id=(start // 500) % 4)
                                            for i in range(start, start + 500)])
            assert r.is_ok()
            await asyncio.sleep(0)

    workers = [asyncio.create_task(worker()) for _ in range(tasks)]
    await asyncio.sleep(0.1)
    assert abroker.waiters().waiting == tasks          # all 100 parked on futures ...
    assert set(threading.enumerate()) <= base_threads  # ... and not on threads (earlier tests' may end)
    await producer()
    await asyncio.wait_for(done.wait(), 120)
    await asyncio.gather(*workers)
    assert len(got) == total and len(set(got)) == total
    # the store's own short-lived helpers (allocating the next segment) may come and go;
    # nothing ran on an executor and nothing grew with the number of waiting tasks
    new = names - base_names
    assert peak[0] <= base + 2 and len(new) <= 2, new
    assert not [n for n in new if n.startswith(("asyncio_", "ThreadPoolExecutor"))], new
    st = abroker.store.stats()
    assert [p for p in st["pop"] if p["group"] == "workers"][0]["inflight"] == 0
