"""``pymq stats`` and ``pymq top`` over a live store (opened read-only)."""

from __future__ import annotations

import json
import threading
import time

import pymq
from pymq import cli

from conftest import small_config


def run(capfd, argv):
    code = cli.main(argv)
    out, err = capfd.readouterr()
    return code, out, err


def test_stats_json_and_text(tmp_path, capfd):
    path = str(tmp_path / "s")
    with pymq.MessageStore(path, small_config()) as s:
        for i in range(12):
            s.put_message(pymq.Message("TopicTest", b"x", queue_id=i % 3))
        s.put_message(pymq.Message("TopicTest", b"later", delay_level=5))
        s.commit_offset("g1", "TopicTest", 0, 1)
    code, out, err = run(capfd, ["--store", path, "stats", "--json", "--sample", "0"])
    assert code == 0, err
    st = json.loads(out)
    assert {t["topic"]: t["messages"] for t in st["topics"]}["TopicTest"] == 12
    assert st["groups"] == [{"group": "g1", "topic": "TopicTest", "lag": 3,
                             "queues": [{"queue_id": 0, "consumer_offset": 1, "broker_offset": 4, "lag": 3}]}]
    assert st["delay"]["pending"] == 1 and st["read_only"] is True
    code, out, err = run(capfd, ["--store", path, "stats", "--sample", "0"])
    assert code == 0, err
    assert "pending    1 delayed, 0 timer messages" in out
    assert "#Topic" in out and "TopicTest" in out and "#Lag" in out


def test_stats_measures_the_writers_put_rate(tmp_path, capfd):
    path = str(tmp_path / "s")
    with pymq.MessageStore(path, small_config(commitlog_file_size=1 << 20)) as s:
        s.put_message(pymq.Message("T", b"first"))
        stop = threading.Event()

        def produce():
            while not stop.is_set():
                s.put_message(pymq.Message("T", b"y"))
                time.sleep(0.001)

        t = threading.Thread(target=produce)
        t.start()
        try:
            code, out, err = run(capfd, ["--store", path, "stats", "--json", "--sample", "0.5"])
        finally:
            stop.set()
            t.join()
    assert code == 0, err
    st = json.loads(out)
    assert st["put"]["messages_total"] > 10 and st["tps"]["10s"]["put_tps"] > 10


def test_top_redraws_until_its_iterations(tmp_path, capfd):
    path = str(tmp_path / "s")
    with pymq.MessageStore(path, small_config()) as s:
        s.put_message(pymq.Message("T", b"x"))
    code, out, err = run(capfd, ["--store", path, "top", "--iterations", "3", "--interval", "0.05"])
    assert code == 0, err
    assert out.count("pymq top - ") == 3 and "msgs/s" in out
    assert "\x1b[2J" not in out                  # not a terminal: plain frames, no escape codes
    code, out, err = run(capfd, ["--store", str(tmp_path / "missing"), "top", "--iterations", "1"])
    assert code == 2 and "no store" in err
