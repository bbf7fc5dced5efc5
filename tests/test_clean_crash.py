"""SIGKILL while cleaning deletes files (issue 11): 20 kills, a consistent store each time.

A child process writes to a store with tiny files and runs cleaning passes back to back
(a reserved time of 50 ms), so segments, queue files and index files are being deleted
when the SIGKILL lands. After every kill the parent reopens (recovers) the store and checks that
every queue reads from its minimum on without a gap, that the last acknowledged put of the
child survived, and that writing continues; then, shut down, that the commit log, the
queues and the index agree (``StoreChecker``).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pymq
from pymq import GetMessageStatus, PutMessageStatus
from pymq.checker import StoreChecker

ROUNDS = 20
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CONFIG = dict(commitlog_file_size=8 * 1024, consume_queue_entries=16, index_hash_slots=32,
              index_max_entries=64, file_reserved_time=0.05 / 3600, clean_resource_interval=5,
              delete_commitlog_files_interval=0, delete_consume_queue_files_interval=0,
              flush_interval_commitlog=20, delete_when="00", warm_mapped_file_enable=False)

CHILD = """
import sys, time
import pymq
store = pymq.MessageStore(sys.argv[1], pymq.StoreConfig(**{config!r})).start()
i = 0
while True:
    for _ in range(40):
        r = store.put_message(pymq.Message(topic="C", body=b"m%d" % i + b"x" * 100, keys=["k%d" % i],
                                           queue_id=i % 3))
        if r.status is pymq.PutMessageStatus.PUT_OK:
            print("ack", r.commitlog_offset, flush=True)
        i += 1
    out = store.delete_expired_files()
    if out["commitlog"]:
        print("cleaned", out["commitlog"], flush=True)
"""


def _run_child(path, rng):
    code = CHILD.format(config=CONFIG)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True, env=env)
    last_ack = -1
    cleaned = 0
    deadline = time.monotonic() + 20
    try:
        for line in p.stdout:
            kind, value = line.split()
            if kind == "ack":
                last_ack = int(value)
            else:
                cleaned += 1
                if cleaned >= 2 and rng.random() < 0.5:
                    time.sleep(rng.random() * 0.01)     # land somewhere in the next deletions
                    break
            if time.monotonic() > deadline:
                break
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
        # what the child printed before the kill and the loop did not read: its last ack may
        # be there, with cleanings that deleted the segment of the last ack read above
        for line in p.stdout:
            parts = line.split()
            if len(parts) != 2 or not line.endswith("\n"):
                continue                        # cut by the kill
            if parts[0] == "ack":
                last_ack = int(parts[1])
            else:
                cleaned += 1
        p.stdout.close()
    assert cleaned >= 1, "the child never cleaned"
    return last_ack


def _check(path, last_ack):
    with pymq.MessageStore(path, pymq.StoreConfig(**CONFIG)) as store:
        assert store.get_min_phy_offset() <= last_ack
        m = store.look_message_by_offset(last_ack)
        assert m is not None and m.topic == "C"
        for q in range(3):
            lo, hi = store.get_min_offset_in_queue("C", q), store.get_max_offset_in_queue("C", q)
            assert lo <= hi
            off, seen = lo, 0
            while off < hi:
                g = store.get_message("g", "C", q, off)
                assert g.status is GetMessageStatus.FOUND, (q, off, lo, hi, g)
                for k, msg in enumerate(g.messages):
                    assert msg.queue_offset == off + k and msg.queue_id == q
                seen += len(g.messages)
                off = g.next_begin_offset
            assert seen == hi - lo
        r = store.put_message(pymq.Message(topic="C", body=b"after", queue_id=1))
        assert r.status is PutMessageStatus.PUT_OK
        assert r.queue_offset == store.get_max_offset_in_queue("C", 1) or store.dispatch_behind_bytes()
    report = StoreChecker(str(path)).run()          # recovered and shut down cleanly
    assert report.ok, report.problems[:5]


def test_sigkill_during_cleaning_reopens_consistent(tmp_path):
    seed = int(os.environ.get("PYMQ_CRASH_SEED", random.SystemRandom().randrange(1 << 30)))
    print(f"PYMQ_CRASH_SEED={seed}")
    rng = random.Random(seed)
    path = tmp_path / "store"
    for _ in range(ROUNDS):
        last_ack = _run_child(path, rng)
        _check(path, last_ack)
