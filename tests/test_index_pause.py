"""Indexing paused for want of space for a new index file: one log record per pause
episode (not one per key or per message), one when it ends, and ``stats()["index"]``
showing it.

The disk tests mount a small tmpfs (as tests/test_disk_full.py does; needs root).
"""

from __future__ import annotations

import json
import logging
import os
import time

import pytest
from conftest import mounted_tmpfs, small_config

import pymq
from pymq import PutMessageStatus
from pymq._core.index_file import index_file_size
from pymq.store.disk_guard import DiskUsage

MOUNT_SIZE = 3 * 1024 * 1024
# ~1.5 MiB index files: they fit an empty 3 MiB disk, not one that holds the ballast
SLOTS, ENTRIES = 375_000, 2_000
BALLAST = 2 * 1024 * 1024


@pytest.fixture
def tmpfs(tmp_path):
    yield from mounted_tmpfs(tmp_path, MOUNT_SIZE)


def cfg(**kw):
    values = dict(clean_resource_interval=100, file_reserved_time=1.0, clean_file_forcibly_enable=False,
                  delete_when="%02d" % ((time.localtime().tm_hour + 12) % 24),
                  index_hash_slots=SLOTS, index_max_entries=ENTRIES)
    values.update(kw)
    return small_config(**values)


def ballast(path, nbytes):
    with open(path, "wb") as f:
        f.write(b"\0" * nbytes)


def wait_for(cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def put_keyed(store, n=50, keys=10):
    acked = []
    for i in range(n):
        r = store.put_message(pymq.Message(topic="Ix", body=b"b%d" % i, queue_id=i % 2,
                                           keys=[f"m{i}k{j}" for j in range(keys)]))
        assert r.status is PutMessageStatus.PUT_OK, r.error
        acked.append(r)
    wait_for(lambda: store.dispatch_behind_bytes() == 0)
    return acked


def index_records(caplog):
    return [rec for rec in caplog.records
            if (rec.name == "pymq" or rec.name.startswith("pymq.")) and "index" in rec.getMessage().lower()]


def test_a_pause_is_logged_once_and_its_end_once(tmpfs, caplog):
    assert index_file_size(SLOTS, ENTRIES) > MOUNT_SIZE - BALLAST - MOUNT_SIZE // 100
    ballast(tmpfs / "ballast", BALLAST)
    with caplog.at_level(logging.DEBUG, logger="pymq"):
        store = pymq.MessageStore(tmpfs / "store", cfg()).start()
        try:
            acked = put_keyed(store)
            assert store.index_service.paused_at == acked[0].commitlog_offset
            assert store.query_message("Ix", "m49k9") == []
            (rec,) = index_records(caplog)
            assert rec.levelno == logging.ERROR and "paused" in rec.getMessage()
            assert f"{index_file_size(SLOTS, ENTRIES)}-byte index file" in rec.getMessage()

            os.remove(tmpfs / "ballast")                 # space returns
            wait_for(lambda: store.query_message("Ix", "m49k9"))
            for i in (0, 17, 49):
                assert [m.commitlog_offset for m in store.query_message("Ix", f"m{i}k3")] \
                    == [acked[i].commitlog_offset]
            assert store.index_service.paused_at == -1
            put_keyed(store, n=5)                        # indexing goes on quietly
        finally:
            store.shutdown()
    records = index_records(caplog)
    assert len(records) == 2, [r.getMessage() for r in records]
    assert "recovered" in records[1].getMessage()


def test_retries_that_fail_again_are_counted_not_logged(tmpfs, caplog):
    """The guard says a file fits (a stale measure) but its allocation meets ENOSPC: every
    cleaning pass resumes indexing and the roll fails again; the episode goes on, silent."""
    ballast(tmpfs / "ballast", BALLAST)
    with caplog.at_level(logging.INFO, logger="pymq"):
        store = pymq.MessageStore(tmpfs / "store", cfg()).start()
        try:
            guard = store.disk_guard
            real = guard.usage_fn
            guard.usage_fn = lambda p: DiskUsage(p, 1 << 40, 1 << 39)     # plenty, says the guard
            put_keyed(store)
            ix = store.index_service
            wait_for(lambda: ix.pause_log.failures >= 5)                  # one per cleaning pass
            assert ix.pause_log.episodes == 1
            assert len(index_records(caplog)) == 1, [r.getMessage() for r in index_records(caplog)]
            guard.usage_fn = real
            os.remove(tmpfs / "ballast")
            wait_for(lambda: store.query_message("Ix", "m49k9"))
        finally:
            store.shutdown()
    records = index_records(caplog)
    assert len(records) == 2, [r.getMessage() for r in records]
    assert "recovered" in records[1].getMessage()


def test_stats_show_a_paused_index(tmpfs):
    ballast(tmpfs / "ballast", BALLAST)
    store = pymq.MessageStore(tmpfs / "store", cfg()).start()
    try:
        acked = put_keyed(store, n=5)
        ix = store.stats()["index"]
        json.dumps(ix)
        assert ix["enabled"] is True and ix["paused"] is True
        assert ix["paused_at"] == acked[0].commitlog_offset
        assert "index file" in ix["reason"] and str(tmpfs) in ix["reason"]
        assert ix["indexed_through"] == 0 and ix["files"] == 0
        assert ix["file_size_bytes"] == index_file_size(SLOTS, ENTRIES)
        assert ix["pause_episodes"] == 1
        os.remove(tmpfs / "ballast")
        wait_for(lambda: not store.stats()["index"]["paused"])
        ix = store.stats()["index"]
        assert ix["paused_at"] == -1 and ix["reason"] is None and ix["files"] == 1
        assert ix["indexed_through"] == store.commit_log.get_max_offset()
    finally:
        store.shutdown()


def test_stats_index_entry_on_a_healthy_store(tmp_path):
    path = tmp_path / "s"
    with pymq.MessageStore(path, small_config()) as store:
        acked = put_keyed(store, n=3, keys=2)
        ix = store.stats()["index"]
        assert ix == {"enabled": True, "paused": False, "paused_at": -1, "reason": None,
                      "indexed_through": store.commit_log.get_max_offset(), "files": 1,
                      "file_size_bytes": index_file_size(64, 256), "pause_episodes": 0}
        assert acked[-1].commitlog_offset < ix["indexed_through"]
        ro = pymq.MessageStore(path, read_only=True).start()
        try:
            ix = ro.stats()["index"]
            assert ix["paused"] is None and ix["paused_at"] is None and ix["reason"] is None
            assert ix["files"] == 1
        finally:
            ro.shutdown()
    with pymq.MessageStore(tmp_path / "off", small_config(message_index_enable=False)) as store:
        put_keyed(store, n=2, keys=1)
        ix = store.stats()["index"]
        assert ix["enabled"] is False and ix["paused"] is False and ix["indexed_through"] is None
