"""Consume-queue files mapped on demand, at most ``max_mapped_queue_files`` at once (issue
23, part 3, "Maps under control"), as the store uses them.

Every mapping is one entry of the process's map table (``vm.max_map_count``, 65,530 by
default); a store that kept every queue file mapped could not hold 50,000 queues and
anything else. These tests check that idle files are let go under the cap and mapped again
by whatever touches them next, and that nothing reads an evicted file as empty, damaged or
missing: pulls (decoded, raw, Spark's columns), time lookups, bounds, the dispatcher's
writes, reopens, a follower, cleaning and ``pymq check``, a random model, and many threads
at once under a cap of 8. The map cache's own rules are in ``test_map_cache.py``.

``test_many_queues_stay_under_the_cap`` fills and reopens a store of many queues of
RocketMQ's default consume-queue size (4,000 queues under a cap of 1,024 by default, about
7 s); ``PYMQ_MAP_CAP_QUEUES=50000 PYMQ_MAP_CAP=16384`` runs the issue's full size (about
25 s on 2 cores, 3.3 GB of queue blocks reserved on disk).
"""

from __future__ import annotations

import os
import random
import threading
import time

import pytest
from conftest import small_config
from test_index_file_format import wait_dispatched

import pymq
from pymq import BoundaryType, GetMessageStatus, PutMessageStatus

MARGIN = 16                 # the store's other mapped files: commit log, index, timer, checkpoint


def store_maps(root) -> int:
    """Mappings this process holds of files under ``root`` (lines of /proc/self/maps)."""
    root = os.path.realpath(str(root)) + os.sep
    with open("/proc/self/maps") as f:
        return sum(1 for line in f if root in line)


def capped(cap: int = 8, **overrides) -> pymq.StoreConfig:
    return small_config(max_mapped_queue_files=cap, **overrides)


def queue_files(store) -> list:
    return [mf for cq in store.consume_queues.queues() for mf in cq.mapped_file_queue.mapped_files]


def body_of(topic: str, queue_id: int, offset: int) -> bytes:
    return f"{topic}/{queue_id}/{offset}".encode()


def read_queue(store, topic: str, queue_id: int, page: int = 32) -> list:
    """Every message of a queue, by pulls from offset 0."""
    out, offset = [], store.get_min_offset_in_queue(topic, queue_id)
    while True:
        g = store.get_message("g", topic, queue_id, offset, page)
        if g.status is not GetMessageStatus.FOUND:
            assert g.status in (GetMessageStatus.OFFSET_OVERFLOW_ONE, GetMessageStatus.NO_MESSAGE_IN_QUEUE), g
            return out
        out.extend(g.messages)
        offset = g.next_begin_offset


def fill(store, topics: int, queues: int, per_queue: int) -> dict:
    """``per_queue`` messages into each queue, interleaved; returns {(topic, qid): count}."""
    for i in range(per_queue):
        for t in range(topics):
            for q in range(queues):
                r = store.put_message(pymq.Message(topic=f"T{t}", body=body_of(f"T{t}", q, i), queue_id=q))
                assert r.status is PutMessageStatus.PUT_OK and r.queue_offset == i
    wait_dispatched(store)
    return {(f"T{t}", q): per_queue for t in range(topics) for q in range(queues)}


def check_all(store, expected: dict) -> None:
    for (topic, q), n in expected.items():
        got = read_queue(store, topic, q)
        assert [m.body for m in got] == [body_of(topic, q, i) for i in range(n)], (topic, q)
        assert [m.queue_offset for m in got] == list(range(n))
        assert store.get_max_offset_in_queue(topic, q) == n
        assert store.get_min_offset_in_queue(topic, q) == 0


# -- reading what was evicted ---------------------------------------------------------------------

