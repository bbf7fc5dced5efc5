"""Index files are RocketMQ's, byte for byte (STORE_SPEC 4 and 11).

Every file under ``index/`` is read here with ``struct`` only and checked against the
commit log as the independent decoder (tests/rocketmq_decoder.py) sees it:

* the layout: a 40-byte header (beginTimestamp, endTimestamp, beginPhyOffset,
  endPhyOffset, hashSlotCount, indexCount), ``hashSlotNum`` int slots, ``indexNum``
  20-byte entries (keyHash, phyOffset, timeDiff, prevIndex); entry 0 is never used;
* the chains: every entry is reachable from the slot ``hash % hashSlotNum`` of its key
  hash through ``prevIndex``, every slot points at an entry of that slot;
* the contents: keyHash is ``abs(String.hashCode("topic#key"))`` (0 for
  Integer.MIN_VALUE), computed by a pure-Python UTF-16 oracle; phyOffset is a record of
  that topic whose UNIQ_KEY is the key or whose KEYS hold it; timeDiff follows putKey's
  rules, including the "first entry" quirk of a file seeded by the previous one;
* the whole sequence: the entries of all files, in file-name order, are exactly the
  keys ``buildIndex`` puts for the records of the log (UNIQ_KEY first, then each KEYS
  word; rolled-back transactions skipped), and each file equals, byte for byte, the file
  a pure-Python model of ``IndexFile.putKey`` + ``getAndCreateLastIndexFile`` builds.
"""

from __future__ import annotations

import datetime
import os
import random
import struct
import time

import pytest

import pymq

from conftest import small_config
from rocketmq_decoder import index_hash, java_hash, walk_commitlog

HEADER = struct.Struct(">qqqqii")
SLOT = struct.Struct(">i")
ENTRY = struct.Struct(">iqii")
HEADER_SIZE, SLOT_SIZE, ENTRY_SIZE = 40, 4, 20
INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
TX_MASK, TX_PREPARED, TX_COMMIT, TX_ROLLBACK = 0xC, 0x4, 0x8, 0xC


# -- the oracle --------------------------------------------------------------------------------


def _plain_char(c: int) -> bool:
    return 0x21 <= c <= 0x7E or 0xA1 <= c <= 0xD7FF or 0xE000 <= c <= 0xFFFD


def craft_min_value_key(topic: str) -> str:
    """A key ``k`` with ``("topic#" + k).hashCode() == Integer.MIN_VALUE``.

    ``hash(P + x + c1 + c2) = 961 * hash(P + x) + 31 * c1 + c2 (mod 2**32)``: try
    (deterministic) random ASCII parts ``x`` until two plain BMP characters complete the
    sum."""
    rng = random.Random(topic)
    target = 0x80000000
    while True:
        x = "mv" + "".join(chr(rng.randint(0x41, 0x5A)) for _ in range(5))
        h = java_hash(f"{topic}#{x}") & 0xFFFFFFFF
        v = (target - 961 * h) & 0xFFFFFFFF
        c2 = 0x41 + (v - 0x41) % 31                # c2 == v (mod 31), in A..`
        c1 = (v - c2) // 31
        if _plain_char(c1):
            key = x + chr(c1) + chr(c2)
            assert java_hash(f"{topic}#{key}") == INT_MIN
            return key


SPEC_VECTORS = [
    ("", 0), ("a", 97), ("abc", 96354), ("TopicTest#key1", -1655984460),
    ("TopicTest#UNIQ", -1656663421), ("FooBar#Hello", -101609924),
    ("\u4E2D\u6587", 646394), ("\u6D88\u606F\u961F\u5217", 860276223),
    ("TopicTest#\u8BA2\u5355123", -609830755), ("\U0001F600", 1772899),
    ("emoji\U0001F680key", 1939299606), ("polygenelubricants", INT_MIN),
    ("Aa", 2112), ("BB", 2112),
]


def test_java_hash_oracle_matches_the_spec_vectors():
    for s, h in SPEC_VECTORS:
        assert java_hash(s) == h, s
    assert index_hash("polygenelubricants") == 0
    assert index_hash("TopicTest#key1") == 1655984460
    assert index_hash("TopicTest#key1") % 100 == 60
    assert index_hash("TopicTest#\u8BA2\u5355123") % 100 == 55
    # astral characters are two UTF-16 units
    assert java_hash("\U0001F600") == (31 * 0xD83D + 0xDE00)
    key = craft_min_value_key("IdxFmt")
    assert index_hash("IdxFmt#" + key) == 0


