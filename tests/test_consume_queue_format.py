"""Consume-queue files are RocketMQ's, byte for byte (STORE_SPEC 3.1, 3.2, 3.3, 5, 11).

Every file under ``consumequeue/{topic}/{queueId}/`` is read here with ``struct`` only and
compared with what the independent decoder (tests/rocketmq_decoder.py) finds in the commit
log: entry ``i`` of a queue is ``>qiq`` (commit-log offset, record size, tagsCode) of the
queue's ``i``-th dispatched record, the tagsCode being Java's ``String.hashCode`` of TAGS
computed by a pure-Python UTF-16 oracle. Files are named by the 20-digit byte offset of
their first entry and are ``consume_queue_entries * 20`` bytes long with a zero tail.
"""

from __future__ import annotations

import math
import os
import random
import shutil
import struct
import time

import pytest

import pymq

from conftest import small_config
from rocketmq_decoder import java_hash, walk_commitlog

UNIT = struct.Struct(">qiq")
UNIT_SIZE = 20
TX_MASK = 0xC
TX_PREPARED, TX_COMMIT, TX_ROLLBACK = 0x4, 0x8, 0xC


# -- the oracle --------------------------------------------------------------------------------


# STORE_SPEC section 11, computed with OpenJDK 17.
JAVA_VECTORS = [
    ("", 0), ("a", 97), ("abc", 96354), ("TopicTest#key1", -1655984460),
    ("FooBar#Hello", -101609924), ("TAG1", 2567159), ("TagA", 2598919),
    ("schedule_tag", 1162501618), ("\u4E2D\u6587", 646394),
    ("\u6D88\u606F\u961F\u5217", 860276223), ("TopicTest#\u8BA2\u5355123", -609830755),
    ("\U0001F600", 1772899), ("emoji\U0001F680key", 1939299606),
    ("polygenelubricants", -2147483648), ("Aa", 2112), ("BB", 2112),
]

FIXED_TAGS = [None, "TagA", "TAG1", "Aa", "BB", "\u4E2D\u6587", "\u6D88\u606F\u961F\u5217",
              "\U0001F600", "emoji\U0001F680key", "polygenelubricants", "schedule_tag",
              "x" * 200]


def random_tag(rng: random.Random) -> str:
    """A non-empty tag of ASCII, BMP and astral characters (no separators, no surrogates)."""
    out = []
    for _ in range(rng.randint(1, 12)):
        kind = rng.random()
        if kind < 0.4:
            cp = rng.randint(0x21, 0x7E)
        elif kind < 0.8:
            cp = rng.choice([rng.randint(0xA0, 0xD7FF), rng.randint(0xE000, 0xFFFD)])
        else:
            cp = rng.randint(0x10000, 0x10FFFF)
        out.append(chr(cp))
    return "".join(out)


def test_java_hash_oracle_matches_the_spec_vectors():
    for s, h in JAVA_VECTORS:
        assert java_hash(s) == h, s
    # astral characters count as two UTF-16 units: same as their surrogate pair by hand
    assert java_hash("\U0001F600") == ((31 * 0xD83D + 0xDE00) & 0xFFFFFFFF)


# -- reading the files -------------------------------------------------------------------------

def cq_dir(root, topic, qid) -> str:
    return os.path.join(root, "consumequeue", topic, str(qid))


def read_queue_files(root, topic, qid, entries_per_file) -> tuple[list, dict]:
    """All written entries of a queue, checking names, sizes and the zero tail.

    Returns ``(entries, raw)``: the list of ``(offset, size, tagsCode)`` in queue order
    and ``{file name: bytes}``."""
    file_size = entries_per_file * UNIT_SIZE
    d = cq_dir(root, topic, qid)
    names = sorted(os.listdir(d))
    raw = {}
    entries = []
    ended = False
    for i, name in enumerate(names):
        assert len(name) == 20 and name.isdigit(), name
        assert int(name) == i * file_size, (names, file_size)
        with open(os.path.join(d, name), "rb") as f:
            data = f.read()
        raw[name] = data
        assert len(data) == file_size, (name, len(data))
        for pos in range(0, file_size, UNIT_SIZE):
            chunk = data[pos:pos + UNIT_SIZE]
            if chunk == bytes(UNIT_SIZE):
                ended = True
                continue
            assert not ended, f"{name}: an entry at {pos} after the zero tail began"
            entries.append(UNIT.unpack(chunk))
    return entries, raw


