"""``pymq._core.index_file.IndexFile`` alone: RocketMQ's ``IndexFileTest`` (STORE_SPEC 10)
and damaged files.

The scenario: an index file of 100 slots and 400 entries (8440 bytes) takes the raw keys
"0".."398" (phy 0..398) and refuses "400"; ``selectPhyOffset("60")`` finds only 60;
``select_phy_offset`` compares hashes only, so a colliding key finds the collision.

Damage: prevIndex pointing at its own entry, at a later entry (a cycle), beyond
indexCount, negative; slot values out of range; random bytes anywhere in the slot and
entry region; an impossible indexCount in the header. Every walk must return a bounded
list. Damage runs in a child interpreter, so a crash or an endless loop fails one test
rather than killing the run.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap
import time

import pytest

from pymq._core.index_file import IndexFile, index_file_size

from rocketmq_decoder import index_hash, java_hash
from pymq._core.mapped_file import MappedFile

SLOTS, ENTRIES = 100, 400
HEADER = struct.Struct(">qqqqii")
ENTRY = struct.Struct(">iqii")
LONG_MAX = (1 << 63) - 1
ENTRIES_POS = 40 + SLOTS * 4


def new_file(tmp_path, name="20240101000000000", slots=SLOTS, entries=ENTRIES):
    mf = MappedFile(str(tmp_path / name), index_file_size(slots, entries), create=True)
    return mf, IndexFile(mf, slots, entries)


def fill_399(f, ts):
    for i in range(ENTRIES - 1):
        assert f.put_key(str(i), i, ts) is True, i


def read(mf) -> bytes:
    with open(mf.file_name, "rb") as fh:
        return fh.read()


def test_file_size():
    assert index_file_size(SLOTS, ENTRIES) == 8440
    assert index_file_size(5_000_000, 20_000_000) == 420_000_040


def test_put_key_399_then_full(tmp_path):
    mf, f = new_file(tmp_path)
    assert mf.file_size == 8440
    ts = int(time.time() * 1000)
    fill_399(f, ts)
    assert f.is_write_full()
    assert f.put_key("400", 400, ts) is False
    assert f.index_count == ENTRIES
    data = read(mf)
    assert len(data) == 8440
    bt, et, bp, ep, slot_count, count = HEADER.unpack_from(data, 0)
    assert (bt, et, bp, ep, count) == (ts, ts, 0, 398, 400)
    slots = struct.unpack_from(">100i", data, 40)
    assert slot_count == sum(1 for v in slots if v) == f.hash_slot_count
    assert data[ENTRIES_POS:ENTRIES_POS + 20] == bytes(20)        # entry 0 unused
    for n in range(1, ENTRIES):
        h, phy, td, prev = ENTRY.unpack_from(data, ENTRIES_POS + n * 20)
        assert h == index_hash(str(n - 1)) and phy == n - 1 and td == 0
        assert 0 <= prev < n
        if prev:
            assert ENTRY.unpack_from(data, ENTRIES_POS + prev * 20)[0] % SLOTS == h % SLOTS
    # the refused put changed nothing
    assert read(mf) == data


def test_select_phy_offset_60(tmp_path):
    mf, f = new_file(tmp_path)
    ts = int(time.time() * 1000)
    fill_399(f, ts)
    assert f.select_phy_offset("60", 10, 0, LONG_MAX) == [60]
    assert f.select_phy_offset("398", 10, 0, LONG_MAX) == [398]
    assert f.select_phy_offset("0", 10, 0, LONG_MAX) == [0]
    assert f.select_phy_offset("399", 10, 0, LONG_MAX) == []
    assert f.select_phy_offset("60", 10, ts + 1000, LONG_MAX) == []     # out of time range
    assert f.select_phy_offset("60", 10, 0, ts - 1) == []


def test_select_phy_offset_walks_whole_chains_newest_first(tmp_path):
    mf, f = new_file(tmp_path, slots=7, entries=200)
    ts = int(time.time() * 1000)
    for i in range(150):
        assert f.put_key(f"k{i % 5}", i, ts)
    assert f.select_phy_offset("k3", 100, 0, LONG_MAX) == list(range(148, -1, -5))
    assert f.select_phy_offset("k3", 4, 0, LONG_MAX) == [148, 143, 138, 133]


def test_colliding_keys_share_entries(tmp_path):
    mf, f = new_file(tmp_path)
    ts = int(time.time() * 1000)
    assert java_hash("Aa") == java_hash("BB") == 2112
    assert f.put_key("Aa", 1000, ts)
    assert f.put_key("x", 5, ts)
    assert f.put_key("BB", 2000, ts)
    assert f.select_phy_offset("BB", 10, 0, LONG_MAX) == [2000, 1000]
    assert f.select_phy_offset("Aa", 10, 0, LONG_MAX) == [2000, 1000]
    # same slot (2112 % 100 == 12), other hash: not returned
    other = next(k for k in (f"s{i}" for i in range(10_000))
                 if index_hash(k) % SLOTS == 12 and index_hash(k) != 2112)
    assert f.put_key(other, 3000, ts)
    assert f.select_phy_offset("Aa", 10, 0, LONG_MAX) == [2000, 1000]
    assert f.select_phy_offset(other, 10, 0, LONG_MAX) == [3000]


def test_min_value_hash_goes_to_slot_zero(tmp_path):
    mf, f = new_file(tmp_path)
    ts = int(time.time() * 1000)
    assert java_hash("polygenelubricants") == -(1 << 31)
    assert f.put_key("polygenelubricants", 77, ts)
    data = read(mf)
    assert struct.unpack_from(">i", data, 40)[0] == 1                # slot 0
    assert ENTRY.unpack_from(data, ENTRIES_POS + 20)[:2] == (0, 77)  # hash 0
    assert f.select_phy_offset("polygenelubricants", 10, 0, LONG_MAX) == [77]


def test_time_diff_and_header(tmp_path):
    """timeDiff in whole seconds from the first put; a file seeded by its predecessor."""
    mf, f = new_file(tmp_path)
    t0 = 1_700_000_000_123
    assert f.put_key("a", 10, t0)
    assert f.put_key("b", 20, t0 + 999)
    assert f.put_key("c", 30, t0 + 1000)
    assert f.put_key("d", 40, t0 + 5_432)
    assert f.put_key("e", 50, t0 - 5_000)          # older than begin: timeDiff 0
    data = read(mf)
    diffs = [ENTRY.unpack_from(data, ENTRIES_POS + n * 20)[2] for n in range(1, 6)]
    assert diffs == [0, 0, 1, 5, 0]
    assert HEADER.unpack_from(data, 0) == (t0, t0 - 5_000, 10, 50, 5, 6)
    # seeded: the first entry's timeDiff is against the seed (RocketMQ's quirk)
    mf2 = MappedFile(str(tmp_path / "20240101000000001"), index_file_size(SLOTS, ENTRIES), create=True)
    g = IndexFile(mf2, SLOTS, ENTRIES, 50, t0)
    assert HEADER.unpack_from(read(mf2), 0) == (t0, t0, 50, 50, 0, 0)
    assert g.put_key("f", 60, t0 + 3_500)
    assert g.put_key("g", 70, t0 + 4_400)
    data = read(mf2)
    assert HEADER.unpack_from(data, 0) == (t0 + 3_500, t0 + 4_400, 60, 70, 2, 3)
    assert [ENTRY.unpack_from(data, ENTRIES_POS + n * 20)[2] for n in (1, 2)] == [3, 0]


# -- damage ------------------------------------------------------------------------------------

def run_isolated(body: str, timeout=30) -> subprocess.CompletedProcess:
    tests = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(tests)
    code = textwrap.dedent(f"""
        import os, random, struct, sys, time
        from pymq._core.index_file import IndexFile, index_file_size
        from pymq._core.mapped_file import MappedFile
        SLOTS, ENTRIES, LONG_MAX = {SLOTS}, {ENTRIES}, {LONG_MAX}
        EP = 40 + SLOTS * 4
        def fresh(path, slots=SLOTS, entries=ENTRIES):
            mf = MappedFile(path, index_file_size(slots, entries), create=True)
            f = IndexFile(mf, slots, entries)
            ts = 1_700_000_000_000
            for i in range(entries - 1):
                assert f.put_key(str(i), i, ts)
            return mf, f
        def prev_of(n):
            return EP + n * 20 + 16
        def check(res, maxn, bound=ENTRIES):
            assert isinstance(res, list), res
            assert len(res) <= min(maxn, bound), (len(res), maxn)
    """) + textwrap.dedent(body) + "\nprint('OK')\n"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    try:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=timeout, env=env, cwd=root)
    except subprocess.TimeoutExpired:
        pytest.fail("the walk did not terminate (endless chain)")


def assert_ok(p):
    assert p.returncode == 0 and p.stdout.strip().endswith("OK"), \
        (p.returncode, p.stdout[-2000:], p.stderr[-2000:])


def test_prev_index_pointing_at_itself(tmp_path):
    assert_ok(run_isolated(f"""
        mf, f = fresh({str(tmp_path / 'self')!r})
        # "60" is entry 61; make it its own predecessor
        mf.write_at(prev_of(61), struct.pack(">i", 61))
        res = f.select_phy_offset("60", 10, 0, LONG_MAX)
        assert res == [60], res
        # every entry of the slot chain of "60" points at itself
        for n in range(1, ENTRIES):
            mf.write_at(prev_of(n), struct.pack(">i", n))
        for k in ("60", "0", "398", "7"):
            check(f.select_phy_offset(k, 10**6, 0, LONG_MAX), 10**6)
    """))


def test_prev_index_cycle_through_a_later_entry(tmp_path):
    assert_ok(run_isolated(f"""
        mf, f = fresh({str(tmp_path / 'cycle')!r}, slots=1, entries=50)
        # one slot: one chain 49 -> 48 -> ... -> 1. Make 10 point forward to 40: a cycle.
        EP1 = 40 + 4
        mf.write_at(EP1 + 10 * 20 + 16, struct.pack(">i", 40))
        for k in ("5", "30", "9", "nothing"):
            res = f.select_phy_offset(k, 10**6, 0, LONG_MAX)
            check(res, 10**6, 50)
        # all entries the same hash: the walk would collect forever without a bound
        h = struct.unpack_from(">i", open(mf.file_name, "rb").read(), EP1 + 20)[0]
        for n in range(1, 50):
            mf.write_at(EP1 + n * 20, struct.pack(">i", h))
        res = f.select_phy_offset("0", 10**6, 0, LONG_MAX)
        check(res, 10**6, 50)
        # a two-entry cycle 49 <-> 48
        mf.write_at(EP1 + 48 * 20 + 16, struct.pack(">i", 49))
        res = f.select_phy_offset("0", 10**6, 0, LONG_MAX)
        check(res, 10**6, 50)
    """))


def test_prev_index_beyond_count_or_negative(tmp_path):
    assert_ok(run_isolated(f"""
        mf, f = fresh({str(tmp_path / 'beyond')!r}, slots=1, entries=50)
        EP1 = 40 + 4
        full = f.select_phy_offset("7", 100, 0, LONG_MAX)
        assert full == [7], full
        for bad, cut in ((50, 30), (10**9, 20), (2**31 - 1, 25), (-1, 15), (-(2**31), 12), (0, 40)):
            mf.write_at(EP1 + cut * 20 + 16, struct.pack(">i", bad))
            res = f.select_phy_offset("7", 100, 0, LONG_MAX)
            # the walk stops at the damaged entry: "7" (entry 8) is not reached
            assert res == [], (bad, res)
            mf.write_at(EP1 + cut * 20 + 16, struct.pack(">i", cut - 1))
            assert f.select_phy_offset("7", 100, 0, LONG_MAX) == [7]
    """))


def test_slot_values_out_of_range(tmp_path):
    assert_ok(run_isolated(f"""
        mf, f = fresh({str(tmp_path / 'slots')!r})
        slot = {index_hash("60") % SLOTS}
        for bad in (ENTRIES, ENTRIES + 1, 10**6, 2**31 - 1, -1, -(2**31), 0):
            mf.write_at(40 + slot * 4, struct.pack(">i", bad))
            assert f.select_phy_offset("60", 10, 0, LONG_MAX) == [], bad
    """))


def test_random_damage_of_slots_and_entries(tmp_path):
    assert_ok(run_isolated(f"""
        rng = random.Random(3)
        size = index_file_size(SLOTS, ENTRIES)
        for round in range(40):
            mf, f = fresh({str(tmp_path)!r} + "/r%d" % round)
            for _ in range(rng.choice([1, 10, 200, 2000])):
                p = rng.randrange(40, size)
                mf.write_at(p, bytes([rng.randrange(256)]))
            for k in [str(i) for i in range(0, 400, 7)] + ["Aa", "x", "polygenelubricants"]:
                maxn = rng.choice([1, 10, 10**6])
                check(f.select_phy_offset(k, maxn, 0, LONG_MAX), maxn)
                check(f.select_phy_offset(k, maxn, rng.randrange(2**40), LONG_MAX), maxn)
            # puts continue or report full, never crash
            for i in range(5):
                f.put_key("after%d" % i, 1000 + i, 1_700_000_000_000)
            mf.close()
    """, timeout=60))


def test_impossible_index_count_in_header(tmp_path):
    """indexCount is read from the file: a value beyond indexNum must not make the walk
    read past the mapping (RocketMQ's Java walk would throw IndexOutOfBounds and log)."""
    assert_ok(run_isolated(f"""
        mf, f = fresh({str(tmp_path / 'count')!r})
        slot = {index_hash("60") % SLOTS}
        for count, slotv in ((ENTRIES + 1, ENTRIES), (10**6, 10**6 - 1), (2**31 - 1, 10**8),
                             (2**31 - 1, 2**31 - 1)):
            mf.write_at(36, struct.pack(">i", count))
            mf.write_at(40 + slot * 4, struct.pack(">i", slotv))
            check(f.select_phy_offset("60", 10, 0, LONG_MAX), 10)
        assert f.put_key("x", 1, 1) is False          # full: nothing written
    """))


def test_random_damage_of_the_header(tmp_path):
    assert_ok(run_isolated(f"""
        rng = random.Random(9)
        for round in range(30):
            mf, f = fresh({str(tmp_path)!r} + "/h%d" % round)
            for _ in range(rng.choice([1, 4, 40])):
                mf.write_at(rng.randrange(0, 40), bytes([rng.randrange(256)]))
            for k in [str(i) for i in range(0, 400, 13)]:
                check(f.select_phy_offset(k, 10**6, 0, LONG_MAX), 10**6)
            mf.close()
    """, timeout=60))


def test_constructor_checks_sizes(tmp_path):
    mf = MappedFile(str(tmp_path / "x"), index_file_size(SLOTS, ENTRIES), create=True)
    with pytest.raises(ValueError):
        IndexFile(mf, SLOTS + 1, ENTRIES)
    with pytest.raises(ValueError):
        IndexFile(mf, 0, ENTRIES)
    with pytest.raises(ValueError):
        IndexFile(mf, SLOTS, 1)


def test_link_equal_to_index_count_of_a_full_file(tmp_path):
    """A slot or prevIndex equal to indexCount passes the ``> indexCount`` test, but in a
    full file entry number indexCount (== indexNum) lies past the file's end. With 14
    slots and 200 entries the file is exactly one 4096-byte page, so that entry is past
    the mapping: the walk must not read it. To make such a read visible, other 4096-byte
    files are mapped around the index files with a fake entry (hash of "60", phy
    987654321) at their start: the kernel usually places consecutive mappings next to
    each other, so reading past an index file reads that entry."""
    assert index_file_size(14, 200) == 4096
    assert_ok(run_isolated(f"""
        H60 = {index_hash("60")}
        fake = struct.pack(">iqii", H60, 987654321, 0, 0)
        keep = []
        for trial in range(8):
            nb = MappedFile({str(tmp_path)!r} + "/nb%d" % trial, 4096, create=True)
            nb.write_at(0, fake)
            mf, f = fresh({str(tmp_path)!r} + "/page%d" % trial, slots=14, entries=200)
            nb2 = MappedFile({str(tmp_path)!r} + "/nc%d" % trial, 4096, create=True)
            nb2.write_at(0, fake)
            keep += [nb, mf, nb2]
            assert f.is_write_full() and f.index_count == 200
            EP14 = 40 + 14 * 4
            slot = H60 % 14
            if trial % 2:
                # a prevIndex == indexCount on the chain of "60" (every entry after 61)
                for n in range(62, 200):
                    mf.write_at(EP14 + n * 20 + 16, struct.pack(">i", 200))
            else:
                # a slot value == indexCount
                mf.write_at(40 + slot * 4, struct.pack(">i", 200))
            res = f.select_phy_offset("60", 10, 0, LONG_MAX)
            check(res, 10)
            assert 987654321 not in res, ("read past the end of the index file", trial, res)
    """))
