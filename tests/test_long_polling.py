"""Long polling (``wait_message``) and consumer offsets (STORE_SPEC 5 "Long polling", 7).

A reader blocked in ``wait_message`` must be woken by the dispatcher when its queue gets a
message (RocketMQ's ``NotifyMessageArrivingListener`` path), not by a timer: the wake
latency after a put is measured. Consumer offsets survive a reopen through
``config/consumerOffset.json`` in RocketMQ's fastjson shape.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import threading
import time

import pytest

import pymq

from conftest import small_config


def put(store, topic, qid, body=b"x"):
    r = store.put_message(pymq.Message(topic, body, queue_id=qid))
    assert r.status is pymq.PutMessageStatus.PUT_OK
    return r


def wait_dispatched(store, timeout=5.0):
    deadline = time.monotonic() + timeout
    while store.dispatch_behind_bytes() != 0:
        assert time.monotonic() < deadline, "dispatch did not catch up"
        time.sleep(0.001)


class Waiter(threading.Thread):
    """Calls ``wait_message`` once; records the result and when it returned."""

    def __init__(self, store, topic, qid, offset, timeout_s):
        super().__init__(daemon=True)
        self.args = (topic, qid, offset, timeout_s)
        self.store = store
        self.started_waiting = threading.Event()
        self.result = None
        self.t_start = self.t_end = None
        self.error = None

    def run(self):
        try:
            self.started_waiting.set()
            self.t_start = time.perf_counter()
            self.result = self.store.wait_message(*self.args)
            self.t_end = time.perf_counter()
        except BaseException as e:            # reported by the test
            self.error = e


def test_waiter_wakes_within_milliseconds_of_a_put(store):
    latencies = []
    for trial in range(20):
        mx = store.get_max_offset_in_queue("Poll", 0)
        w = Waiter(store, "Poll", 0, mx, 5.0)
        w.start()
        assert w.started_waiting.wait(2.0)
        time.sleep(0.01)                      # let it block on the condition
        assert w.is_alive() and w.result is None
        t_put = time.perf_counter()
        r = put(store, "Poll", 0, b"%d" % trial)
        assert r.queue_offset == mx
        w.join(5.0)
        assert not w.is_alive() and w.error is None
        assert w.result is True
        latencies.append(w.t_end - t_put)
        # the message it waited for is readable now
        g = store.get_message("g", "Poll", 0, mx, 1)
        assert [m.body for m in g.messages] == [b"%d" % trial]
    assert statistics.median(latencies) < 0.020, latencies
    assert max(latencies) < 0.200, latencies


def test_wait_times_out_when_nothing_comes(store):
    put(store, "Quiet", 0)
    wait_dispatched(store)
    for offset in (1, 5):
        t0 = time.monotonic()
        assert store.wait_message("Quiet", 0, offset, 0.1) is False
        elapsed = time.monotonic() - t0
        assert 0.1 - 0.002 <= elapsed < 0.6, elapsed
    t0 = time.monotonic()
    assert store.wait_message("NeverSeen", 3, 0, 0.1) is False        # unknown queue
    assert 0.1 - 0.002 <= time.monotonic() - t0 < 0.6


def test_wait_returns_at_once_when_the_offset_is_readable(store):
    for _ in range(3):
        put(store, "Ready", 0)
    wait_dispatched(store)
    for offset in (0, 1, 2):
        t0 = time.monotonic()
        assert store.wait_message("Ready", 0, offset, 5.0) is True
        assert time.monotonic() - t0 < 0.05
    t0 = time.monotonic()
    assert store.wait_message("Ready", 0, 3, 0.05) is False
    assert time.monotonic() - t0 >= 0.045


def test_waiters_wake_only_for_their_queue(store):
    waiters = {q: Waiter(store, "Multi", q, 0, 0.5) for q in range(4)}
    waiters["other"] = Waiter(store, "MultiOther", 2, 0, 0.5)      # same queue id, other topic
    for w in waiters.values():
        w.start()
    for w in waiters.values():
        assert w.started_waiting.wait(2.0)
    time.sleep(0.02)
    t_put = time.perf_counter()
    put(store, "Multi", 2)
    for w in waiters.values():
        w.join(3.0)
        assert not w.is_alive() and w.error is None
    assert waiters[2].result is True
    assert waiters[2].t_end - t_put < 0.2
    for key in (0, 1, 3, "other"):
        w = waiters[key]
        assert w.result is False, key
        assert w.t_end - w.t_start >= 0.5 - 0.002, key


def test_a_batch_wakes_the_waiter_of_its_queue(store):
    w = Waiter(store, "BatchPoll", 1, 0, 5.0)
    w.start()
    assert w.started_waiting.wait(2.0)
    time.sleep(0.01)
    t_put = time.perf_counter()
    r = store.put_messages([pymq.Message("BatchPoll", b"%d" % i, queue_id=1) for i in range(5)])
    assert r.status is pymq.PutMessageStatus.PUT_OK
    w.join(5.0)
    assert w.result is True and w.t_end - t_put < 0.2


def test_waiter_for_a_later_offset_waits_for_that_offset(store):
    """Waiting for offset 2 of an empty queue: the first two messages are not enough."""
    w = Waiter(store, "Later", 0, 2, 2.0)
    w.start()
    assert w.started_waiting.wait(2.0)
    time.sleep(0.01)
    put(store, "Later", 0)
    put(store, "Later", 0)
    time.sleep(0.05)
    assert w.is_alive(), "woke before offset 2 was readable"
    t_put = time.perf_counter()
    put(store, "Later", 0)
    w.join(3.0)
    assert w.result is True and w.t_end - t_put < 0.2


# -- consumer offsets ----------------------------------------------------------------------------

def offsets_file(root):
    return os.path.join(root, "config", "consumerOffset.json")


def check_fastjson_shape(path, expected):
    """``{"offsetTable":{"topic@group":{0:6,...}}}`` with unquoted int keys."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    # RocketMQ's fastjson writes queue ids as bare ints: not valid JSON for json.loads
    for (topic, group), queues in expected.items():
        assert '"%s@%s"' % (topic, group) in text
        for qid, off in queues.items():
            assert re.search(r"[{,]\s*%d\s*:\s*%d\b" % (qid, off), text), (qid, off, text)
    assert '"0"' not in text and not re.search(r'"\d+"\s*:', text)
    quoted = re.sub(r"([{,]\s*)(\d+)(\s*:)", r'\1"\2"\3', text)
    doc = json.loads(quoted)
    table = doc["offsetTable"]
    assert {k: {int(q): v for q, v in m.items()} for k, m in table.items()} == \
        {"%s@%s" % k: dict(v) for k, v in expected.items()}


