"""Crash recovery under fire: a writer subprocess SIGKILLed at random moments (issue 6).

``pymq.testing.WriterProcess`` puts messages (topic ``KillTest``, body ``m<i>``, key
``k<i>``, queue ``i % 3``) as fast as it can, single puts or batches (``put_messages`` or
``put_bodies``), and logs the commit-log offset of every put acknowledged ``PUT_OK``. The test kills it with SIGKILL
after a random number of acknowledgements and a random short sleep (sometimes while it is
still starting up, i.e. while it is recovering from the previous kill), 12 times in
ASYNC_FLUSH and 12 times in SYNC_FLUSH, with segments, consume-queue files and index
files small enough to roll all the time. After every kill the store is reopened here and:

* every acknowledged put (of every round so far) is in the log at its offset, with the
  body, key, topic and queue the writer gave it;
* the log, walked independently (``rocketmq_decoder``) up to the recovered end, holds only
  whole records, and per queue their queue offsets run 0, 1, 2, ... without gaps;
* each consume queue, read byte by byte from its files, has exactly one entry per record
  of its queue, pointing at that record (offset and size), nothing past the log's end;
  ``StoreChecker`` agrees;
* the index finds every acknowledged key (``query_message("KillTest", "k<i>")``) and its
  unique key, and nothing else;
* writing continues: a put into each queue gets the next queue offset, is dispatched,
  read back and found by key; those puts must survive every later kill too.

A SIGKILL leaves the page cache intact, so in both flush modes nothing acknowledged may be
lost. The RNG seed is printed (``PYMQ_CRASH_SEED=<seed>`` reruns a failure).
"""

from __future__ import annotations

import os
import random
import struct
import time

import pytest
import rocketmq_decoder as rd

import pymq
from pymq import testing
from pymq.checker import StoreChecker

TOPIC = "KillTest"
QUEUES = 3
ROUNDS_PER_MODE = 12

SIZES = {
    "commitlog_file_size": 8 * 1024,   # ~50 records per segment: rolls every few ms
    "consume_queue_entries": 16,
    "index_hash_slots": 32,
    "index_max_entries": 128,          # ~60 messages per index file (key + unique key)
    "flush_interval_commitlog": 20,
    "warm_mapped_file_enable": False,
}


def _seed() -> int:
    env = os.environ.get("PYMQ_CRASH_SEED")
    return int(env) if env else random.SystemRandom().randrange(1 << 32)