def expected_entries(root, topic, qid) -> list:
    """The queue's entries as RocketMQ builds them, from the commit log alone."""
    out = []
    for rec in walk_commitlog(os.path.join(root, "commitlog")):
        if rec["blank"] or rec["topic"] != topic or rec["queue_id"] != qid:
            continue
        if rec["sys_flag"] & TX_MASK in (TX_PREPARED, TX_ROLLBACK):
            continue
        assert rec["queue_offset"] == len(out), "queue offsets in the log are not a gap-free run"
        tags = rec["properties"].get("TAGS")
        out.append((rec["offset"], rec["total_size"], java_hash(tags) if tags else 0))
    return out


def check_queue(root, topic, qid, entries_per_file, expected_count=None) -> dict:
    """Assert the files of a queue hold exactly the expected entries; return the raw files."""
    got, raw = read_queue_files(root, topic, qid, entries_per_file)
    want = expected_entries(root, topic, qid)
    if expected_count is not None:
        assert len(want) == expected_count
    assert got == want
    assert len(raw) == max(1, math.ceil(len(want) / entries_per_file))
    return raw


def wait_dispatched(store, timeout=5.0):
    deadline = time.monotonic() + timeout
    while store.dispatch_behind_bytes() != 0:
        assert time.monotonic() < deadline, "dispatch did not catch up"
        time.sleep(0.001)


def used_bytes(data: bytes) -> int:
    """End of the last non-zero 20-byte unit of a CQ file."""
    end = len(data)
    while end >= UNIT_SIZE and data[end - UNIT_SIZE:end] == bytes(UNIT_SIZE):
        end -= UNIT_SIZE
    return end


def snapshot_cq(root) -> dict:
    """``{relative path: bytes}`` of every consume-queue file."""
    base = os.path.join(root, "consumequeue")
    out = {}
    for dirpath, _dirs, files in os.walk(base):
        for name in files:
            p = os.path.join(dirpath, name)
            with open(p, "rb") as f:
                out[os.path.relpath(p, base)] = f.read()
    return out


# -- the format --------------------------------------------------------------------------------

ENTRIES = 16


def fill(store, rng, n_many=150) -> dict:
    """Put a mix of topics, queues and tags; return {(topic, qid): [(tags, put result)]}."""
    put = {}

    def one(topic, qid, tags):
        r = store.put_message(pymq.Message(topic, b"b%d" % rng.randrange(10**6), tags=tags, queue_id=qid))
        assert r.status is pymq.PutMessageStatus.PUT_OK
        put.setdefault((topic, qid), []).append((tags, r))

    tag_pool = FIXED_TAGS + [random_tag(rng) for _ in range(30)]
    for i in range(n_many):                       # "Many": ~10 CQ files
        one("Many", 3, tag_pool[i % len(tag_pool)])
        if i % 3 == 0:
            one("Other", rng.randrange(4), rng.choice(tag_pool))
        if i % 5 == 0:
            one("Other_2", 0, rng.choice(tag_pool))
    for tags in FIXED_TAGS + [""]:                # one full pass of the fixed tags
        one("Tagged", 1, tags)
    return put


