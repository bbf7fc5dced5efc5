"""SIGKILL a process in the middle of puts, pops, acks, changes of invisible time and
state snapshots under SYNC_FLUSH, at random moments (30 kills). After each kill a copy of the store is
opened with the clock hours ahead and drained: every message the child saw acked stays
acked (never delivered again), every other message comes back (those whose ack was in
flight at the kill may go either way), none twice."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time

import pymq

try:
    from . import pop_testlib as lib
except ImportError:
    import pop_testlib as lib

KILLS = 30
HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r"""
import random, sys
sys.path.insert(0, sys.argv[1])
import pymq, pop_testlib as lib
path, seed, tag = sys.argv[2], int(sys.argv[3]), sys.argv[4]
b = lib.open_broker(path, config=lib.small_config(flush_disk_type="SYNC_FLUSH"))
rnd = random.Random(seed)
c = pymq.SimpleConsumer(b, "g", "K")
out = sys.stdout
print("READY", flush=True)
i = 0
while True:
    if rnd.random() < 0.3:
        for _ in range(5):
            b.put_message(pymq.Message("K", f"{tag}-{i}".encode(), queue_id=i % 2))
            i += 1
    for m in c.receive(8, 3600):
        body = m.body.decode()
        x = rnd.random()
        if x < 0.6:
            out.write(f"ACKING {body}\n"); out.flush()
            c.ack(m)
            out.write(f"ACKED {body}\n"); out.flush()
        elif x < 0.7:
            c.change_invisible_duration(m, 7200)
    if rnd.random() < 0.05:
        b.pop_service.persist_snapshot()      # killed in the middle of one now and then
"""


def all_bodies(b, topic):
    out = []
    for q in b.get_topics().get(topic, []):
        off = b.get_min_offset_in_queue(topic, q)
        while True:
            r = b.get_message("x", topic, q, off, 32)
            if r.status is not pymq.GetMessageStatus.FOUND:
                break
            out.extend(m.body.decode() for m in r.messages)
            off = r.next_begin_offset
    return set(out)


def check(copy, acked, doubt):
    clock = lib.FakeClock(time.time_ns() // 1_000_000 + 10 * 3600_000)
    b = lib.open_broker(copy, clock)
    try:
        lib.wait_dispatched(b)
        every = all_bodies(b, "K")
        got = []
        while True:
            msgs = b.pop_message("g", "K", 64, 1000).messages
            if not msgs:
                break
            got.extend(m.body.decode() for m in msgs)
        assert len(got) == len(set(got)), "a message delivered twice within its invisible time"
        assert not set(got) & acked, f"acked messages came back: {sorted(set(got) & acked)[:5]}"
        lost = every - acked - doubt - set(got)
        assert not lost, f"un-acked messages did not come back: {sorted(lost)[:5]}"
        return len(every), len(got)
    finally:
        b.shutdown()


def test_sigkill_during_pops_and_acks(tmp_path):
    path = str(tmp_path / "store")
    b = lib.open_broker(path, config=lib.small_config(flush_disk_type="SYNC_FLUSH"))
    for i in range(200):
        b.put_message(pymq.Message("K", f"init-{i}".encode(), queue_id=i % 2))
    b.shutdown()
    rnd = random.Random(12)
    acked: set = set()
    doubt: set = set()
    total_acked_lines = 0
    for k in range(KILLS):
        p = subprocess.Popen([sys.executable, "-c", CHILD, HERE, path, str(k), f"r{k}"],
                             stdout=subprocess.PIPE, text=True)
        lines: list = []
        reader = threading.Thread(target=lambda: lines.extend(p.stdout), daemon=True)
        first = p.stdout.readline()
        assert first.strip() == "READY", first
        reader.start()
        time.sleep(rnd.uniform(0.02, 0.3))
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        reader.join(10)
        acking = {ln.split(" ", 1)[1].strip() for ln in lines if ln.startswith("ACKING ")}
        done = {ln.split(" ", 1)[1].strip() for ln in lines if ln.startswith("ACKED ")}
        total_acked_lines += len(done)
        acked |= done
        doubt |= acking - done
        copy = str(tmp_path / f"check{k}")
        shutil.copytree(path, copy)
        check(copy, acked, doubt)
        shutil.rmtree(copy)
    assert total_acked_lines > KILLS, "the children acked too little to test anything"
    print(f"{KILLS} kills: {len(acked)} acked, {len(doubt)} in doubt")
