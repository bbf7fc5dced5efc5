"""``get_offset_in_queue_by_time`` against a bisect oracle (STORE_SPEC 3.4, RocketMQ 5.x).

Within a queue store timestamps never decrease, so 5.x's rules (file chosen by the store
times of its first and last entries; an exact hit widened to the first equal entry for
LOWER and the last for UPPER; no hit: the right neighbour for LOWER, the left for UPPER;
after the last message LOWER = last+1 = max, UPPER = last; before the first LOWER = the
first index, UPPER = 0) reduce to::

    LOWER(ts) = bisect_left(times, ts)                  (max offset when ts > last)
    UPPER(ts) = max(bisect_right(times, ts) - 1, 0)     (0 when ts < first)

with ``times`` the store times of the queue's entries in queue order. Note 4.x answered
the *nearest* entry (ties to the left, last entry when after the end): not tested here.
"""

from __future__ import annotations

import bisect
import os
import random
import time

import pytest

import pymq
from pymq import BoundaryType

from conftest import small_config
from rocketmq_decoder import walk_commitlog

LOWER, UPPER = BoundaryType.LOWER, BoundaryType.UPPER


def wait_dispatched(store, timeout=5.0):
    deadline = time.monotonic() + timeout
    while store.dispatch_behind_bytes() != 0:
        assert time.monotonic() < deadline, "dispatch did not catch up"
        time.sleep(0.001)


def oracle(times, ts, boundary, base=0):
    """The spec's answer over the entries ``times`` that start at queue offset ``base``."""
    if boundary is LOWER:
        return base + bisect.bisect_left(times, ts)
    i = bisect.bisect_right(times, ts) - 1
    return base + i if i >= 0 else 0


def queue_times(store, topic, qid):
    lo, hi = store.get_min_offset_in_queue(topic, qid), store.get_max_offset_in_queue(topic, qid)
    times = [store.get_message_store_timestamp(topic, qid, i) for i in range(lo, hi)]
    assert all(t > 0 for t in times)
    assert times == sorted(times), "store times of a queue must not decrease"
    return lo, times


def probe_points(times, rng, n_random):
    first, last = times[0], times[-1]
    pts = {first - 20_000, first - 2, first - 1, last + 1, last + 2, last + 20_000, 0, -1, 1 << 50}
    for t in set(times):
        pts.update((t - 1, t, t + 1))
    # random times repeat inside the short span of the test: thousands of queries anyway
    return sorted(pts) + [rng.randint(first - 30, last + 30) for _ in range(n_random)]


def check_all(store, topic, qid, rng, n_random=2000):
    base, times = queue_times(store, topic, qid)
    checked = 0
    for ts in probe_points(times, rng, n_random):
        for b in (LOWER, UPPER):
            got = store.get_offset_in_queue_by_time(topic, qid, ts, b)
            assert got == oracle(times, ts, b, base), (topic, qid, ts, b, base, times[:3], times[-3:])
            checked += 1
    return checked


def put_groups(store, topic, qids, rng, groups):
    """Groups of puts separated by sleeps: single puts (often several per ms) and batches
    (one store time for the whole batch), so the times have runs and gaps."""
    expect = {q: [] for q in qids}
    for g in range(groups):
        q = rng.choice(qids)
        if rng.random() < 0.3:
            n = rng.randint(2, 40)
            r = store.put_messages([pymq.Message(topic, b"b%d.%d" % (g, k), queue_id=q) for k in range(n)])
            assert r.status is pymq.PutMessageStatus.PUT_OK
            expect[q].extend([r.store_timestamp] * n)
        else:
            for k in range(rng.randint(1, 8)):
                qq = rng.choice(qids)
                r = store.put_message(pymq.Message(topic, b"s%d.%d" % (g, k), queue_id=qq))
                assert r.status is pymq.PutMessageStatus.PUT_OK
                expect[qq].append(r.store_timestamp)
        if rng.random() < 0.6:
            time.sleep(rng.choice([0.001, 0.002, 0.004, 0.007]))
    return expect


# -- against the oracle ---------------------------------------------------------------------------

@pytest.mark.parametrize("entries", [11, 20])
def test_lookup_matches_the_oracle(tmp_path, entries):
    rng = random.Random(entries)
    root = tmp_path / "s"
    store = pymq.MessageStore(root, small_config(consume_queue_entries=entries)).start()
    try:
        expect = put_groups(store, "Time", [0, 1, 2], rng, 70)
        # a batch larger than a CQ file: a run of equal times across file boundaries
        r = store.put_messages([pymq.Message("Time", b"run%d" % k, queue_id=0) for k in range(2 * entries + 3)])
        expect[0].extend([r.store_timestamp] * (2 * entries + 3))
        time.sleep(0.003)
        expect[0].append(store.put_message(pymq.Message("Time", b"after", queue_id=0)).store_timestamp)
        wait_dispatched(store)
        for q, times in expect.items():
            assert queue_times(store, "Time", q) == (0, times)
            assert len(times) > 2 * entries            # several CQ files per queue
            assert check_all(store, "Time", q, rng) > 4000
        # the decoder sees the same times
        recs = [x for x in walk_commitlog(root / "commitlog") if not x["blank"] and x["queue_id"] == 1]
        assert [x["store_timestamp"] for x in recs] == expect[1]
    finally:
        store.shutdown()
    # after reopening: the same answers
    with pymq.MessageStore(root, small_config(consume_queue_entries=entries)) as store:
        for q in expect:
            check_all(store, "Time", q, rng, n_random=300)


