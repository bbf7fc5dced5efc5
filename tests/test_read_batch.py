"""``read_batch``: get_message without objects (issue 27).

The oracle is ``get_message`` on the same store: for any queue, offset, page size and tag
filter, a batch has the pull's status, next offset, bounds and damage count, bodies equal
to the messages' bodies and columns equal to their fields; that holds across segment
ends, after cleaning, on a follower, and where records are damaged. A batch's views of
the log outlive the deletion of their segment without ever reading unmapped memory.
"""

from __future__ import annotations

import gc
import os
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pymq
from pymq import GetMessageStatus as S
from pymq._core.arrow_columns import record_batch
from pymq._core.record import java_hash_code

from conftest import small_config

SEG = 64 * 1024
TAGS = [None, "TagA", "TagB", "Aa", "BB"]         # "Aa" and "BB" share a hash code


def wait_dispatched(store, timeout=5.0):
    deadline = time.monotonic() + timeout
    while store.dispatch_behind_bytes():
        assert time.monotonic() < deadline, "dispatch did not catch up"
        time.sleep(0.002)


def assert_same_as_get_message(store, topic, queue_id, offset, max_msgs=32, tags=None):
    g = store.get_message("g", topic, queue_id, offset, max_msgs, tags)
    with store.read_batch(topic, queue_id, offset, max_msgs, tags) as b:
        assert (b.status, b.next_begin_offset, b.min_offset, b.max_offset, b.damaged) == \
            (g.status, g.next_begin_offset, g.min_offset, g.max_offset, g.damaged)
        assert (b.topic, b.queue_id, len(b)) == (topic, queue_id, len(g.messages))
        msgs = g.messages
        assert [bytes(v) for v in b.bodies] == [m.body for m in msgs]
        assert all(v.readonly for v in b.bodies)
        assert list(b.queue_offsets) == [m.queue_offset for m in msgs]
        assert list(b.commitlog_offsets) == [m.commitlog_offset for m in msgs]
        assert list(b.store_timestamps) == [m.store_timestamp for m in msgs]
        assert list(b.store_sizes) == [m.store_size for m in msgs]
        assert list(b.body_sizes) == [len(m.body) for m in msgs]
        assert list(b.tags_codes) == [java_hash_code(m.tags) if m.tags else 0 for m in msgs]
        for i, m in enumerate(msgs):
            assert (b.properties(i), b.tags(i), b.keys(i), b.uniq_key(i)) == \
                (m.properties, m.tags, m.keys, m.uniq_key)
            x = b.message(i)
            assert (x.body, x.properties, x.msg_id, x.born_timestamp, x.born_host, x.body_crc, x.flag,
                    x.topic, x.queue_id, x.queue_offset) == \
                (m.body, m.properties, m.msg_id, m.born_timestamp, m.born_host, m.body_crc, m.flag,
                 m.topic, m.queue_id, m.queue_offset)
    return g, b


def fill(store, topic, queue_id, n, seed=0, sizes=(0, 5, 100, 1000, 3000)):
    """``n`` messages of 0..3000 bytes (records cross many 64 KiB segment ends), some with
    tags and keys, through put_message, put_messages and put_bodies alike."""
    import random
    rng = random.Random(seed)
    i = 0
    while i < n:
        k = min(n - i, rng.randint(1, 6))
        bodies = [rng.randbytes(rng.choice(sizes)) for _ in range(k)]
        tags = [TAGS[rng.randrange(len(TAGS))] for _ in range(k)]
        keys = [f"k{i + j}" if rng.random() < 0.5 else None for j in range(k)]
        how = rng.randrange(3)
        if how == 0:
            rs = [store.put_message(pymq.Message(topic, b, tags=t, keys=kk, queue_id=queue_id))
                  for b, t, kk in zip(bodies, tags, keys)]
        elif how == 1:
            rs = [store.put_messages([pymq.Message(topic, b, tags=t, keys=kk, queue_id=queue_id)
                                      for b, t, kk in zip(bodies, tags, keys)])]
        else:
            rs = [store.put_bodies(topic, bodies, queue_id=queue_id, keys=keys, tags=tags)]
        assert all(r.is_ok() for r in rs), rs
        i += k


# -- the property: exactly what get_message returns ---------------------------------------------

@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    s = pymq.MessageStore(tmp_path_factory.mktemp("rb") / "store",
                          small_config(commitlog_file_size=SEG, consume_queue_entries=50))
    s.start()
    fill(s, "RB", 0, 300, seed=1)
    fill(s, "RB", 1, 120, seed=2)
    wait_dispatched(s)
    assert s.get_max_phy_offset() > 5 * SEG
    yield s
    s.shutdown()


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(queue_id=st.sampled_from([0, 1, 2]), offset=st.integers(-3, 305), max_msgs=st.integers(1, 40),
       tags=st.sampled_from([None, "*", "TagA", "TagA || BB", "Aa", "Nope"]))
