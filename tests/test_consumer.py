"""pymq.Consumer: all queues of a topic, tag filtering, committed progress, long polling."""

from __future__ import annotations

import random
import threading
import time

import pymq
from conftest import small_config


def fill(store, n, rng, queues=4, tags=("TagA", "TagB", "TagC", None)):
    sent = []
    for i in range(n):
        tag = rng.choice(tags)
        body = b"m%06d" % i
        r = store.put_message(pymq.Message(topic="T", body=body, tags=tag, queue_id=rng.randrange(queues)))
        assert r.is_ok()
        sent.append((body, tag))
    return sent


def drain(consumer, idle_s=0.3):
    got = []
    while True:
        msgs = consumer.poll(timeout_s=idle_s)
        if not msgs:
            return got
        got.extend(msgs)


def test_reads_a_multi_queue_topic_with_a_tag_filter_exactly_once(tmp_path):
    rng = random.Random(5)
    cfg = small_config(consume_queue_entries=32)
    with pymq.MessageStore(tmp_path / "s", cfg) as store:
        sent = fill(store, 2000, rng)
        c = pymq.Consumer(store, group="g1", topic="T", tags="TagA || TagC")
        got = drain(c)
        want = sorted(b for b, t in sent if t in ("TagA", "TagC"))
        assert sorted(m.body for m in got) == want          # each exactly once
        assert all(m.tags in ("TagA", "TagC") for m in got)
        per_queue = {}
        for m in got:
            per_queue.setdefault(m.queue_id, []).append(m.queue_offset)
        assert all(offs == sorted(offs) for offs in per_queue.values())   # in queue order
        c.commit()
        positions = c.positions
    with pymq.MessageStore(tmp_path / "s", cfg) as store:
        for q, off in positions.items():
            assert store.query_offset("g1", "T", q) == off
        more = fill(store, 300, rng)
        c2 = pymq.Consumer(store, group="g1", topic="T", tags="TagA || TagC")
        got2 = drain(c2)
        assert sorted(m.body for m in got2) == sorted(b for b, t in more if t in ("TagA", "TagC"))


def test_consume_from_latest_and_timestamp(tmp_path):
    with pymq.MessageStore(tmp_path / "s", small_config()) as store:
        for i in range(10):
            store.put_message(pymq.Message(topic="T", body=b"old%d" % i))
        assert store.wait_message("T", 0, 9, 5)
        time.sleep(0.02)
        mark = int(time.time() * 1000)
        time.sleep(0.02)
        for i in range(5):
            store.put_message(pymq.Message(topic="T", body=b"new%d" % i))
        assert store.wait_message("T", 0, 14, 5)
        latest = pymq.Consumer(store, "g-latest", "T", consume_from="latest")
        assert latest.poll(timeout_s=0.05) == []
        by_time = pymq.Consumer(store, "g-time", "T", consume_from=mark)
        assert [m.body for m in drain(by_time, 0.1)] == [b"new%d" % i for i in range(5)]
        earliest = pymq.Consumer(store, "g-first", "T")
        assert len(drain(earliest, 0.1)) == 15


def test_poll_wakes_when_a_message_arrives(tmp_path):
    with pymq.MessageStore(tmp_path / "s", small_config()) as store:
        store.put_message(pymq.Message(topic="T", body=b"first", queue_id=1))
        c = pymq.Consumer(store, "g", "T")
        assert [m.body for m in c.poll(1.0)] == [b"first"]
        done = {}

        def late_put():
            time.sleep(0.2)
            done["t"] = time.monotonic()
            store.put_message(pymq.Message(topic="T", body=b"late", queue_id=3))   # a new queue

        threading.Thread(target=late_put).start()
        t0 = time.monotonic()
        msgs = c.poll(timeout_s=5.0)
        assert [m.body for m in msgs] == [b"late"]
        assert time.monotonic() - done["t"] < 0.1
        assert time.monotonic() - t0 < 2.0


def test_bad_arguments():
    import pytest
    with pytest.raises(ValueError):
        pymq.Consumer(None, "", "T")
    with pytest.raises(ValueError):
        pymq.Consumer(None, "g", "T", consume_from="yesterday")
