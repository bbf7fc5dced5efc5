"""The recent-keys table answers exactly what the index files answer (issue 27, item 4).

``query_message`` starts its walk of the newest index file from the key's newest entry
as the in-memory table (``pymq._core.recent_keys``) holds it, or skips the file when the
table knows the key is absent. Hypothesis drives a writer (puts, batches, clock ticks,
restarts) on tiny index files (a roll every dozen messages, so keys live in older files
too) with a table of 4 ways (always full: evictions, a catch-up larger than the table)
or of the default size, and after every step compares, for each key and a set of time
ranges, the answers of

* the writer (with its table),
* a read-only follower with a table and one without (``index_recent_keys=0``),

with a dict oracle of (topic, key) -> [(offset, store time)]. Keys include "Aa"/"BB"
(one Java hash), two keys of one slot, keys of many messages and a key no message has.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pymq
from pymq._core.recent_keys import RecentKeys, _set_initial_ways

from conftest import small_config
from rocketmq_decoder import index_hash

MAX_BATCH = 64
SLOTS, ENTRIES = 8, 24
TOPICS = ("RA", "RB")


def same_slot_pair(topic: str) -> tuple[str, str]:
    """Two keys of ``topic`` whose hashes differ but share a slot."""
    seen = {}
    for i in range(10_000):
        k = f"s{i}"
        h = index_hash(f"{topic}#{k}")
        other = seen.get(h % SLOTS)
        if other is not None and other[1] != h:
            return other[0], k
        seen.setdefault(h % SLOTS, (k, h))
    raise AssertionError("no pair")


SLOT_A, SLOT_B = same_slot_pair("RA")
POOL = ("Aa", "BB", "hot", "k1", "k2", "k3", SLOT_A, SLOT_B)
ABSENT = ("absent", "Ab", "hot ")


def cfg(ways: int) -> pymq.StoreConfig:
    return small_config(index_hash_slots=SLOTS, index_max_entries=ENTRIES, index_recent_keys=ways)


class Oracle:
    def __init__(self):
        self.by_key: dict = {}          # (topic, key) -> [(offset, store time)]

    def add(self, offset, topic, keys, uniq, ts):
        for k in dict.fromkeys(list(keys) + [uniq]):
            self.by_key.setdefault((topic, k), []).append((offset, ts))

    def expect(self, topic, key, max_num, begin, end):
        end = (1 << 63) - 1 if end is None else end
        hits = sorted((o for o, ts in self.by_key.get((topic, key), []) if begin <= ts <= end), reverse=True)
        return hits[:min(max_num, MAX_BATCH)]

    def times(self) -> list:
        return sorted({ts for hits in self.by_key.values() for _o, ts in hits})


def ranges(oracle: Oracle) -> list:
    """Time ranges: none, from the start, around the middle, the newest only, after all."""
    tss = oracle.times()
    if not tss:
        return [(0, None)]
    lo, mid, hi = tss[0], tss[len(tss) // 2], tss[-1]
    return [(0, None), (lo, hi), (0, mid), (mid, None), (mid + 1, hi), (hi, hi), (lo - 1, lo),
            (hi + 1, None), (lo, lo + 999), (mid - 1000, mid + 1000)]


def offsets(store, topic, key, max_num, begin, end) -> list:
    return [m.commitlog_offset for m in store.query_message(topic, key, max_num, begin, end)]


def check(oracle: Oracle, answerers: list) -> None:
    queries = [(t, k) for t in TOPICS for k in POOL + ABSENT]
    queries += [q for q in oracle.by_key if q not in queries]     # the uniq keys
    rs = ranges(oracle)
    for topic, key in queries:
        for begin, end in rs:
            for max_num in (1, 3, 64):
                want = oracle.expect(topic, key, max_num, begin, end)
                for name, store in answerers:
                    got = offsets(store, topic, key, max_num, begin, end)
                    assert got == want, (name, topic, key, max_num, begin, end, got, want)


class Run:
    """A writer, two followers and the oracle."""

    def __init__(self, root: str, ways: int):
        self.root, self.ways = root, ways
        self.oracle = Oracle()
        self.open()

    def open(self):
        self.writer = pymq.MessageStore(self.root, cfg(self.ways)).start()
        self.followers = [pymq.MessageStore(self.root, cfg(w), read_only=True).start() for w in (self.ways, 0)]

    def close(self):
        for s in self.followers:
            s.shutdown()
        self.writer.shutdown()

    def settle(self):
        deadline = time.monotonic() + 10
        while self.writer.dispatch_behind_bytes():
            assert time.monotonic() < deadline
            time.sleep(0.001)
        for s in self.followers:
            s.refresh()

    def put(self, topic, keys):
        r = self.writer.put_message(pymq.Message(topic, b"x", keys=keys or None))
        assert r.is_ok()
        self.oracle.add(r.commitlog_offset, topic, keys, r.uniq_key, r.store_timestamp)

    def batch(self, topic, keyss):
        r = self.writer.put_messages([pymq.Message(topic, b"y", keys=ks or None) for ks in keyss])
        assert r.is_ok()
        for off, ks in zip(r.commitlog_offsets, keyss):
            m = self.writer.look_message_by_offset(off)
            self.oracle.add(off, topic, ks, m.uniq_key, m.store_timestamp)

    def check(self):
        self.settle()
        check(self.oracle, [("writer", self.writer), ("follower", self.followers[0]),
                            ("follower without table", self.followers[1])])


keys = st.lists(st.sampled_from(POOL), max_size=3)
step = st.one_of(
    st.tuples(st.just("put"), st.sampled_from(TOPICS), keys),
    st.tuples(st.just("batch"), st.sampled_from(TOPICS), st.lists(keys, min_size=2, max_size=6)),
    st.tuples(st.just("many"), st.sampled_from(TOPICS), st.integers(5, 30)),   # one key, many messages
    st.just(("tick",)),
    st.just(("check",)),
    st.just(("restart",)),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ways=st.sampled_from([4, 1 << 20, "grown"]), steps=st.lists(step, min_size=1, max_size=25))
def test_table_answers_what_the_index_answers(ways, steps):
    """``grown``: tables of at most 64 ways that start at 4 and grow as the file fills
    (4, 8, 16, 32 for files of 24 entries), taken in again from the file's first entry."""
    root = tempfile.mkdtemp(prefix="recent-keys-")
    initial = None
    if ways == "grown":
        ways, initial = 64, _set_initial_ways(4)
    run = Run(root + "/store", ways)
    try:
        for s in steps:
            if s[0] == "put":
                run.put(s[1], s[2])
            elif s[0] == "batch":
                run.batch(s[1], s[2])
            elif s[0] == "many":
                for _ in range(s[2]):
                    run.put(s[1], ["hot"])
            elif s[0] == "tick":
                time.sleep(0.003)                      # later messages get later store times
            elif s[0] == "check":
                run.check()
            else:
                run.settle()
                run.close()
                run.open()                             # the tables start empty again
        run.check()
    finally:
        run.close()
        shutil.rmtree(root, ignore_errors=True)
        if initial is not None:
            _set_initial_ways(initial)


