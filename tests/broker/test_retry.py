"""Retry and dead letter (issue 12, part 1): ``send_message_back``, ``pymq.Consumer``'s
retry subscription and ``reconsume_later``, the topic and group tables, and a Hypothesis
state machine against an oracle (put, consume, send back, restart)."""

from __future__ import annotations

import json
import os
import time

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import pymq
from pymq.broker import Broker, BrokerConfig
from pymq.broker.retry import SendBackError
from pymq.broker.subscription_group import SubscriptionGroupConfig

from pop_testlib import small_config, wait_dispatched

FAST = "1s " * 17 + "1s"          # every delay level one second: retries come round quickly


def broker(path, **cfg):
    return Broker(path, small_config(message_delay_level=FAST.strip()), BrokerConfig(**cfg)).start()


def consumed(b, topic="T", n=1):
    wait_dispatched(b)
    g = b.get_message("g", topic, 0, 0, n)
    assert g.status is pymq.GetMessageStatus.FOUND
    return g.messages


def test_send_back_goes_to_the_retry_topic_delayed_by_level_3_plus_reconsume_times(tmp_path):
    with broker(tmp_path / "b") as b:
        b.put_message(pymq.Message("T", b"body", tags="TagA", keys=["k1"], properties={"p": "v"}, flag=7))
        m = consumed(b)[0]
        r = b.send_message_back("g", m)
        assert r.is_ok()
        rec = b.look_message_by_offset(r.commitlog_offset)
        # stored delayed: in the schedule topic, level 3, bound for %RETRY%g
        assert rec.topic == "SCHEDULE_TOPIC_XXXX" and rec.queue_id == 2
        assert rec.properties["REAL_TOPIC"] == "%RETRY%g" and rec.properties["DELAY"] == "3"
        assert rec.reconsume_times == 1 and rec.body == b"body" and rec.flag == 7
        assert rec.properties["RETRY_TOPIC"] == "T" and rec.properties["ORIGIN_MESSAGE_ID"] == m.msg_id
        assert rec.properties["p"] == "v" and rec.tags == "TagA" and rec.keys == ["k1"]
        assert rec.properties["UNIQ_KEY"] == m.uniq_key and rec.born_timestamp == m.born_timestamp
        assert b.topic_config_manager.select_topic_config("%RETRY%g").perm == 6
        r = b.send_message_back("g", m, delay_level=1)
        assert b.look_message_by_offset(r.commitlog_offset).properties["DELAY"] == "1"


def test_past_the_limit_or_a_negative_level_the_message_goes_to_the_dlq(tmp_path):
    with broker(tmp_path / "b") as b:
        b.subscription_group_manager.update_subscription_group_config(
            SubscriptionGroupConfig("g", retry_max_times=2))
        b.put_message(pymq.Message("T", b"x"))
        m = consumed(b)[0]
        rec = b.look_message_by_offset(b.send_message_back("g", m, delay_level=-1).commitlog_offset)
        assert rec.topic == "%DLQ%g" and rec.reconsume_times == 1 and "DELAY" not in rec.properties
        assert b.topic_config_manager.select_topic_config("%DLQ%g").perm == 2
        # a message already retried twice (limit 2) goes to the DLQ
        r1 = b.look_message_by_offset(b.send_message_back("g", m, delay_level=1).commitlog_offset)
        assert r1.reconsume_times == 1
        b.put_message(pymq.Message("T", b"y", reconsume_times=2))
        m2 = b.get_message("g", "T", 0, 1).messages[0] if wait_dispatched(b) is None else None
        rec = b.look_message_by_offset(b.send_message_back("g", m2).commitlog_offset)
        assert rec.topic == "%DLQ%g" and rec.reconsume_times == 3
        # the consumer's own limit wins when it sends one (4.x clients do)
        rec = b.look_message_by_offset(b.send_message_back("g", m2, max_reconsume_times=5).commitlog_offset)
        assert rec.properties["REAL_TOPIC"] == "%RETRY%g"


def test_send_back_errors(tmp_path):
    with Broker(tmp_path / "b", small_config(), BrokerConfig(auto_create_subscription_group=False)).start() as b:
        b.put_message(pymq.Message("T", b"x"))
        m = consumed(b)[0]
        with pytest.raises(SendBackError, match="does not exist"):
            b.send_message_back("nope", m)
        b.subscription_group_manager.update_subscription_group_config(SubscriptionGroupConfig("g"))
        with pytest.raises(SendBackError, match="no message"):
            b.send_message_back("g", m.commitlog_offset + 1)
        with pytest.raises(TypeError):
            b.send_message_back("g", "not a message")


