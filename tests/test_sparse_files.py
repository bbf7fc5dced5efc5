"""Commit-log segments, index files and timer files that follow the data (issue 23): each
keeps RocketMQ's length and layout, but takes disk blocks only where it holds data,
reserved before every write, so a full disk is a status or a paused index, never a SIGBUS.

Disk use is measured in blocks (``st_blocks``, what ``du`` counts), not file sizes. The
full disks are small ext4 images (on tmpfs pymq allocates files whole: reading a hole
there takes space, see ``test_tmpfs_files_are_allocated_whole``).
"""

from __future__ import annotations

import logging
import os
import time

import pytest
from conftest import mounted_ext4, mounted_tmpfs, small_config
from test_disk_full import fill_disk
from test_index_file_format import wait_dispatched
from test_sparse_queues import blocks

import pymq
from pymq import PutMessageStatus
from pymq._core.mapped_file import MappedFile
from pymq.errors import DiskFullError

MiB = 1024 * 1024


def _fs_type(path) -> str:
    """The type of the file system holding ``path`` (``/proc/mounts``)."""
    path = os.path.realpath(path)
    best, kind = "", ""
    with open("/proc/mounts") as f:
        for line in f:
            mnt, typ = line.split()[1:3]
            if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) > len(best):
                best, kind = mnt, typ
    return kind


def _read_queues(store, topic: str, queues: int) -> list:
    """Every message of ``topic``'s first ``queues`` queues, pulled from offset 0."""
    out = []
    for q in range(queues):
        off = 0
        while True:
            g = store.get_message("g", topic, q, off, 256)
            if not g.messages:
                break
            out += g.messages
            off = g.next_begin_offset
    return out


@pytest.fixture
def disk(tmp_path):
    """Where a store's sparse files stay sparse: the test's directory, or a loop-mounted
    ext4 image when that directory is on tmpfs."""
    if _fs_type(tmp_path) in ("tmpfs", "ramfs"):
        yield from mounted_ext4(tmp_path, 256 * MiB)
    else:
        yield tmp_path


@pytest.fixture
def small_disk(tmp_path):
    yield from mounted_ext4(tmp_path, 24 * MiB)


def _tour(store, deliver_at_ms: int) -> list:
    """What the README's tour does: 1,005 messages, an offset commit, a key lookup."""
    r = store.put_message(pymq.Message(topic="TopicTest", body=b"hello", tags="TagA", keys=["order-1"],
                                       properties={"a": "b"}))
    rs = store.put_messages([pymq.Message(topic="TopicTest", body=b"x%d" % i) for i in range(1000)])
    assert r.is_ok() and rs.is_ok()
    g = store.get_message("group1", "TopicTest", 0, offset=0, max_msgs=32, tags="TagA || TagB")
    store.commit_offset("group1", "TopicTest", 0, g.next_begin_offset)
    assert store.put_message(pymq.Message(topic="TopicTest", body=b"in 10 s", delay_level=3)).is_ok()
    assert store.put_message(pymq.Message(topic="TopicTest", body=b"at T", deliver_time_ms=deliver_at_ms)).is_ok()
    for i in range(3):
        assert store.put_message(pymq.Message(topic=f"Other{i}", body=b"o", keys=[f"k{i}"])).is_ok()
    return [r]


def test_the_tour_store_takes_under_16_mib_with_default_config(disk):
    """The README tour with ``StoreConfig()`` (1 GiB segments, 400 MiB index files, the
    timer wheel): under 16 MiB of blocks, every file at RocketMQ's length, and reopened
    everything is there (the key is found, the timer message still pending)."""
    root = str(disk / "store")
    cfg = pymq.StoreConfig()
    deliver_at = int(time.time() * 1000) + 3_600_000
    with pymq.MessageStore(root, cfg) as store:
        first = _tour(store, deliver_at)
        wait_dispatched(store)
    used = blocks(root)
    assert used < 16 * MiB, f"{used / MiB:.1f} MiB"
    seg = os.path.join(root, "commitlog", f"{0:020d}")
    assert os.path.getsize(seg) == cfg.commitlog_file_size
    assert os.stat(seg).st_blocks * 512 <= cfg.commitlog_reserve_bytes + 64 * 1024
    index = os.listdir(os.path.join(root, "index"))
    assert len(index) == 1
    ipath = os.path.join(root, "index", index[0])
    assert os.path.getsize(ipath) == 40 + cfg.index_hash_slots * 4 + cfg.index_max_entries * 20
    assert os.stat(ipath).st_blocks * 512 < 8 * MiB
    wheel = os.path.join(root, "timerwheel")
    assert os.stat(wheel).st_blocks * 512 < 1 * MiB < os.path.getsize(wheel)
    with pymq.MessageStore(root, cfg) as store:
        assert [m.msg_id for m in store.query_message("TopicTest", "order-1")] == [first[0].msg_id]
        assert len(store.query_message("Other2", "k2")) == 1
        assert store.get_max_offset_in_queue("TopicTest", 0) + sum(
            store.get_max_offset_in_queue("TopicTest", q) for q in range(1, 4)) >= 1001
        assert store.stats()["timer"]["pending"] >= 1


