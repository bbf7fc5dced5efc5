"""Opening a store with file sizes other than those it was written with.

One open with the wrong sizes (say the default 1 GiB segments for a store of 64 KiB ones)
must not lock the user out: it raises a clear ``SegmentSizeError`` naming the store's and
the config's sizes, and changes nothing on disk (no rewritten ``storeSizes.json``, no grown
segment, no deleted queue or index file). The store then opens as before: without a
config, with its own sizes, read-only, and ``pymq check`` finds nothing wrong. The sizes
come from ``config/storeSizes.json``, or, when it is missing or damaged, from the files.
"""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest
from conftest import small_config, snapshot

import pymq
from pymq import cli
from pymq._core.mapped_file import offset_to_file_name
from pymq.checker import StoreChecker
from pymq.store_sizes import sizes_path
from pymq.store.mapped_file_queue import MappedFileQueue

SEG = 64 * 1024
BODY = 5000


def body(i: int) -> bytes:
    return b"%05d" % i + b"x" * (BODY - 5)


def build(path: str, n: int) -> list:
    """``n`` messages of 5 KB over two queues of topic T, each with a key; 200 of them
    fill 16 commit-log segments, 5 stay in the first one. Returns the put results."""
    with pymq.MessageStore(path, small_config()) as s:
        rs = [s.put_message(pymq.Message("T", body(i), keys=[f"k{i}"], queue_id=i % 2)) for i in range(n)]
    assert all(r.is_ok() for r in rs)
    return rs


def bodies(store) -> list[bytes]:
    out = []
    for qid in (0, 1):
        off = 0
        while True:
            g = store.get_message("g", "T", qid, off)
            if not g.messages:
                break
            out.extend(m.body for m in g.messages)
            off = g.next_begin_offset
    return sorted(out)


