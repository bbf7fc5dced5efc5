"""Pop (receive with an invisibility time): ack, stale handles, change of invisible time,
redelivery with reconsume_times + 1, dead-lettering, restart, FIFO message groups,
long polling and SimpleConsumer."""

from __future__ import annotations

import os
import threading
import time

import pytest

import pymq
from pymq.broker.pop_service import PopStatus
from pymq.broker.receipt_handle import InvalidReceiptHandleError, decode_receipt_handle

try:
    from . import pop_testlib as lib
except ImportError:
    import pop_testlib as lib


@pytest.fixture
def clock():
    return lib.FakeClock()


@pytest.fixture
def broker(tmp_path, clock):
    b = lib.open_broker(tmp_path / "b", clock)
    yield b
    b.shutdown()


def fill(b, n, queues=1, topic="T", **kw):
    for i in range(n):
        lib.put(b, topic, b"m%d" % i, queue_id=i % queues, **kw)
    lib.wait_dispatched(b)


def bodies(msgs):
    return sorted(m.body for m in msgs)


def test_pop_hides_acked_never_return(broker, clock):
    fill(broker, 10, queues=2)
    r = broker.pop_message("g", "T", 4, 1000)
    assert r.status is PopStatus.FOUND and len(r.messages) == 4
    assert all(m.receipt_handle and m.reconsume_times == 0 and m.delivery_attempt == 1 for m in r.messages)
    rest = broker.pop_message("g", "T", 32, 1000).messages
    assert len(rest) == 6 and not set(bodies(rest)) & set(bodies(r.messages))
    assert broker.pop_message("g", "T", 32, 1000).status is PopStatus.NO_NEW_MSG
    for m in r.messages + rest:
        broker.ack_message(m.receipt_handle)
    clock.advance(10_000)
    assert broker.pop_message("g", "T", 32, 1000).messages == []
    # another group gets everything
    assert len(broker.pop_message("other", "T", 32, 1000).messages) == 10


def test_stale_handle_refused_never_acks_new_delivery(broker, clock):
    fill(broker, 1)
    first = broker.pop_message("g", "T", 1, 1000).messages[0]
    clock.advance(1000)
    second = broker.pop_message("g", "T", 1, 1000).messages[0]
    assert second.queue_offset == first.queue_offset and second.reconsume_times == 1
    with pytest.raises(InvalidReceiptHandleError):
        broker.ack_message(first.receipt_handle)
    broker.ack_message(second.receipt_handle)
    with pytest.raises(InvalidReceiptHandleError):
        broker.ack_message(second.receipt_handle)
    with pytest.raises(InvalidReceiptHandleError):
        broker.ack_message("garbage")
    with pytest.raises(InvalidReceiptHandleError):
        broker.change_invisible_time(second.receipt_handle, 10)


def test_ack_after_deadline_before_redelivery_is_accepted(broker, clock):
    fill(broker, 1)
    m = broker.pop_message("g", "T", 1, 1000).messages[0]
    clock.advance(5000)
    broker.ack_message(m.receipt_handle)
    assert broker.pop_message("g", "T", 1, 1000).messages == []


def test_ack_messages_batch(broker, clock):
    fill(broker, 3)
    ms = broker.pop_message("g", "T", 3, 1000).messages
    broker.ack_message(ms[0].receipt_handle)
    res = broker.pop_service.ack_messages([m.receipt_handle for m in ms] + ["junk"])
    assert res[1:3] == [None, None]
    assert isinstance(res[0], InvalidReceiptHandleError) and isinstance(res[3], InvalidReceiptHandleError)
    clock.advance(5000)
    assert broker.pop_message("g", "T", 3, 1000).messages == []


def test_change_invisible_time(broker, clock):
    fill(broker, 1)
    m = broker.pop_message("g", "T", 1, 1000).messages[0]
    h = broker.change_invisible_time(m.receipt_handle, 5000)
    assert h != m.receipt_handle and decode_receipt_handle(h).offset == m.queue_offset
    with pytest.raises(InvalidReceiptHandleError):
        broker.ack_message(m.receipt_handle)          # replaced by the new handle
    clock.advance(4999)
    assert broker.pop_message("g", "T", 1, 1000).messages == []
    clock.advance(1)
    again = broker.pop_message("g", "T", 1, 1000).messages
    assert [x.body for x in again] == [b"m0"] and again[0].reconsume_times == 1
    with pytest.raises(InvalidReceiptHandleError):
        broker.ack_message(h)


