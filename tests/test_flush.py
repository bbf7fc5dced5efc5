"""Flushing: SYNC_FLUSH acknowledges only what is on disk (or says FLUSH_DISK_TIMEOUT);
ASYNC_FLUSH catches up in the background; shutdown flushes everything; the abort marker
exists exactly while the store runs."""

from __future__ import annotations

import os
import threading
import time

import pymq
from pymq import PutMessageStatus as S

from conftest import small_config
from rocketmq_decoder import walk_commitlog

FILE_SIZE = 64 * 1024


def mfq_of(store):
    return store.commit_log.mapped_file_queue


def test_sync_flush_put_returns_after_the_record_is_flushed(tmp_path):
    with pymq.MessageStore(tmp_path / "store", small_config(flush_disk_type="SYNC_FLUSH")) as store:
        mfq = mfq_of(store)
        for i in range(300):            # crosses segments: ~1.4 KiB each, 64 KiB files
            body = b"%d" % i + b"s" * (i * 37 % 2800)
            if i % 10 == 9:
                r = store.put_messages([pymq.Message(topic="Sync", body=body), pymq.Message(topic="Sync", body=b"b")])
            else:
                r = store.put_message(pymq.Message(topic="Sync", body=body))
            assert r.status is S.PUT_OK, r
            assert mfq.flushed_where >= r.commitlog_offset + r.wrote_bytes, (i, mfq.flushed_where, r)
        assert store.get_max_phy_offset() > 4 * FILE_SIZE
        assert mfq.flushed_where == store.get_max_phy_offset()


def test_sync_flush_concurrent_puts_all_ok(tmp_path):
    with pymq.MessageStore(tmp_path / "store", small_config(flush_disk_type="SYNC_FLUSH")) as store:
        mfq = mfq_of(store)
        results = {}
        errors = []

        def work(tid):
            try:
                out = []
                for i in range(150):
                    r = store.put_message(pymq.Message(topic="Sync", body=b"t%d-%d" % (tid, i) + b"x" * 500,
                                                       queue_id=tid % 3))
                    out.append((r.status, r.commitlog_offset + r.wrote_bytes, mfq.flushed_where))
                results[tid] = out
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors
        assert len(results) == 6
        for tid, out in results.items():
            for status, end, flushed_after in out:
                assert status is S.PUT_OK, (tid, status)
                assert flushed_after >= end
        assert mfq.flushed_where == store.get_max_phy_offset()
        table = store.get_queue_offset_table()
        assert sum(table.values()) == 6 * 150


def test_sync_flush_timeout_when_the_disk_is_slow(tmp_path, monkeypatch):
    cfg = small_config(flush_disk_type="SYNC_FLUSH", sync_flush_timeout=50)
    with pymq.MessageStore(tmp_path / "store", cfg) as store:
        ok = store.put_message(pymq.Message(topic="Slow", body=b"fast disk"))
        assert ok.status is S.PUT_OK
        mfq = mfq_of(store)
        real_flush = mfq.flush

        def slow_flush(least_pages):
            time.sleep(0.3)
            return real_flush(least_pages)

        monkeypatch.setattr(mfq, "flush", slow_flush)
        t0 = time.monotonic()
        r = store.put_message(pymq.Message(topic="Slow", body=b"slow disk"))
        waited = time.monotonic() - t0
        assert r.status is S.FLUSH_DISK_TIMEOUT, r
        assert r.is_ok()
        assert waited < 0.3 + 0.25, waited           # gave up after about the timeout
        assert r.queue_offset == 1
        m = store.look_message_by_offset(r.commitlog_offset)
        assert m is not None and m.body == b"slow disk"
        rb = store.put_messages([pymq.Message(topic="Slow", body=b"batch")])
        assert rb.status is S.FLUSH_DISK_TIMEOUT and rb.is_ok()
        monkeypatch.undo()
        deadline = time.monotonic() + 5
        while mfq.flushed_where < store.get_max_phy_offset() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert mfq.flushed_where == store.get_max_phy_offset()   # the slow flushes did complete
        time.sleep(0.35)                               # no slow flush still in flight
        r2 = store.put_message(pymq.Message(topic="Slow", body=b"fast again"))
        assert r2.is_ok() and r2.queue_offset == 3     # PUT_OK unless the machine stalls 50 ms
    recs = [r for r in walk_commitlog(tmp_path / "store" / "commitlog") if not r["blank"]]
    assert [r["body"] for r in recs] == [b"fast disk", b"slow disk", b"batch", b"fast again"]


