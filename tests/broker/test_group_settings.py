"""Consumer-group settings through the public API (``Broker.update_subscription_group``),
and what a SimpleConsumer says when given a store without the broker's pop."""

from __future__ import annotations

import json

import pytest

import pymq

try:
    from . import pop_testlib as lib
except ImportError:
    import pop_testlib as lib


def test_update_subscription_group_flags_fifo_and_persists(tmp_path):
    path = tmp_path / "b"
    with lib.open_broker(path) as broker:
        cfg = broker.update_subscription_group("orders", consume_message_orderly=True)
        assert isinstance(cfg, pymq.SubscriptionGroupConfig) and cfg.consume_message_orderly
        assert cfg.retry_max_times == broker.broker_config.max_reconsume_times     # untouched: default
        cfg = broker.update_subscription_group("orders", retry_max_times=3)
        assert cfg.consume_message_orderly and cfg.retry_max_times == 3           # earlier change kept
        for i in range(2):
            lib.put(broker, "T", b"a%d" % i, message_group="a")
        lib.wait_dispatched(broker)
        first = broker.pop_message("orders", "T", 32, 60_000).messages
        assert [m.body for m in first] == [b"a0"]                # FIFO: one of the group at a time
        with pytest.raises(TypeError, match="consume_orderly"):
            broker.update_subscription_group("orders", consume_orderly=True)
    doc = json.loads((path / "config" / "subscriptionGroup.json").read_text())
    entry = doc["subscriptionGroupTable"]["orders"]
    assert entry["consumeMessageOrderly"] is True and entry["retryMaxTimes"] == 3
    with lib.open_broker(path) as broker:
        cfg = broker.subscription_group_manager.find_subscription_group_config("orders")
        assert cfg.consume_message_orderly and cfg.retry_max_times == 3


def test_simple_consumer_needs_a_broker(tmp_path):
    with pymq.MessageStore(tmp_path / "s", lib.small_config()) as store:
        with pytest.raises(TypeError, match="pymq.Broker"):
            pymq.SimpleConsumer(store, "g", "T")


def test_topic_list_shows_a_retry_topic_before_its_first_message_lands(tmp_path, capfd):
    """Right after a send-back the retry message waits in SCHEDULE_TOPIC_XXXX; its topic
    is already the broker's (config/topics.json), and ``pymq topic-list`` lists it."""
    from pymq import cli

    path = tmp_path / "b"
    with lib.open_broker(path) as broker:
        r = lib.put(broker, "Orders", b"x")
        lib.wait_dispatched(broker)
        msg = broker.look_message_by_offset(r.commitlog_offset)
        assert broker.send_message_back("g1", msg).status is pymq.PutMessageStatus.PUT_OK
        lib.wait_dispatched(broker)
        assert "%RETRY%g1" not in broker.get_topics()            # no queue yet: the retry is delayed
        assert cli.main(["--store", str(path), "topic-list", "--json"]) == 0
        topics = json.loads(capfd.readouterr()[0])
    assert "%RETRY%g1" in topics and "Orders" in topics