def test_change_to_zero_makes_visible_now(broker, clock):
    fill(broker, 1)
    m = broker.pop_message("g", "T", 1, 60_000).messages[0]
    broker.change_invisible_time(m.receipt_handle, 0)
    assert [x.body for x in broker.pop_message("g", "T", 1, 1000).messages] == [b"m0"]


def test_dead_letter_after_retry_max_times(tmp_path, clock):
    b = lib.open_broker(tmp_path / "b", clock, max_reconsume_times=2)
    try:
        fill(b, 2)
        attempts = []
        for _ in range(3):                     # reconsume_times 0, 1, 2
            ms = b.pop_message("g", "T", 32, 1000).messages
            attempts.append(sorted(m.reconsume_times for m in ms))
            clock.advance(1000)
        assert attempts == [[0, 0], [1, 1], [2, 2]]
        assert b.pop_message("g", "T", 32, 1000).messages == []
        assert sorted(lib.dlq_bodies(b, "g")) == [b"m0", b"m1"]
        dlq = b.get_message("x", "%DLQ%g", 0, 0, 32).messages
        assert dlq[0].reconsume_times == 3 and dlq[0].properties.get("RETRY_TOPIC") == "T"
        assert "POP_CK" not in dlq[0].properties
    finally:
        b.shutdown()


def test_forward_to_dead_letter(broker, clock):
    fill(broker, 2)
    ms = broker.pop_message("g", "T", 2, 1000).messages
    clock.advance(1000)
    again = broker.pop_message("g", "T", 1, 1000).messages
    with pytest.raises(InvalidReceiptHandleError):
        broker.pop_service.forward_to_dead_letter(ms[0].receipt_handle)     # stale: nothing moved
    broker.pop_service.forward_to_dead_letter(again[0].receipt_handle)
    assert lib.dlq_bodies(broker, "g") == [again[0].body]
    dlq = broker.get_message("x", "%DLQ%g", 0, 0, 1).messages[0]
    assert dlq.reconsume_times == 2                       # its delivery's (1) + 1
    with pytest.raises(InvalidReceiptHandleError):
        broker.ack_message(again[0].receipt_handle)
    clock.advance(1000)
    assert [m.body for m in broker.pop_message("g", "T", 5, 1000).messages] == [ms[1].body]


def test_revive_service_dead_letters_without_pops(tmp_path, clock):
    b = lib.open_broker(tmp_path / "b", clock, max_reconsume_times=0)
    try:
        fill(b, 3)
        assert len(b.pop_message("g", "T", 32, 1000).messages) == 3
        clock.advance(1000)
        assert b.pop_service.revive() == 3
        assert sorted(lib.dlq_bodies(b, "g")) == [b"m0", b"m1", b"m2"]
        assert b.query_offset("g", "T", 0) == 3          # progress recorded as consumer offset
    finally:
        b.shutdown()


def test_restart_keeps_acks_inflight_and_deadlines(tmp_path, clock):
    b = lib.open_broker(tmp_path / "b", clock)
    fill(b, 6)
    ms = b.pop_message("g", "T", 4, 10_000).messages
    b.ack_message(ms[0].receipt_handle)
    b.change_invisible_time(ms[1].receipt_handle, 20_000)
    b.shutdown()
    b = lib.open_broker(tmp_path / "b", clock)
    try:
        with pytest.raises(InvalidReceiptHandleError):
            b.ack_message(ms[0].receipt_handle)
        assert bodies(b.pop_message("g", "T", 32, 30_000).messages) == [b"m4", b"m5"]
        clock.advance(10_000)
        assert bodies(b.pop_message("g", "T", 32, 30_000).messages) == [b"m2", b"m3"]
        clock.advance(10_000)
        again = b.pop_message("g", "T", 32, 10_000).messages
        assert [(m.body, m.reconsume_times) for m in again] == [(b"m1", 1)]
    finally:
        b.shutdown()


def test_replay_without_snapshot_equals_snapshot(tmp_path, clock):
    b = lib.open_broker(tmp_path / "b", clock)
    fill(b, 20, queues=2)
    ms = b.pop_message("g", "T", 12, 10_000).messages
    for m in ms[::3]:
        b.ack_message(m.receipt_handle)
    b.change_invisible_time(ms[1].receipt_handle, 50_000)
    expected = b.pop_service.state.to_json()
    b.shutdown()
    os.remove(tmp_path / "b" / "config" / "popState.json")
    b = lib.open_broker(tmp_path / "b", clock)
    try:
        assert b.pop_service.state.to_json() == expected
    finally:
        b.shutdown()