def test_a_full_disk_at_commit_log_reservation_is_a_status_and_puts_resume(small_disk, caplog):
    """A segment of 4 MiB reserved 256 KiB at a time on a 24 MiB disk: once the disk is
    full, a put whose bytes fall past the reservation is refused with a status (the guard
    then refuses puts), no write lands in an unreserved page (no SIGBUS kills the process);
    when space returns puts go on in the same segment, and every acknowledged message
    reads back after a reopen."""
    root = str(small_disk / "s")
    cfg = small_config(commitlog_file_size=4 * MiB, commitlog_reserve_bytes=256 * 1024,
                       disk_space_warning_level_ratio=0.99, clean_file_forcibly_enable=False,
                       consume_queue_entries=100_000, message_index_enable=False)
    store = pymq.MessageStore(root, cfg).start()
    acked = []
    try:
        for i in range(100):
            r = store.put_message(pymq.Message(topic="T", body=b"%06d" % i + b"x" * 2000))
            assert r.status is PutMessageStatus.PUT_OK
            acked.append(r)
        seg = store.commit_log.mapped_file_queue.get_last_mapped_file()
        assert seg.reserve_chunk == 256 * 1024 and seg.reserved < cfg.commitlog_file_size
        fill_disk(str(small_disk / "ballast"))
        caplog.set_level(logging.ERROR, logger="pymq")
        refused = None
        for i in range(100, 3000):
            r = store.put_message(pymq.Message(topic="T", body=b"%06d" % i + b"x" * 2000))
            if r.status is not PutMessageStatus.PUT_OK:
                refused = r
                break
            acked.append(r)
        assert refused is not None, "the disk never filled"
        assert refused.status in (PutMessageStatus.SERVICE_NOT_AVAILABLE, PutMessageStatus.CREATE_MAPEDFILE_FAILED)
        assert store.commit_log.mapped_file_queue.get_last_mapped_file() is seg     # no new segment
        assert store.disk_guard.full
        os.remove(small_disk / "ballast")
        store.disk_guard.check()
        assert not store.disk_guard.full
        for i in range(3000, 3050):
            r = store.put_message(pymq.Message(topic="T", body=b"%06d" % i + b"x" * 2000))
            assert r.status is PutMessageStatus.PUT_OK, r
            acked.append(r)
    finally:
        store.shutdown()
    with pymq.MessageStore(root, cfg) as store:
        got = [m.commitlog_offset for m in _read_queues(store, "T", 4)]
    assert sorted(got) == sorted(r.commitlog_offset for r in acked)


def test_a_full_disk_pauses_the_sparse_index_and_it_catches_up_without_duplicates(small_disk, caplog):
    """An index file of 2 MiB (sparse) whose next entries need blocks the full disk has
    not: indexing pauses (logged once), puts and reads by queue go on; with space back the
    index resumes where it paused and every key is found exactly once."""
    root = str(small_disk / "s")
    cfg = small_config(commitlog_file_size=4 * MiB, commitlog_reserve_bytes=0, index_hash_slots=200_000,
                       index_max_entries=60_000, consume_queue_entries=100_000,
                       disk_space_warning_level_ratio=0.999, clean_file_forcibly_enable=False)
    store = pymq.MessageStore(root, cfg).start()
    try:
        ids = []
        for i in range(200):
            r = store.put_message(pymq.Message(topic="T", body=b"b", keys=[f"key{i}", f"alt{i}"]))
            assert r.is_ok()
            ids.append(r.msg_id)
        wait_dispatched(store)
        index = store.index_service.index_files[-1].mapped_file
        assert 0 < index.reserved_bytes < index.file_size // 4
        fill_disk(str(small_disk / "ballast"))
        caplog.set_level(logging.ERROR, logger="pymq")
        for i in range(200, 3000):       # the log's segment is whole: these are accepted
            r = store.put_message(pymq.Message(topic="T", body=b"b", keys=[f"key{i}", f"alt{i}"]))
            assert r.is_ok(), r
            ids.append(r.msg_id)
        wait_dispatched(store)
        assert store.index_service.paused
        assert sum(1 for r in caplog.records if "indexing" in r.getMessage()) == 1
        assert store.get_max_offset_in_queue("T", 0) + sum(
            store.get_max_offset_in_queue("T", q) for q in (1, 2, 3)) == 3000
        os.remove(small_disk / "ballast")
        deadline = time.monotonic() + 30          # the cleaning pass (each second) resumes it
        while store.index_service.paused and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not store.index_service.paused
        wait_dispatched(store)
        deadline = time.monotonic() + 30
        while len(store.query_message("T", "key2999")) == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        for i in range(0, 3000, 7):
            for key in (f"key{i}", f"alt{i}"):
                assert [m.msg_id for m in store.query_message("T", key)] == [ids[i]], (key, i)
    finally:
        store.shutdown()


