"""Lite topics in the broker: a LITE message is stored once in its parent topic and filed
in its lite topic's LMQ (``%LMQ%$parent$lite`` queue 0) with RocketMQ's properties; a
group pops each lite topic in order, one message in flight at a time; LMQ offsets go on
after a restart; the LMQ quota; deleting the parent deletes its lite topics; the
subscription registry."""

from __future__ import annotations

import time

import pytest

import pymq
from pymq.broker.lite_pop import pop_lite
from pymq.broker.lite_subscriptions import LiteSubscriptionQuotaError, LiteSubscriptionRegistry
from pymq.broker.lite_topic import (IllegalLiteTopicError, check_lite_topic, lite_queues_of, parent_and_lite,
                                    to_lmq_name)
from pymq.broker.lite_writer import LiteTopicQuotaError

try:
    from . import pop_testlib as lib
except ImportError:
    import pop_testlib as lib

A, B = to_lmq_name("P", "a"), to_lmq_name("P", "b")


def put(broker, lite, body, queue_id=0):
    m = pymq.Message("P", body)
    m.queue_id = queue_id
    r = broker.put_lite_message(m, lite)
    assert r.status is pymq.PutMessageStatus.PUT_OK
    return r


def dispatched(broker):
    deadline = time.monotonic() + 10
    while broker.dispatch_behind_bytes() and time.monotonic() < deadline:
        time.sleep(0.002)


def bodies(result):
    return [m.body.decode() for m in result.messages]


def test_names():
    assert A == "%LMQ%$P$a"
    assert parent_and_lite(A) == ("P", "a")
    assert parent_and_lite("%LMQ%plain") is None
    assert lite_queues_of(["P", A, B, "%LMQ%$PX$a"], "P") == [A, B]
    assert check_lite_topic("device_12-ab") == "device_12-ab"
    for bad in ("", "  ", "a$b", "a b", "x" * 65):
        with pytest.raises(IllegalLiteTopicError):
            check_lite_topic(bad)


def test_a_lite_message_is_stored_once_and_filed_in_its_lmq(tmp_path):
    with lib.open_broker(tmp_path / "b") as b:
        put(b, "a", b"a0", queue_id=1)
        put(b, "b", b"b0", queue_id=2)
        put(b, "a", b"a1", queue_id=3)
        dispatched(b)
        r = b.get_message("g", A, 0, 0, 10)
        assert [(m.body, m.topic, m.queue_id, m.queue_offset) for m in r.messages] == [
            (b"a0", "P", 0, 0), (b"a1", "P", 0, 1)]
        props = r.messages[1].properties
        assert (props["__LITE_TOPIC"], props["INNER_MULTI_DISPATCH"], props["INNER_MULTI_QUEUE_OFFSET"]) == (
            "a", A, "1")
        assert [m.body for m in b.get_message("g", "P", 3, 0, 10).messages] == [b"a1"]
        assert b.get_max_offset_in_queue(B, 0) == 1


def test_a_group_pops_each_lite_topic_in_order_one_at_a_time(tmp_path):
    clock = lib.FakeClock()
    with lib.open_broker(tmp_path / "b", clock) as b:
        for i in range(3):
            put(b, "a", f"a{i}".encode(), queue_id=i)
            put(b, "b", f"b{i}".encode(), queue_id=i)
        dispatched(b)
        svc = b.pop_service
        first = pop_lite(svc, "g", [A, B], 32, 10_000)
        assert sorted(bodies(first)) == ["a0", "b0"]
        assert bodies(pop_lite(svc, "g", [A, B], 32, 10_000)) == []          # both held by the group
        assert sorted(bodies(pop_lite(svc, "other", [A], 32, 10_000))) == ["a0"]   # groups are apart
        a0 = next(m for m in first.messages if m.body == b"a0")
        b.ack_message(a0.properties["POP_CK"])
        assert bodies(pop_lite(svc, "g", [A, B], 32, 10_000)) == ["a1"]
        clock.advance(20_000)                  # nothing acked since: both come back, in order
        again = pop_lite(svc, "g", [A, B], 32, 10_000)
        assert sorted((m.body.decode(), m.reconsume_times) for m in again.messages) == [("a1", 1), ("b0", 1)]