def test_entries_are_rocketmq_units_of_the_commit_log_records(tmp_path):
    rng = random.Random(7)
    root = str(tmp_path / "store")
    store = pymq.MessageStore(root, small_config(consume_queue_entries=ENTRIES)).start()
    try:
        put = fill(store, rng)
        wait_dispatched(store)
        # while running: the mapped files are already RocketMQ's (shared mappings)
        for (topic, qid), items in put.items():
            check_queue(root, topic, qid, ENTRIES, expected_count=len(items))
    finally:
        store.shutdown()
    assert os.path.isdir(os.path.join(root, "consumequeue", "Many", "3"))
    assert sorted(os.listdir(os.path.join(root, "consumequeue"))) == ["Many", "Other", "Other_2", "Tagged"]
    for (topic, qid), items in put.items():
        check_queue(root, topic, qid, ENTRIES, expected_count=len(items))
        got, _ = read_queue_files(root, topic, qid, ENTRIES)
        for i, ((tags, r), (off, size, code)) in enumerate(zip(items, got)):
            # the put results agree with the files too
            assert r.queue_offset == i
            assert off == r.commitlog_offset and size == r.wrote_bytes
            assert code == (java_hash(tags) if tags else 0), tags
    assert len(os.listdir(cq_dir(root, "Many", 3))) == math.ceil(150 / ENTRIES) >= 5


def test_tags_code_vectors_in_the_files(tmp_path):
    root = str(tmp_path / "store")
    vectors = [("TagA", 2598919), ("TAG1", 2567159), ("Aa", 2112), ("BB", 2112),
               ("\u4E2D\u6587", 646394), ("\U0001F600", 1772899), ("emoji\U0001F680key", 1939299606),
               ("polygenelubricants", -2147483648), (None, 0), ("", 0)]
    with pymq.MessageStore(root, small_config(consume_queue_entries=ENTRIES)) as store:
        for tags, _ in vectors:
            store.put_message(pymq.Message("Vec", b"v", tags=tags))
        wait_dispatched(store)
    got, raw = read_queue_files(root, "Vec", 0, ENTRIES)
    assert [code for _, _, code in got] == [code for _, code in vectors]
    # "TagA": the spec's sample tagsCode bytes, and a negative hash is sign-extended
    first = raw["0" * 20]
    assert first[12:20] == bytes.fromhex("000000000027A807")
    assert first[7 * 20 + 12:7 * 20 + 20] == bytes.fromhex("FFFFFFFF80000000")


def test_transaction_types(tmp_path):
    """Prepared (0x4) and rollback (0xC) records get no entry and no queue offset; commit
    (0x8) and normal ones do (STORE_SPEC 1.9 step 5, 5 dispatcher 1)."""
    root = str(tmp_path / "store")
    kinds = [0, TX_PREPARED, 0, TX_ROLLBACK, TX_COMMIT, TX_PREPARED, TX_PREPARED, TX_COMMIT, 0,
             TX_ROLLBACK] * 4
    results = []
    with pymq.MessageStore(root, small_config(consume_queue_entries=ENTRIES)) as store:
        for i, k in enumerate(kinds):
            r = store.put_message(pymq.Message("Tx", b"tx%d" % i, tags="T%d" % k, sys_flag=k))
            assert r.status is pymq.PutMessageStatus.PUT_OK
            results.append((k, r))
        wait_dispatched(store)
        counted = [r for k, r in results if k in (0, TX_COMMIT)]
        assert store.get_max_offset_in_queue("Tx", 0) == len(counted) == 20
        g = store.get_message("g", "Tx", 0, 0, 32)
        got = [m.body for m in g.messages]
        assert got[:ENTRIES] == [b"tx%d" % i for i, (k, _) in enumerate(results) if k in (0, TX_COMMIT)][:ENTRIES]
    next_offset = 0
    for k, r in results:
        if k in (TX_PREPARED, TX_ROLLBACK):
            assert r.queue_offset == 0
        else:
            assert r.queue_offset == next_offset
            next_offset += 1
    check_queue(root, "Tx", 0, ENTRIES, expected_count=20)
    got, _ = read_queue_files(root, "Tx", 0, ENTRIES)
    assert [off for off, _, _ in got] == [r.commitlog_offset for r in counted]
    # the log itself: prepared/rollback records carry queue offset 0
    recs = [r for r in walk_commitlog(os.path.join(root, "commitlog")) if not r["blank"]]
    assert [r["sys_flag"] & TX_MASK for r in recs] == kinds
    assert all(r["queue_offset"] == 0 for r in recs if r["sys_flag"] & TX_MASK in (TX_PREPARED, TX_ROLLBACK))


