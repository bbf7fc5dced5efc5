"""Recall (RocketMQ 5.3's RecallMessage) on an embedded Broker: a delayed message recalled
before its time is never delivered, the others are; a recall after the time, with a
malformed handle or for another topic is refused; the delete mark is never delivered,
survives a restart, and works when it comes in while its second is being delivered."""

from __future__ import annotations

import time

import pytest

import pymq
from pymq.broker import Broker
from pymq.broker.recall import (InvalidRecallHandleError, RecallTooLateError, decode_recall_handle,
                                encode_recall_handle)
from pymq.status import PutMessageStatus

from pop_testlib import small_config


def bodies(b, topic="T") -> list[bytes]:
    out, off = [], 0
    while True:
        g = b.get_message("g", topic, 0, off)
        if not g.messages:
            return out
        out += [m.body for m in g.messages]
        off = g.next_begin_offset


def put_later(b, body: bytes, deliver_ms: int):
    msg = pymq.Message("T", body, queue_id=0, deliver_time_ms=deliver_ms)
    r = b.put_message(msg)
    assert r.is_ok()
    handle = b.recall_handle(msg, r)
    assert handle is not None
    return handle, r.uniq_key


def wait_until(ms: int) -> None:
    time.sleep(max(0.0, ms / 1000 - time.time()))


def test_a_recalled_message_is_never_delivered_and_the_others_are(tmp_path):
    with Broker(tmp_path / "b", small_config()).start() as b:
        due = int(time.time() * 1000) + 1500
        keep, _ = put_later(b, b"keep", due)
        gone, uniq = put_later(b, b"gone", due)
        also, _ = put_later(b, b"also", due + 300)
        assert b.recall_message("T", gone) == uniq
        assert b.recall_message("T", gone) == uniq          # again: one more mark, nothing else
        wait_until(due + 300 + 1500)
        assert sorted(bodies(b)) == [b"also", b"keep"]
        assert b.timer_service.recalled == 1
        with pytest.raises(RecallTooLateError):
            b.recall_message("T", keep)                      # delivered: too late
    assert decode_recall_handle(keep).topic == "T"


def test_bad_handles_are_refused_and_nothing_is_written(tmp_path):
    with Broker(tmp_path / "b", small_config()).start() as b:
        handle, _ = put_later(b, b"x", int(time.time() * 1000) + 60_000)
        before = b.get_max_phy_offset()
        for bad in ("", "not base64 !", "djEgVA", encode_recall_handle("T", "b", 1, "id")[:-3] + "@@@", None, 7):
            with pytest.raises(InvalidRecallHandleError):
                b.recall_message("T", bad)
        with pytest.raises(InvalidRecallHandleError, match="topic"):
            b.recall_message("Other", handle)
        assert b.get_max_phy_offset() == before
        assert b.recall_handle(pymq.Message("T", b"now"), b.put_message(pymq.Message("T", b"now"))) is None


def test_a_delete_mark_past_its_time_is_refused_by_the_store(tmp_path):
    """The appender's guard: a mark whose second passed must never land in the topic."""
    with Broker(tmp_path / "b", small_config()).start() as b:
        mark = pymq.Message("T", b"recall", queue_id=0, properties={
            "TIMER_DELIVER_MS": str(int(time.time() * 1000) - 10), "TIMER_DEL_UNIQKEY": "T+X"})
        assert b.put_message(mark).status is PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL
        time.sleep(0.3)
        assert bodies(b) == []


def test_a_recall_survives_a_restart(tmp_path):
    path = tmp_path / "b"
    with Broker(path, small_config()).start() as b:
        due = int(time.time() * 1000) + 2000
        gone, _ = put_later(b, b"gone", due)
        put_later(b, b"keep", due)
        b.recall_message("T", gone)
    with Broker(path, small_config()).start() as b:
        wait_until(due + 1500)
        assert bodies(b) == [b"keep"]


def test_a_mark_that_comes_while_its_second_is_delivered(tmp_path):
    """The second is loaded (its first message delivered, the next waiting for its
    millisecond) when the mark comes in: the second is read again and the mark holds."""
    with Broker(tmp_path / "b", small_config()).start() as b:
        second = int(time.time()) + 2
        put_later(b, b"first", second * 1000 + 50)
        gone, _ = put_later(b, b"gone", second * 1000 + 950)
        wait_until(second * 1000 + 50)
        while bodies(b) != [b"first"] and time.time() * 1000 < second * 1000 + 700:
            time.sleep(0.01)
        assert bodies(b) == [b"first"]                       # the second is being delivered
        b.recall_message("T", gone)
        wait_until(second * 1000 + 1950)
        assert bodies(b) == [b"first"]