# -- reading the files -------------------------------------------------------------------------

def read_index_files(root, slots, entries_num) -> list:
    """``[(name, header tuple, slots list, entries list, raw bytes)]`` in name order.

    ``entries`` holds all ``entries_num`` entries (entry 0 included) as ``(hash, phy,
    timeDiff, prev)``."""
    d = os.path.join(root, "index")
    size = HEADER_SIZE + slots * SLOT_SIZE + entries_num * ENTRY_SIZE
    out = []
    for name in sorted(os.listdir(d)):
        path = os.path.join(d, name)
        assert len(name) == 17 and name.isdigit(), f"index file name {name!r} is not yyyyMMddHHmmssSSS"
        with open(path, "rb") as f:
            raw = f.read()
        assert len(raw) == size, (name, len(raw), size)
        header = HEADER.unpack_from(raw, 0)
        slot_vals = [SLOT.unpack_from(raw, HEADER_SIZE + i * SLOT_SIZE)[0] for i in range(slots)]
        epos = HEADER_SIZE + slots * SLOT_SIZE
        entries = [ENTRY.unpack_from(raw, epos + i * ENTRY_SIZE) for i in range(entries_num)]
        out.append((name, header, slot_vals, entries, raw))
    return out


def name_to_ms(name: str) -> int:
    """yyyyMMddHHmmssSSS in local time -> ms since the epoch."""
    dt = datetime.datetime.strptime(name[:14], "%Y%m%d%H%M%S")
    return int(time.mktime(dt.timetuple())) * 1000 + int(name[14:])


def expected_puts(root) -> tuple[list, dict]:
    """``buildIndex`` over the log: ``[(key string, hash, phy, storeTs)]`` in put order,
    and ``{offset: record}``."""
    seq = []
    recs = {}
    for rec in walk_commitlog(os.path.join(root, "commitlog")):
        if rec["blank"]:
            continue
        recs[rec["offset"]] = rec
        if rec["sys_flag"] & TX_MASK == TX_ROLLBACK:
            continue
        props = rec["properties"]
        topic = rec["topic"]
        if "UNIQ_KEY" in props:
            k = f"{topic}#{props['UNIQ_KEY']}"
            seq.append((k, index_hash(k), rec["offset"], rec["store_timestamp"]))
        for word in props.get("KEYS", "").split(" "):
            if word:
                k = f"{topic}#{word}"
                seq.append((k, index_hash(k), rec["offset"], rec["store_timestamp"]))
    return seq, recs