def test_damaged_snapshot_falls_back_to_replay(tmp_path, clock):
    b = lib.open_broker(tmp_path / "b", clock)
    fill(b, 5)
    ms = b.pop_message("g", "T", 3, 10_000).messages
    b.ack_message(ms[0].receipt_handle)
    expected = b.pop_service.state.to_json()
    b.shutdown()
    snap = tmp_path / "b" / "config" / "popState.json"
    for p in (snap, snap.with_name("popState.json.bak")):
        if p.exists():
            p.write_text("{not json")
    b = lib.open_broker(tmp_path / "b", clock)
    try:
        assert b.pop_service.state.to_json() == expected
    finally:
        b.shutdown()


def test_tags_filter(broker):
    for i in range(6):
        lib.put(broker, "T", b"m%d" % i, tags="A" if i % 2 else "B")
    lib.wait_dispatched(broker)
    assert bodies(broker.pop_message("g", "T", 32, 1000, "A").messages) == [b"m1", b"m3", b"m5"]


def test_pops_rotate_over_queues(broker):
    fill(broker, 40, queues=4)
    seen = [m.queue_id for _ in range(4) for m in broker.pop_message("g", "T", 2, 1000).messages]
    assert sorted(set(seen)) == [0, 1, 2, 3]


def test_topic_deleted_and_recreated(broker):
    fill(broker, 4)
    assert len(broker.pop_message("g", "T", 2, 1000).messages) == 2
    assert broker.delete_topic("T")
    fill(broker, 1)                          # offset 0 again
    assert [m.body for m in broker.pop_message("g", "T", 32, 1000).messages] == [b"m0"]
    broker.pop_service.forget_topic("T")
    assert [m.body for m in broker.pop_message("g", "T", 32, 1000).messages] == [b"m0"]


def test_a_deleted_topic_stays_deleted_after_its_pop_state_is_forgotten(broker):
    """Forgetting a deleted topic's pop state resets its cursors without reading its queues
    (a read of a queue creates it: the topic came back, empty, and an LMQ counted again
    toward max_lmq_consume_queue_num)."""
    fill(broker, 2)
    assert len(broker.pop_message("g", "T", 1, 1000).messages) == 1
    assert broker.delete_topic("T")
    assert "T" not in broker.get_topics()
    broker.pop_service.forget_topic("T")
    assert "T" not in broker.get_topics()
    fill(broker, 1)
    assert [m.body for m in broker.pop_message("g", "T", 32, 1000).messages] == [b"m0"]


def test_reset_survives_replay(tmp_path, clock):
    b = lib.open_broker(tmp_path / "b", clock)
    fill(b, 4)
    assert len(b.pop_message("g", "T", 3, 1000).messages) == 3
    b.delete_topic("T")
    b.pop_service.forget_topic("T")
    fill(b, 2)
    assert len(b.pop_message("g", "T", 1, 1000).messages) == 1
    expected = b.pop_service.state.to_json()
    b.shutdown()
    os.remove(tmp_path / "b" / "config" / "popState.json")
    b = lib.open_broker(tmp_path / "b", clock)
    try:
        assert b.pop_service.state.to_json() == expected
        assert [m.body for m in b.pop_message("g", "T", 32, 1000).messages] == [b"m1"]
    finally:
        b.shutdown()


def test_bad_arguments(broker):
    with pytest.raises(ValueError):
        broker.pop_message("g", "T", 0, 1000)
    with pytest.raises(ValueError):
        broker.pop_message("g", "T", 1, 0)
    with pytest.raises(ValueError):
        broker.pop_message("", "T", 1, 10)
    assert broker.pop_message("g", "NoSuchTopic", 1, 10).status is PopStatus.NO_NEW_MSG


# -- FIFO ------------------------------------------------------------------------------