def test_every_message_is_read_back_after_its_file_was_evicted(tmp_path):
    """40 queues of three files each under a cap of 8: pulls, time lookups and bounds map
    each file again; then the same after a writer reopen and from a read-only store."""
    root = tmp_path / "s"
    cfg = capped(8)
    with pymq.MessageStore(root, cfg) as s:
        s.start()
        expected = fill(s, 4, 10, 150)              # 64-entry files: three per queue
        cache = s.consume_queues.map_cache
        files = queue_files(s)
        assert len(files) == 120
        assert cache.mapped <= 8 and sum(mf.evicted for mf in files) >= 112
        assert store_maps(root / "consumequeue") <= 8
        check_all(s, expected)
        assert cache.remaps >= 100 and cache.mapped <= 8
        # time lookups over files that are not mapped
        first = s.get_message("g", "T3", 9, 0, 1).messages[0]
        last = s.get_message("g", "T3", 9, 149, 1).messages[0]
        for mf in queue_files(s):
            mf.evict()
        assert s.get_offset_in_queue_by_time("T3", 9, first.store_timestamp) == 0
        assert s.get_offset_in_queue_by_time("T3", 9, last.store_timestamp + 1) == 150
        assert s.get_offset_in_queue_by_time("T3", 9, last.store_timestamp, BoundaryType.UPPER) == 149
        maps = s.stats()["maps"]
        assert maps["consume_queue"] == cache.mapped <= 8 and maps["consume_queue_cap"] == 8
        assert maps["consume_queue_files"] == 120 and maps["consume_queue_evictions"] > 0
        assert maps["total"] == maps["commitlog"] + maps["consume_queue"] + maps["index"] + maps["timer"]
    with pymq.MessageStore(root, cfg) as s:          # a writer reopen: recovery reads evicted files
        assert s.consume_queues.map_cache.mapped <= 8 and store_maps(root / "consumequeue") <= 8
        s.start()
        check_all(s, expected)
        # the dispatcher writes into files it has to map again
        for mf in queue_files(s):
            mf.evict()
        for q in range(10):
            assert s.put_message(pymq.Message(topic="T0", body=body_of("T0", q, 150), queue_id=q)).is_ok()
        wait_dispatched(s)
        expected.update({("T0", q): 151 for q in range(10)})
        check_all(s, expected)
    with pymq.MessageStore(root, cfg, read_only=True) as s:
        assert s.consume_queues.map_cache.mapped <= 8
        check_all(s, expected)


def test_raw_pulls_and_columns_of_evicted_files(tmp_path):
    with pymq.MessageStore(tmp_path / "s", capped(2)) as s:
        s.start()
        expected = fill(s, 1, 6, 30)
        for mf in queue_files(s):
            mf.evict()
        for (topic, q), n in expected.items():
            g = s.get_message_raw("g", topic, q, 0, 32)
            assert g.status is GetMessageStatus.FOUND and g.message_count == n
            del g
        for mf in queue_files(s):
            mf.evict()
        cl = s.commit_log
        from pymq._core import columns
        cq = s.consume_queues.find_consume_queue("T0", 3)
        count, _status, cols = columns.read_range(cq.appender, cl.mapped_file_queue.mapped_files, cl.file_size,
                                                  "T0", 3, 0, 30, 100, 1 << 20)
        assert count == 30 and cols["bytes"] > 0


# -- a follower, cleaning, check ----------------------------------------------------------------

def test_a_follower_sees_an_evicted_queue_grow(tmp_path):
    """A read-only store under a cap of 2 finds the writer's new entries in queues whose
    files it let go, and looks at idle queues without mapping them again."""
    root = tmp_path / "s"
    with pymq.MessageStore(root, capped(0)) as w:
        w.start()
        expected = fill(w, 1, 6, 3)
        with pymq.MessageStore(root, capped(2), read_only=True) as r:
            assert r.consume_queues.map_cache.mapped <= 2
            check_all(r, expected)
            for q in range(3):
                assert w.put_message(pymq.Message(topic="T0", body=body_of("T0", q, 3), queue_id=q)).is_ok()
            wait_dispatched(w)
            idle = [mf for q in range(3, 6) for mf in r.consume_queues.find_consume_queue("T0", q)
                    .mapped_file_queue.mapped_files if mf.evicted]
            remaps = r.consume_queues.map_cache.remaps
            r.refresh()
            assert all(mf.evicted for mf in idle) and idle          # looked at with pread
            assert r.consume_queues.map_cache.remaps - remaps <= 3  # only the queues that grew
            expected.update({("T0", q): 4 for q in range(3)})
            check_all(r, expected)
            assert r.consume_queues.map_cache.mapped <= 2


def test_cleaning_and_check_of_a_store_whose_files_are_evicted(tmp_path):
    """Retention moves each queue's minimum and deletes its old files, then ``pymq check``
    reads every entry, all through files that are not mapped."""
    root = tmp_path / "s"
    cfg = capped(2, consume_queue_entries=32, file_reserved_time=0.3 / 3600, delete_commitlog_files_interval=0,
                 delete_consume_queue_files_interval=0, delete_files_batch_max=1000,
                 delete_when="%02d" % ((time.localtime().tm_hour + 12) % 24))
    with pymq.MessageStore(root, cfg) as s:
        s.start()
        for i in range(2000):
            assert s.put_message(pymq.Message(topic="R", body=b"r" * 200, queue_id=i % 8)).is_ok()
        wait_dispatched(s)
        time.sleep(0.4)
        for mf in queue_files(s):
            mf.evict()
        files_before = len(queue_files(s))
        out = s.delete_expired_files()
        assert out["commitlog"] > 0 and out["consume_queue"] > 0
        assert len(queue_files(s)) == files_before - out["consume_queue"]
        for q in range(8):
            low = s.get_min_offset_in_queue("R", q)
            assert low > 0
            g = s.get_message("g", "R", q, low, 1)
            assert g.status is GetMessageStatus.FOUND and g.messages[0].queue_offset == low
        assert s.consume_queues.map_cache.mapped <= 2
    from pymq.checker import StoreChecker
    report = StoreChecker(str(root), cfg).run()
    assert report.ok, report