def test_lookup_on_a_queue_whose_first_cq_file_was_deleted(tmp_path):
    """Cleaning removed the first CQ file: the min is 10, the entries below it are gone,
    and the answers come from the remaining entries (LOWER before them: the first index
    of the first remaining file, which is the min; UPPER: 0)."""
    rng = random.Random(5)
    root = tmp_path / "s"
    cfg = small_config(consume_queue_entries=10)
    with pymq.MessageStore(root, cfg) as store:
        expect = put_groups(store, "Del", [0], rng, 30)[0]
    assert len(expect) > 25
    os.remove(root / "consumequeue" / "Del" / "0" / ("0" * 20))
    with pymq.MessageStore(root, cfg) as store:
        base, times = queue_times(store, "Del", 0)
        assert base == 10 and times == expect[10:]
        check_all(store, "Del", 0, rng, n_random=500)
        assert store.get_offset_in_queue_by_time("Del", 0, expect[0] - 1000, LOWER) == 10
        assert store.get_offset_in_queue_by_time("Del", 0, expect[0] - 1000, UPPER) == 0


def test_min_offset_inside_the_first_file(store):
    """5.x corner rule: when the time is before the entry at the queue min (``low``), LOWER
    answers the first index of that CQ file, even if it is below the min; UPPER 0."""
    rs = []
    for i in range(12):
        rs.append(store.put_message(pymq.Message("MinMid", b"%d" % i)))
        time.sleep(0.002)
    wait_dispatched(store)
    cq = store.consume_queues.find_consume_queue("MinMid", 0)
    cq.correct_min_offset(rs[4].commitlog_offset)
    assert store.get_min_offset_in_queue("MinMid", 0) == 4
    t = [r.store_timestamp for r in rs]
    f = store.get_offset_in_queue_by_time
    assert f("MinMid", 0, t[4] - 1, LOWER) == 0          # the file's first index (spec 3.4)
    assert f("MinMid", 0, t[4] - 1, UPPER) == 0
    assert f("MinMid", 0, t[4], LOWER) == f("MinMid", 0, t[4], UPPER) == 4
    assert f("MinMid", 0, t[7] + 1, LOWER) == 8
    assert f("MinMid", 0, t[7] + 1, UPPER) == 7
    assert f("MinMid", 0, t[11] + 1, LOWER) == 12
    assert f("MinMid", 0, t[11] + 1, UPPER) == 11


def test_equal_times_runs_spec_example(store):
    """STORE_SPEC 3.4: times t1,t1,t1,t3,t3 and a query for t2 give LOWER 4 and UPPER 3
    (indices 1..5 in the spec; here the run sits at offsets 1..5 after one older entry)."""
    store.put_message(pymq.Message("Run", b"x"))
    time.sleep(0.003)
    r1 = store.put_messages([pymq.Message("Run", b"a") for _ in range(3)])
    time.sleep(0.005)
    r3 = store.put_messages([pymq.Message("Run", b"c") for _ in range(2)])
    wait_dispatched(store)
    t1, t3 = r1.store_timestamp, r3.store_timestamp
    assert t3 - t1 >= 2
    f = store.get_offset_in_queue_by_time
    t2 = t1 + 1
    assert (f("Run", 0, t2, LOWER), f("Run", 0, t2, UPPER)) == (4, 3)
    assert (f("Run", 0, t1, LOWER), f("Run", 0, t1, UPPER)) == (1, 3)
    assert (f("Run", 0, t3, LOWER), f("Run", 0, t3, UPPER)) == (4, 5)
    assert (f("Run", 0, t3 + 1, LOWER), f("Run", 0, t3 + 1, UPPER)) == (6, 5)


# -- DefaultMessageStoreTest.getOffsetInQueueByTime, 5.x meaning ------------------------------------

@pytest.mark.parametrize("entries", [64, 5, 3])
def test_default_message_store_test_scenario(tmp_path, entries):
    """10 messages ~10 ms apart. 4.9.7's test expects the *nearest* message for +-2 ms and
    the last/first for +-20000 ms; with 5.x boundaries the answers are those below."""
    with pymq.MessageStore(tmp_path / "s", small_config(consume_queue_entries=entries)) as store:
        rs = []
        for i in range(10):
            r = store.put_message(pymq.Message("FooBar", b"Once, there was a chance for me! offset %d" % i,
                                               tags="TAG1", keys=[str(int(time.time() * 1000))], queue_id=0))
            assert r.status is pymq.PutMessageStatus.PUT_OK
            rs.append(r)
            time.sleep(0.01)
        wait_dispatched(store)
        ts = [r.store_timestamp for r in rs]
        assert all(b - a >= 5 for a, b in zip(ts, ts[1:]))
        f = store.get_offset_in_queue_by_time
        for i, t in enumerate(ts):
            assert store.get_message_store_timestamp("FooBar", 0, i) == t
            assert f("FooBar", 0, t) == i                       # LOWER is the default
            assert f("FooBar", 0, t, LOWER) == f("FooBar", 0, t, UPPER) == i
            assert f("FooBar", 0, t + 2, LOWER) == i + 1        # 10 (the max) after the last
            assert f("FooBar", 0, t + 2, UPPER) == i
            assert f("FooBar", 0, t - 2, LOWER) == i
            assert f("FooBar", 0, t - 2, UPPER) == max(i - 1, 0)
        assert f("FooBar", 0, ts[-1] + 20_000, LOWER) == 10
        assert f("FooBar", 0, ts[-1] + 20_000, UPPER) == 9
        assert f("FooBar", 0, ts[0] - 20_000, LOWER) == 0
        assert f("FooBar", 0, ts[0] - 20_000, UPPER) == 0
        for b in (LOWER, UPPER):
            assert f("FooBar", 1, ts[5], b) == 0                # wrong queue
            assert f("NoSuchTopic", 0, ts[5], b) == 0
        with pytest.raises(TypeError):
            f("FooBar", 0, ts[0], "LOWER")
