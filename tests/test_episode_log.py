"""A failing background service logs once per episode, with a count, and logs its recovery:
the number of log records stays bounded however often it fails."""

from __future__ import annotations

import logging
import os
import time

import pymq
from pymq.store.episode_log import EpisodeLog

from conftest import small_config


def _wait_for(cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def _records(caplog, needle):
    return [r for r in caplog.records if r.name.startswith("pymq") and needle in r.getMessage()]


def test_unwritable_offset_table_logs_one_episode(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="pymq")
    store = pymq.MessageStore(tmp_path / "s", small_config(flush_consumer_offset_interval=10)).start()
    try:
        svc = store.offset_persist_service
        blocker = tmp_path / "s" / "config" / "consumerOffset.json.tmp"
        os.makedirs(blocker)                      # the table's temporary file cannot be written
        store.commit_offset("g", "T", 0, 7)
        _wait_for(lambda: svc.failures >= 6)
        assert svc.failing == svc.failures and svc.episodes == 1
        failed = _records(caplog, "ConsumerOffsetPersistService failed")
        assert len(failed) == 1 and failed[0].levelno == logging.ERROR and failed[0].exc_info
        health = {s["name"]: s for s in store.stats()["services"]}["ConsumerOffsetPersistService"]
        assert health["failing"] >= 6 and health["episodes"] == 1 and "IsADirectoryError" in health["last_error"]
        os.rmdir(blocker)                         # space is back: the next pass writes the table
        _wait_for(lambda: svc.failing == 0)
        n = svc.failures
        recovered = _records(caplog, "ConsumerOffsetPersistService recovered")
        assert len(recovered) == 1 and f"after {n} failed attempts" in recovered[0].getMessage()
        assert len(_records(caplog, "ConsumerOffsetPersistService")) == 2
    finally:
        store.shutdown()
    assert pymq.MessageStore(tmp_path / "s", read_only=True).query_offset("g", "T", 0) == 7


def test_refused_delivery_puts_log_one_episode(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="pymq")
    store = pymq.MessageStore(tmp_path / "s", small_config(message_delay_level="1s 2s")).start()
    try:
        assert store.put_message(pymq.Message("T", b"later", delay_level=1)).is_ok()
        store.commit_log.appender.set_writeable(False, "disk full (test)")
        errors = store.schedule_service.delivery_errors
        _wait_for(lambda: errors.failures >= 5)        # retried every 100 ms once due
        assert len(_records(caplog, "ScheduleMessageService delivery failed")) == 1
        store.commit_log.appender.set_writeable(True)
        _wait_for(lambda: store.get_max_offset_in_queue("T", 0) == 1)
        _wait_for(lambda: errors.failing == 0)
        assert len(_records(caplog, "ScheduleMessageService delivery recovered")) == 1
        assert len(_records(caplog, "ScheduleMessageService delivery")) == 2
    finally:
        store.shutdown()


def test_a_long_episode_is_reminded_with_its_count(caplog):
    caplog.set_level(logging.ERROR, logger="pymq.test")
    e = EpisodeLog(logging.getLogger("pymq.test"), "writing X", remind_s=0.1)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 0.35:
        e.failed("boom")
        time.sleep(0.005)
    n = e.failures
    assert n > 20
    msgs = [r.getMessage() for r in caplog.records]
    assert 2 <= len(msgs) <= 5            # the first failure and one reminder per 0.1 s
    assert msgs[0].startswith("writing X failed: boom")
    assert all("still failing" in m for m in msgs[1:])
    assert e.succeeded() and not e.succeeded()
    assert e.episodes == 1 and e.failing == 0


def test_a_broken_arrival_listener_neither_stops_dispatch_nor_floods_the_log(store, caplog):
    caplog.set_level(logging.WARNING, logger="pymq")
    calls = []

    def broken(arrived):
        calls.append(arrived)
        raise RuntimeError("listener bug")

    remove = store.add_arrival_listener(broken, ["T"])
    for i in range(5):
        store.put_message(pymq.Message("T", b"x"))
        assert store.wait_message("T", 0, i, 5)
        _wait_for(lambda: len(calls) > i)
    remove()
    assert len(_records(caplog, "arrival listener failed")) == 1
    store.put_message(pymq.Message("T", b"y"))
    assert store.wait_message("T", 0, 5, 5)
    time.sleep(0.05)
    assert len(calls) == 5                       # removed: not called again