def _wait_dispatched(store, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while store.dispatch_behind_bytes():
        assert time.monotonic() < deadline, "the dispatcher did not catch up"
        time.sleep(0.002)


def _log_records(root: str, min_offset: int, max_offset: int) -> tuple[list[dict], int]:
    """Every record of the commit log in [min_offset, max_offset), decoded independently
    (blanks crossed, nothing read past the recovered end), and where the walk ended."""
    out = []
    reach = max(min_offset, 0)                 # an empty log begins (and ends) at 0
    if not os.path.isdir(os.path.join(root, "commitlog")):
        return out, reach                      # killed before the first segment was made
    for start, path in rd.segment_files(os.path.join(root, "commitlog")):
        if start + SIZES["commitlog_file_size"] <= min_offset or start >= max_offset:
            continue
        with open(path, "rb") as f:
            data = f.read()
        pos = max(0, min_offset - start)
        limit = min(len(data), max_offset - start)
        buf = data[:limit]
        while pos < limit:
            rec = rd.decode_record(buf, pos)      # DecodeError: not a whole record
            if rec["blank"]:
                reach = start + len(data)
                break
            rec["offset"] = start + pos
            out.append(rec)
            pos += rec["total_size"]
            reach = start + pos
    return out, reach


def _cq_entries(root: str, topic: str, queue_id: int, count: int, entries_per_file: int) -> list[tuple]:
    """Entries 0..count-1 of a consume queue, read with struct from its files."""
    d = os.path.join(root, "consumequeue", topic, str(queue_id))
    file_size = entries_per_file * 20
    out = []
    cache: dict[int, bytes] = {}
    for i in range(count):
        start = (i * 20) // file_size * file_size
        if start not in cache:
            with open(os.path.join(d, f"{start:020d}"), "rb") as f:
                cache[start] = f.read()
        out.append(struct.unpack_from(">qiq", cache[start], i * 20 - start))
    return out


def _index_of(m) -> int:
    assert m.body[:1] == b"m", m.body
    return int(m.body[1:])


def _verify(root: str, cfg: pymq.StoreConfig, acked: list[int], extra: dict, ctx: str, tag: str, rng) -> None:
    """Reopen the killed store, check everything, put one message per queue, shut down."""
    store = pymq.MessageStore(root, cfg)
    try:
        max_phy = store.get_max_phy_offset()
        min_phy = store.get_min_phy_offset()

        # 1. every acknowledged put is there, as the writer made it
        by_index = {}
        for off in acked:
            m = store.look_message_by_offset(off)
            assert m is not None, f"{ctx}: acknowledged offset {off} lost (log end {max_phy})"
            i = _index_of(m)
            assert m.topic == TOPIC and m.keys == [f"k{i}"] and m.queue_id == i % QUEUES, (ctx, off, m)
            assert m.commitlog_offset == off
            assert off + m.store_size <= max_phy
            by_index[i] = (off, m)
        for off, (qid, body) in extra.items():
            m = store.look_message_by_offset(off)
            assert m is not None and m.body == body and m.queue_id == qid, f"{ctx}: post-recovery put at {off} lost"

        # 2. the log up to its recovered end: whole records, gap-free queue offsets
        recs, reach = _log_records(root, min_phy, max_phy)
        assert reach == max_phy, f"{ctx}: the log's records end at {reach}, the store says {max_phy}"
        offsets = {r["offset"] for r in recs}
        assert offsets >= set(acked) | set(extra), ctx
        per_queue: dict[int, list[dict]] = {}
        for r in recs:
            assert r["topic"] == TOPIC, (ctx, r["offset"], r["topic"])
            per_queue.setdefault(r["queue_id"], []).append(r)
        for qid, rs in per_queue.items():
            assert [r["queue_offset"] for r in rs] == list(range(len(rs))), \
                f"{ctx}: queue {qid} offsets in the log are not 0..{len(rs) - 1}"

        # 3. consume queues: one entry per record of the queue, pointing at it
        for qid in range(QUEUES):
            rs = per_queue.get(qid, [])
            assert store.get_min_offset_in_queue(TOPIC, qid) == 0
            assert store.get_max_offset_in_queue(TOPIC, qid) == len(rs), \
                f"{ctx}: queue {qid} max {store.get_max_offset_in_queue(TOPIC, qid)}, log has {len(rs)}"
            units = _cq_entries(root, TOPIC, qid, len(rs), cfg.consume_queue_entries)
            for i, ((phy, size, _tags), r) in enumerate(zip(units, rs)):
                assert (phy, size) == (r["offset"], r["total_size"]), f"{ctx}: {TOPIC}/{qid} entry {i}"
                assert phy + size <= max_phy
            # and the pull path sees the same, a page at a time
            pulled, off = [], 0
            while off < len(rs):
                g = store.get_message("g", TOPIC, qid, off, 32)
                assert g.status is pymq.GetMessageStatus.FOUND, (ctx, qid, off, g.status)
                pulled += [(m.queue_offset, m.commitlog_offset) for m in g.messages]
                off = g.next_begin_offset
            assert pulled == [(r["queue_offset"], r["offset"]) for r in rs], ctx
        report = StoreChecker(root, cfg).run()
        assert report.ok, f"{ctx}: StoreChecker: {report.problems[:5]}"

        # 4. the index: every acknowledged key, and some unique keys
        keys = sorted(by_index)
        for i in keys:
            off, m = by_index[i]
            got = [x.commitlog_offset for x in store.query_message(TOPIC, f"k{i}")]
            assert got == [off], f"{ctx}: query k{i} -> {got}, expected [{off}]"
        for i in rng.sample(keys, min(50, len(keys))):
            off, m = by_index[i]
            got = [x.commitlog_offset for x in store.query_message(TOPIC, m.uniq_key)]
            assert got == [off], f"{ctx}: unique key of k{i} -> {got}"

        # 5. writing continues where the queues end
        store.start()
        before = {q: store.get_max_offset_in_queue(TOPIC, q) for q in range(QUEUES)}
        for q in range(QUEUES):
            body = f"after-{tag}-{q}".encode()          # also its key
            r = store.put_message(pymq.Message(topic=TOPIC, body=body, keys=[body.decode()], queue_id=q))
            assert r.status is pymq.PutMessageStatus.PUT_OK, (ctx, r.status)
            assert r.queue_offset == before[q], f"{ctx}: queue {q} put got {r.queue_offset}, expected {before[q]}"
            assert r.commitlog_offset >= max_phy
            extra[r.commitlog_offset] = (q, body)
        _wait_dispatched(store)
        for off, (q, body) in list(extra.items())[-QUEUES:]:
            g = store.get_message("g", TOPIC, q, before[q], 1)
            assert [m.body for m in g.messages] == [body], ctx
            assert [m.commitlog_offset for m in store.query_message(TOPIC, body.decode())] == [off], ctx
    finally:
        store.shutdown()
    assert not os.path.exists(os.path.join(root, "abort")), "a clean shutdown leaves no abort marker"


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_sigkill_writer_loses_nothing_acknowledged(tmp_path, flush):
    seed = _seed()
    print(f"PYMQ_CRASH_SEED={seed} ({flush})")
    rng = random.Random(seed)
    root = str(tmp_path / "store")
    cfg_dict = dict(SIZES, flush_disk_type=flush)
    cfg = pymq.StoreConfig(**cfg_dict)
    extra: dict[int, tuple] = {}
    kills = 0
    acked: list[int] = []
    for rnd in range(ROUNDS_PER_MODE):
        batch = rng.choice([1, 1, 1, 2, 3, 4, 5, 6])      # <= 6: the writer's keys stay unique
        bodies = batch > 1 and rng.random() < 0.5          # the batch through put_bodies
        ctx = f"seed {seed} {flush} round {rnd} batch {batch}{' put_bodies' if bodies else ''}"
        with testing.WriterProcess(root, cfg_dict, start_index=(rnd + 1) * 1_000_000, batch=batch,
                                   bodies=bodies) as w:
            roll = rng.random()
            if roll < 0.15:
                # kill it while it starts up: importing, opening, recovering the last crash
                time.sleep(rng.uniform(0.0, 0.4))
            else:
                w.wait_for(len(acked) + rng.choice([1, 5, 30, 100, 300]))
                time.sleep(rng.uniform(0.0, 0.03))
            assert w.proc.poll() is None, f"{ctx}: writer died: {w.proc.stderr.read().decode()[-2000:]}"
            w.kill()
            kills += 1
            now = w.acknowledged()
        assert now[:len(acked)] == acked, ctx
        print(f"{ctx}: {len(now) - len(acked)} acknowledged puts before the kill")
        acked = now
        _verify(root, cfg, acked, extra, ctx, f"{flush}-{rnd}", rng)
    assert kills == ROUNDS_PER_MODE
    assert len(acked) > 100, "the writers acknowledged too little to mean anything"
