"""`pymq delete-topic`, `pymq clean-expired`, and what `topic-status` / `check` show after
cleaning (issue 11)."""

from __future__ import annotations

import json
import time

from conftest import small_config

import pymq
from pymq import cli
from pymq.store_sizes import save_sizes


def make_store(path, n=2000):
    cfg = small_config(file_reserved_time=0.2 / 3600, delete_when="%02d" % ((time.localtime().tm_hour + 12) % 24))
    with pymq.MessageStore(path, cfg) as s:
        for i in range(n):
            s.put_message(pymq.Message("Old", b"x" * 200, keys=[f"k{i}"], queue_id=i % 2))
        s.put_message(pymq.Message("Other", b"y"))
        s.commit_offset("g", "Old", 0, 5)
    return cfg


def run(capfd, argv):
    code = cli.main(argv)
    out, err = capfd.readouterr()
    return code, out, err


def test_clean_expired_then_topic_status_and_check_show_the_new_minimum(tmp_path, capfd):
    path = str(tmp_path / "s")
    cfg = make_store(path)
    save_sizes(path, cfg)
    time.sleep(0.3)
    code, out, err = run(capfd, ["--store", path, "clean-expired", "--json"])
    assert code == 0 and json.loads(out)["commitlog"] == 0, err     # 72 hours reserved
    code, out, err = run(capfd, ["--store", path, "clean-expired", "--reserved-hours", "0.00005", "--json"])
    assert code == 0, err
    data = json.loads(out)
    assert data["commitlog"] > 0 and data["consume_queue"] > 0 and data["min_commitlog_offset"] > 0
    code, out, err = run(capfd, ["--store", path, "topic-status", "-t", "Old", "--json"])
    rows = json.loads(out)
    assert code == 0 and all(r["min_offset"] > 0 for r in rows)
    with pymq.MessageStore(path, read_only=True) as ro:
        assert [r["min_offset"] for r in rows] == [ro.get_min_offset_in_queue("Old", q) for q in (0, 1)]
    code, out, err = run(capfd, ["--store", path, "check"])
    assert code == 0, out + err
    assert f"from offset {data['min_commitlog_offset']:,}" in out and "OK" in out
    code, out, err = run(capfd, ["--store", path, "check", "--json"])
    assert json.loads(out)["min_commitlog_offset"] == data["min_commitlog_offset"]


def test_delete_topic_from_the_command_line(tmp_path, capfd):
    path = str(tmp_path / "s")
    make_store(path, n=50)
    code, out, err = run(capfd, ["--store", path, "delete-topic", "-t", "Old", "--json"])
    assert code == 0, err
    assert json.loads(out) == {"topic": "Old", "deleted": True}
    code, out, err = run(capfd, ["--store", path, "topic-list", "--json"])
    assert json.loads(out) == ["Other"]
    code, out, err = run(capfd, ["--store", path, "delete-topic", "-t", "Old"])
    assert code == 2 and "no queue" in err
    code, out, err = run(capfd, ["--store", path, "clean-expired", "--force"])
    assert code == 0 and "Commit Log" in out
    with pymq.MessageStore(path) as s:
        assert s.query_offset("g", "Old", 0) == -1
        assert s.put_message(pymq.Message("Old", b"new")).queue_offset == 0


def test_maintenance_commands_refuse_a_locked_store(tmp_path, capfd):
    path = str(tmp_path / "s")
    make_store(path, n=5)
    with pymq.MessageStore(path, small_config()):
        code, out, err = run(capfd, ["--store", path, "clean-expired"])
        assert code == 2 and "lock" in err.lower()
    code, out, err = run(capfd, ["--store", str(tmp_path / "none"), "clean-expired"])
    assert code == 2 and "no store" in err


def test_clean_expired_force_deletes_past_one_pass_batch(tmp_path, capfd):
    """`--force` deletes every segment but the one being written, even when that is more
    than one cleaning pass takes (delete_files_batch_max, 10)."""
    path = str(tmp_path / "s")
    make_store(path, n=5000)
    segments = sorted((tmp_path / "s" / "commitlog").iterdir())
    assert len(segments) > 12
    code, out, err = run(capfd, ["--store", path, "clean-expired", "--force", "--json"])
    assert code == 0, err
    data = json.loads(out)
    assert data["commitlog"] == len(segments) - 1
    assert [p.name for p in (tmp_path / "s" / "commitlog").iterdir()] == [segments[-1].name]
    with pymq.MessageStore(path, read_only=True) as ro:
        assert ro.get_min_phy_offset() == int(segments[-1].name)