def test_consumer_reads_its_retry_topic_and_reconsume_later_ends_in_the_dlq(tmp_path):
    with broker(tmp_path / "b") as b:
        b.subscription_group_manager.update_subscription_group_config(
            SubscriptionGroupConfig("g", retry_max_times=2))
        b.put_message(pymq.Message("Orders", b"o1", tags="A"))
        c = pymq.Consumer(b, "g", "Orders", tags="A")
        assert c.retry_topic == "%RETRY%g"
        seen = []
        deadline = time.monotonic() + 15
        while len(seen) < 3 and time.monotonic() < deadline:
            for m in c.poll(0.5):
                assert m.topic == "Orders" and m.body == b"o1"     # the original topic, restored
                seen.append(m.reconsume_times)
                c.reconsume_later(m)
        assert seen == [0, 1, 2]
        wait_dispatched(b)
        dlq = b.get_message("g", "%DLQ%g", 0, 0).messages
        assert [(m.body, m.reconsume_times, m.properties["RETRY_TOPIC"]) for m in dlq] == [(b"o1", 3, "Orders")]
        c.commit()
        assert b.query_offset("g", "%RETRY%g", 0) == 2


def test_reconsume_later_needs_a_broker(tmp_path):
    with pymq.MessageStore(tmp_path / "s", small_config()) as s:
        c = pymq.Consumer(s, "g", "T")
        assert c.retry_topic is None
        with pytest.raises(TypeError, match="Broker"):
            c.reconsume_later(object())


def test_topic_and_group_tables_are_rocketmq_shaped_and_survive_restart(tmp_path):
    path = tmp_path / "b"
    with broker(path, default_topic_queue_nums=8) as b:
        assert b.topic_config_manager.create_topic_in_send_message_method("Auto").write_queue_nums == 8
        b.subscription_group_manager.update_subscription_group_config(
            SubscriptionGroupConfig("fifo", consume_message_orderly=True, retry_max_times=3))
        assert b.subscription_group_manager.find_subscription_group_config("new").retry_max_times == 16
    topics = json.loads(open(os.path.join(path, "config", "topics.json")).read())
    assert topics["topicConfigTable"]["Auto"] == {"topicName": "Auto", "readQueueNums": 8, "writeQueueNums": 8,
                                                  "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0,
                                                  "order": False}
    assert topics["dataVersion"]["counter"] >= 1
    groups = json.loads(open(os.path.join(path, "config", "subscriptionGroup.json")).read())
    g = groups["subscriptionGroupTable"]["fifo"]
    assert g["consumeMessageOrderly"] is True and g["retryMaxTimes"] == 3 and g["retryQueueNums"] == 1
    with broker(path, auto_create_topic_enable=False, auto_create_subscription_group=False) as b:
        assert b.topic_config_manager.select_topic_config("Auto").read_queue_nums == 8
        assert b.topic_config_manager.create_topic_in_send_message_method("Other") is None
        assert b.subscription_group_manager.find_subscription_group_config("fifo").consume_message_orderly
        assert b.subscription_group_manager.find_subscription_group_config("unknown") is None


