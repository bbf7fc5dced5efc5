"""Consume-queue files that follow the data (issue 23): RocketMQ's file length, disk blocks
only ahead of the entries, a full disk met at reservation (never a SIGBUS), and a writer
reopen that does not read the unused rest of each queue's file.

Disk use is measured in blocks (``st_blocks``, what ``du`` counts), not file sizes.
"""

from __future__ import annotations

import logging
import os
import time

import pytest
from conftest import mounted_ext4, small_config
from test_disk_full import fill_disk
from test_index_file_format import wait_dispatched

import pymq
from pymq import PutMessageStatus

ENTRIES = 300_000                   # RocketMQ's default: 6,000,000-byte files


def blocks(path: str) -> int:
    """Bytes of disk allocated to the files under ``path``."""
    total = 0
    for d, _, names in os.walk(path):
        for n in names:
            total += os.stat(os.path.join(d, n)).st_blocks * 512
    return total


def test_queue_files_keep_their_length_and_take_blocks_for_their_entries(tmp_path):
    root = str(tmp_path / "s")
    cfg = small_config(consume_queue_entries=ENTRIES)
    with pymq.MessageStore(root, cfg) as s:
        s.start()
        for t in range(10):
            for q in range(10):
                assert s.put_message(pymq.Message(topic=f"T{t}", body=b"x", queue_id=q)).status is PutMessageStatus.PUT_OK
        big = [s.put_message(pymq.Message(topic="Big", body=b"y")) for _ in range(5000)]
        wait_dispatched(s)
    cq = os.path.join(root, "consumequeue")
    files = [os.path.join(d, n) for d, _, ns in os.walk(cq) for n in ns]
    assert len(files) == 101
    assert all(os.path.getsize(p) == ENTRIES * 20 for p in files)
    chunk = cfg.consume_queue_reserve_bytes
    # 100 queues of one entry: one chunk each (a page more where the file system rounds);
    # the queue of 5,000 entries: its entries rounded up to whole chunks
    big_need = -(-5000 * 20 // chunk) * chunk
    assert blocks(cq) <= 100 * (chunk + 4096) + big_need + 4096, blocks(cq)
    assert blocks(cq) < 101 * ENTRIES * 20 // 50          # not whole files
    with pymq.MessageStore(root, cfg, read_only=True) as s:
        g = s.get_message("g", "Big", 0, 0, 32)
        assert [m.queue_offset for m in g.messages] == list(range(32))
        assert s.get_max_offset_in_queue("Big", 0) == len(big) and s.get_max_offset_in_queue("T9", 9) == 1


def test_whole_files_when_asked(tmp_path):
    root = str(tmp_path / "s")
    cfg = small_config(consume_queue_entries=10_000, consume_queue_reserve_bytes=0)
    with pymq.MessageStore(root, cfg) as s:
        s.start()
        s.put_message(pymq.Message(topic="T", body=b"x"))
        wait_dispatched(s)
    assert blocks(os.path.join(root, "consumequeue")) >= 10_000 * 20


def test_reopen_after_damage_in_a_sparse_file_still_refills(tmp_path):
    """The reopen reads only the data extents after a queue's end; an entry zeroed in the
    middle, with entries after it, is still found and the queue refilled from the log."""
    root = str(tmp_path / "s")
    cfg = small_config(consume_queue_entries=ENTRIES)
    with pymq.MessageStore(root, cfg) as s:
        s.start()
        for i in range(300):
            s.put_message(pymq.Message(topic="T", body=b"m%d" % i))
        wait_dispatched(s)
    path = os.path.join(root, "consumequeue", "T", "0", "0" * 20)
    with open(path, "r+b") as f:
        f.seek(100 * 20)
        f.write(bytes(20))
    with pymq.MessageStore(root, cfg) as s:
        s.start()
        wait_dispatched(s)
        got = []
        off = 0
        while off < 300:
            g = s.get_message("g", "T", 0, off, 64)
            got += [m.body for m in g.messages]
            off = g.next_begin_offset
        assert got == [b"m%d" % i for i in range(300)]


@pytest.fixture
def small_disk(tmp_path):
    yield from mounted_ext4(tmp_path, 4 * 1024 * 1024)


def test_a_full_disk_at_reservation_is_an_error_not_a_sigbus(small_disk, caplog):
    """Entries past a queue file's reserved blocks need more: with the disk full, the
    dispatcher's reservation fails (no write lands in an unallocated page, so no SIGBUS
    kills the process), it backs off and logs once, and when space returns every
    acknowledged message is dispatched and readable at its queue offset."""
    root = str(small_disk / "s")
    cfg = small_config(consume_queue_entries=2000, consume_queue_reserve_bytes=4000,
                       clean_file_forcibly_enable=False)
    s = pymq.MessageStore(root, cfg)
    s.start()
    try:
        acked = [s.put_message(pymq.Message(topic="T", body=b"a%d" % i)) for i in range(150)]
        wait_dispatched(s)
        fill = str(small_disk / "fill")
        fill_disk(fill)
        caplog.set_level(logging.ERROR, logger="pymq")
        more = []
        for i in range(150, 400):              # the segment has room; the queue file's blocks do not
            r = s.put_message(pymq.Message(topic="T", body=b"a%d" % i))
            if r.status is PutMessageStatus.PUT_OK:
                more.append(r)
        time.sleep(0.5)
        assert more and s.get_max_offset_in_queue("T", 0) <= 200, "entries past the reserved blocks were written"
        failures = [r for r in caplog.records if "Reput" in r.getMessage() or "reserve" in r.getMessage()]
        assert 1 <= len(failures) <= 3, [r.getMessage() for r in caplog.records]
        os.remove(fill)
        wait_dispatched(s, timeout=30)
        total = len(acked) + len(more)
        assert s.get_max_offset_in_queue("T", 0) == total
        got = []
        off = 0
        while off < total:
            g = s.get_message("g", "T", 0, off, 64)
            assert g.messages, g.status
            got += [m.body for m in g.messages]
            off = g.next_begin_offset
        assert got == [b"a%d" % i for i in range(150)] + [b"a%d" % (150 + i) for i in range(len(more))]
    finally:
        s.shutdown()


def test_stats_count_the_maps(tmp_path):
    root = str(tmp_path / "s")
    with pymq.MessageStore(root, small_config(consume_queue_entries=100)) as s:
        s.start()
        for q in range(5):
            for _ in range(150):                 # two files in each queue
                s.put_message(pymq.Message(topic="T", body=b"x", queue_id=q))
        wait_dispatched(s)
        maps = s.stats()["maps"]
        assert maps["consume_queue"] == 10
        assert maps["commitlog"] == len(s.commit_log.mapped_file_queue.mapped_files) >= 1
        assert maps["total"] == maps["commitlog"] + maps["consume_queue"] + maps["index"] + maps["timer"]
        assert maps["max_map_count"] is None or maps["max_map_count"] > 0


def test_a_store_of_many_queues_syncs_them_at_shutdown_in_one_call(tmp_path, monkeypatch):
    """Shutting down with at least SYNC_FS_QUEUES queues syncs their file system once
    (``syncfs``) instead of each file, marks every queue flushed, and every entry is
    there after a reopen; a failing syncfs falls back to flushing file by file."""
    from pymq.store import flush_service

    calls = []
    real = flush_service.sync_file_system
    monkeypatch.setattr(flush_service, "sync_file_system", lambda p: (calls.append(p), real(p)))
    root = str(tmp_path / "s")
    cfg = small_config(consume_queue_entries=ENTRIES)
    s = pymq.MessageStore(root, cfg).start()
    for t in range(10):
        for q in range(10):
            assert s.put_message(pymq.Message(topic=f"T{t}", body=b"x%d" % q, queue_id=q)).is_ok()
    wait_dispatched(s)
    queues = s.consume_queues.queues()
    s.shutdown()
    assert calls == [root]
    assert all(cq.mapped_file_queue.flushed_where == 20 for cq in queues if cq.topic.startswith("T"))
    with pymq.MessageStore(root, cfg) as s:
        assert [s.get_message("g", f"T{t}", q, 0, 4).messages[0].body for t in range(10) for q in range(10)] == \
            [b"x%d" % q for _ in range(10) for q in range(10)]

    def failing(p):
        raise OSError(5, "no syncfs here")
    monkeypatch.setattr(flush_service, "sync_file_system", failing)
    s = pymq.MessageStore(root, cfg).start()
    for t in range(10):
        assert s.put_message(pymq.Message(topic=f"T{t}", body=b"more", queue_id=0)).is_ok()
    wait_dispatched(s)
    queues = s.consume_queues.queues()
    s.shutdown()
    assert all(cq.mapped_file_queue.flushed_where == 40 for cq in queues
               if cq.topic.startswith("T") and cq.queue_id == 0)
