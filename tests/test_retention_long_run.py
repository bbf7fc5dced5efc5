"""A long run under retention (issue 11): disk usage stays bounded while ten times the
bound is written, with a consumer in the writer's process and a read-only reader in
another process reading throughout.

The writer puts ~5 MB/s of 1 KiB messages into 64 KiB segments with a reserved time of
half a second and a cleaning pass every 100 ms (about 3 MB live at any time). The store directory's allocated size is sampled
throughout and must stay under ``BOUND``; at least ``10 * BOUND`` bytes are written. The
consumer must see every queue's offsets strictly increase (it skips what was deleted
before it got there, via OFFSET_TOO_SMALL), the reader process must exit cleanly having
read messages all along, and no put may fail.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

from conftest import small_config

import pymq
from pymq import PutMessageStatus

BOUND = 6 * 1024 * 1024
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

READER = """
import sys, time
import pymq
from pymq import GetMessageStatus as S
store = pymq.MessageStore(sys.argv[1], read_only=True).start()
deadline = time.monotonic() + float(sys.argv[2])
seen = 0
positions = {}
while time.monotonic() < deadline:
    for q in store.get_topics().get("Run", []):
        off = positions.get(q, 0)
        g = store.get_message("r", "Run", q, off)
        if g.status is S.FOUND:
            for m in g.messages:
                assert m.body[:1] == b"m" and len(m.body) == 1024, m
            seen += len(g.messages)
        if g.next_begin_offset > off or g.status is S.OFFSET_TOO_SMALL:
            positions[q] = g.next_begin_offset
    time.sleep(0.001)
store.shutdown()
print(seen)
"""


def dir_bytes(path):
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def test_disk_usage_stays_bounded_under_retention(tmp_path):
    path = tmp_path / "store"
    hour = time.localtime().tm_hour
    cfg = small_config(file_reserved_time=0.5 / 3600, clean_resource_interval=100,
                       delete_when="%02d;%02d" % (hour, (hour + 1) % 24),
                       delete_commitlog_files_interval=0, delete_consume_queue_files_interval=0,
                       delete_files_batch_max=100, consume_queue_entries=1024)
    store = pymq.MessageStore(path, cfg).start()
    stop = threading.Event()
    samples, errors, consumed = [], [], []
    written = [0]

    def writer():
        body = b"m" + b"x" * 1023
        t0 = time.monotonic()
        i = 0
        while written[0] < 11 * BOUND:
            r = store.put_message(pymq.Message(topic="Run", body=body, queue_id=i % 4))
            if r.status is not PutMessageStatus.PUT_OK:
                errors.append(r)
                return
            written[0] += r.wrote_bytes
            i += 1
            ahead = written[0] / 5e6 - (time.monotonic() - t0)    # ~5 MB/s
            if ahead > 0:
                time.sleep(ahead)

    def consume():
        c = pymq.Consumer(store, "g", "Run")
        last = {}
        while not stop.is_set():
            for m in c.poll(0.05):
                if m.queue_offset <= last.get(m.queue_id, -1):
                    errors.append(("offset went back", m.queue_id, m.queue_offset))
                last[m.queue_id] = m.queue_offset
                consumed.append(1)
            c.commit()

    def sample():
        while not stop.is_set():
            samples.append(dir_bytes(path))
            time.sleep(0.05)

    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    w = threading.Thread(target=writer)
    threads = [threading.Thread(target=consume), threading.Thread(target=sample)]
    reader = None
    try:
        w.start()
        for t in threads:
            t.start()
        time.sleep(0.3)                              # the store exists for the reader
        reader = subprocess.Popen([sys.executable, "-c", READER, str(path), "8"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=env)
        w.join(60)
        assert not w.is_alive()
        out, err = reader.communicate(timeout=60)
    finally:
        stop.set()
        for t in threads:
            t.join(10)
        store.shutdown()
        if reader is not None and reader.poll() is None:
            reader.kill()
    print(f"written {written[0] / 1e6:.1f} MB, directory at most {max(samples) / 1e6:.2f} MB "
          f"(bound {BOUND / 1e6:.2f} MB), consumed {len(consumed)}, reader read {out.strip()}")
    assert not errors, errors[:3]
    assert reader.returncode == 0, err
    assert int(out.strip()) > 1000                   # the reader process read all along
    assert written[0] >= 10 * BOUND
    assert len(consumed) > 1000
    assert samples and max(samples) < BOUND, (max(samples), BOUND)
