"""A damaged side file never locks a user out of the store (issue 11).

Each side file (consumer offsets, delay offsets, timer checkpoint, timer wheel, checkpoint,
store sizes) is damaged four ways (garbage, truncated, empty, zeroed), with and without a
good ``.bak`` where the file has one. The store must open, report what it found, keep
every message readable, still deliver its pending delayed and timer messages, and refuse
with ``strict_open``; a read-only open always works.
"""

from __future__ import annotations

import os
import random
import time

import pytest
from conftest import small_config

import pymq
from pymq.checker import StoreChecker
from pymq.errors import CorruptStoreError, SegmentSizeError

FILES = {
    "consumerOffset": "config/consumerOffset.json",
    "delayOffset": "config/delayOffset.json",
    "timerCheckpoint": "config/timerCheckpoint.json",
    "timerwheel": "timerwheel",
    "checkpoint": "checkpoint",
    "storeSizes": "config/storeSizes.json",
}
DAMAGES = ("garbage", "truncated", "empty", "zeroed")
HAS_BAK = ("consumerOffset", "delayOffset", "timerCheckpoint")
N = 30


def cfg(**kw):
    return small_config(message_delay_level="1s", **kw)


def damage(path, how, rng):
    data = open(path, "rb").read()
    if how == "garbage":
        new = bytes(rng.randrange(256) for _ in range(max(len(data), 64)))
        new = new[:len(data)] if len(data) >= 64 else new
    elif how == "truncated":
        new = data[: len(data) // 2]
    elif how == "empty":
        new = b""
    else:
        new = b"\0" * len(data)
    with open(path, "wb") as f:
        f.write(new)


def build(path, with_bak):
    """A store with N ordinary messages, a committed offset, a delayed and a timer message
    still pending at close (due a second or so after the reopen)."""
    with pymq.MessageStore(path, cfg()) as s:
        for i in range(N):
            s.put_message(pymq.Message("T", b"m%d" % i, keys=[f"k{i}"]))
        s.commit_offset("g", "T", 0, 7)
        s.put_message(pymq.Message("T", b"timer", deliver_time_ms=int(time.time() * 1000) + 1500))
        s.put_message(pymq.Message("T", b"delayed", delay_level=1))
        deadline = time.monotonic() + 5
        while s.dispatch_behind_bytes() and time.monotonic() < deadline:
            time.sleep(0.002)
        s.schedule_service.offsets.persist()      # the tables exist even with nothing delivered
        s.timer_service.persist()
        if with_bak:          # persist twice: the first good text becomes the .bak
            s.consumer_offsets.persist()
            s.schedule_service.offsets.persist()
            s.timer_service.persist()
            s.commit_offset("g", "T", 0, 8)
            s.consumer_offsets.persist()
            s.schedule_service.offsets.persist()
            s.timer_service.persist()


def bodies(store):
    out, off = [], 0
    while True:
        g = store.get_message("g", "T", 0, off)
        if not g.messages:
            return out
        out.extend(m.body for m in g.messages)
        off = g.next_begin_offset


def wait_for(store, expected, timeout=6.0):
    deadline = time.monotonic() + timeout
    got = bodies(store)
    while not expected <= set(got) and time.monotonic() < deadline:
        time.sleep(0.05)
        got = bodies(store)
    return got


CASES = [(name, bak) for name in FILES for bak in ((False, True) if name in HAS_BAK else (False,))]


@pytest.mark.parametrize("how", DAMAGES)
@pytest.mark.parametrize("name,with_bak", CASES)
def test_a_damaged_side_file_opens_with_every_message(tmp_path, name, how, with_bak):
    path = tmp_path / "s"
    build(path, with_bak)
    target = path / FILES[name]
    assert target.exists()
    damage(target, how, random.Random(hash((name, how))))
    if not with_bak:
        strict_error = SegmentSizeError if (name == "timerwheel" and how in ("truncated", "empty")) \
            else CorruptStoreError
        if name in ("consumerOffset", "delayOffset", "timerCheckpoint", "timerwheel"):
            with pytest.raises(strict_error):
                pymq.MessageStore(path, cfg(strict_open=True))
    # read-only always opens (storeSizes: sizes read off the files)
    ro = pymq.MessageStore(path, read_only=True).start()
    try:
        assert [b for b in bodies(ro) if b.startswith(b"m")] == [b"m%d" % i for i in range(N)]
    finally:
        ro.shutdown()
    # a writer opens; without a config when the sizes file is the damaged one
    store = pymq.MessageStore(path, None if name == "storeSizes" else cfg()).start()
    try:
        got = wait_for(store, {b"timer", b"delayed"})
        assert [b for b in got if b.startswith(b"m")] == [b"m%d" % i for i in range(N)]
        assert b"timer" in got and b"delayed" in got, got        # still delivered
        assert store.query_message("T", f"k{N - 1}")
        report = "\n".join(store.open_report)
        if name == "consumerOffset":       # the .bak holds the text before the last persist
            assert store.query_offset("g", "T", 0) == (7 if with_bak else -1)
        else:
            assert store.query_offset("g", "T", 0) == (8 if with_bak else 7)
        if not with_bak and not (name == "checkpoint" and how == "zeroed"):
            assert os.path.basename(FILES[name]) in report, store.open_report
        put = store.put_message(pymq.Message("T", b"after"))
        assert put.is_ok()
    finally:
        store.shutdown()
    check = StoreChecker(str(path)).run()
    assert check.ok, check.problems


def test_check_reports_files_set_aside(tmp_path):
    path = tmp_path / "s"
    build(path, False)
    damage(path / FILES["consumerOffset"], "garbage", random.Random(1))
    pymq.MessageStore(path, cfg()).shutdown()
    notes = StoreChecker(str(path)).run().notes
    assert any("consumerOffset.json.corrupt-" in n for n in notes), notes
