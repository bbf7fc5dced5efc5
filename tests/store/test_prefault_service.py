"""PrefaultService: the window of pages populated ahead of the commit log's writes.

What the kernel mapped is read from ``/proc/self/pagemap`` (a page of a fresh segment is
present in the mapping once it was populated or written), so these tests see what the
thread really populated, not what it says it did.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import threading
import time

import pytest
from conftest import mounted_ext4

import pymq
from pymq._core.mapped_file import MappedFile, offset_to_file_name
from pymq.errors import DiskFullError, PymqError, StoreStateError
from pymq.store import prefault_service
from pymq.store.prefault_service import PrefaultService

PAGE = os.sysconf("SC_PAGE_SIZE")
KiB = 1024
THREAD = "pymq-PrefaultService"



def resident(mf: MappedFile) -> list[bool]:
    """Per page of ``mf``: whether this process's mapping of it is present (populated or
    written; ``/proc/self/pagemap`` bit 63). Pages the kernel read ahead into the page
    cache without mapping them do not count: they are clean and never written back."""
    buf = (ctypes.c_char * mf.file_size).from_buffer(mf)
    try:
        first = ctypes.addressof(buf) // PAGE
        pages = (mf.file_size + PAGE - 1) // PAGE
        with open("/proc/self/pagemap", "rb") as f:
            f.seek(first * 8)
            raw = f.read(pages * 8)
        return [bool(int.from_bytes(raw[i * 8:i * 8 + 8], "little") >> 63) for i in range(pages)]
    finally:
        del buf


def wait_for(cond, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.002)
    return cond()


class OneSegment:
    """The queue the service follows: ``get_last_mapped_file`` is all it asks."""

    def __init__(self, mf):
        self.mf = mf

    def get_last_mapped_file(self):
        return self.mf


def prefault_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == THREAD]


def test_window_follows_the_writes_and_stays_inside_the_reserved_blocks(tmp_path):
    size, window, chunk = 1024 * KiB, 256 * KiB, 64 * KiB
    mf = MappedFile(str(tmp_path / offset_to_file_name(0)), size, create=True, reserve_chunk=chunk)
    assert not any(resident(mf))
    svc = PrefaultService(OneSegment(mf), window, idle_ms=60_000)     # woken by the writes only
    svc.start()
    try:
        # only the first chunk is reserved: populated up to it, not into the hole after it
        assert wait_for(lambda: mf.populated_to == chunk)
        time.sleep(0.05)
        pages = resident(mf)
        assert all(pages[:chunk // PAGE]) and not any(pages[chunk // PAGE:])

        # the writer reserves more blocks: that wakes the thread, which populates them
        mf.wrote_position = 60 * KiB
        mf.reserve(mf.wrote_position + 8 * KiB)
        assert mf.reserved == 2 * chunk
        assert wait_for(lambda: mf.populated_to == 2 * chunk)
        time.sleep(0.05)
        pages = resident(mf)
        assert all(pages[:2 * chunk // PAGE]) and not any(pages[2 * chunk // PAGE:])

        # past half the chunk, the writer reserves the next one early (the thread's room)
        assert mf.reserve_ahead == chunk // 2
        mf.reserve(2 * chunk - chunk // 4)
        assert mf.reserved == 3 * chunk
        assert wait_for(lambda: mf.populated_to == 3 * chunk)

        # the writer jumps near the end: the window follows it, and stops at the file's end
        mf.wrote_position = 900 * KiB
        mf.reserve(900 * KiB + 100)
        assert mf.reserved == 960 * KiB
        assert wait_for(lambda: mf.populated_to == 960 * KiB)
        mf.reserve(1000 * KiB)
        assert mf.reserved == size
        assert wait_for(lambda: mf.populated_to == size)
        pages = resident(mf)
        assert all(pages[900 * KiB // PAGE:])
        assert not any(pages[3 * chunk // PAGE:900 * KiB // PAGE])      # skipped, never written
        # all reserved and populated: appends near the end wake nobody any more
        time.sleep(0.05)
        passes = svc.passes
        for i in range(20):
            mf.wrote_position = 1000 * KiB + i * 100
            mf.reserve(mf.wrote_position + 100)
            time.sleep(0.002)
        time.sleep(0.05)
        assert svc.passes == passes
    finally:
        svc.shutdown()
    assert not svc.running and not prefault_threads() and mf.reserve_ahead == 0
    with open(mf.file_name, "rb") as f:
        assert f.read() == bytes(size)                     # populating wrote nothing
    mf.close()


def test_writes_within_half_a_window_wake_it_and_nothing_else_does(tmp_path):
    size, window = 2048 * KiB, 128 * KiB
    mf = MappedFile(str(tmp_path / offset_to_file_name(0)), size, create=True)   # allocated whole
    svc = PrefaultService(OneSegment(mf), window)
    svc.start()
    try:
        assert wait_for(lambda: mf.populated_to == window)
        time.sleep(0.05)
        assert mf.populated_to == window                   # caught up: it waits
        mf.wrote_position = window // 2 - 8192             # not yet within half a window
        mf.reserve(mf.wrote_position + 100)
        time.sleep(0.05)
        assert mf.populated_to == window
        mf.wrote_position = window // 2 + 4096
        mf.reserve(mf.wrote_position + 100)                # now: it populates on
        assert wait_for(lambda: mf.populated_to == mf.wrote_position + window)
        assert sum(resident(mf)) == (mf.wrote_position + window) // PAGE
    finally:
        svc.shutdown()
        mf.close()


def _small_store(path, **kw):
    cfg = dict(commitlog_file_size=256 * KiB, consume_queue_entries=4096, index_hash_slots=1024,
               index_max_entries=4096, commitlog_prefault_window=64 * KiB)
    cfg.update(kw)
    return pymq.MessageStore(str(path), pymq.StoreConfig(**cfg))


def test_follows_segment_rolls_and_the_records_are_unchanged(tmp_path):
    bodies = [bytes([i % 251]) * 100 for i in range(200)]
    with _small_store(tmp_path / "s") as store:
        svc = store.commit_log.prefault_service
        assert svc.running
        mfq = store.commit_log.mapped_file_queue
        for _ in range(50):                                # ~38 KB a put: a roll every seventh
            assert store.put_bodies("T", bodies).is_ok()
            last = mfq.get_last_mapped_file()
            expect = min(last.wrote_position + 64 * KiB, last.file_size)
            assert wait_for(lambda: svc.segment is last and last.populated_to >= expect - PAGE)
            pages = resident(last)
            # nothing populated past the window (the writer's own pages are behind it)
            assert not any(pages[(last.wrote_position + 64 * KiB + PAGE - 1) // PAGE + 1:])
        files = mfq.mapped_files
        assert len(files) >= 7 and svc.segments_followed >= len(files)
        assert wait_for(lambda: store.dispatch_behind_bytes() == 0)
        n = 0
        offset = 0
        while True:
            r = store.get_message("G", "T", 0, offset, 32)
            if not r.messages:
                break
            for m in r.messages:
                assert m.body == bodies[n % 200]
                n += 1
            offset = r.next_begin_offset
        assert n == 10_000
    assert not prefault_threads()
    with _small_store(tmp_path / "s") as store:            # recovered: every record still there
        assert store.get_max_offset_in_queue("T", 0) == 10_000


def test_no_thread_after_shutdown_and_none_when_off(tmp_path):
    store = _small_store(tmp_path / "a").start()
    svc = store.commit_log.prefault_service
    store.put_bodies("T", [b"x" * 100] * 10)
    assert wait_for(lambda: svc.segment is not None)
    assert len(prefault_threads()) == 1
    store.shutdown()
    assert not svc.running and not prefault_threads() and svc.segment is None
    with _small_store(tmp_path / "b", commitlog_prefault_window=0) as off:
        assert off.commit_log.prefault_service is None
        assert off.put_bodies("T", [b"x" * 100] * 10).is_ok()
        assert not prefault_threads()
    with pytest.raises(PymqError):
        pymq.StoreConfig(commitlog_prefault_window=-1)
    # a slave's log is written by replication through the file: no window there
    with _small_store(tmp_path / "c", broker_role="SLAVE", ha_master_address="127.0.0.1:1") as slave:
        assert slave.commit_log.prefault_service is None and not prefault_threads()


def test_an_idle_store_costs_nothing(tmp_path):
    with _small_store(tmp_path / "s") as store:
        svc = store.commit_log.prefault_service
        store.put_bodies("T", [b"x" * 100] * 100)
        assert wait_for(lambda: svc.segment is not None and svc.segment.populated_to >= 64 * KiB)
        time.sleep(0.1)
        clock = time.pthread_getcpuclockid(svc._thread.ident)
        before = time.clock_gettime(clock)
        time.sleep(1.0)
        assert time.clock_gettime(clock) - before < 0.005     # asleep on its eventfd


def test_a_forked_child_has_no_running_service(tmp_path):
    with _small_store(tmp_path / "s") as store:
        svc = store.commit_log.prefault_service
        store.put_bodies("T", [b"x" * 100] * 100)
        assert wait_for(lambda: svc.segment is not None)
        seg = svc.segment
        pid = os.fork()
        if pid == 0:                                       # the child: report through the exit code
            code = 0
            try:
                if svc.running or prefault_threads() or svc._fd != -1:
                    code = 1
                svc.shutdown()                             # does nothing here, raises nothing
                svc.start()                                # nor does this start a thread
                if prefault_threads():
                    code = 2
                if store.put_bodies("T", [b"y"]).is_ok():
                    code = 3
            except StoreStateError:
                pass                                       # the store is fenced in the child
            except BaseException:
                code = 4
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        # the parent's thread goes on following the writes
        assert svc.running and svc.segment is seg
        before = seg.populated_to
        for _ in range(4):
            assert store.put_bodies("T", [b"z" * 100] * 500).is_ok()
        last = store.commit_log.mapped_file_queue.get_last_mapped_file()
        assert wait_for(lambda: svc.segment is last and last.populated_to > (before if last is seg else 0))


def test_no_populate_write_logs_once_and_stops(tmp_path, caplog):
    mf = MappedFile(str(tmp_path / offset_to_file_name(0)), 64 * KiB, create=True)
    a, b = PrefaultService(OneSegment(mf), 64 * KiB), PrefaultService(OneSegment(mf), 64 * KiB)
    prefault_service._unsupported_logged = False
    with caplog.at_level(logging.INFO, logger="pymq"):
        assert a._failed(errno.EINVAL, mf) is False
        assert b._failed(errno.EINVAL, mf) is False
        assert b._failed(errno.EIO, mf) is True            # other errors: the next segment
    assert not a.supported and a.last_error.errno == errno.EINVAL
    assert sum("MADV_POPULATE_WRITE" in r.getMessage() and r.levelno == logging.INFO
               for r in caplog.records) == 1
    mf.close()


@pytest.fixture
def small_disk(tmp_path):
    yield from mounted_ext4(tmp_path, 16 * 1024 * KiB)


def test_the_early_reservation_gives_way_on_a_full_disk(small_disk):
    """While a window is armed on a sparse segment, its writer reserves the next chunk
    half a chunk early; on a full disk that early part is dropped, and a write that fits
    the blocks already reserved goes on, while one that does not still fails."""
    chunk = 1024 * KiB
    mf = MappedFile(str(small_disk / offset_to_file_name(0)), 4 * chunk, create=True, reserve_chunk=chunk)
    svc = PrefaultService(OneSegment(mf), 256 * KiB)
    svc.start()
    try:
        assert wait_for(lambda: mf.reserve_ahead == chunk // 2 and mf.populated_to == 256 * KiB)
        fd = os.open(small_disk / "filler", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            st = os.statvfs(small_disk)
            n = st.f_bavail * st.f_frsize
            while n > 0:                                   # take every free block
                try:
                    os.posix_fallocate(fd, 0, n)
                    break
                except OSError:
                    n -= 16 * KiB
            assert os.statvfs(small_disk).f_bavail * st.f_frsize < chunk
            mf.reserve(chunk - 100)                        # fits: the early chunk has no room
            assert mf.reserved == chunk and mf.reserve_ahead == 0
            with pytest.raises(DiskFullError):
                mf.reserve(chunk + 100)                    # does not fit: still refused
        finally:
            os.close(fd)
    finally:
        svc.shutdown()
        mf.close()