def test_the_timer_wheel_and_log_are_sparse_and_deliver(disk):
    """The wheel (a slot per second over two weeks) and the timer log are created at their
    full length with a few blocks; timers written at scattered seconds are delivered."""
    root = str(disk / "s")
    cfg = small_config(commitlog_file_size=1 * MiB)
    now = int(time.time() * 1000)
    with pymq.MessageStore(root, cfg) as store:
        for k in range(20):          # seconds far apart: slots in different granules
            assert store.put_message(pymq.Message("T", b"far%d" % k, deliver_time_ms=now + 3_600_000 * (k + 1))).is_ok()
        assert store.put_message(pymq.Message("T", b"soon", deliver_time_ms=now + 1500)).is_ok()
        deadline = time.monotonic() + 20
        got = []
        while not got and time.monotonic() < deadline:
            g = store.get_message("g", "T", 0, 0, 8)
            got = [m.body for m in g.messages]
            time.sleep(0.1)
        assert got == [b"soon"]
    wheel = os.path.join(root, "timerwheel")
    # the first 64 KiB, and a granule for each second written (the timers', the delivered)
    assert os.stat(wheel).st_blocks * 512 <= 64 * 1024 + 24 * 4096 < os.path.getsize(wheel)
    tlog = os.path.join(root, "timerlog", f"{0:020d}")
    assert os.stat(tlog).st_blocks * 512 <= 64 * 1024 + 4096 < os.path.getsize(tlog)
    with pymq.MessageStore(root, cfg) as store:       # reopened: the far timers are pending
        assert store.stats()["timer"]["pending"] == 20


def test_granule_reservations(disk):
    """``reserve_range`` allocates the 4 KiB granules a write touches and no others;
    ``zero_range`` forgets what it punched; ``reserved_bytes`` counts both kinds."""
    path = str(disk / "f")
    mf = MappedFile(path, 64 * MiB, create=True, reserve_chunk=64 * 1024)
    try:
        assert os.path.getsize(path) == 64 * MiB
        assert mf.reserved == 64 * 1024 and mf.reserved_bytes == 64 * 1024
        mf.write_at(40 * MiB + 10, b"x" * 10)                     # one granule
        mf.write_at(50 * MiB - 2, b"y" * 4)                       # two granules
        assert mf.reserved_bytes == 64 * 1024 + 3 * 4096
        assert os.stat(path).st_blocks * 512 <= 64 * 1024 + 3 * 4096 + 4096
        assert mf.reserved == 64 * 1024                           # the prefix did not move
        mf.reserve_range(40 * MiB, 40 * MiB + 4096)               # reserved already: nothing new
        assert mf.reserved_bytes == 64 * 1024 + 3 * 4096
        mf.zero_range(40 * MiB, 40 * MiB + 4096)
        assert mf.reserved_bytes == 64 * 1024 + 2 * 4096
        assert mf.read(40 * MiB + 10, 10) == bytes(10) and mf.read(50 * MiB - 2, 4) == b"yyyy"
        mf.append_message(b"z" * 100)
        assert mf.read(0, 100) == b"z" * 100
    finally:
        mf.close()


def test_reservations_fail_cleanly_on_a_full_disk(small_disk):
    path = str(small_disk / "f")
    mf = MappedFile(path, 64 * MiB, create=True, reserve_chunk=64 * 1024)
    try:
        fill_disk(str(small_disk / "ballast"))
        with pytest.raises(DiskFullError):
            mf.write_at(30 * MiB, b"x")
        with pytest.raises(DiskFullError):
            mf.reserve(mf.reserved + 1)
        assert mf.read(30 * MiB, 1) == b"\0"                    # nothing written, no SIGBUS
        os.remove(small_disk / "ballast")
        mf.write_at(30 * MiB, b"x")
        assert mf.read(30 * MiB, 1) == b"x"
    finally:
        mf.close()


