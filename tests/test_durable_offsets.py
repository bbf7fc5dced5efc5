"""Durable consumer progress (issue 22, item 6).

``Consumer.commit()``, ``store.commit_offset(..., durable=True)`` and
``store.flush_offsets()`` return only once ``config/consumerOffset.json`` holds the
offsets; commits waiting at the same time share one write; the plain ``commit_offset``
stays in memory. Checked with a real SIGKILL right after a commit returned, 30 times.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

from conftest import small_config

import pymq
import pymq.aio
from pymq.store.consumer_offsets import ConsumerOffsetManager

TOPIC = "Progress"
QUEUES = 4


def on_disk(path) -> ConsumerOffsetManager:
    """The offsets as a new opener reads them from the files."""
    table = ConsumerOffsetManager(path)
    table.load()
    return table


def test_commit_offset_stays_in_memory_unless_durable(tmp_path):
    path = tmp_path / "store"
    cfg = small_config(flush_consumer_offset_interval=3_600_000)
    with pymq.MessageStore(path, cfg) as store:
        table = store.consumer_offsets
        writes = table.persists
        for offset in range(1, 1001):
            store.commit_offset("g", TOPIC, 0, offset)
        assert table.persists == writes                          # the cheap default: no write
        assert on_disk(path).query_offset("g", TOPIC, 0) == -1
        store.commit_offset("g", TOPIC, 1, 7, durable=True)
        assert table.persists == writes + 1
        assert on_disk(path).query_offsets("g", TOPIC) == {0: 1000, 1: 7}
        store.flush_offsets()                                    # nothing new: no write
        assert table.persists == writes + 1
        store.commit_offset("g", TOPIC, 0, 1001)
        store.flush_offsets()
        assert on_disk(path).query_offset("g", TOPIC, 0) == 1001
        assert not [n for n in os.listdir(path / "config") if n.endswith(".tmp")]


def test_concurrent_durable_commits_share_writes(tmp_path):
    """16 threads commit durably at once, 10 rounds: every commit is on disk when it
    returns, and the rounds take far fewer writes than commits."""
    threads, rounds = 16, 10
    path = tmp_path / "store"
    cfg = small_config(flush_consumer_offset_interval=3_600_000)
    with pymq.MessageStore(path, cfg) as store:
        table = store.consumer_offsets
        barrier = threading.Barrier(threads)
        seen_on_disk = []
        errors = []

        def committer(i: int) -> None:
            try:
                for r in range(1, rounds + 1):
                    barrier.wait()
                    store.commit_offset(f"g{i}", TOPIC, i % QUEUES, r, durable=True)
                    seen_on_disk.append(on_disk(path).query_offset(f"g{i}", TOPIC, i % QUEUES) >= r)
            except BaseException as e:      # reported by the main thread
                errors.append(e)
                barrier.abort()

        writes = table.persists
        workers = [threading.Thread(target=committer, args=(i,)) for i in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(60)
        assert not errors, errors
        commits = threads * rounds
        done = table.persists - writes
        print(f"\n{commits} durable commits from {threads} threads at once: {done} writes of the file")
        assert len(seen_on_disk) == commits and all(seen_on_disk)
        assert done <= commits // 4, f"{done} writes for {commits} commits: no group commit"
        final = on_disk(path)
        assert all(final.query_offset(f"g{i}", TOPIC, i % QUEUES) == rounds for i in range(threads))


def test_consumer_commit_is_on_disk_when_it_returns(tmp_path):
    path = tmp_path / "store"
    cfg = small_config(flush_consumer_offset_interval=3_600_000)
    with pymq.MessageStore(path, cfg) as store:
        for i in range(40):
            assert store.put_message(pymq.Message(TOPIC, b"m%d" % i, queue_id=i % QUEUES)).is_ok()
        consumer = pymq.Consumer(store, "g", TOPIC)
        got = []
        deadline = time.monotonic() + 10
        while len(got) < 40 and time.monotonic() < deadline:
            got += consumer.poll(0.5)
        assert len(got) == 40
        consumer.commit()
        assert on_disk(path).query_offsets("g", TOPIC) == {q: 10 for q in range(QUEUES)}


def test_aio_commit_returns_a_future_done_once_on_disk(tmp_path):
    path = tmp_path / "store"
    cfg = small_config(flush_consumer_offset_interval=3_600_000)

    async def main() -> None:
        async with pymq.aio.AsyncStore(pymq.MessageStore(path, cfg)) as astore:
            for i in range(8):
                await astore.put_message(pymq.Message(TOPIC, b"m%d" % i, queue_id=0))
            consumers = [pymq.aio.Consumer(astore, f"g{i}", TOPIC) for i in range(8)]
            for c in consumers:
                assert len(await c.poll(1.0)) == 8
            # the loop keeps running while the writes happen on the executor
            ticks = 0

            async def ticker() -> None:
                nonlocal ticks
                while True:
                    ticks += 1
                    await asyncio.sleep(0)

            tick_task = asyncio.create_task(ticker())
            futures = [c.commit() for c in consumers]
            assert all(isinstance(f, asyncio.Future) for f in futures)
            # committed in memory at once, before any await
            assert all(astore.store.query_offset(f"g{i}", TOPIC, 0) == 8 for i in range(8))
            await asyncio.gather(*futures)
            tick_task.cancel()
            table = on_disk(path)
            assert all(table.query_offset(f"g{i}", TOPIC, 0) == 8 for i in range(8))
            assert ticks > 0

    asyncio.run(main())


# -- SIGKILL right after Consumer.commit() returned ------------------------------------------

_CHILD = r"""
import json, sys
sys.path[:0] = json.loads(sys.argv[3])
import pymq
print("READY", flush=True)
sys.stdin.readline()    # the parent has closed the store
cfg = pymq.StoreConfig(**json.loads(sys.argv[2]))
store = pymq.MessageStore(sys.argv[1], cfg).start()
consumer = pymq.Consumer(store, "killed", "Progress", pull_batch_size=3)
commits = int(sys.argv[4])
while commits:
    if not consumer.poll(1.0):
        continue
    consumer.commit()
    print("COMMITTED", json.dumps(consumer.positions), flush=True)
    commits -= 1