# -- reopen, rebuild, recovery -------------------------------------------------------------------

def put_many(store, topic, qid, n, tag_fn=lambda i: "Tag%d" % (i % 5)):
    rs = []
    for i in range(n):
        r = store.put_message(pymq.Message(topic, b"%s-%d-%d" % (topic.encode(), qid, i), tags=tag_fn(i),
                                           queue_id=qid))
        assert r.status is pymq.PutMessageStatus.PUT_OK
        rs.append(r)
    return rs


def interleaved(store, n=60):
    """Two topics, three queues, interleaved in the log, with transactions mixed in."""
    for i in range(n):
        put_many(store, "A", i % 2, 1)
        if i % 4 == 0:
            store.put_message(pymq.Message("A", b"prep", tags="P", sys_flag=TX_PREPARED))
        put_many(store, "B", 0, 1, tag_fn=lambda _i: None if i % 3 else "\u6D88\u606F")


def cq_config():
    return small_config(consume_queue_entries=ENTRIES)


def test_reopen_keeps_the_files_and_continues_the_offsets(tmp_path):
    root = str(tmp_path / "store")
    with pymq.MessageStore(root, cq_config()) as store:
        interleaved(store)
        wait_dispatched(store)
        maxima = {q: store.get_max_offset_in_queue(*q) for q in [("A", 0), ("A", 1), ("B", 0)]}
    before = snapshot_cq(root)
    assert before
    with pymq.MessageStore(root, cq_config()) as store:
        assert snapshot_cq(root) == before
        for (topic, qid), mx in maxima.items():
            assert store.get_max_offset_in_queue(topic, qid) == mx
            rs = put_many(store, topic, qid, 3)
            assert [r.queue_offset for r in rs] == [mx, mx + 1, mx + 2]
        wait_dispatched(store)
    after = snapshot_cq(root)
    for path, data in before.items():
        # old entries untouched; new ones appended behind them
        n = used_bytes(data)
        assert after[path][:n] == data[:n], path
    for topic, qid in maxima:
        check_queue(root, topic, qid, ENTRIES, expected_count=maxima[(topic, qid)] + 3)


def test_deleted_consume_queues_are_rebuilt_identically(tmp_path):
    """All CQ files gone while closed: opening replays the whole commit log (dispatch
    replay) and produces the same bytes."""
    root = str(tmp_path / "store")
    with pymq.MessageStore(root, cq_config()) as store:
        interleaved(store, 80)
        put_many(store, "Many", 0, 200)
        wait_dispatched(store)
    before = snapshot_cq(root)
    shutil.rmtree(os.path.join(root, "consumequeue"))
    with pymq.MessageStore(root, cq_config()) as store:
        assert store.get_max_offset_in_queue("Many", 0) == 200
        rs = put_many(store, "A", 1, 1)
        assert rs[0].queue_offset == 40          # 80 messages over A/0 and A/1
    after = snapshot_cq(root)
    assert set(after) == set(before)
    for path, data in before.items():
        if path.startswith(os.path.join("A", "1")):
            continue
        assert after[path] == data, path
    check_queue(root, "A", 1, ENTRIES, expected_count=41)


def test_deleted_queue_of_the_newest_records_is_rebuilt(tmp_path):
    """One queue's directory gone while closed. The reput starts at the largest physical
    end any remaining queue points at (STORE_SPEC 5, "Starting offset"), so a queue whose
    records are the newest in the log is rebuilt in full."""
    root = str(tmp_path / "store")
    with pymq.MessageStore(root, cq_config()) as store:
        interleaved(store, 40)
        put_many(store, "Last", 2, 70)
        wait_dispatched(store)
    before = snapshot_cq(root)
    shutil.rmtree(cq_dir(root, "Last", 2))
    with pymq.MessageStore(root, cq_config()) as store:
        assert store.get_max_offset_in_queue("Last", 2) == 70
        assert store.get_min_offset_in_queue("Last", 2) == 0
        assert snapshot_cq(root) == before
        assert put_many(store, "Last", 2, 1)[0].queue_offset == 70
    check_queue(root, "Last", 2, ENTRIES, expected_count=71)