@pytest.fixture
def tmpfs(tmp_path):
    yield from mounted_tmpfs(tmp_path, 16 * MiB)


def test_tmpfs_files_are_allocated_whole(tmpfs):
    """On tmpfs a read of a hole takes memory (and is a SIGBUS once it is full), so a
    file there is allocated whole even when asked to be sparse, and an existing file with
    holes gets them allocated when a writer opens it."""
    path = str(tmpfs / "f")
    mf = MappedFile(path, 1 * MiB, create=True, reserve_chunk=64 * 1024)
    assert mf.reserve_chunk == 0 and mf.reserved == 1 * MiB
    mf.close()
    assert os.stat(path).st_blocks * 512 >= 1 * MiB
    holes = str(tmpfs / "g")
    with open(holes, "wb") as f:
        f.truncate(1 * MiB)
    assert os.stat(holes).st_blocks == 0
    mf = MappedFile(holes, 1 * MiB, reserve_chunk=64 * 1024)
    mf.close()
    assert os.stat(holes).st_blocks * 512 >= 1 * MiB


def test_the_disk_guard_counts_what_the_files_being_written_will_still_take(disk):
    """Free space, as the guard sees it, is the disk's less what the sparse segment and
    index file being written still lack: a disk with room for two more segments but not
    also for the rest of the current one refuses puts, as whole allocation did."""
    from pymq.store.disk_guard import DiskUsage

    root = str(disk / "s")
    cfg = small_config(commitlog_file_size=64 * MiB, commitlog_reserve_bytes=1 * MiB, index_hash_slots=64,
                       index_max_entries=256, disk_space_warning_level_ratio=0.99)
    total = 10 * 1024 * MiB                     # 1 % of it: 102.4 MiB kept free
    with pymq.MessageStore(root, cfg) as store:
        assert store.put_message(pymq.Message("T", b"x")).is_ok()
        promised = store.commit_log.unreserved_bytes()
        assert 62 * MiB <= promised < 64 * MiB
        # 260 MiB free: two segments and the 1 % fit (231 MiB), not also the rest of this one
        store.disk_guard.usage_fn = lambda p: DiskUsage(p, total, 260 * MiB)
        store.disk_guard.check()
        assert store.disk_guard.full
        assert "63.0 MiB more kept for the files being written" in store.disk_guard.last.describe()
        r = store.put_message(pymq.Message("T", b"y"))
        assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        store.disk_guard.usage_fn = lambda p: DiskUsage(p, total, 300 * MiB)
        store.disk_guard.check()
        assert not store.disk_guard.full
        assert store.put_message(pymq.Message("T", b"z")).is_ok()


def test_sigkill_while_sparse_files_grow_loses_nothing(disk):
    """A writer SIGKILLed three times while its sparse segments (2 MiB, reserved 64 KiB at a
    time), index files and queue files grow: every acknowledged put is read back at its
    offset, found by its key, and the store checks clean after a writer's reopen."""
    from pymq import testing
    from pymq.checker import StoreChecker

    config = dict(commitlog_file_size=2 * MiB, commitlog_reserve_bytes=64 * 1024, index_hash_slots=50_000,
                  index_max_entries=60_000, consume_queue_entries=100_000, flush_interval_commitlog=50)
    path = str(disk / "s")
    for round_ in range(3):
        with testing.WriterProcess(path, config, start_index=round_ * 1_000_000) as writer:
            writer.wait_for(12_000 * (round_ + 1), timeout_s=60)
        acked = writer.acknowledged()
    segments = testing.segments(path)
    assert len(segments) >= 3
    assert all(os.path.getsize(p) == 2 * MiB for p in segments)
    cfg = pymq.StoreConfig(**config)
    with pymq.MessageStore(path, cfg) as s:
        wait_dispatched(s)
        found = {m.commitlog_offset: m for m in _read_queues(s, "KillTest", 3)}
        missing = set(acked) - set(found)
        assert not missing, sorted(missing)[:10]
        for off in acked[::997]:
            key = found[off].keys[0]
            assert [m.commitlog_offset for m in s.query_message("KillTest", key)] == [off], key
    report = StoreChecker(path).run()
    assert report.ok, report.problems[:5]