def assert_intact(store, n: int) -> None:
    assert bodies(store) == [body(i) for i in range(n)]
    for i in (0, n // 2, n - 1):
        assert [m.body for m in store.query_message("T", f"k{i}")] == [body(i)]


def assert_opens(path: str, n: int, capfd, damaged_record: bool = False) -> None:
    """The store opens every way and holds its ``n`` messages; check finds no damage (but
    a damaged storeSizes.json, until a writer saved the sizes again)."""
    ro = pymq.MessageStore(path, read_only=True)
    try:
        assert_intact(ro, n)
    finally:
        ro.shutdown()
    report = StoreChecker(path).run()
    assert report.records == n
    assert [(p.kind, p.where) for p in report.problems] == \
        ([("sidefile", "config/storeSizes.json")] if damaged_record else []), report.problems
    with pymq.MessageStore(path) as s:
        assert s.config.commitlog_file_size == SEG
        assert_intact(s, n)
    with pymq.MessageStore(path, small_config()) as s:
        assert_intact(s, n)
    assert json.load(open(sizes_path(path)))["commitlog_file_size"] == SEG
    capfd.readouterr()
    assert cli.main(["--store", path, "check"]) == 0
    out, err = capfd.readouterr()
    assert "OK" in out, (out, err)
    report = StoreChecker(path).run()
    assert report.ok and report.records == n, report.problems


def refuse(path: str, config: pymq.StoreConfig) -> str:
    """Open with ``config``: a SegmentSizeError, and not a byte changed."""
    before = snapshot(path)
    with pytest.raises(pymq.SegmentSizeError) as info:
        pymq.MessageStore(path, config)
    assert snapshot(path) == before
    return str(info.value)


# -- the audit's case: the default config on a store of 64 KiB segments ---------------------------

@pytest.mark.parametrize("n,segments", [(200, 16), (5, 1)], ids=["16-segments", "1-segment"])
def test_wrong_sizes_refused_and_nothing_changed(tmp_path, capfd, n, segments):
    path = str(tmp_path / "s")
    build(path, n)
    count = len(os.listdir(os.path.join(path, "commitlog")))
    assert count == 1 if segments == 1 else count >= segments
    text = refuse(path, pymq.StoreConfig())
    for part in ("commitlog_file_size=65536", "commitlog_file_size=1073741824", "consume_queue_entries=64",
                 "consume_queue_entries=300000", "index_hash_slots=64", "index_max_entries=256",
                 "storeSizes.json", "without a config", "Nothing was changed"):
        assert part in text, text
    # a second wrong open, and a read-only one, change nothing either
    refuse(path, pymq.StoreConfig())
    before = snapshot(path)
    with pytest.raises(pymq.PymqError):
        pymq.MessageStore(path, pymq.StoreConfig(), read_only=True)
    assert snapshot(path) == before
    assert_opens(path, n, capfd)


@pytest.mark.parametrize("n", [200, 5], ids=["16-segments", "1-segment"])
@pytest.mark.parametrize("record", ["missing", "damaged"])
def test_without_a_good_record_the_files_tell_the_sizes(tmp_path, capfd, n, record):
    """An old store (no storeSizes.json) or a damaged record: the sizes read off the files
    serve the same check."""
    path = str(tmp_path / "s")
    build(path, n)
    if record == "missing":
        os.remove(sizes_path(path))
    else:
        with open(sizes_path(path), "wb") as f:
            f.write(b"\x00garbage{")
    text = refuse(path, pymq.StoreConfig())
    for part in ("commitlog_file_size=65536", "commitlog_file_size=1073741824", "consume_queue_entries=64",
                 "index file length=5416", "read off the files"):
        assert part in text, text
    assert_opens(path, n, capfd, damaged_record=record == "damaged")


@pytest.mark.parametrize("n", [200, 5], ids=["16-segments", "1-segment"])
@pytest.mark.parametrize("field,value", [("commitlog_file_size", 128 * 1024), ("commitlog_file_size", 32 * 1024),
                                         ("consume_queue_entries", 128), ("index_hash_slots", 128),
                                         ("index_max_entries", 512)])
def test_one_wrong_size_is_enough(tmp_path, capfd, n, field, value):
    path = str(tmp_path / "s")
    build(path, n)
    text = refuse(path, small_config(**{field: value}))
    assert f"{field}={value}" in text, text
    assert ("delete" in text) == field.startswith("index"), text     # the index can be rebuilt
    os.remove(sizes_path(path))          # the files tell the same
    text = refuse(path, small_config(**{field: value}))
    assert (f"{field}={value}" in text) or (field.startswith("index") and "index file length=5416" in text), text
    assert_opens(path, n, capfd)


def test_other_index_sizes_once_the_index_is_deleted(tmp_path):
    """The error's advice works: without index files the index takes the new sizes (it is
    rebuilt from the commit log) and the record follows."""
    path = str(tmp_path / "s")
    build(path, 200)
    new = small_config(index_hash_slots=128, index_max_entries=512)
    refuse(path, new)
    shutil.rmtree(os.path.join(path, "index"))
    with pymq.MessageStore(path, new) as s:
        assert_intact(s, 200)
    assert json.load(open(sizes_path(path)))["index_hash_slots"] == 128
    with pymq.MessageStore(path) as s:
        assert s.config.index_hash_slots == 128
        assert_intact(s, 200)


def test_a_new_store_records_its_sizes_after_opening(tmp_path):
    path = str(tmp_path / "s")
    with pymq.MessageStore(path, small_config()):
        assert json.load(open(sizes_path(path)))["commitlog_file_size"] == SEG
    with pymq.MessageStore(path) as s:
        assert s.config.consume_queue_entries == 64


# -- a short last segment is recovered only for the size it belongs to ------------------------------

def test_short_only_segment_is_recovered_with_its_recorded_size(tmp_path):
    """docs/recovery.md: a short last segment is given its length back; with one segment,
    the recorded size says what that length is."""
    path = str(tmp_path / "s")
    rs = build(path, 5)
    seg = os.path.join(path, "commitlog", offset_to_file_name(0))
    os.truncate(seg, rs[2].commitlog_offset + 100)          # the third record is cut
    with pymq.MessageStore(path, small_config()) as s:
        assert os.path.getsize(seg) == SEG
        assert bodies(s) == [body(i) for i in range(2)]
        assert s.get_max_phy_offset() == rs[2].commitlog_offset
        assert s.put_message(pymq.Message("T", b"after")).is_ok()


def write_segments(d: str, size: int, lengths: list[int], first: int = 0) -> list[str]:
    os.makedirs(d, exist_ok=True)
    paths = []
    for i, length in enumerate(lengths):
        p = os.path.join(d, offset_to_file_name(first + i * size))
        with open(p, "wb") as f:
            f.write(b"\x01" * length)
        paths.append(p)
    return paths


@pytest.mark.parametrize("lengths,first", [([4096, 4096, 4096, 1000], 0), ([1000], 4096)],
                         ids=["segments-of-another-size", "misaligned-only-segment"])
def test_load_never_grows_a_segment_into_another_size(tmp_path, lengths, first):
    d = str(tmp_path / "q")
    paths = write_segments(d, 4096, lengths, first)
    before = snapshot(d)
    q = MappedFileQueue(d, 8192)
    with pytest.raises(pymq.SegmentSizeError):
        q.load()
    assert snapshot(d) == before and q.short_last_file is None
    assert [os.path.getsize(p) for p in paths] == lengths


def test_load_grows_a_short_last_segment_of_its_own_size(tmp_path):
    d = str(tmp_path / "q")
    paths = write_segments(d, 4096, [4096, 4096, 1000])
    q = MappedFileQueue(d, 4096)
    q.load()
    try:
        assert os.path.getsize(paths[-1]) == 4096 and q.short_last_file == 1000
        assert len(q.mapped_files) == 3
    finally:
        q.shutdown()


# -- the timer wheel's settings ---------------------------------------------------------------------

def test_timer_settings_recorded_so_the_wheel_is_never_taken_for_damage(tmp_path, capfd):
    """The wheel's length follows timer_wheel_days and timer_max_delay_sec. A store written
    with other ones than the defaults opens without a config with its own: its wheel is not
    set aside and rebuilt as damaged, the pending timer is delivered once, and ``pymq
    check`` finds nothing. A config that contradicts them is refused, as for other sizes."""
    path = str(tmp_path / "s")
    timer = dict(timer_wheel_days=1, timer_max_delay_sec=3600)
    with pymq.MessageStore(path, small_config(**timer)) as s:
        due = int(time.time() * 1000) + 2500
        assert s.put_message(pymq.Message("T", b"later", deliver_time_ms=due)).is_ok()
        assert s.put_message(pymq.Message("T", b"now")).is_ok()
        deadline = time.monotonic() + 10
        while not os.path.exists(os.path.join(path, "timerwheel")) and time.monotonic() < deadline:
            time.sleep(0.02)
    recorded = json.load(open(sizes_path(path)))
    assert (recorded["timer_wheel_days"], recorded["timer_max_delay_sec"]) == (1, 3600)
    text = refuse(path, small_config())
    assert "timer_wheel_days=1" in text and "timer_wheel_days=7" in text, text
    assert "timer_max_delay_sec=3600" in text, text
    capfd.readouterr()
    assert cli.main(["--store", path, "check"]) == 0, capfd.readouterr()
    with pymq.MessageStore(path) as s:
        assert (s.config.timer_wheel_days, s.config.timer_max_delay_sec) == (1, 3600)
        assert s.open_report == []
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            got = s.get_message("g", "T", 0, 0).messages
            if len(got) == 2:
                break
            time.sleep(0.05)
        assert sorted(m.body for m in got) == [b"later", b"now"]
    assert not [n for n in os.listdir(path) if ".corrupt-" in n]
    with pymq.MessageStore(path, small_config(**timer)) as s:
        assert s.open_report == []


def test_timer_settings_may_change_while_there_is_no_wheel(tmp_path):
    path = str(tmp_path / "s")
    build(path, 5)
    assert not os.path.exists(os.path.join(path, "timerwheel"))
    with pymq.MessageStore(path, small_config(timer_wheel_days=2)) as s:
        assert_intact(s, 5)
    assert json.load(open(sizes_path(path)))["timer_wheel_days"] == 2