def _damage(path_dir, how):
    names = sorted(os.listdir(path_dir))
    last = os.path.join(path_dir, names[-1])
    with open(last, "r+b") as f:
        data = bytearray(f.read())
        used = used_bytes(bytes(data))
        assert used >= 3 * UNIT_SIZE
        if how == "zero_last_entries":
            data[used - 3 * UNIT_SIZE:used] = bytes(3 * UNIT_SIZE)
        elif how == "zero_mid_entry":
            cut = used - 2 * UNIT_SIZE + 9            # in the middle of the second-last entry
            data[cut:] = bytes(len(data) - cut)
        elif how == "cut_mid_entry":
            cut = used - 2 * UNIT_SIZE + 9
            f.truncate(cut)
            return
        f.seek(0)
        f.write(data)


@pytest.mark.parametrize("how", ["zero_last_entries", "zero_mid_entry", "cut_mid_entry"])
def test_damaged_consume_queue_tail_is_recovered(tmp_path, how):
    """The last CQ file of the newest queue loses its tail while the store is closed:
    recovery cuts at the last whole entry and the replay of the log restores the rest."""
    root = str(tmp_path / "store")
    with pymq.MessageStore(root, cq_config()) as store:
        interleaved(store, 20)
        put_many(store, "Tail", 0, 2 * ENTRIES + 7)   # last file holds 7 entries
        wait_dispatched(store)
    before = snapshot_cq(root)
    _damage(cq_dir(root, "Tail", 0), how)
    with pymq.MessageStore(root, cq_config()) as store:
        assert store.get_max_offset_in_queue("Tail", 0) == 2 * ENTRIES + 7
        g = store.get_message("g", "Tail", 0, 2 * ENTRIES, 32)
        assert [m.body for m in g.messages] == [b"Tail-0-%d" % i for i in range(2 * ENTRIES, 2 * ENTRIES + 7)]
        assert snapshot_cq(root) == before
        assert put_many(store, "Tail", 0, 1)[0].queue_offset == 2 * ENTRIES + 7
        assert put_many(store, "A", 0, 1)[0].queue_offset == 10
    check_queue(root, "Tail", 0, ENTRIES, expected_count=2 * ENTRIES + 8)


def test_damaged_tail_of_an_older_queue_after_a_crash(tmp_path):
    """After an abnormal exit (``abort`` left behind) RocketMQ's recoverAbnormally
    re-dispatches the commit log from the checkpoint's file (STORE_SPEC 8.3), and
    ``putMessagePositionInfo`` is idempotent per queue (3.2 step 1), so a queue that lost
    the tail of its CQ gets it back even when other queues point further into the log.
    Without that, the queue's max offset falls back and new puts reuse queue offsets that
    records in the log already carry."""
    root = str(tmp_path / "store")
    with pymq.MessageStore(root, cq_config()) as store:
        put_many(store, "Old", 0, ENTRIES + 6)
        put_many(store, "New", 0, 5)
        wait_dispatched(store)
    before = snapshot_cq(root)
    _damage(cq_dir(root, "Old", 0), "zero_last_entries")
    open(os.path.join(root, "abort"), "wb").close()        # as if the process had crashed
    with pymq.MessageStore(root, cq_config()) as store:
        assert store.get_max_offset_in_queue("Old", 0) == ENTRIES + 6
        assert snapshot_cq(root) == before
        assert put_many(store, "Old", 0, 1)[0].queue_offset == ENTRIES + 6
    check_queue(root, "Old", 0, ENTRIES, expected_count=ENTRIES + 7)
