"""store.stats(): values checked against counted operations (RocketMQ's StoreStatsService and
runtime info), rates over their windows, the read-only view, the broker's pop counts."""

from __future__ import annotations

import json
import time

import pymq

from conftest import small_config


def cfg(**over):
    values = dict(commitlog_file_size=1 << 20, consume_queue_entries=1000, index_hash_slots=64,
                  index_max_entries=4096, message_delay_level="1s 2s")
    values.update(over)
    return small_config(**values)


def _wait_for(cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_totals_equal_the_operations_counted(tmp_path):
    with pymq.MessageStore(tmp_path / "s", cfg()) as store:
        wrote = 0
        for i in range(120):
            r = store.put_message(pymq.Message("A", b"x" * (i % 7 + 1), queue_id=i % 3))
            wrote += r.wrote_bytes
        r = store.put_messages([pymq.Message("B", b"batch", queue_id=1) for _ in range(30)])
        wrote += r.wrote_bytes
        _wait_for(lambda: store.dispatch_behind_bytes() == 0)
        found = miss = got = got_bytes = 0
        for qid in range(3):
            offset = 0
            while True:
                g = store.get_message("g", "A", qid, offset, 16)
                if g.messages:
                    found += 1
                    got += len(g.messages)
                    got_bytes += g.buffer_total_size
                    offset = g.next_begin_offset
                else:
                    miss += 1
                    break
        store.get_message("g", "Nowhere", 0, 0)
        miss += 1
        st = store.stats()
    assert st["put"] == {"messages_total": 150, "bytes_total": wrote}
    assert st["get"] == {"found_total": found, "miss_total": miss, "messages_total": got, "bytes_total": got_bytes}
    assert got == 120
    topics = {t["topic"]: t for t in st["topics"]}
    assert topics["A"]["messages"] == 120 and topics["B"]["messages"] == 30
    assert [(q["queue_id"], q["min_offset"], q["max_offset"]) for q in topics["A"]["queues"]] == \
        [(0, 0, 40), (1, 0, 40), (2, 0, 40)]
    assert st["commitlog"]["max_offset"] == wrote and st["commitlog"]["dispatch_behind_bytes"] == 0
    assert json.loads(json.dumps(st)) == st        # plain JSON types only


def test_rates_cover_their_windows(tmp_path):
    with pymq.MessageStore(tmp_path / "s", cfg()) as store:
        time.sleep(1.1)                         # a sample in the ring before the puts
        for _ in range(500):
            store.put_message(pymq.Message("A", b"y"))
        tps = store.stats()["tps"]
    assert set(tps) == {"10s", "1m", "10m"}
    for window in tps.values():
        # nothing was put before the first sample, so each window holds the 500 puts
        assert abs(window["put_tps"] * window["seconds"] - 500) < 1.5
        assert window["seconds"] >= 1.0
        assert window["get_found_tps"] == 0


def test_consumer_lag_disk_and_pending_deliveries(tmp_path):
    with pymq.MessageStore(tmp_path / "s", cfg(disk_max_used_space_ratio=70)) as store:
        for i in range(10):
            store.put_message(pymq.Message("A", b"m", queue_id=i % 2))
        store.put_message(pymq.Message("A", b"d1", delay_level=1))
        store.put_message(pymq.Message("A", b"d2", delay_level=2))
        store.put_message(pymq.Message("A", b"d3", delay_level=2))
        due = int(time.time() * 1000) + 1500
        for _ in range(4):
            store.put_message(pymq.Message("A", b"t", deliver_time_ms=due))
        store.put_message(pymq.Message("A", b"far", deliver_time_ms=due + 3_600_000))
        _wait_for(lambda: store.dispatch_behind_bytes() == 0)
        store.commit_offset("g1", "A", 0, 2)
        store.commit_offset("g1", "A", 1, 5)
        st = store.stats()
        (g1,) = [g for g in st["groups"] if g["group"] == "g1"]
        assert g1["topic"] == "A" and g1["lag"] == (5 - 2) + (5 - 5)
        assert {q["queue_id"]: q["lag"] for q in g1["queues"]} == {0: 3, 1: 0}
        assert st["delay"]["pending"] == 3
        assert [lv["pending"] for lv in st["delay"]["levels"]] == [1, 2]
        _wait_for(lambda: store.stats()["timer"]["pending"] == 5)
        disk = st["disk"]
        assert disk["clean_ratio"] == 0.70 and disk["warning_ratio"] == 0.90
        assert 0 <= disk["used_ratio"] <= 1 and disk["free_bytes"] > 0 and disk["puts_refused"] is False
        _wait_for(lambda: store.stats()["delay"]["pending"] == 0, timeout=15)
        _wait_for(lambda: store.stats()["timer"]["pending"] == 1, timeout=15)   # the 4 due ones went
        assert store.get_max_offset_in_queue("A", 0) >= 5 + 3 + 4


def test_read_only_view_follows_the_writer(tmp_path):
    path = tmp_path / "s"
    writer = pymq.MessageStore(path, cfg(flush_consumer_offset_interval=20)).start()
    try:
        reader = pymq.MessageStore(path, read_only=True).start()
        try:
            for i in range(40):
                writer.put_message(pymq.Message("A", b"z", queue_id=i % 2))
            writer.commit_offset("g", "A", 0, 15)
            _wait_for(lambda: reader.stats()["put"]["messages_total"] == 40)
            _wait_for(lambda: [g["lag"] for g in reader.stats()["groups"]] == [5])
            st = reader.stats()
            assert st["read_only"] and st["commitlog"]["flushed_offset"] is None
        finally:
            reader.shutdown()
    finally:
        writer.shutdown()


def test_broker_reports_pop_in_flight(tmp_path):
    with pymq.Broker(tmp_path / "b", cfg()) as broker:
        for i in range(6):
            broker.put_message(pymq.Message("Jobs", b"j", queue_id=0))
        _wait_for(lambda: broker.dispatch_behind_bytes() == 0)
        sc = pymq.SimpleConsumer(broker, "w", "Jobs")
        got = sc.receive(4, 60)
        sc.ack(got[0])
        (pop,) = broker.stats()["pop"]
        assert pop == {"group": "w", "topic": "Jobs", "inflight": 3, "waiting": 0, "unread": 2}
        assert broker.stats()["transactions"] == {"half_pending": 0}
