"""A damaged side file never locks a user out of the store (issue 11).

Each side file (consumer offsets, delay offsets, timer checkpoint, timer wheel, checkpoint,
store sizes) is damaged four ways (garbage, truncated, empty, zeroed), with and without a
good ``.bak`` where the file has one. The store must open, report what it found, keep
every message readable, still deliver its pending delayed and timer messages, and refuse
with ``strict_open``; a read-only open always works.
"""

from __future__ import annotations

import json
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
        new = rng.randbytes(max(len(data), 64))
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
    if not with_bak:
        # the cases without a .bak: the timer gate persists the timer checkpoint when the
        # first timer put creates its files, so a .bak can exist already; take it away
        for bak in (path / "config").glob("*.bak"):
            bak.unlink()


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
    damage(target, how, random.Random(f"{name}-{how}"))
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


# -- pymq check before any open --------------------------------------------------------------
#
# ``pymq check`` reads every side file with the store's own loaders and changes nothing: a
# damaged one is a ``sidefile`` problem (exit code 1), named by its path in the store, with a
# note on what an open would do. A zeroed ``checkpoint`` is legal (0 = unknown times): it is
# noted, not a problem.

CHECKED = dict(FILES, topicDeletions="config/topicDeletions.json", topics="config/topics.json",
               subscriptionGroup="config/subscriptionGroup.json")
TABLES = ("consumerOffset", "delayOffset", "timerCheckpoint", "topicDeletions", "topics", "subscriptionGroup")


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """A store, shut down cleanly, with every side file (each table saved twice, so it has
    a good ``.bak``) and a timer message pending for an hour, so a wheel that does not
    index it is damage."""
    from pymq.broker.subscription_group import SubscriptionGroupConfig, SubscriptionGroupManager
    from pymq.broker.topic_config import TopicConfig, TopicConfigManager

    path = tmp_path_factory.mktemp("side") / "s"
    with pymq.MessageStore(path, cfg()) as s:
        for i in range(N):
            s.put_message(pymq.Message("T", b"m%d" % i))
        s.put_message(pymq.Message("Gone", b"g"))
        s.put_message(pymq.Message("T", b"timer", deliver_time_ms=int(time.time() * 1000) + 3_600_000))
        s.put_message(pymq.Message("T", b"delayed", delay_level=1))
        deadline = time.monotonic() + 5
        while (s.dispatch_behind_bytes() or s.timer_service.checkpoint.enqueue_offset < 1) \
                and time.monotonic() < deadline:
            time.sleep(0.002)
        assert s.delete_topic("Gone")
        for offset in (7, 8):
            s.commit_offset("g", "T", 0, offset)
            s.consumer_offsets.persist()
            s.schedule_service.offsets.persist()
            s.timer_service.checkpoint._mark_changed()
            s.timer_service.persist()
            s.topic_deletions._mark_changed()
            s.topic_deletions.persist()
    topics, groups = TopicConfigManager(str(path), None), SubscriptionGroupManager(str(path), None)
    for n in range(2):
        topics.put(TopicConfig(f"T{n}"))
        groups.put(SubscriptionGroupConfig(f"g{n}"))
    topics.close()                  # a change within 200 ms of a write waits for the next
    groups.close()
    for name in CHECKED:
        assert (path / CHECKED[name]).exists(), name
        if name in TABLES:
            assert (path / (CHECKED[name] + ".bak")).exists(), name
    return path


def copy_store(src, dst):
    """A copy of the template made of hard links (the damage replaces a file, so the
    template is never written through a link)."""
    import shutil
    shutil.copytree(src, dst, copy_function=os.link)
    return dst


