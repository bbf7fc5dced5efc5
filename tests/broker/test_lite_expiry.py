"""Lite-topic expiry in the broker (:mod:`pymq.broker.lite_lifecycle`): an idle lite topic
of a parent with ``lite.topic.expiration`` loses its LMQ, every group's offset and pop
state of it and every client's subscription of it; a young one, and one of a parent
without expiration, stay; a message after expiry starts the lite topic at offset 0 and
is popped; a message arriving before the deletion keeps the lite topic."""

from __future__ import annotations

import time

import pymq
from pymq.broker.lite_pop import pop_lite
from pymq.broker.lite_topic import to_lmq_name
from pymq.broker.topic_config import TopicConfig

try:
    from . import pop_testlib as lib
except ImportError:
    import pop_testlib as lib

UNIT_MS = 200          # one "minute" of lite.topic.expiration
IDLE, ACTIVE, FOREVER = to_lmq_name("P", "idle"), to_lmq_name("P", "active"), to_lmq_name("Q", "idle")


def put(broker, parent, lite, body):
    r = broker.put_lite_message(pymq.Message(parent, body), lite)
    assert r.status is pymq.PutMessageStatus.PUT_OK


def dispatched(broker):
    deadline = time.monotonic() + 10
    while broker.dispatch_behind_bytes() and time.monotonic() < deadline:
        time.sleep(0.002)


def open_lite_broker(path, **kw):
    kw.setdefault("min_lite_ttl", 0)
    b = lib.open_broker(path, lite_topic_expiration_unit_ms=UNIT_MS, lite_ttl_check_interval=3_600_000, **kw)
    tcm = b.topic_config_manager
    tcm.update_topic_config(TopicConfig("P", 2, 2, attributes={"message.type": "LITE",
                                                                "lite.topic.expiration": "1"}))
    tcm.update_topic_config(TopicConfig("Q", 2, 2, attributes={"message.type": "LITE"}))
    return b


def test_an_idle_lite_topic_is_deleted_with_its_offsets_pop_state_and_subscriptions(tmp_path):
    with open_lite_broker(tmp_path / "b") as b:
        svc, subs = b.pop_service, b.lite_subscriptions
        put(b, "P", "idle", b"i0")
        put(b, "P", "idle", b"i1")
        put(b, "Q", "idle", b"q0")
        dispatched(b)
        assert [m.body for m in pop_lite(svc, "g", (IDLE,), 1, 60_000).messages] == [b"i0"]   # in flight
        b.commit_offset("g2", IDLE, 0, 2)
        subs.add_partial("c1", "g", "P", [IDLE, ACTIVE])
        subs.add_partial("c2", "g", "P", [IDLE])
        time.sleep(UNIT_MS * 1.5 / 1000)
        put(b, "P", "active", b"a0")
        dispatched(b)
        assert b.lite_lifecycle.clean_expired() == [IDLE]
        assert not b.has_queue(IDLE, 0)
        assert b.query_offset("g2", IDLE, 0) == -1 and b.query_offset("g", IDLE, 0) == -1
        with svc._lock:                 # nothing in flight: the group starts over at 0
            assert [(s.next_offset, len(s.inflight)) for k, s in svc.state.queues.items() if k[1] == IDLE] == [
                (0, 0)]
        assert subs.subscribers(IDLE) == set() and subs.subscription("c1").lmqs == {ACTIVE}
        assert subs.subscription("c2").lmqs == set()
        assert b.has_queue(ACTIVE, 0) and b.has_queue(FOREVER, 0)     # young; a parent without expiration
        assert list(b.lite_lifecycle.deleted) == [IDLE]
        # a message after the expiry starts the lite topic afresh, and is popped at once
        put(b, "P", "idle", b"fresh")
        dispatched(b)
        assert (b.get_min_offset_in_queue(IDLE, 0), b.get_max_offset_in_queue(IDLE, 0)) == (0, 1)
        got = pop_lite(svc, "g", (IDLE,), 32, 60_000).messages
        assert [(m.body, m.queue_offset, m.reconsume_times) for m in got] == [(b"fresh", 0, 0)]


def test_a_message_before_the_deletion_keeps_the_lite_topic(tmp_path):
    with open_lite_broker(tmp_path / "b") as b:
        put(b, "P", "idle", b"i0")
        dispatched(b)
        time.sleep(UNIT_MS * 1.5 / 1000)
        lifecycle = b.lite_lifecycle
        assert lifecycle.is_expired(IDLE, 1)
        put(b, "P", "idle", b"i1")          # comes between the scan and the deletion
        assert not lifecycle.delete_lmq(IDLE, 1)
        assert b.get_max_offset_in_queue(IDLE, 0) == 2


def test_min_lite_ttl_holds_expiry_back(tmp_path):
    with open_lite_broker(tmp_path / "b", min_lite_ttl=60_000) as b:
        put(b, "P", "idle", b"i0")
        dispatched(b)
        time.sleep(UNIT_MS * 1.5 / 1000)
        lifecycle = b.lite_lifecycle
        assert not lifecycle.may_run()                       # the broker is younger than min_lite_ttl
        assert not lifecycle.is_expired(IDLE, 1)              # so is the lite topic's last message
        assert lifecycle.is_expired(IDLE, 1, now_ms=int(time.time() * 1000) + 61_000)
        assert lifecycle.clean_expired() == [] and b.has_queue(IDLE, 0)