# -- the three answers of the table, and its catch-up ----------------------------------------

def test_find_hit_absent_and_unknown(tmp_path):
    """A hit gives the key's newest entry; a key never taken in is absent for sure while no
    bucket pushed a way out, and unknown (walk the file) once one did."""
    with pymq.MessageStore(tmp_path / "s", small_config(index_recent_keys=8)) as store:
        offs = [store.put_message(pymq.Message("T", b"x", keys=["a"])).commitlog_offset for _ in range(2)]
        deadline = time.monotonic() + 5
        while store.dispatch_behind_bytes():
            assert time.monotonic() < deadline
            time.sleep(0.001)
        assert offsets(store, "T", "a", 32, 0, None) == offs[::-1]
        recent = store.index_service.querier.recent
        phy, prev = recent.lookup(index_hash("T#a"))
        assert phy == offs[1] and prev > 0               # chained to the first message's entry
        assert recent.lookup(index_hash("T#nothing")) is False
        for i in range(40):                              # 40 keys more than 8 ways: evictions
            store.put_message(pymq.Message("T", b"x", keys=[f"k{i}"]))
        while store.dispatch_behind_bytes():
            time.sleep(0.001)
        assert [m.keys for m in store.query_message("T", "k39", 1)] == [["k39"]]
        assert recent.held() <= 8
        unknown = [k for k in (f"k{i}" for i in range(40)) if recent.lookup(index_hash("T#" + k)) is None]
        assert unknown                                   # pushed out: the file is walked ...
        for k in unknown:
            assert [m.keys for m in store.query_message("T", k, 32)] == [[k]]    # ... and finds it
        assert offsets(store, "T", "a", 32, 0, None) == offs[::-1]