def test_async_flush_catches_up_in_the_background(tmp_path):
    cfg = small_config(flush_interval_commitlog=20, flush_commitlog_least_pages=0)
    with pymq.MessageStore(tmp_path / "store", cfg) as store:
        mfq = mfq_of(store)
        for i in range(200):
            r = store.put_message(pymq.Message(topic="Async", body=b"a" * 1000))
            assert r.status is S.PUT_OK                # ASYNC: never waits for the disk
        target = store.get_max_phy_offset()
        assert target > 2 * FILE_SIZE
        deadline = time.monotonic() + 1.0
        while mfq.flushed_where < target and time.monotonic() < deadline:
            time.sleep(0.01)
        assert mfq.flushed_where == target, (mfq.flushed_where, target)


def test_async_flush_with_least_pages_waits_for_enough_dirty_pages(tmp_path):
    cfg = small_config(flush_interval_commitlog=10, flush_commitlog_least_pages=4,
                       flush_commitlog_thorough_interval=60_000)
    with pymq.MessageStore(tmp_path / "store", cfg) as store:
        mfq = mfq_of(store)
        store.put_message(pymq.Message(topic="Async", body=b"a" * 100))
        time.sleep(0.2)
        assert mfq.flushed_where == 0                  # under 4 pages: not flushed yet
        for _ in range(20):
            store.put_message(pymq.Message(topic="Async", body=b"a" * 1000))
        deadline = time.monotonic() + 1.0
        while mfq.flushed_where == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert mfq.flushed_where >= 4 * 4096


def test_shutdown_flushes_everything_and_removes_abort(tmp_path):
    path = tmp_path / "store"
    # the background flush effectively never runs: shutdown has to do all of it
    cfg = small_config(flush_interval_commitlog=60_000, flush_commitlog_least_pages=4,
                       flush_commitlog_thorough_interval=600_000)
    store = pymq.MessageStore(path, cfg)
    abort = path / "abort"
    assert not abort.exists()                          # opened, not started
    store.start()
    assert abort.exists()
    mfq = mfq_of(store)
    for i in range(1500):                              # ~23 segments of 64 KiB
        store.put_message(pymq.Message(topic="Shut", body=b"%d" % i + b"x" * 1000))
    max_offset = store.get_max_phy_offset()
    assert max_offset > 20 * FILE_SIZE
    assert mfq.flushed_where < max_offset
    store.shutdown()
    assert mfq.flushed_where == max_offset, (mfq.flushed_where, max_offset)
    assert not abort.exists()
    recs = [r for r in walk_commitlog(path / "commitlog") if not r["blank"]]
    assert len(recs) == 1500


def test_shutdown_of_a_store_never_started_flushes_and_leaves_no_abort(tmp_path):
    path = tmp_path / "store"
    with pymq.MessageStore(path, small_config()) as store:
        store.put_message(pymq.Message(topic="T", body=b"x"))
    store = pymq.MessageStore(path, small_config())
    assert not (path / "abort").exists()
    store.shutdown()
    assert not (path / "abort").exists()
    assert os.path.exists(path / "lock")


def test_abort_file_stays_after_a_crash(tmp_path):
    """A store that is not shut down (process killed) leaves `abort` behind."""
    import subprocess
    import sys

    tests = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(tests)
    path = tmp_path / "store"
    code = (f"import os, sys, pymq; sys.path.insert(0, {tests!r}); from conftest import small_config; "
            f"s = pymq.MessageStore({str(path)!r}, small_config()); s.start(); "
            f"r = s.put_message(pymq.Message(topic='T', body=b'crash')); s.flush(); "
            f"print(r.commitlog_offset); os._exit(0)")
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60,
                       capture_output=True, text=True)
    assert (path / "abort").exists()
    with pymq.MessageStore(path, small_config()) as store:
        assert store.look_message_by_offset(int(p.stdout.strip())).body == b"crash"
        assert (path / "abort").exists()
    assert not (path / "abort").exists()