class RetryMachine(RuleBasedStateMachine):
    """Oracle: per message, how often it was handed back; the store must hold exactly one
    record per send-back, in the retry topic below the limit and in the DLQ at it."""

    LIMIT = 3

    def __init__(self):
        super().__init__()
        import tempfile
        self.dir = tempfile.mkdtemp(prefix="pymq-retry-")
        self.b = self._open()
        self.messages = []          # (offset of the latest record, reconsume_times, body)
        self.expect_retry = 0
        self.expect_dlq = 0

    def _open(self):
        b = Broker(self.dir, small_config(), BrokerConfig(max_reconsume_times=self.LIMIT)).start()
        b.schedule_service.shutdown()        # deliveries are not under test here
        return b

    @rule(body=st.binary(max_size=64))
    def put(self, body):
        r = self.b.put_message(pymq.Message("T", body))
        assert r.is_ok()
        self.messages.append((r.commitlog_offset, 0, body))

    @precondition(lambda self: self.messages)
    @rule(i=st.integers(min_value=0), level=st.sampled_from([0, 0, 1, -1]))
    def send_back(self, i, level):
        i %= len(self.messages)
        offset, times, body = self.messages[i]
        r = self.b.send_message_back("g", offset, delay_level=level)
        assert r.is_ok()
        rec = self.b.look_message_by_offset(r.commitlog_offset)
        assert rec.body == body and rec.reconsume_times == times + 1
        if times >= self.LIMIT or level < 0:
            assert rec.topic == "%DLQ%g"
            self.expect_dlq += 1
        else:
            assert rec.properties["REAL_TOPIC"] == "%RETRY%g"
            assert rec.properties["DELAY"] == str(level or 3 + times)
            self.expect_retry += 1
        self.messages[i] = (r.commitlog_offset, times + 1, body)

    @rule()
    def restart(self):
        self.b.shutdown()
        self.b = self._open()

    @invariant()
    def counts(self):
        wait_dispatched(self.b)
        b = self.b
        assert b.get_max_offset_in_queue("%DLQ%g", 0) == self.expect_dlq
        delayed = sum(b.get_max_offset_in_queue("SCHEDULE_TOPIC_XXXX", q) for q in range(18))
        assert delayed == self.expect_retry

    def teardown(self):
        self.b.shutdown()
        import shutil
        shutil.rmtree(self.dir, ignore_errors=True)


TestRetryMachine = RetryMachine.TestCase
TestRetryMachine.settings = settings(max_examples=20, stateful_step_count=25, deadline=None)


def test_cli_lists_retry_and_dlq_topics_and_resends_dead_letters(tmp_path, capfd):
    from pymq import cli
    from pymq.config import save_sizes
    path = str(tmp_path / "b")
    with broker(path) as b:
        save_sizes(path, b.config)
        for body in (b"a", b"b"):
            b.put_message(pymq.Message("T", body))
        wait_dispatched(b)
        for m in b.get_message("g", "T", 0, 0).messages:
            b.send_message_back("g", m, delay_level=-1)             # straight to the DLQ
        wait_dispatched(b)
        first = b.get_message("g", "%DLQ%g", 0, 0).messages[0].msg_id
    assert cli.main(["--store", path, "topic-list"]) == 0
    out = capfd.readouterr().out
    assert "%DLQ%g  (dead-letter topic of group g)" in out
    assert cli.main(["--store", path, "resend-dlq", "-g", "g", "-i", first, "--json"]) == 0
    rows = json.loads(capfd.readouterr().out)
    assert [r["status"] for r in rows] == ["PUT_OK"] and rows[0]["dlq_msg_id"] == first
    assert cli.main(["--store", path, "resend-dlq", "-g", "g", "--all", "--json"]) == 0
    assert len(json.loads(capfd.readouterr().out)) == 2
    assert cli.main(["--store", path, "resend-dlq", "-g", "g", "--all"]) == 0       # nothing new
    assert "no dead letter" in capfd.readouterr().out
    with broker(path) as b:
        wait_dispatched(b)
        again = b.get_message("g", "%RETRY%g", 0, 0).messages
        assert sorted(m.body for m in again) == [b"a", b"a", b"b"]
        assert all(m.reconsume_times == 0 and m.properties["RETRY_TOPIC"] == "T" for m in again)
    assert cli.main(["--store", path, "resend-dlq", "-g", "g", "-i", "00" * 16]) == 2


def test_broker_delete_topic_forgets_its_config_and_pop_state(tmp_path):
    with broker(tmp_path / "b") as b:
        b.topic_config_manager.create_topic_in_send_message_method("Gone")
        for i in range(5):
            b.put_message(pymq.Message("Gone", b"old%d" % i))
        wait_dispatched(b)
        assert len(b.pop_message("g", "Gone", 2, 60_000).messages) == 2
        assert b.delete_topic("Gone") is True
        assert b.topic_config_manager.select_topic_config("Gone") is None
        for i in range(3):
            b.put_message(pymq.Message("Gone", b"new%d" % i))
        wait_dispatched(b)
        got = b.pop_message("g", "Gone", 10, 60_000).messages
        assert sorted(m.body for m in got) == [b"new0", b"new1", b"new2"]