def damage_by_replacing(path, how, rng):
    data = open(path, "rb").read()
    new = {"garbage": rng.randbytes(max(len(data), 64)), "truncated": data[: len(data) // 2],
           "empty": b"", "zeroed": b"\0" * len(data)}[how]
    with open(f"{path}.new", "wb") as f:
        f.write(new)
    os.replace(f"{path}.new", path)


def snapshot(root):
    out = {}
    for d, _dirs, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            st = os.stat(p)
            out[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns)
    return out


def run_check(capfd, path, *extra):
    from pymq import cli
    code = cli.main(["--store", str(path), "check", *extra])
    out, err = capfd.readouterr()
    return code, out, err


def test_check_of_an_undamaged_store_is_ok(template, capfd, tmp_path):
    path = copy_store(template, tmp_path / "s")
    code, out, _ = run_check(capfd, path)
    assert code == 0 and "OK: no damage found" in out, out
    assert "sidefile" not in out
    code, out, _ = run_check(capfd, path, "--json")
    report = json.loads(out)
    assert code == 0 and report["ok"] and report["problems"] == [], report


@pytest.mark.parametrize("how", DAMAGES)
@pytest.mark.parametrize("name", list(CHECKED))
def test_check_reports_a_damaged_side_file_before_any_open(template, capfd, tmp_path, name, how):
    path = copy_store(template, tmp_path / "s")
    rel = CHECKED[name]
    for bak in path.glob("config/*.bak"):          # no good copy: an open would reset the table
        bak.unlink()
    damage_by_replacing(path / rel, how, random.Random(f"{name}-{how}"))
    before = snapshot(path)
    code, text, _ = run_check(capfd, path)
    code_json, out, _ = run_check(capfd, path, "--json")
    report = json.loads(out)
    assert snapshot(path) == before                   # the check changed nothing
    notes = [n for n in report["notes"] if n.startswith(rel)]
    if name == "checkpoint" and how == "zeroed":      # zero times are "unknown", not damage
        assert code == code_json == 0 and report["ok"], report
        assert any("checkpoint holds no times" in n for n in report["notes"]), report["notes"]
        return
    assert code == code_json == 1, text
    assert "DAMAGED" in text and f"sidefile {rel}" in text, text
    assert not report["ok"]
    assert [p["where"] for p in report["problems"] if p["kind"] == "sidefile"] == [rel], report["problems"]
    assert len(notes) == 1, report["notes"]             # what an open would do
    expected = {"timerwheel": "rebuilds the wheel", "checkpoint": "an open",
                "storeSizes": "reads the file sizes off the files"}.get(name, "starts with")
    assert expected in notes[0], notes[0]


@pytest.mark.parametrize("name", TABLES)
def test_check_says_an_open_would_load_the_bak(template, capfd, tmp_path, name):
    path = copy_store(template, tmp_path / "s")
    rel = CHECKED[name]
    damage_by_replacing(path / rel, "truncated", random.Random(2))
    code, out, _ = run_check(capfd, path, "--json")
    report = json.loads(out)
    assert code == 1 and [(p["kind"], p["where"]) for p in report["problems"]] == [("sidefile", rel)]
    assert f"{rel}.bak is good" in report["problems"][0]["detail"]
    assert any(n.startswith(rel) and f"loads {rel}.bak" in n for n in report["notes"]), report["notes"]


def test_check_reports_a_damaged_bak_without_a_main_file(template, capfd, tmp_path):
    path = copy_store(template, tmp_path / "s")
    rel = CHECKED["delayOffset"]
    (path / rel).unlink()
    damage_by_replacing(path / (rel + ".bak"), "garbage", random.Random(3))
    code, out, _ = run_check(capfd, path, "--json")
    report = json.loads(out)
    assert code == 1 and [p["where"] for p in report["problems"]] == [rel + ".bak"], report


def test_check_after_an_open_repaired_the_side_files(template, tmp_path):
    """Damage every side file of the store at once (the broker's tables are the broker's
    to repair): check reports each; an open repairs them, and the check then finds the
    store whole, with the damaged files set aside noted."""
    path = copy_store(template, tmp_path / "s")
    store_files = [CHECKED[n] for n in CHECKED if n not in ("topics", "subscriptionGroup")]
    (path / CHECKED["topics"]).unlink()
    (path / CHECKED["subscriptionGroup"]).unlink()
    for bak in path.glob("config/*.bak"):
        bak.unlink()
    for rel in store_files:
        damage_by_replacing(path / rel, "truncated", random.Random(4))
    report = StoreChecker(str(path)).run()
    assert sorted(p.where for p in report.problems if p.kind == "sidefile") == sorted(store_files)
    pymq.MessageStore(path, cfg()).shutdown()
    report = StoreChecker(str(path)).run()
    assert report.ok, report.problems
    assert any("consumerOffset.json.corrupt-" in n for n in report.notes), report.notes


def test_check_with_a_writer_holding_the_store_notes_what_it_handled(template, tmp_path):
    """A writer that opened a store with garbage in ``checkpoint`` took the times as
    unknown and writes them at its next flush: while it holds the store, the check notes
    the file instead of calling the store damaged."""
    path = copy_store(template, tmp_path / "s")
    damage_by_replacing(path / "checkpoint", "garbage", random.Random(5))
    assert not StoreChecker(str(path)).run().ok
    store = pymq.MessageStore(path, cfg())
    try:
        report = StoreChecker(str(path)).run()
        assert report.ok, report.problems
        assert any(n.startswith("checkpoint: ") and "a writer holds the store" in n for n in report.notes), \
            report.notes
    finally:
        store.shutdown()