def test_lmq_offsets_go_on_after_a_restart(tmp_path):
    path = tmp_path / "b"
    with lib.open_broker(path) as b:
        put(b, "a", b"a0")
        put(b, "a", b"a1")
    with lib.open_broker(path) as b:
        put(b, "a", b"a2")
        dispatched(b)
        r = b.get_message("g", A, 0, 0, 10)
        assert [(m.body, m.queue_offset) for m in r.messages] == [(b"a0", 0), (b"a1", 1), (b"a2", 2)]


def test_new_lite_topics_past_the_quota_are_refused(tmp_path):
    with lib.open_broker(tmp_path / "b", max_lmq_consume_queue_num=2) as b:
        put(b, "a", b"1")
        put(b, "b", b"2")
        with pytest.raises(LiteTopicQuotaError):
            b.put_lite_message(pymq.Message("P", b"3"), "c")
        put(b, "a", b"4")                      # an existing one goes on


def test_deleting_the_parent_deletes_its_lite_topics(tmp_path):
    with lib.open_broker(tmp_path / "b") as b:
        put(b, "a", b"1")
        put(b, "b", b"2")
        dispatched(b)
        assert b.delete_topic("P")
        assert not [t for t in b.get_topics() if t.startswith("%LMQ%$P$")]
        put(b, "a", b"again")                  # a new lite topic of that name starts at 0
        dispatched(b)
        assert [m.queue_offset for m in b.get_message("g", A, 0, 0, 10).messages] == [0]


def test_registry_partial_complete_and_quota():
    reg = LiteSubscriptionRegistry(pymq.BrokerConfig(max_lite_subscription_count=3))
    reg.add_partial("c1", "g", "P", [A])
    reg.add_partial("c1", "g", "P", [A, B])
    assert reg.subscription("c1").lmqs == {A, B}
    assert reg.subscribers(A) == {"c1"}
    reg.add_partial("c2", "g", "P", [A])
    assert reg.subscribers(A) == {"c1", "c2"} and reg.active_count() == 3
    with pytest.raises(LiteSubscriptionQuotaError):
        reg.add_partial("c2", "g", "P", [B])
    reg.remove_partial("c1", "g", "P", [A])
    assert reg.subscription("c1").lmqs == {B}
    reg.add_complete("c1", "g", "P", [to_lmq_name("P", "x")])
    assert reg.subscription("c1").lmqs == {to_lmq_name("P", "x")} and reg.subscribers(B) == set()
    reg.remove_complete("c1")
    assert reg.subscription("c1") is None and reg.active_count() == 1


def test_pymq_check_takes_lmq_entries_for_what_they_are(tmp_path):
    """An LMQ entry points at a record of the parent queue that names the LMQ in its
    properties: ``pymq check`` finds nothing wrong; an entry at the wrong place is found."""
    from pymq.checker import StoreChecker
    path = tmp_path / "b"
    with lib.open_broker(path) as b:
        for i in range(4):
            put(b, "a", f"a{i}".encode(), queue_id=i % 2)
        dispatched(b)
    report = StoreChecker(path).run()
    assert report.ok, report.problems
    cq_file = next((path / "consumequeue" / A / "0").iterdir())
    data = bytearray(cq_file.read_bytes())
    data[0:20], data[20:40] = data[20:40], data[0:20]        # entries 0 and 1 swapped
    cq_file.write_bytes(bytes(data))
    report = StoreChecker(path).run()
    assert not report.ok
    assert any("INNER_MULTI_QUEUE_OFFSET" in str(p) for p in report.problems)