class ModelIndexFile:
    """RocketMQ's ``IndexFile`` (STORE_SPEC 4), in Python, for byte comparison."""

    def __init__(self, slots, entries_num, seed_phy=0, seed_ts=0):
        self.slots_n, self.entries_n = slots, entries_num
        self.begin_ts = self.end_ts = seed_ts if seed_ts > 0 else 0
        self.begin_phy = self.end_phy = seed_phy if seed_phy > 0 else 0
        self.slot_count = 0
        self.count = 1
        self.slots = [0] * slots
        self.entries = [(0, 0, 0, 0)] * entries_num

    def full(self):
        return self.count >= self.entries_n

    def put(self, h, phy, ts):
        assert not self.full()
        slot = h % self.slots_n
        sv = self.slots[slot]
        if sv <= 0 or sv > self.count:
            sv = 0
        diff = ts - self.begin_ts                 # Java: long division truncates
        if self.begin_ts <= 0 or diff < 0:
            diff = 0
        diff = min(diff // 1000, INT_MAX)
        self.entries[self.count] = (h, phy, diff, sv)
        self.slots[slot] = self.count
        if self.count <= 1:
            self.begin_phy = phy
            self.begin_ts = ts
        if sv == 0:
            self.slot_count += 1
        self.count += 1
        self.end_phy = phy
        self.end_ts = ts

    def to_bytes(self):
        out = bytearray(HEADER.pack(self.begin_ts, self.end_ts, self.begin_phy, self.end_phy,
                                    self.slot_count, self.count))
        for v in self.slots:
            out += SLOT.pack(v)
        for e in self.entries:
            out += ENTRY.pack(*e)
        return bytes(out)


def model_files(seq, slots, entries_num) -> list:
    files = []
    for _k, h, phy, ts in seq:
        if not files or files[-1].full():
            prev = files[-1] if files else None
            files.append(ModelIndexFile(slots, entries_num,
                                        prev.end_phy if prev else 0, prev.end_ts if prev else 0))
        files[-1].put(h, phy, ts)
    return files


def record_has_key(rec, topic_key: str) -> bool:
    topic, _, key = topic_key.partition("#")
    if rec["topic"] != topic:
        return False
    props = rec["properties"]
    return props.get("UNIQ_KEY") == key or key in props.get("KEYS", "").split(" ")


# -- filling a store ---------------------------------------------------------------------------

def key_pool(topic: str, rng: random.Random) -> list:
    fixed = ["k1", "order-42", "\u8BA2\u5355123", "\u4E2D\u6587", "\u6D88\u606F\u961F\u5217",
             "\U0001F600", "emoji\U0001F680key", "polygenelubricants", craft_min_value_key(topic),
             "Aa", "BB", "x" * 300, "key1"]
    rnd = []
    for _ in range(25):
        n = rng.randint(1, 10)
        rnd.append("".join(chr(rng.choice([rng.randint(0x21, 0x7E), rng.randint(0x4E00, 0x9FFF),
                                           rng.randint(0x1F300, 0x1F64F)])) for _ in range(n)))
    return fixed + rnd


def fill(store, rng, n, per_file) -> list:
    """Put messages of two topics with 0..4 keys each (duplicates included) and every
    transaction type; return the put results.

    Once, right after a message that fills an index file exactly (``per_file`` entries
    each), sleep over a second: the next file's first entry then gets a non-zero timeDiff
    against the seed (the previous file's end), RocketMQ's quirk."""
    results = []
    pools = {t: key_pool(t, rng) for t in ("IdxFmt", "IdxFmt_2")}
    entries = 0
    slept = False
    for i in range(n):
        topic = "IdxFmt" if i % 4 else "IdxFmt_2"
        pool = pools[topic]
        nkeys = rng.choice([0, 1, 1, 2, 3, 4])
        keys = [rng.choice(pool) for _ in range(nkeys)]
        if i % 17 == 0 and keys:
            keys.append(keys[0])                  # a key twice in one message: two entries
        sys_flag = 0
        if i % 11 == 3:
            sys_flag = TX_PREPARED
        elif i % 11 == 5:
            sys_flag = TX_COMMIT
        elif i % 11 == 7:
            sys_flag = TX_ROLLBACK
        props = {"UNIQ_KEY": f"client-{i}"} if i % 13 == 0 else None
        r = store.put_message(pymq.Message(topic, b"body-%d" % i, tags="T", keys=keys or None,
                                           properties=props, queue_id=i % 3, sys_flag=sys_flag))
        assert r.status is pymq.PutMessageStatus.PUT_OK, (i, r)
        results.append(r)
        if sys_flag != TX_ROLLBACK:
            entries += 1 + len(keys)
        if not slept and i >= 20 and entries % per_file == 0:
            time.sleep(1.05)
            slept = True
        elif i % 40 == 39:
            time.sleep(0.02)
    return results


def wait_dispatched(store, timeout=5.0):
    deadline = time.monotonic() + timeout
    while store.dispatch_behind_bytes():
        assert time.monotonic() < deadline, "dispatch did not catch up"
        time.sleep(0.002)


# -- the checks --------------------------------------------------------------------------------

def check_structure(files, seq, recs, slots, entries_num):
    """The structural rules, file by file, from the bytes alone."""
    all_entries = []
    prev_header = None
    for fi, (name, header, slot_vals, entries, _raw) in enumerate(files):
        begin_ts, end_ts, begin_phy, end_phy, slot_count, count = header
        assert 2 <= count <= entries_num, (name, header)
        if fi < len(files) - 1:
            assert count == entries_num, f"{name}: a non-last file is not full ({count})"
        assert entries[0] == (0, 0, 0, 0), f"{name}: entry 0 is used"
        used = entries[1:count]
        for i, e in enumerate(entries[count:], start=count):
            assert e == (0, 0, 0, 0), f"{name}: entry {i} beyond indexCount {count} is written"
        # hashSlotCount == occupied slots; each slot points at an entry of that slot
        assert slot_count == sum(1 for v in slot_vals if v != 0), (name, header)
        for s, v in enumerate(slot_vals):
            if v:
                assert 1 <= v < count, (name, s, v)
                assert entries[v][0] % slots == s, (name, s, v, entries[v])
        # every entry reachable from its slot; chains descend; prevIndex in the same slot
        reached = set()
        for s, v in enumerate(slot_vals):
            while v:
                assert v not in reached, f"{name}: entry {v} on two chains or a cycle"
                reached.add(v)
                h, _phy, _td, prev = entries[v]
                assert h % slots == s
                assert 0 <= prev < v, (name, v, prev)
                v = prev
        assert reached == set(range(1, count)), f"{name}: unreachable entries {set(range(1, count)) - reached}"
        # keyHash / phy of each entry
        for i, (h, phy, td, prev) in enumerate(used, start=1):
            assert 0 <= h <= INT_MAX
            assert phy in recs, f"{name}: entry {i} phy {phy} is not a record start"
        # header against first/last entries; seeding from the previous file
        first, last = entries[1], entries[count - 1]
        first_rec, last_rec = recs[first[1]], recs[last[1]]
        assert begin_phy == first[1], (name, header)
        assert end_phy == last[1], (name, header)
        assert begin_ts == first_rec["store_timestamp"], (name, header)
        assert end_ts == last_rec["store_timestamp"], (name, header)
        # timeDiff, RocketMQ's rules: entry 1 against the seed (previous file's end), others
        # against this file's beginTimestamp
        seed_ts = prev_header[1] if prev_header is not None else 0
        for i, (h, phy, td, prev) in enumerate(used, start=1):
            ts = recs[phy]["store_timestamp"]
            base = seed_ts if i == 1 else begin_ts
            want = 0 if base <= 0 or ts < base else min((ts - base) // 1000, INT_MAX)
            assert td == want, (name, i, td, want, ts, base)
        if fi == 0:
            assert entries[1][2] == 0               # first file: no seed, timeDiff 0
        # the file name is its creation time: not after its first entry was stored... and
        # close to it
        assert abs(name_to_ms(name) - begin_ts) < 60_000, (name, begin_ts)
        all_entries.extend(used)
        prev_header = header
    # the concatenated entries are buildIndex's puts, in order
    got = [(h, phy) for h, phy, _td, _prev in all_entries]
    want = [(h, phy) for _k, h, phy, _ts in seq]
    assert got == want
    for (k, h, phy, _ts) in seq:
        assert record_has_key(recs[phy], k), (k, phy)
    assert len(files) == -(-len(seq) // (entries_num - 1))
    names = [f[0] for f in files]
    assert names == sorted(set(names))


def check_store(root, slots, entries_num, min_files=2):
    seq, recs = expected_puts(root)
    files = read_index_files(root, slots, entries_num)
    assert len(files) >= min_files
    check_structure(files, seq, recs, slots, entries_num)
    models = model_files(seq, slots, entries_num)
    assert len(models) == len(files)
    for (name, _h, _s, _e, raw), model in zip(files, models):
        want = model.to_bytes()
        if raw != want:
            diff = next(i for i in range(len(raw)) if raw[i] != want[i])
            pytest.fail(f"{name}: first differing byte at {diff} (file {raw[diff:diff + 20].hex()} "
                        f"model {want[diff:diff + 20].hex()})")
    return seq, recs, files


@pytest.mark.parametrize("slots,entries_num", [(8, 16), (61, 50), (64, 200)])
def test_index_files_are_rocketmq_files(tmp_path, slots, entries_num):
    rng = random.Random(slots * 1000 + entries_num)
    root = str(tmp_path / "store")
    cfg = small_config(index_hash_slots=slots, index_max_entries=entries_num)
    store = pymq.MessageStore(root, cfg).start()
    try:
        results = fill(store, rng, 160 if slots != 64 else 130, entries_num - 1)
        wait_dispatched(store)
        # while running: the mapped files are the state
        seq, recs, files = check_store(root, slots, entries_num)
    finally:
        store.shutdown()
    # the quirk was exercised: a seeded file whose first entry has a non-zero timeDiff
    if slots == 8:
        assert any(f[3][1][2] > 0 for f in files[1:]), "no seeded first entry with timeDiff > 0"
    # the keys this test meant to cover are in the index, with their hashes
    keys = {k for k, _h, _phy, _ts in seq}
    mk = craft_min_value_key("IdxFmt")
    assert "IdxFmt#" + mk in keys and index_hash("IdxFmt#" + mk) == 0
    assert "IdxFmt#polygenelubricants" in keys
    assert any(k.startswith("IdxFmt#client-") for k in keys)
    assert "IdxFmt#\u8BA2\u5355123" in keys or "IdxFmt_2#\u8BA2\u5355123" in keys
    for r in results:
        tx = (r.commitlog_offset in recs) and recs[r.commitlog_offset]["sys_flag"] & TX_MASK
        indexed = [e for e in seq if e[2] == r.commitlog_offset]
        if tx == TX_ROLLBACK:
            assert indexed == [], f"rolled-back record {r.commitlog_offset} indexed"
        else:
            assert indexed, f"record {r.commitlog_offset} (tx {tx}) not indexed"
            assert indexed[0][0].endswith("#" + r.uniq_key)
    # after a clean shutdown the files still hold the same entries (only the last record
    # may be re-indexed on the next start, RocketMQ's `<` quirk: not checked here)
    check_store(root, slots, entries_num)


def test_transaction_types_and_uniq_key_only(tmp_path):
    """NOT, PREPARED and COMMIT records are indexed (uniq key and keys), ROLLBACK is not."""
    root = str(tmp_path / "store")
    slots, entries_num = 16, 32
    store = pymq.MessageStore(root, small_config(index_hash_slots=slots, index_max_entries=entries_num)).start()
    try:
        offs = {}
        for flag in (0, TX_PREPARED, TX_COMMIT, TX_ROLLBACK):
            r = store.put_message(pymq.Message("Tx", b"b", keys=[f"key-{flag}"], sys_flag=flag))
            assert r.status is pymq.PutMessageStatus.PUT_OK
            offs[flag] = r
        r = store.put_message(pymq.Message("Tx", b"no keys"))        # only UNIQ_KEY
        offs["plain"] = r
        wait_dispatched(store)
        seq, recs, files = check_store(root, slots, entries_num, min_files=1)
    finally:
        store.shutdown()
    by_phy = {}
    for k, _h, phy, _ts in seq:
        by_phy.setdefault(phy, []).append(k)
    for flag in (0, TX_PREPARED, TX_COMMIT):
        r = offs[flag]
        assert by_phy[r.commitlog_offset] == [f"Tx#{r.uniq_key}", f"Tx#key-{flag}"]
    assert offs[TX_ROLLBACK].commitlog_offset not in by_phy
    assert by_phy[offs["plain"].commitlog_offset] == [f"Tx#{offs['plain'].uniq_key}"]
    (name, header, slot_vals, entries, _raw), = files
    assert header[5] == 1 + 2 * 3 + 1         # indexCount: 7 entries after the unused one


def snapshot_index(root) -> dict:
    d = os.path.join(root, "index")
    out = {}
    for name in sorted(os.listdir(d)):
        with open(os.path.join(d, name), "rb") as f:
            out[name] = f.read()
    return out


def test_clean_restart_adds_no_index_entries(tmp_path):
    """RocketMQ restarts the dispatch at the consume queues' end after a clean exit, so a
    restart without new messages writes nothing to the index; new messages then continue
    the same files (the model of putKey still matches, byte for byte)."""
    root = str(tmp_path / "store")
    slots, entries_num = 8, 16
    cfg = small_config(index_hash_slots=slots, index_max_entries=entries_num)
    store = pymq.MessageStore(root, cfg).start()
    try:
        for i in range(7):
            r = store.put_message(pymq.Message("Restart", b"x%d" % i, keys=[f"k{i}", "common"]))
            assert r.status is pymq.PutMessageStatus.PUT_OK
        wait_dispatched(store)
    finally:
        store.shutdown()
    before = snapshot_index(root)
    check_store(root, slots, entries_num, min_files=1)
    for _ in range(3):
        store = pymq.MessageStore(root, cfg).start()
        try:
            wait_dispatched(store)
            assert len(store.query_message("Restart", "common")) == 7
        finally:
            store.shutdown()
    after = snapshot_index(root)
    assert sorted(after) == sorted(before), "index files were added by restarts alone"
    for name in before:
        hb, ha = HEADER.unpack_from(before[name], 0), HEADER.unpack_from(after[name], 0)
        assert ha == hb, f"{name}: header {hb} became {ha} after restarts without new messages"
        assert after[name] == before[name], name
    store = pymq.MessageStore(root, cfg).start()
    try:
        for i in range(9):
            store.put_message(pymq.Message("Restart", b"y%d" % i, keys=[f"k{i}"]))
        wait_dispatched(store)
    finally:
        store.shutdown()
    check_store(root, slots, entries_num, min_files=2)