def test_committed_offsets_survive_a_reopen(tmp_path):
    root = str(tmp_path / "s")
    expected = {("TopicTest", "group"): {0: 6, 1: 3, 2: 3, 3: 2}, ("Other_T", "g2"): {7: 123456789012}}
    with pymq.MessageStore(root, small_config()) as store:
        assert store.query_offset("group", "TopicTest", 0) == -1
        for (topic, group), queues in expected.items():
            for qid, off in queues.items():
                store.commit_offset(group, topic, qid, off - 1)
                store.commit_offset(group, topic, qid, off)       # the last commit wins
        assert store.query_offset("group", "TopicTest", 0) == 6
        assert store.query_offset("group", "TopicTest", 9) == -1
        assert store.query_offset("nobody", "TopicTest", 0) == -1
    assert os.path.isfile(offsets_file(root))
    check_fastjson_shape(offsets_file(root), expected)
    with pymq.MessageStore(root, small_config()) as store:
        for (topic, group), queues in expected.items():
            for qid, off in queues.items():
                assert store.query_offset(group, topic, qid) == off
        assert store.query_offset("group", "Other_T", 7) == -1
        assert store.query_offset("g2", "TopicTest", 0) == -1
        store.commit_offset("group", "TopicTest", 0, 7)
    with pymq.MessageStore(root, small_config()) as store:
        assert store.query_offset("group", "TopicTest", 0) == 7
        assert store.query_offset("group", "TopicTest", 3) == 2


def test_offsets_of_a_store_that_was_never_started_survive(tmp_path):
    root = str(tmp_path / "s")
    store = pymq.MessageStore(root, small_config())
    assert store.query_offset("g", "T", 0) == -1
    store.commit_offset("g", "T", 0, 42)
    store.commit_offset("g", "T", 5, 1)
    store.shutdown()
    assert os.path.isfile(offsets_file(root))
    store = pymq.MessageStore(root, small_config())       # again never started
    assert store.query_offset("g", "T", 0) == 42
    assert store.query_offset("g", "T", 5) == 1
    store.shutdown()
    with pymq.MessageStore(root, small_config()) as store:
        assert store.query_offset("g", "T", 0) == 42
    check_fastjson_shape(offsets_file(root), {("T", "g"): {0: 42, 5: 1}})


def test_offsets_are_persisted_while_running(tmp_path):
    """The persist service writes the table on its own (every flush_consumer_offset_interval
    ms), so a crash after that loses nothing."""
    root = str(tmp_path / "s")
    store = pymq.MessageStore(root, small_config(flush_consumer_offset_interval=50)).start()
    try:
        store.commit_offset("g", "Live", 1, 9)
        deadline = time.monotonic() + 3.0
        while not os.path.isfile(offsets_file(root)):
            assert time.monotonic() < deadline, "consumerOffset.json was not written while running"
            time.sleep(0.01)
        time.sleep(0.05)
        check_fastjson_shape(offsets_file(root), {("Live", "g"): {1: 9}})
    finally:
        store.shutdown()


@pytest.mark.parametrize("bad", [-1, "1", None, 1.5])
def test_commit_offset_rejects_bad_offsets(store, bad):
    with pytest.raises((TypeError, ValueError)):
        store.commit_offset("g", "T", 0, bad)
    assert store.query_offset("g", "T", 0) == -1
