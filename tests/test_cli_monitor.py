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


def _settle(store) -> None:
    deadline = time.monotonic() + 10
    while store.dispatch_behind_bytes() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_pop_in_flight_rebuilt_from_the_revive_log_beside_a_live_broker(tmp_path, capfd):
    """``pymq stats`` and ``pymq top`` run beside the broker of a store (``pymq serve`` in
    another process), on the store opened read-only: their pop rows are the broker's own
    ``stats()["pop"]``, rebuilt from the revive log, followed as it grows, and after a
    restart from ``config/popState.json`` plus the records after it."""
    from pymq.broker.pop_view import PopView

    path = str(tmp_path / "b")
    broker = pymq.Broker(path, small_config()).start()
    try:
        for i in range(10):
            broker.put_message(pymq.Message("Jobs", b"j", queue_id=i % 2))
        _settle(broker)
        ro = pymq.MessageStore(path, read_only=True).start()
        view = PopView(ro)
        assert view.rows() == [] == broker.stats()["pop"]          # no pop yet: no revive log
        sc = pymq.SimpleConsumer(broker, "w", "Jobs")
        got = sc.receive(6, 60)
        sc.ack(got[0])
        sc.ack(got[1])
        _settle(broker)
        expected = broker.stats()["pop"]
        assert expected == [{"group": "w", "topic": "Jobs", "inflight": 4, "waiting": 0, "unread": 4}]
        code, out, err = run(capfd, ["--store", path, "stats", "--json", "--sample", "0"])
        assert code == 0, err
        assert json.loads(out)["pop"] == expected
        code, out, err = run(capfd, ["--store", path, "stats", "--sample", "0"])
        assert "#Inflight" in out and "w" in out, out
        ro.refresh()
        assert view.rows() == expected
        for m in got[2:]:                                           # the view follows the log
            sc.ack(m)
        sc.change_invisible_duration(sc.receive(1, 60)[0], 120)
        _settle(broker)
        ro.refresh()
        assert view.rows() == broker.stats()["pop"]
        ro.shutdown()
        before_restart = broker.stats()["pop"]
    finally:
        broker.shutdown()
    code, out, err = run(capfd, ["--store", path, "stats", "--json", "--sample", "0"])
    assert json.loads(out)["pop"] == before_restart
    with pymq.Broker(path, small_config()) as broker:
        assert broker.stats()["pop"] == before_restart
        pymq.SimpleConsumer(broker, "w2", "Jobs").receive(3, 60)
        _settle(broker)
        code, out, err = run(capfd, ["--store", path, "top", "--iterations", "2", "--interval", "0.1"])
        assert code == 0, err
        assert "#Inflight" in out and "w2" in out, out
        code, out, err = run(capfd, ["--store", path, "stats", "--json", "--sample", "0"])
        assert json.loads(out)["pop"] == broker.stats()["pop"]
        assert {r["group"]: r["inflight"] for r in broker.stats()["pop"]}["w2"] == 3


def test_pop_view_matches_the_broker_through_random_operations(tmp_path):
    """The broker's in-memory pop state is the oracle: after every step of a random run of
    puts, receives, acks and invisibility changes by two groups, the view of a read-only
    store that only reads the revive log counts the same."""
    import random

    from pymq.broker.pop_view import PopView

    rng = random.Random(20261125)
    path = str(tmp_path / "b")
    with pymq.Broker(path, small_config()) as broker:
        ro = pymq.MessageStore(path, read_only=True).start()
        try:
            view = PopView(ro)
            consumers = [pymq.SimpleConsumer(broker, g, "Jobs") for g in ("a", "b")]
            held: list = []
            for step in range(80):
                op = rng.choice(["put", "put", "receive", "ack", "change"])
                sc = rng.choice(consumers)
                if op == "put":
                    broker.put_message(pymq.Message("Jobs", b"%d" % step, queue_id=rng.randrange(3)))
                elif op == "receive":
                    held += [(sc, m) for m in sc.receive(rng.randrange(1, 4), 60)]
                elif held:
                    owner, m = held.pop(rng.randrange(len(held)))
                    if op == "ack":
                        owner.ack(m)
                    else:
                        owner.change_invisible_duration(m, 90)
                _settle(broker)
                ro.refresh()
                assert view.rows() == broker.stats()["pop"], (step, op)
        finally:
            ro.shutdown()
