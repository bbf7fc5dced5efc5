"""The map cache of consume-queue files, piece by piece (``pymq.store.map_cache``,
issue 23 part 3): the setting, CLOCK's choice, the files it must skip (exported, pinned,
being written by the dispatcher without the GIL), flushing and losing an evicted file.
The store-level checks (every message read back, a model, threads, 50,000 queues) are in
``test_map_cap.py``.
"""

from __future__ import annotations

import os

import pytest
from test_index_file_format import wait_dispatched
from test_map_cap import body_of, capped, fill, read_queue

import pymq
from pymq._core.cq_unit import read_unit
from pymq._core.mapped_file import MappedFile
from pymq.errors import PymqError, StoreStateError
from pymq.store.map_cache import MapCache


# -- the setting ------------------------------------------------------------------------------------

def test_the_setting():
    assert pymq.StoreConfig().max_mapped_queue_files == 16_384
    assert pymq.StoreConfig(max_mapped_queue_files=0).max_mapped_queue_files == 0      # no cap
    with pytest.raises(PymqError):
        pymq.StoreConfig(max_mapped_queue_files=-1)


# -- what is never evicted ------------------------------------------------------------------------

def _files(tmp_path, n: int) -> list:
    out = []
    for i in range(n):
        d = tmp_path / f"q{i}"
        d.mkdir()
        mf = MappedFile(str(d / ("0" * 20)), 4096, create=True)
        mf.append_message(b"%020d" % i)
        out.append(mf)
    return out


def test_the_cache_skips_exported_and_refused_files_and_takes_the_next(tmp_path):
    cache = MapCache(2)
    refused = set()
    cache.evictor = lambda mf, owner: mf not in refused and mf.evict()
    files = _files(tmp_path, 6)
    view = memoryview(files[0])                     # a reader holds a buffer of file 0
    refused.add(files[1])                           # the dispatcher is writing file 1
    for mf in files:
        cache.member(None).add(mf)
    # files 0 and 1 are skipped and the next candidates taken; with both busy the newest
    # stays too (the cap is exceeded until they are free)
    assert not files[0].evicted and not files[1].evicted and not files[5].evicted
    assert all(mf.evicted for mf in files[2:5])
    assert cache.mapped == 3 and cache.skipped > 0
    view.release()
    refused.clear()
    assert bytes(files[3].read(0, 20)) == b"%020d" % 3          # mapped again: back to the cap
    assert cache.mapped == 2 and cache.remaps == 1 and not files[3].evicted
    for mf in files:
        mf.close()
    assert cache.mapped == 0


def test_a_file_used_since_the_last_sweep_gets_a_second_chance(tmp_path):
    cache = MapCache(3)
    files = _files(tmp_path, 4)
    for mf in files[:3]:
        cache.member(None).add(mf)                  # each joins at the front: 2, 1, 0
    files[2].used = True                            # read
    files[1].append_message(b"x" * 20)              # written
    cache.member(None).add(files[3])
    assert files[0].evicted and not files[1].evicted and not files[2].evicted
    assert not files[1].used and not files[2].used  # their chance is used up
    for mf in files:
        mf.close()


def test_the_dispatcher_keeps_the_file_it_writes_without_the_gil(tmp_path):
    with pymq.MessageStore(tmp_path / "s", capped(4)) as s:
        s.start()
        fill(s, 1, 2, 5)
        cq = s.consume_queues.find_consume_queue("T0", 0)
        app, router = cq.appender, s.router
        cur = app.current
        if cur.evicted:
            cur.read(0, 1)
        assert app.routed                           # in the dispatcher's table of routes
        router.writing = True                       # as inside a GIL-free stretch
        try:
            assert not router.evict(cur, app) and not cur.evicted
        finally:
            router.writing = False
        assert router.evict(cur, app) and cur.evicted
        s.put_message(pymq.Message(topic="T0", body=body_of("T0", 0, 5), queue_id=0))
        wait_dispatched(s)
        assert [m.body for m in read_queue(s, "T0", 0)] == [body_of("T0", 0, i) for i in range(6)]


# -- flushing, and a file gone ------------------------------------------------------------------

def test_flush_of_an_evicted_file_syncs_without_mapping_it(tmp_path):
    with pymq.MessageStore(tmp_path / "s", capped(4)) as s:
        s.start()
        fill(s, 1, 2, 10)
        cq = s.consume_queues.find_consume_queue("T0", 1)
        mf = cq.mapped_file_queue.mapped_files[0]
        if mf.evicted:
            mf.read(0, 1)
        mf.flushed_position = 0
        assert mf.evict() and mf.evicted
        assert mf.flush(0) == mf.wrote_position == 200
        assert mf.evicted                           # synced through the file, not mapped again


def test_an_evicted_file_deleted_by_another_process_reads_as_gone(tmp_path):
    mf = _files(tmp_path, 1)[0]
    assert mf.evict()
    os.unlink(mf.file_name)
    assert read_unit(mf, 0) is None                 # as a closed file: not an error, not data
    with pytest.raises(StoreStateError):
        mf.read(0, 20)
    mf.close()