sys.stdin.read()        # wait for the SIGKILL
"""


def test_offsets_committed_before_a_sigkill_are_kept(tmp_path):
    """30 times: a consumer process commits (Consumer.commit) one to three times and says
    so after each commit returned; it is SIGKILLed within a second of the last; the store
    reopened (crash recovery) holds every offset it said it committed. The persist
    interval is an hour: only the durable commit can have written them."""
    trials = 30
    path = tmp_path / "store"
    config = dict(commitlog_file_size=256 * 1024, consume_queue_entries=4096, index_hash_slots=256,
                  index_max_entries=1024, warm_mapped_file_enable=False,
                  flush_consumer_offset_interval=3_600_000)
    with pymq.MessageStore(path, pymq.StoreConfig(**config)) as store:
        for i in range(trials * 40):
            assert store.put_message(pymq.Message(TOPIC, b"%06d" % i, queue_id=i % QUEUES)).is_ok()
    paths = json.dumps([p for p in sys.path if p])
    rng = random.Random(22)

    def spawn() -> tuple[subprocess.Popen, int]:
        """The next consumer, its imports done while the previous trial is checked."""
        commits = rng.randint(1, 3)
        return subprocess.Popen([sys.executable, "-c", _CHILD, str(path), json.dumps(config), paths, str(commits)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True), commits

    kept = 0
    nxt = spawn()
    for trial in range(trials):
        child, commits = nxt
        said = None
        try:
            assert child.stdout.readline() == "READY\n", child.stderr.read()
            child.stdin.write("go\n")
            child.stdin.flush()
            for _ in range(commits):
                line = child.stdout.readline()
                assert line.startswith("COMMITTED "), (line, child.stderr.read() if not line else "")
                said = {int(q): off for q, off in json.loads(line.split(" ", 1)[1]).items()}
            time.sleep(rng.uniform(0.0, 0.5))          # killed within a second of the commit
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
            for stream in (child.stdin, child.stdout, child.stderr):
                stream.close()
        nxt = spawn() if trial + 1 < trials else None
        with pymq.MessageStore(path, pymq.StoreConfig(**config)) as store:
            reopened = {q: store.query_offset("killed", TOPIC, q) for q in said}
        if reopened == said:           # nothing commits after the last line
            kept += 1
        else:
            print(f"trial {trial}: said {said}, reopened {reopened}")
    print(f"\nSIGKILL after Consumer.commit(): committed offsets kept in {kept} of {trials} trials")
    assert kept == trials
