"""Broker tables written a few times a second, not once per change (issue 24): a flood of
new topics writes ``topics.json`` at most every ``WRITE_INTERVAL_S``, a single change is on
disk when its call returns, a deferred write that fails is retried, and shutdown writes
whatever is pending."""

from __future__ import annotations

import json
import os
import time

from pymq.broker import Broker, BrokerConfig
from pymq.broker import data_version_table
from pymq.broker.topic_config import TopicConfig

from pop_testlib import small_config


def _saved(path) -> dict:
    try:
        with open(os.path.join(path, "config", "topics.json")) as f:
            return json.load(f)["topicConfigTable"]
    except FileNotFoundError:
        return {}


def test_a_flood_of_new_topics_is_written_in_batches(tmp_path):
    path = str(tmp_path / "b")
    b = Broker(path, small_config(), BrokerConfig(max_topics=0)).start()
    try:
        tcm = b.topic_config_manager
        time.sleep(data_version_table.WRITE_INTERVAL_S)
        before = tcm.persists
        tcm.create_topic_in_send_message_method("First")
        assert "First" in _saved(path)                      # a lone change: on disk at return
        t0 = time.monotonic()
        for i in range(300):
            assert tcm.create_topic_in_send_message_method(f"Flood{i}") is not None
        elapsed = time.monotonic() - t0
        writes = tcm.persists - before
        assert writes <= 2 + elapsed / data_version_table.WRITE_INTERVAL_S, (writes, elapsed)
        deadline = time.monotonic() + 5                      # the trailing write takes the rest
        while "Flood299" not in _saved(path) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert all(f"Flood{i}" in _saved(path) for i in range(300))
    finally:
        b.shutdown()


def test_shutdown_writes_what_is_pending(tmp_path):
    path = str(tmp_path / "b")
    b = Broker(path, small_config(), BrokerConfig()).start()
    tcm = b.topic_config_manager
    tcm.update_topic_config(TopicConfig("A", 2, 2))
    tcm.update_topic_config(TopicConfig("B", 2, 2))          # within the interval: deferred
    b.shutdown()
    assert {"A", "B"} <= set(_saved(path))
    with Broker(path, small_config(), BrokerConfig()) as again:
        assert again.topic_config_manager.select_topic_config("B").read_queue_nums == 2


def test_a_failed_deferred_write_is_retried_and_logged_once(tmp_path, monkeypatch, caplog):
    path = str(tmp_path / "b")
    b = Broker(path, small_config(), BrokerConfig()).start()
    try:
        tcm = b.topic_config_manager
        monkeypatch.setattr(data_version_table, "RETRY_S", 0.05)
        real = tcm._persist
        failures = []

        def flaky():
            if len(failures) < 3:
                failures.append(1)
                raise OSError(28, "No space left on device")
            real()
        monkeypatch.setattr(tcm, "_persist", flaky)
        tcm._last_write = time.monotonic()                   # the next change is deferred
        tcm.update_topic_config(TopicConfig("Later", 1, 1))
        deadline = time.monotonic() + 5
        while "Later" not in _saved(path) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "Later" in _saved(path) and len(failures) == 3
        assert tcm.write_errors.episodes == 1 and tcm.write_errors.failing == 0
        assert sum(1 for r in caplog.records if "topics.json" in r.getMessage()) <= 2   # failed, recovered
    finally:
        b.shutdown()