def test_a_table_of_one_bucket_holds_its_four_ways(tmp_path):
    with pymq.MessageStore(tmp_path / "s", small_config(index_recent_keys=1)) as store:
        offs = [store.put_message(pymq.Message("T", b"x")).commitlog_offset for _ in range(3)]
        uniq = [store.look_message_by_offset(o).uniq_key for o in offs]
        while store.dispatch_behind_bytes():
            time.sleep(0.001)
        assert offsets(store, "T", uniq[0], 32, 0, None) == [offs[0]]
        recent = store.index_service.querier.recent
        assert recent.capacity == 4 and recent.held() == 3
        assert [recent.lookup(index_hash("T#" + u))[0] for u in uniq] == offs


def test_large_catch_up_without_the_gil_while_others_query(tmp_path):
    """The first query on a large file takes its entries in without the GIL; queries of
    other threads meanwhile walk the file and get the same answers."""
    n = 12_000                                           # 24,000 entries: over NOGIL_FILL
    with pymq.MessageStore(tmp_path / "s", small_config(commitlog_file_size=16 << 20, index_hash_slots=4096,
                                                        index_max_entries=100_000)) as store:
        for s in range(0, n, 1000):
            r = store.put_messages([pymq.Message("T", b"b", keys=[f"key-{i}"]) for i in range(s, s + 1000)])
            assert r.is_ok()
        deadline = time.monotonic() + 30
        while store.dispatch_behind_bytes():
            assert time.monotonic() < deadline
            time.sleep(0.005)
        errors = []

        def lookups(step):
            try:
                for i in range(0, n, step):
                    got = store.query_message("T", f"key-{i}", 32)
                    assert [m.keys for m in got] == [[f"key-{i}"]], (i, got)
            except Exception as e:                       # reported below
                errors.append(e)

        threads = [threading.Thread(target=lookups, args=(s,)) for s in (1, 7, 13)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        recent = store.index_service.querier.recent
        assert recent.taken == 2 * n and recent.held() == 2 * n


def test_the_table_grows_with_the_file_and_answers_as_before(tmp_path):
    """A table that starts at 4 ways grows (a power of two, at most its ways) once the
    newest file holds more entries than three quarters of them, and then holds every key
    of the file again: hits, and absence claims for keys no message has."""
    before = _set_initial_ways(4)
    try:
        store = pymq.MessageStore(str(tmp_path / "store"), small_config(
            index_hash_slots=64, index_max_entries=400, index_recent_keys=256)).start()
        try:
            recent = store.index_service.querier.recent
            assert recent.capacity == 4 and recent.max_capacity == 256
            sizes = []
            for i in range(150):
                assert store.put_message(pymq.Message("RA", b"x", keys=[f"g{i}"])).is_ok()
                store.flush() if hasattr(store, "flush") else None
                while store.dispatch_behind_bytes():
                    time.sleep(0.001)
                assert [m.keys for m in store.query_message("RA", f"g{i}", 1)] == [[f"g{i}"]]
                sizes.append(recent.capacity)
            # each message files two entries (KEYS and UNIQ_KEY): 300 entries want 512 ways,
            # the table stops at 256; it grew step by step, never shrank
            assert sizes == sorted(sizes) and sizes[-1] == 256 and len(set(sizes)) >= 5
            for i in range(150):
                assert [m.keys for m in store.query_message("RA", f"g{i}", 1)] == [[f"g{i}"]]
                assert store.query_message("RA", f"absent{i}", 1) == []
            assert recent.held() > 0
        finally:
            store.shutdown()
    finally:
        _set_initial_ways(before)


def test_initial_ways_are_the_most_when_fewer():
    before = _set_initial_ways(1 << 16)
    try:
        assert RecentKeys(8).capacity == 8 and RecentKeys(1 << 22).capacity == 1 << 16
        assert RecentKeys(1 << 22).max_capacity == 1 << 22
    finally:
        _set_initial_ways(before)