def test_read_batch_returns_what_get_message_returns(filled, queue_id, offset, max_msgs, tags):
    assert_same_as_get_message(filled, "RB", queue_id, offset, max_msgs, tags)


def test_paging_a_whole_queue_across_segment_ends(filled):
    offset, seen, segments = 0, [], set()
    while True:
        g, b = assert_same_as_get_message(filled, "RB", 0, offset)
        if b.status is S.OFFSET_OVERFLOW_ONE:
            break
        assert b.status is S.FOUND
        seen.extend(m.queue_offset for m in g.messages)
        segments.update(m.commitlog_offset // SEG for m in g.messages)
        offset = b.next_begin_offset
    assert seen == list(range(300)) and len(segments) >= 5


# -- every status -------------------------------------------------------------------------------

def cfg10(**kw):
    return small_config(consume_queue_entries=10, **kw)


def test_statuses_of_an_open_queue(tmp_path):
    with pymq.MessageStore(tmp_path / "s", small_config(consume_queue_entries=40)) as store:
        for i in range(30):
            store.put_message(pymq.Message("St", b"%d" % i, tags="A" if i < 25 else "B"))
        wait_dispatched(store)
        cases = [("St", 7, 0, None, S.NO_MESSAGE_IN_QUEUE), ("Nowhere", 0, 0, None, S.NO_MESSAGE_IN_QUEUE),
                 ("St", 0, 30, None, S.OFFSET_OVERFLOW_ONE), ("St", 0, 31, None, S.OFFSET_OVERFLOW_BADLY),
                 ("St", 0, -1, None, S.OFFSET_TOO_SMALL), ("St", 0, 3, "C", S.NO_MATCHED_MESSAGE),
                 ("St", 0, 20, "B", S.FOUND), ("St", 0, 0, None, S.FOUND)]
        for topic, qid, offset, tags, status in cases:
            g, _ = assert_same_as_get_message(store, topic, qid, offset, 4, tags)
            assert g.status is status, (topic, qid, offset, tags)


def test_offset_too_small_and_found_null_after_a_queue_file_went(tmp_path):
    root = tmp_path / "store"
    with pymq.MessageStore(root, cfg10()) as store:
        for i in range(35):
            store.put_message(pymq.Message("Small", b"%d" % i))
    os.remove(root / "consumequeue" / "Small" / "0" / ("0" * 20))
    with pymq.MessageStore(root, cfg10()) as store:
        for offset in (0, 9, 10, 34):
            assert_same_as_get_message(store, "Small", 0, offset)
        assert store.read_batch("Small", 0, 3).status is S.OFFSET_TOO_SMALL
        store.consume_queues.find_consume_queue("Small", 0).min_logic_offset = 0    # a pull racing the clean
        g, _ = assert_same_as_get_message(store, "Small", 0, 3)
        assert (g.status, g.next_begin_offset) == (S.OFFSET_FOUND_NULL, 10)


def test_message_was_removing_and_after_cleaning(tmp_path):
    """A commit-log segment deleted while its queue entries are still there (the moment
    between deleting the segment and correcting the queue's min): MESSAGE_WAS_REMOVING;
    then a real cleaning pass and reads below, at and after the new minimum."""
    root = tmp_path / "store"
    body = b"r" * 1000
    with pymq.MessageStore(root, cfg10()) as store:
        rs = [store.put_message(pymq.Message("Rm", body + b"%d" % i)) for i in range(150)]
        wait_dispatched(store)
        mfq = store.commit_log.mapped_file_queue
        assert mfq.delete_first_files(lambda mf: True, 1)           # no queue correction yet
        g, _ = assert_same_as_get_message(store, "Rm", 0, 0)
        assert g.status is S.MESSAGE_WAS_REMOVING
        first_kept = next(i for i, r in enumerate(rs) if r.commitlog_offset >= SEG)
        assert_same_as_get_message(store, "Rm", 0, first_kept)
        # a real pass: segments whose files are old go, the queues follow
        for name in sorted(os.listdir(root / "commitlog"))[:-1]:
            os.utime(root / "commitlog" / name, (1, 1))
        assert store.delete_expired_files()["commitlog"] >= 1
        new_min = store.get_min_offset_in_queue("Rm", 0)
        assert new_min > first_kept
        for offset in (0, new_min - 1, new_min, new_min + 5, 149, 150):
            assert_same_as_get_message(store, "Rm", 0, offset)


def test_damaged_records_are_skipped_as_get_message_skips_them(tmp_path):
    root = tmp_path / "s"
    with pymq.MessageStore(root, small_config()) as store:
        rs = [store.put_message(pymq.Message("Dmg", b"body-%03d" % i, properties={"p": "v%d" % i}))
              for i in range(20)]
    seg = root / "commitlog" / ("0" * 20)
    rec = rs[10]
    with open(seg, "r+b") as f:                      # one property byte of record 10 changes
        f.seek(rec.commitlog_offset)
        raw = f.read(rec.wrote_bytes)
        f.seek(rec.commitlog_offset + raw.index(b"p\x01v") + 2)
        f.write(b"w")
    with pymq.MessageStore(root, small_config(), read_only=True) as store:
        g, _ = assert_same_as_get_message(store, "Dmg", 0, 0, 32)
        assert g.damaged == 1 and [m.queue_offset for m in g.messages] == [i for i in range(20) if i != 10]


def test_a_follower_reads_the_same_as_get_message(tmp_path):
    root = str(tmp_path / "store")
    cfg = small_config(commitlog_file_size=8 * 1024, consume_queue_entries=16)
    with pymq.MessageStore(root, cfg) as writer:
        fill(writer, "F", 0, 30, seed=3, sizes=(0, 10, 300, 1000))
        wait_dispatched(writer)
        reader = pymq.MessageStore(root, read_only=True)
        try:
            fill(writer, "F", 0, 20, seed=4, sizes=(0, 10, 300, 1000))     # after the follower looked
            wait_dispatched(writer)
            for offset in (0, 10, 29, 30, 45, 50, 60):
                assert_same_as_get_message(reader, "F", 0, offset)
            reader.refresh()
            for offset in (0, 29, 30, 45, 50):
                assert_same_as_get_message(reader, "F", 0, offset)
            assert reader.read_batch("F", 0, 49, 1).status is S.FOUND
        finally:
            reader.shutdown()


def test_a_light_message_queue_reads_as_get_message_reads_it(tmp_path):
    """An LMQ's entries point at records filed under their parent queue: the batch gives
    their places in the LMQ, as get_message does."""
    with pymq.MessageStore(tmp_path / "s", small_config()) as store:
        for i in range(6):
            m = pymq.Message("Parent", b"p%d" % i, properties={"INNER_MULTI_DISPATCH": "%LMQ%x",
                                                              "INNER_MULTI_QUEUE_OFFSET": str(i)})
            m.queue_id = i % 2
            assert store.put_message(m).is_ok()
        wait_dispatched(store)
        for offset in (0, 2, 5, 6):
            assert_same_as_get_message(store, "%LMQ%x", 0, offset)
        with store.read_batch("%LMQ%x", 0, 0) as b:
            assert list(b.queue_offsets) == list(range(6))
            assert [(b.message(i).queue_offset, b.message(i).queue_id) for i in range(6)] == [(i, 0) for i in range(6)]


# -- lifetime: views, release, deletion ---------------------------------------------------------

def _mapped(path: str) -> bool:
    with open("/proc/self/maps") as f:
        return any(path in line for line in f)


def test_a_view_outlives_the_deletion_of_its_segment(tmp_path):
    root = tmp_path / "store"
    with pymq.MessageStore(root, small_config()) as store:
        bodies = [bytes([i]) * 1500 for i in range(120)]          # three segments and more
        for i in range(0, 120, 10):
            assert store.put_bodies("Del", bodies[i:i + 10]).is_ok()
        wait_dispatched(store)
        seg0 = str(root / "commitlog" / ("0" * 20))
        batch = store.read_batch("Del", 0, 0, 8)
        views = batch.bodies
        assert batch.commitlog_offsets[7] < SEG
        first, second = views[0], views[1]
        part = first[100:110]                           # a slice: shares the first view's buffer
        array = np.frombuffer(second, dtype=np.uint8)    # an array over the second view's buffer
        # cleaning deletes the segment under the batch: the file goes, the mapping stays
        for name in sorted(os.listdir(root / "commitlog"))[:-1]:
            os.utime(root / "commitlog" / name, (1, 1))
        assert store.delete_expired_files()["commitlog"] >= 2
        assert not os.path.exists(seg0) and _mapped(seg0)
        assert bytes(first) == bodies[0] and bytes(views[7]) == bodies[7]
        assert store.read_batch("Del", 0, 0, 8).status is S.OFFSET_TOO_SMALL
        # released: the batch's accessors and its views raise; what was made from them reads on
        batch.release()
        with pytest.raises(ValueError):
            batch.bodies
        with pytest.raises(ValueError):
            batch.queue_offsets
        with pytest.raises(ValueError):
            bytes(first)
        with pytest.raises(ValueError):
            first[0]
        assert bytes(part) == bodies[0][100:110]
        assert array.tobytes() == bodies[1]
        assert _mapped(seg0)
        del part, array, second, first, views, batch
        gc.collect()
        assert not _mapped(seg0)                           # the last view gone: unmapped


def test_a_batch_dropped_without_release_unpins(tmp_path):
    root = tmp_path / "store"
    with pymq.MessageStore(root, small_config()) as store:
        for i in range(0, 120, 10):
            store.put_bodies("Drop", [b"x" * 1500] * 10)
        wait_dispatched(store)
        seg0 = str(root / "commitlog" / ("0" * 20))
        batch = store.read_batch("Drop", 0, 0)
        body = batch.bodies[3]
        for name in sorted(os.listdir(root / "commitlog"))[:-1]:
            os.utime(root / "commitlog" / name, (1, 1))
        store.delete_expired_files()
        del batch
        assert _mapped(seg0) and bytes(body) == b"x" * 1500       # the view holds it
        del body
        assert not _mapped(seg0)


def test_views_are_read_only_and_the_batch_is_not_a_buffer(tmp_path):
    with pymq.MessageStore(tmp_path / "s", small_config()) as store:
        store.put_bodies("Ro", [b"abc", b"de"])
        wait_dispatched(store)
        with store.read_batch("Ro", 0, 0) as b:
            v = b.bodies[0]
            with pytest.raises(TypeError):
                v[0] = 1
            with pytest.raises(TypeError):
                memoryview(b)
            assert list(b) == b.bodies and b.bodies is b.bodies
            assert b.message(-1).body == b"de"
            with pytest.raises(IndexError):
                b.properties(2)
        assert b.released and len(b) == 2 and b.status is S.FOUND
        with pytest.raises(ValueError):
            b.to_arrow()
        empty = store.read_batch("Ro", 0, 2)
        assert (empty.status, len(empty), empty.bodies) == (S.OFFSET_OVERFLOW_ONE, 0, [])
        empty.release()
        empty.release()


def test_bad_arguments(tmp_path):
    with pymq.MessageStore(tmp_path / "s", small_config()) as store:
        with pytest.raises(TypeError):
            store.read_batch(b"T", 0, 0)
        with pytest.raises(TypeError):
            store.read_batch("T", True, 0)
        with pytest.raises(TypeError):
            store.read_batch("T", "0", 0)
        with pytest.raises(ValueError):
            store.read_batch("T", 0, 0, 0)
    with pytest.raises(pymq.StoreStateError):
        store.read_batch("T", 0, 0)


# -- Arrow and the consumer ----------------------------------------------------------------------

def test_to_arrow_is_the_spark_columns_of_the_batch(filled):
    with filled.read_batch("RB", 0, 40, 32) as b:
        table = b.to_arrow()
        n, _status, cols = filled.read_columns("RB", 0, 40, 40 + len(b))
        assert n == len(b) == table.num_rows > 0
        assert table.equals(record_batch(n, cols, "RB", 0))
        rows = table.to_pylist()
        for i, (row, m) in enumerate(zip(rows, b.messages())):
            assert row["body"] == m.body and row["queue_offset"] == m.queue_offset
            assert row["keys"] == m.keys and row["tags"] == m.tags and row["uniq_key"] == m.uniq_key
            assert row["msg_id"] == m.msg_id and row["store_size"] == m.store_size
            assert dict(row["properties"]) == {k: v for k, v in m.properties.items()
                                               if k not in ("TAGS", "KEYS", "UNIQ_KEY")}


def test_consumer_batch_mode(tmp_path):
    with pymq.MessageStore(tmp_path / "s", small_config()) as store:
        for q in range(3):
            store.put_bodies("Cons", [b"q%d-%d" % (q, i) for i in range(40)], queue_id=q,
                             tags=["A" if i % 2 else "B" for i in range(40)])
        wait_dispatched(store)
        consumer = pymq.Consumer(store, group="g", topic="Cons", tags="A")
        got = {}
        while True:
            batches = consumer.poll_batches(timeout_s=0.2)
            if not batches:
                break
            for b in batches:
                with b:
                    assert b.topic == "Cons" and all(b.tags(i) == "A" for i in range(len(b)))
                    got.setdefault(b.queue_id, []).extend(bytes(v) for v in b.bodies)
        assert got == {q: [b"q%d-%d" % (q, i) for i in range(1, 40, 2)] for q in range(3)}
        assert consumer.positions == {0: 40, 1: 40, 2: 40}
        consumer.commit()
        assert store.query_offset("g", "Cons", 1) == 40