# -- a model --------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_operations_against_a_model(tmp_path, seed):
    """Puts, pulls from anywhere, time lookups, bounds and reopens on 24 queues of several
    files under a cap of 8, against a plain list per queue."""
    rnd = random.Random(seed)
    root = tmp_path / "s"
    cfg = capped(8, consume_queue_entries=32)
    keys = [(f"M{t}", q) for t in range(3) for q in range(8)]
    model = {k: [] for k in keys}                   # (body, store timestamp) per queue offset
    s = pymq.MessageStore(root, cfg).start()
    try:
        for step in range(500):
            op = rnd.random()
            topic, q = rnd.choice(keys)
            if op < 0.45:
                msgs = [pymq.Message(topic=topic, body=body_of(topic, q, len(model[(topic, q)]) + i), queue_id=q)
                        for i in range(rnd.randint(1, 6))]
                r = s.put_messages(msgs) if len(msgs) > 1 else s.put_message(msgs[0])
                assert r.is_ok() and r.queue_offset == len(model[(topic, q)])
                model[(topic, q)].extend((m.body, r.store_timestamp) for m in msgs)
                if rnd.random() < 0.5:
                    wait_dispatched(s)
                continue
            wait_dispatched(s)
            rows = model[(topic, q)]
            if op < 0.8:
                start = rnd.randint(0, len(rows))
                g = s.get_message("g", topic, q, start, rnd.randint(1, 40))
                if not rows:
                    assert g.status is GetMessageStatus.NO_MESSAGE_IN_QUEUE
                elif start == len(rows):
                    assert g.status is GetMessageStatus.OFFSET_OVERFLOW_ONE
                else:
                    assert g.status is GetMessageStatus.FOUND, g
                    got = [m.body for m in g.messages]
                    assert got == [b for b, _ in rows[start:start + len(got)]] and got
                    assert g.next_begin_offset == start + len(got)
            elif op < 0.9 and rows:
                i = rnd.randrange(len(rows))
                ts = rows[i][1]
                lower = next(j for j, (_, t) in enumerate(rows) if t >= ts)
                upper = max(j for j, (_, t) in enumerate(rows) if t <= ts)
                assert s.get_offset_in_queue_by_time(topic, q, ts) == lower
                assert s.get_offset_in_queue_by_time(topic, q, ts, BoundaryType.UPPER) == upper
            elif op < 0.97:
                assert s.get_max_offset_in_queue(topic, q) == len(rows)
                assert s.get_min_offset_in_queue(topic, q) == 0
            else:
                s.shutdown()
                s = pymq.MessageStore(root, cfg).start()
            cache = s.consume_queues.map_cache
            assert cache.mapped <= 8 + 2, cache.mapped   # a file the dispatcher was writing may wait a sweep
        wait_dispatched(s)
        for (topic, q), rows in model.items():
            assert [m.body for m in read_queue(s, topic, q)] == [b for b, _ in rows]
        assert s.consume_queues.map_cache.evictions > 0
    finally:
        s.shutdown()


# -- threads ----------------------------------------------------------------------------------------

