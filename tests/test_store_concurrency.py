"""Many threads putting into shared queues: the log stays whole and the queue offsets are
a gap-free run per queue, checked with the independent decoder."""

from __future__ import annotations

import os
import random
import threading

import pymq

from conftest import small_config
from rocketmq_decoder import walk_commitlog

THREADS = 8
TOTAL = 100_000
PER_THREAD = TOTAL // THREADS
QUEUES = 4
TOPIC = "Concurrent"
BIG = 40 * 1024                 # > 32 KiB: copied and CRC'd with the GIL released
FILE_SIZE = 1 << 20


def body_of(tid: int, seq: int, big: bool) -> bytes:
    head = b"t%d-s%d|" % (tid, seq)
    if big:
        return head + bytes([(tid * 31 + seq) & 0xFF]) * (BIG - len(head))
    return head + b"." * ((tid * 7 + seq) % 64)


def parse_body(body: bytes):
    head = body[:body.index(b"|")]
    t, s = head.split(b"-")
    return int(t[1:]), int(s[1:])


def worker(store, tid, results, errors, barrier):
    rng = random.Random(tid)
    mine = []                   # (seq, queue_id, commitlog_offset, queue_offset)
    try:
        barrier.wait()
        seq = 0
        use_batches = tid % 2 == 1
        while seq < PER_THREAD:
            qid = rng.randrange(QUEUES)
            if use_batches and rng.random() < 0.5:
                n = min(rng.randrange(2, 33), PER_THREAD - seq)
                bodies = [body_of(tid, seq + i, False) for i in range(n)]
                r = store.put_messages([pymq.Message(topic=TOPIC, body=b, queue_id=qid, tags=f"t{tid}")
                                        for b in bodies])
                assert r.status is pymq.PutMessageStatus.PUT_OK, r
                assert r.msg_num == n
                for i, off in enumerate(r.commitlog_offsets):
                    mine.append((seq + i, qid, off, r.queue_offset + i))
                seq += n
            else:
                big = rng.random() < 0.0025
                r = store.put_message(pymq.Message(topic=TOPIC, body=body_of(tid, seq, big), queue_id=qid,
                                                   tags=f"t{tid}", keys=[f"k{tid}-{seq}"]))
                assert r.status is pymq.PutMessageStatus.PUT_OK, r
                mine.append((seq, qid, r.commitlog_offset, r.queue_offset))
                seq += 1
    except BaseException as e:          # reported by the main thread
        errors.append((tid, e))
    results[tid] = mine


def test_concurrent_puts_into_shared_queues(tmp_path):
    path = tmp_path / "store"
    store = pymq.MessageStore(path, small_config(commitlog_file_size=FILE_SIZE))
    store.start()
    results = [None] * THREADS
    errors = []
    barrier = threading.Barrier(THREADS)
    threads = [threading.Thread(target=worker, args=(store, t, results, errors, barrier)) for t in range(THREADS)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads), "a putting thread hung"
        assert not errors, errors
        max_offset = store.get_max_phy_offset()
        table = store.get_queue_offset_table()
    finally:
        store.shutdown()

    records = walk_commitlog(os.path.join(path, "commitlog"))   # raises on a torn record
    msgs = [r for r in records if not r["blank"]]
    assert len(msgs) == TOTAL
    assert msgs[-1]["offset"] + msgs[-1]["total_size"] == max_offset
    bigs = 0
    by_queue = {}
    where = {}
    for rec in msgs:
        assert rec["physical_offset"] == rec["offset"]
        assert rec["topic"] == TOPIC
        tid, seq = parse_body(rec["body"])
        big = len(rec["body"]) == BIG
        bigs += big
        assert rec["body"] == body_of(tid, seq, big), (tid, seq)      # no torn or mixed body
        assert rec["properties"]["TAGS"] == f"t{tid}"
        assert (tid, seq) not in where, f"message {(tid, seq)} stored twice"
        where[(tid, seq)] = rec
        by_queue.setdefault(rec["queue_id"], []).append(rec["queue_offset"])
    assert bigs > 0, "no big body was put"
    # every (topic, queue): offsets 0..n-1 in log order, no gap, no duplicate
    assert set(by_queue) <= set(range(QUEUES))
    for qid, offs in by_queue.items():
        assert offs == list(range(len(offs))), f"queue {qid}"
        assert table[(TOPIC, qid)] == len(offs)
    # every message put is there exactly once, where the put said, in its thread's order
    assert len(where) == TOTAL
    for tid, mine in enumerate(results):
        assert len(mine) == PER_THREAD
        last = -1
        for seq, qid, off, qoff in mine:
            rec = where[(tid, seq)]
            assert (rec["offset"], rec["queue_id"], rec["queue_offset"]) == (off, qid, qoff)
            assert off > last, f"thread {tid}: message {seq} stored before its predecessor"
            last = off
