"""The files are the truth (issue 22, item 9): a well-formed ``config/storeSizes.json``
that records other sizes than the store's files have never deletes or resizes anything.

A store of 2,000 messages (several commit-log segments, queue files and index files) gets
a rewritten ``storeSizes.json`` with one size wrong (or all of them). Then:

* an open without a config, for writing and read-only, and the CLI's opens, are refused
  with a ``SegmentSizeError`` naming the file, the recorded and the actual sizes and the
  way out, and not a byte on disk changes;
* ``pymq check`` reports the file (exit 1, valid JSON) and checks everything else with
  the files' sizes, finding nothing else wrong;
* an open with the true config works: all 2,000 messages are readable, by queue and by
  key, and the record is written again, so opens without a config work afterwards.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
from conftest import small_config, snapshot

import pymq
from pymq import cli
from pymq.checker import StoreChecker
from pymq.store_sizes import SIZE_FIELDS, sizes_path

N = 2000
QUEUES = 4
TRUE = small_config()
TRUE_SIZES = {f: getattr(TRUE, f) for f in SIZE_FIELDS}

WRONG = {
    "segment-larger": {"commitlog_file_size": 128 * 1024},
    "segment-smaller": {"commitlog_file_size": 32 * 1024},
    "queue-entries-larger": {"consume_queue_entries": 128},
    "queue-entries-smaller": {"consume_queue_entries": 32},
    "index-slots": {"index_hash_slots": 128},
    "index-entries": {"index_max_entries": 512},
    "all-defaults": {f: getattr(pymq.StoreConfig(), f) for f in SIZE_FIELDS},
}


def body(i: int) -> bytes:
    return b"message-%05d-" % i + b"y" * 120


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> str:
    """A cleanly shut down store of ``N`` messages over ``QUEUES`` queues, each with a key."""
    path = str(tmp_path_factory.mktemp("truth") / "template")
    with pymq.MessageStore(path, small_config()) as s:
        for i in range(N):
            r = s.put_message(pymq.Message("T", body(i), keys=[f"k{i}"], queue_id=i % QUEUES))
            assert r.is_ok()
    # several files of each kind, so that the files tell every size
    assert len(os.listdir(os.path.join(path, "commitlog"))) > 2
    assert len(os.listdir(os.path.join(path, "consumequeue", "T", "0"))) > 2
    assert len(os.listdir(os.path.join(path, "index"))) > 2
    assert json.load(open(sizes_path(path))) == TRUE_SIZES
    return path


def all_readable(store, keys: bool = True) -> None:
    got = []
    for q in range(QUEUES):
        off = 0
        while True:
            g = store.get_message("g", "T", q, off, 32)
            if not g.messages:
                break
            got.extend(m.body for m in g.messages)
            off = g.next_begin_offset
    assert sorted(got) == [body(i) for i in range(N)]
    for i in (0, 1, N // 2, N - 1) if keys else ():
        assert [m.body for m in store.query_message("T", f"k{i}")] == [body(i)]


@pytest.mark.parametrize("wrong", list(WRONG), ids=list(WRONG))
def test_a_record_that_contradicts_the_files_changes_nothing(template, tmp_path, capfd, wrong):
    path = str(tmp_path / "s")
    shutil.copytree(template, path)
    recorded = dict(TRUE_SIZES, **WRONG[wrong])
    with open(sizes_path(path), "w") as f:
        json.dump(recorded, f, indent=1)
    before = snapshot(path)

    # opens without a config, writer and read-only: refused, nothing changed
    for read_only in (False, True):
        with pytest.raises(pymq.SegmentSizeError) as info:
            pymq.MessageStore(path, read_only=read_only)
        text = str(info.value)
        assert snapshot(path) == before, f"read_only={read_only} changed the store"
        assert sizes_path(path) in text, text
        for field, value in WRONG[wrong].items():
            if field in ("timer_wheel_days", "timer_max_delay_sec") or value == TRUE_SIZES[field]:
                continue
            if field.startswith("index"):
                assert f"{field}={value}" in text and "index file length=5416" in text, text
            else:
                assert f"{field}={value}" in text and f"{field}={TRUE_SIZES[field]}" in text, text
        assert "delete it" in text and "nothing was changed" in text.lower(), text

    # the CLI's opens (read-only queries, a writer's maintenance) refuse the same way
    capfd.readouterr()
    assert cli.main(["--store", path, "topic-status", "-t", "T"]) == 2
    assert cli.main(["--store", path, "delete-topic", "-t", "T"]) == 2
    err = capfd.readouterr().err
    assert err.count("storeSizes.json contradicts the store's files") == 2, err
    assert snapshot(path) == before

    # a config equal to the wrong record is refused too, naming the files' sizes
    with pytest.raises(pymq.SegmentSizeError) as info:
        pymq.MessageStore(path, pymq.StoreConfig(**recorded))
    assert "contradicts the files" in str(info.value), str(info.value)
    assert snapshot(path) == before

    # pymq check reports the file, checks the rest with the files' sizes, changes nothing
    capfd.readouterr()
    assert cli.main(["--store", path, "check", "--json"]) == 1
    doc = json.loads(capfd.readouterr().out)
    assert [(p["kind"], p["where"]) for p in doc["problems"]] == [("sidefile", "config/storeSizes.json")], doc
    assert "but the files show" in doc["problems"][0]["detail"]
    assert doc["records"] == N and doc["queue_entries"] == N and doc["index_entries"] >= 2 * N, doc
    assert snapshot(path) == before

    # the true config opens it: every message is there, and the record is right again
    with pymq.MessageStore(path, small_config()) as s:
        all_readable(s)
    assert json.load(open(sizes_path(path))) == TRUE_SIZES
    with pymq.MessageStore(path) as s:
        all_readable(s)
    ro = pymq.MessageStore(path, read_only=True)
    try:
        all_readable(ro)
    finally:
        ro.shutdown()
    report = StoreChecker(path).run()
    assert report.ok and report.records == N, report.problems


def test_deleting_the_record_is_a_way_out(template, tmp_path):
    """The error's other advice: without ``storeSizes.json`` the sizes are read off the
    files (this store's index has RocketMQ's four entries per slot)."""
    path = str(tmp_path / "s")
    shutil.copytree(template, path)
    with open(sizes_path(path), "w") as f:
        json.dump(WRONG["all-defaults"], f)
    with pytest.raises(pymq.SegmentSizeError):
        pymq.MessageStore(path)
    os.remove(sizes_path(path))
    with pymq.MessageStore(path) as s:
        assert s.config.commitlog_file_size == TRUE.commitlog_file_size
        all_readable(s)
    assert json.load(open(sizes_path(path))) == TRUE_SIZES


def test_one_damaged_file_is_not_a_contradiction(template, tmp_path):
    """A record that most files agree with stands when one queue file and one index file
    have another length (damage, which an open rebuilds): no refusal."""
    path = str(tmp_path / "s")
    shutil.copytree(template, path)
    index = sorted(os.listdir(os.path.join(path, "index")))
    os.truncate(os.path.join(path, "index", index[0]), 1000)
    queue = os.path.join(path, "consumequeue", "T", "1")
    with open(os.path.join(queue, sorted(os.listdir(queue))[0]), "ab") as f:
        f.write(bytes(40))
    with pymq.MessageStore(path) as s:
        all_readable(s, keys=False)          # the index file's keys are another matter
    assert json.load(open(sizes_path(path))) == TRUE_SIZES