def test_readers_and_a_writer_on_many_queues_under_a_cap_of_8(tmp_path):
    """Four reader threads (one of them raw, all doing time lookups now and then) pull
    every queue over and over while a writer puts 30,000 messages across 48 queues of ten
    files each and the dispatcher files them, under a cap of 8: every message is read back
    exactly, in order, by every reader."""
    topics, queues, total = 6, 8, 30_000
    keys = [(f"C{t}", q) for t in range(topics) for q in range(queues)]
    with pymq.MessageStore(tmp_path / "s", capped(8, consume_queue_entries=64)) as s:
        s.start()
        done = threading.Event()
        errors: list = []
        counts = {k: 0 for k in keys}

        def writer():
            try:
                rnd = random.Random(7)
                for _ in range(total):
                    topic, q = rnd.choice(keys)
                    r = s.put_message(pymq.Message(topic=topic, body=body_of(topic, q, counts[(topic, q)]), queue_id=q))
                    assert r.is_ok() and r.queue_offset == counts[(topic, q)]
                    counts[(topic, q)] += 1
            except BaseException as e:          # noqa: BLE001 - reported by the test
                errors.append(e)
            finally:
                done.set()

        def reader(n: int, raw: bool):
            try:
                rnd = random.Random(n)
                pos = {k: 0 for k in keys}
                while True:
                    finished = done.is_set() and not s.dispatch_behind_bytes()
                    before = dict(pos)
                    order = list(keys)
                    rnd.shuffle(order)
                    for topic, q in order:
                        if raw:
                            g = s.get_message_raw("g", topic, q, pos[(topic, q)], 16)
                            if g.status is GetMessageStatus.FOUND:
                                assert g.message_count > 0
                                pos[(topic, q)] = g.next_begin_offset
                            g = None
                            continue
                        g = s.get_message("g", topic, q, pos[(topic, q)], 16)
                        if g.status is GetMessageStatus.FOUND:
                            want = [body_of(topic, q, pos[(topic, q)] + i) for i in range(len(g.messages))]
                            assert [m.body for m in g.messages] == want and want
                            pos[(topic, q)] = g.next_begin_offset
                        else:
                            assert g.status in (GetMessageStatus.OFFSET_OVERFLOW_ONE,
                                                GetMessageStatus.NO_MESSAGE_IN_QUEUE), g
                        if rnd.random() < 0.05 and pos[(topic, q)]:
                            s.get_offset_in_queue_by_time(topic, q, int(time.time() * 1000))
                    if finished and pos == before:
                        break
                    if pos == before:
                        time.sleep(0.001)       # nothing new: let the writer and dispatcher on
                assert pos == counts, "a reader missed messages"
            except BaseException as e:          # noqa: BLE001 - reported by the test
                errors.append(e)

        threads = [threading.Thread(target=writer)] + [
            threading.Thread(target=reader, args=(n, n == 3)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        assert not any(t.is_alive() for t in threads)
        assert not errors, errors[0]
        cache = s.consume_queues.map_cache
        assert sum(counts.values()) == total
        assert cache.evictions > 100 and cache.remaps > 100
        # over the cap only by files skipped while busy: one per reader, those being written
        assert cache.peak <= 8 + 4 + len(keys), cache.peak
        assert cache.trim() <= 8
        print(f"\npeak {cache.peak}, evictions {cache.evictions}, remaps {cache.remaps}, skipped {cache.skipped}")
        for (topic, q), n in counts.items():
            assert [m.body for m in read_queue(s, topic, q)] == [body_of(topic, q, i) for i in range(n)]


# -- many queues -------------------------------------------------------------------------------------

QUEUES = int(os.environ.get("PYMQ_MAP_CAP_QUEUES", "4000"))
CAP = int(os.environ.get("PYMQ_MAP_CAP", "1024"))


def test_many_queues_stay_under_the_cap(tmp_path):
    """QUEUES queues (topics of 10 queues) of RocketMQ's default consume-queue size, one
    message each: the process never holds more than the cap (plus the store's few other
    files) of mappings of the store, through the writes, a writer reopen and reading every
    message back. Timings go to the test's output (``-s``)."""
    root = tmp_path / "s"
    cfg = pymq.StoreConfig(max_mapped_queue_files=CAP, commitlog_file_size=64 << 20, index_hash_slots=1 << 16,
                           index_max_entries=1 << 18)
    topics = QUEUES // 10
    t0 = time.monotonic()
    with pymq.MessageStore(root, cfg) as s:
        s.start()
        for t in range(topics):
            for q in range(10):
                assert s.put_message(pymq.Message(topic=f"Q{t}", body=b"%d.%d" % (t, q), queue_id=q)).is_ok()
        wait_dispatched(s, timeout=600)
        written = store_maps(root)
        assert s.consume_queues.map_cache.peak <= CAP and written <= CAP + MARGIN
        assert s.stats()["maps"]["consume_queue_files"] == QUEUES
    t1 = time.monotonic()
    with pymq.MessageStore(root, cfg) as s:
        t2 = time.monotonic()
        reopened = store_maps(root)
        assert reopened <= CAP + MARGIN and s.consume_queues.map_cache.peak <= CAP
        s.start()
        for t in range(topics):
            for q in range(10):
                g = s.get_message("g", f"Q{t}", q, 0, 32)
                assert [m.body for m in g.messages] == [b"%d.%d" % (t, q)], (t, q, g)
        t3 = time.monotonic()
        read = store_maps(root)
        assert read <= CAP + MARGIN
    print(f"\n{QUEUES} queues, cap {CAP}: written and closed in {t1 - t0:.1f} s ({written} maps), "
          f"reopened in {t2 - t1:.1f} s ({reopened} maps), all read in {t3 - t2:.1f} s ({read} maps)")