def test_fifo_one_in_flight_per_message_group(broker, clock):
    lib.set_group(broker, "f", fifo=True)
    for i in range(3):
        for g in ("a", "b"):
            lib.put(broker, "T", f"{g}{i}".encode(), message_group=g)
    lib.put(broker, "T", b"free")
    lib.wait_dispatched(broker)
    first = broker.pop_message("f", "T", 32, 1000).messages
    assert bodies(first) == [b"a0", b"b0", b"free"]
    assert broker.pop_message("f", "T", 32, 1000).messages == []
    by = {m.body: m for m in first}
    broker.ack_message(by[b"a0"].receipt_handle)
    assert [m.body for m in broker.pop_message("f", "T", 32, 1000).messages] == [b"a1"]
    clock.advance(1000)                     # all expire: b0 redelivered, not b1
    nxt = broker.pop_message("f", "T", 32, 1000).messages
    assert bodies(nxt) == [b"a1", b"b0", b"free"]
    assert {m.body: m.reconsume_times for m in nxt} == {b"a1": 1, b"b0": 1, b"free": 1}
    for m in nxt:
        broker.ack_message(m.receipt_handle)
    assert bodies(broker.pop_message("f", "T", 32, 1000).messages) == [b"a2", b"b1"]


def test_fifo_dead_letter_unblocks_group(tmp_path, clock):
    b = lib.open_broker(tmp_path / "b", clock)
    try:
        lib.set_group(b, "f", fifo=True, retry_max_times=1)
        for i in range(2):
            lib.put(b, "T", b"x%d" % i, message_group="x")
        lib.wait_dispatched(b)
        assert [m.body for m in b.pop_message("f", "T", 32, 1000).messages] == [b"x0"]
        clock.advance(1000)
        assert [m.body for m in b.pop_message("f", "T", 32, 1000).messages] == [b"x0"]
        clock.advance(1000)
        assert [m.body for m in b.pop_message("f", "T", 32, 1000).messages] == [b"x1"]
        assert lib.dlq_bodies(b, "f") == [b"x0"]
    finally:
        b.shutdown()


def test_fifo_state_survives_restart(tmp_path, clock):
    b = lib.open_broker(tmp_path / "b", clock)
    lib.set_group(b, "f", fifo=True)
    for i in range(3):
        lib.put(b, "T", b"a%d" % i, message_group="a")
    lib.put(b, "T", b"b0", message_group="b")
    lib.wait_dispatched(b)
    first = b.pop_message("f", "T", 32, 1000).messages
    assert bodies(first) == [b"a0", b"b0"]
    b.shutdown()
    b = lib.open_broker(tmp_path / "b", clock)
    try:
        assert b.pop_message("f", "T", 32, 1000).messages == []
        b.ack_message(first[0].receipt_handle)
        assert [m.body for m in b.pop_message("f", "T", 32, 1000).messages] == [b"a1"]
    finally:
        b.shutdown()


# -- long polling and SimpleConsumer ---------------------------------------------------

def test_long_poll_woken_by_arrival(tmp_path):
    b = lib.open_broker(tmp_path / "b")
    try:
        c = pymq.SimpleConsumer(b, "g", "T", await_duration=5)
        threading.Timer(0.2, lambda: lib.put(b, "T", b"late")).start()
        t0 = time.monotonic()
        got = c.receive(1, 30)
        assert [m.body for m in got] == [b"late"] and time.monotonic() - t0 < 3
    finally:
        b.shutdown()


def test_long_poll_woken_by_expiry(tmp_path):
    b = lib.open_broker(tmp_path / "b")
    try:
        lib.put(b, "T", b"x")
        lib.wait_dispatched(b)
        c = pymq.SimpleConsumer(b, "g", "T", await_duration=5)
        assert len(c.receive(1, 0.3)) == 1
        t0 = time.monotonic()
        got = c.receive(1, 30)
        assert [m.delivery_attempt for m in got] == [2] and time.monotonic() - t0 < 3
    finally:
        b.shutdown()


def test_simple_consumer(broker, clock):
    fill(broker, 3)
    c = pymq.SimpleConsumer(broker, "g", "T")
    msgs = c.receive(2, invisible_duration=1.5)
    assert len(msgs) == 2
    c.ack(msgs[0])
    old = msgs[1].receipt_handle
    new = c.change_invisible_duration(msgs[1], 10)
    assert msgs[1].receipt_handle == new != old
    clock.advance(1500)
    assert [m.body for m in c.receive(5, 1)] == [b"m2"]
    clock.advance(10_000)
    again = c.receive(5, 1)
    assert bodies(again) == [b"m1", b"m2"]
    with pytest.raises(ValueError):
        c.receive(1, 0)
    with pytest.raises(InvalidReceiptHandleError):
        c.ack(msgs[0])
