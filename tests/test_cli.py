"""The pymq command line: in-process through main([...]) and once through the console script."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

import pymq
from pymq import admin, cli
from conftest import small_config


@pytest.fixture(scope="module")
def known_store(tmp_path_factory):
    """14 messages in 4 queues of TopicTest (as in the seed's mqadmin example), a consumer
    group with one committed offset, and the put results."""
    path = str(tmp_path_factory.mktemp("cli") / "broker-a")
    with pymq.MessageStore(path, small_config()) as s:
        rs = [s.put_message(pymq.Message("TopicTest", b"hello %d" % i, tags="TagA" if i % 2 else "TagB",
                                         keys=[f"order-{i}"], queue_id=i % 4)) for i in range(14)]
        s.put_message(pymq.Message("Other", b"x"))
        s.commit_offset("g1", "TopicTest", 0, 2)
    return path, rs


def run(capsys_or_fd, argv):
    code = cli.main(argv)
    out, err = capsys_or_fd.readouterr()
    return code, out, err


def test_topic_status_rows(known_store, capfd):
    path, rs = known_store
    code, out, err = run(capfd, ["--store", path, "topic-status", "-t", "TopicTest"])
    assert code == 0, err
    lines = out.strip().splitlines()
    assert lines[0].split() == ["#Broker", "Name", "#QID", "#Min", "Offset", "#Max", "Offset", "#Last", "Updated"]
    rows = [line.split() for line in lines[1:]]
    last_ts = {q: max(r.store_timestamp for i, r in enumerate(rs) if i % 4 == q) for q in range(4)}
    expected = [["broker-a", str(q), "0", str(n)] + admin.format_time(last_ts[q]).split()
                for q, n in [(0, 4), (1, 4), (2, 3), (3, 3)]]
    assert rows == expected


def test_topic_status_json_and_topic_list(known_store, capfd):
    path, _ = known_store
    code, out, _ = run(capfd, ["--store", path, "topic-status", "-t", "TopicTest", "--json"])
    data = json.loads(out)
    assert code == 0 and [(d["queue_id"], d["min_offset"], d["max_offset"]) for d in data] == \
        [(0, 0, 4), (1, 0, 4), (2, 0, 3), (3, 0, 3)]
    code, out, _ = run(capfd, ["--store", path, "topic-list", "--json"])
    assert code == 0 and json.loads(out) == ["Other", "TopicTest"]


def test_queries_by_key_id_and_offset(known_store, capfd):
    path, rs = known_store
    code, out, _ = run(capfd, ["--store", path, "query-msg-by-key", "-t", "TopicTest", "-k", "order-5", "--json"])
    assert code == 0 and [m["msg_id"] for m in json.loads(out)] == [rs[5].msg_id]
    code, out, _ = run(capfd, ["--store", path, "query-msg-by-key", "-t", "TopicTest", "-k", "nope"])
    assert code == 1 and "no message found" in out
    code, out, _ = run(capfd, ["--store", path, "query-msg-by-id", "-i", rs[7].msg_id, "--json"])
    m = json.loads(out)
    assert code == 0 and (m["topic"], m["keys"], m["body"], m["queue_id"]) == ("TopicTest", ["order-7"], "b'hello 7'", 3)
    code, out, _ = run(capfd, ["--store", path, "query-msg-by-offset", "-t", "TopicTest", "-q", "1", "-o", "2", "--json"])
    assert code == 0 and json.loads(out)["body"] == "b'hello 9'"
    code, _, err = run(capfd, ["--store", path, "query-msg-by-id", "-i", "XYZ"])
    assert code == 2 and "not a message id" in err and "Traceback" not in err


def test_print_msg_and_time_range(known_store, capfd):
    path, rs = known_store
    code, out, _ = run(capfd, ["--store", path, "print-msg", "-t", "TopicTest", "--json", "--body", "text"])
    bodies = sorted(json.loads(line)["body"] for line in out.splitlines())
    assert code == 0 and bodies == sorted(f"hello {i}" for i in range(14))
    t = rs[0].store_timestamp
    code, out, _ = run(capfd, ["--store", path, "print-msg", "-t", "TopicTest", "-q", "0",
                               "-b", str(t), "-e", str(t + 10 ** 6), "--json"])
    assert code == 0 and len(out.splitlines()) == 4


def test_consumer_progress(known_store, capfd):
    path, _ = known_store
    code, out, _ = run(capfd, ["--store", path, "consumer-progress", "-g", "g1", "--json"])
    data = json.loads(out)
    assert code == 0 and data["diff_total"] == 12
    assert [(q["queue_id"], q["broker_offset"], q["consumer_offset"], q["diff"]) for q in data["queues"]] == \
        [(0, 4, 2, 2), (1, 4, -1, 4), (2, 3, -1, 3), (3, 3, -1, 3)]


def test_check_on_a_clean_and_a_damaged_copy(known_store, capfd, tmp_path):
    path, rs = known_store
    code, out, _ = run(capfd, ["--store", path, "check"])
    assert code == 0 and "OK" in out
    copy = str(tmp_path / "copy")
    shutil.copytree(path, copy)
    seg = os.path.join(copy, "commitlog", "0" * 20)
    with open(seg, "r+b") as f:          # flip a byte in the body of message 3
        f.seek(rs[3].commitlog_offset + 90)
        b = f.read(1)
        f.seek(rs[3].commitlog_offset + 90)
        f.write(bytes([b[0] ^ 0xFF]))
    before = open(seg, "rb").read()
    code, out, _ = run(capfd, ["--store", copy, "check", "--json"])
    report = json.loads(out)
    assert code == 1 and not report["ok"]
    assert any(str(rs[3].commitlog_offset) in p["detail"] for p in report["problems"])
    assert open(seg, "rb").read() == before          # the check changed nothing


def test_check_reports_a_damaged_side_file(known_store, capfd, tmp_path):
    """A truncated consumerOffset.json that no writer has opened yet: check names it,
    says what an open would do, exits 1, and changes nothing."""
    path, _ = known_store
    copy = str(tmp_path / "copy")
    shutil.copytree(path, copy)
    offsets = os.path.join(copy, "config", "consumerOffset.json")
    for p in (offsets, offsets + ".bak"):
        if os.path.exists(p):
            os.remove(p)
    shutil.copyfile(os.path.join(path, "config", "consumerOffset.json"), offsets)
    with open(offsets, "r+b") as f:
        f.truncate(os.path.getsize(offsets) // 2)
    before = open(offsets, "rb").read()
    code, out, _ = run(capfd, ["--store", copy, "check"])
    assert code == 1 and "DAMAGED" in out and "sidefile config/consumerOffset.json" in out, out
    assert "note       config/consumerOffset.json: an open sets it aside" in out, out
    code, out, _ = run(capfd, ["--store", copy, "check", "--json"])
    report = json.loads(out)
    assert code == 1 and not report["ok"]
    assert [(p["kind"], p["where"]) for p in report["problems"]] == [("sidefile", "config/consumerOffset.json")]
    assert open(offsets, "rb").read() == before and not os.path.exists(offsets + ".bak")


def test_missing_store_is_a_clear_error(tmp_path, capfd):
    for argv in (["topic-list"], ["check"], ["topic-status", "-t", "T"]):
        code, _, err = run(capfd, ["--store", str(tmp_path / "nothing"), *argv])
        assert code == 2 and "no store" in err and "Traceback" not in err


def test_console_script_and_module(known_store):
    path, _ = known_store
    exe = shutil.which("pymq")
    assert exe is not None, "the pymq console script is not installed (pip install -e .)"
    p = subprocess.run([exe, "--store", path, "topic-status", "-t", "TopicTest"], capture_output=True, text=True)
    assert p.returncode == 0 and "broker-a" in p.stdout
    p = subprocess.run([sys.executable, "-m", "pymq", "--store", path, "topic-list"], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.split() == ["Other", "TopicTest"]
