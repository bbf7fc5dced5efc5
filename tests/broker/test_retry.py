"""Retry and dead letter (issue 12, part 1): ``send_message_back``, ``pymq.Consumer``'s
retry subscription and ``reconsume_later``, the topic and group tables, and a Hypothesis
state machine against an oracle (put, consume, send back, restart)."""

from __future__ import annotations

import json
import os
import time

import pytest
from hypothesis import currently_in_test_context, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, initialize, invariant, precondition, rule,
                                 run_state_machine_as_test)

import pymq
from pymq.broker import Broker, BrokerConfig
from pymq.broker.retry import SendBackError
from pymq.broker.subscription_group import SubscriptionGroupConfig
from pymq.broker.topic_config import TopicConfig

from pop_testlib import small_config, wait_dispatched

FAST = "0s " * 17 + "0s"          # every delay level 0 s: retries come round at once


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
        assert rec.properties["WAIT"] == "false"
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
        # as 4.9.7 writes it: DELAY 0 (no delay), WAIT=false; the DLQ is readable (perm 6)
        assert rec.topic == "%DLQ%g" and rec.reconsume_times == 1
        assert rec.properties["DELAY"] == "0" and rec.properties["WAIT"] == "false"
        assert b.topic_config_manager.select_topic_config("%DLQ%g").perm == 6
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


def test_sends_create_at_most_max_topics(tmp_path):
    """Auto-creation stops at ``max_topics`` topics of the clients (a group's retry and
    dead-letter topics aside); the existing ones stay usable, routes no longer offer new
    names, an admin can still create topics, and a restart keeps the limit."""
    path = tmp_path / "b"
    with broker(path, max_topics=3) as b:
        tcm = b.topic_config_manager
        assert [tcm.create_topic_in_send_message_method(f"T{i}") is not None for i in range(3)] == [True] * 3
        tcm.create_topic_of_group("%RETRY%g", 1, 6)                  # not counted
        assert tcm.create_topic_in_send_message_method("T3") is None
        assert tcm.select_or_default_topic_config("T3") is None
        assert "max_topics" in tcm.why_not_created("T3")
        assert tcm.create_topic_in_send_message_method("T1").topic_name == "T1"
        tcm.update_topic_config(TopicConfig("Admin", 2, 2))           # an admin's topic: not limited
        assert tcm.select_topic_config("Admin") is not None
    topics = json.loads(open(os.path.join(path, "config", "topics.json")).read())["topicConfigTable"]
    assert "T3" not in topics and {"T0", "T1", "T2", "Admin"} <= set(topics)
    with broker(path, max_topics=0) as b:                             # 0: no limit
        assert b.topic_config_manager.create_topic_in_send_message_method("T3") is not None


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


# Levels of the machine: 0 s except level 2 (never due while it runs)
MACHINE_LEVELS = "0s 1h" + " 0s" * 16
LIMIT = 2                       # the group's retry limit in the machine
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"


class Rec:
    """One delivery of a message as the oracle expects it: the body, ``reconsume_times``
    and the offset message id of the first delivery."""

    __slots__ = ("body", "times", "origin")

    def __init__(self, body: bytes, times: int, origin: str) -> None:
        self.body, self.times, self.origin = body, times, origin

    def key(self):
        return (self.body, self.times, self.origin)


class RetryMachine(RuleBasedStateMachine):
    """A ``pymq.Consumer`` of group g on topic T against an oracle of the queues it reads.

    Puts go to T; a polled message is acked (dropped) or handed back with
    ``reconsume_later`` at a random level (0: the next level, 3 + reconsume_times; 1: due
    at once; 2: not due while the machine runs; -1: the DLQ). The schedule service runs
    only when the ``deliver`` rule says (every level but 2 is 0 s), so the oracle knows
    exactly what is in %RETRY%g: every poll returns exactly the records after the
    consumer's positions (T and %RETRY%g), with the original topic, ``reconsume_times``,
    RETRY_TOPIC and ORIGIN_MESSAGE_ID; a message handed back at the limit goes to
    %DLQ%g; nothing due stays in the schedule topic after a delivery. A restart loses
    the consumer (what it read after its last commit is read again)."""

    limit_dlq = 0               # over all runs: dead letters by the limit, reached by consumption

    def __init__(self):
        super().__init__()
        import tempfile
        self.dir = tempfile.mkdtemp(prefix="pymq-retry-")
        self.n = 0
        self.queue = {"T": [], "%RETRY%g": []}      # records in queue order
        self.read = {"T": 0, "%RETRY%g": 0}          # the consumer's positions
        self.committed = {"T": 0, "%RETRY%g": 0}
        self.scheduled = {}                          # level -> records, in put order
        self.dlq = []
        self.held = []                               # (polled MessageExt, Rec): not decided yet
        self._open()

    def _open(self):
        b = Broker(self.dir, small_config(message_delay_level=MACHINE_LEVELS),
                   BrokerConfig(max_reconsume_times=LIMIT))
        b.schedule_service.start = lambda: None      # deliveries when the rule says
        self.b = b.start()
        self.c = pymq.Consumer(b, "g", "T")

    @initialize(bodies=st.lists(st.binary(max_size=16), min_size=1, max_size=3),
                level=st.sampled_from([0, 1, 2, -1]), rounds=st.integers(0, LIMIT + 1))
    def first_puts(self, bodies, level, rounds):
        """Every run starts with messages, failed ``rounds`` times already (Hypothesis may
        disable ``put`` or ``fail_all`` in a run; the retry limit must still be reached)."""
        for body in bodies:
            self.put(body)
        self.fail_all(level, rounds)

    @rule(body=st.binary(max_size=16))
    def put(self, body):
        body = b"%d:" % self.n + body
        self.n += 1
        r = self.b.put_message(pymq.Message("T", body))
        assert r.is_ok()
        self.queue["T"].append(Rec(body, 0, r.msg_id))

    @rule()
    def poll(self):
        wait_dispatched(self.b)
        got = []
        while True:                 # a pull returns at most max_transfer_count per queue
            page = self.c.poll(0)
            if not page:
                break
            got.extend(page)
        expected = []
        for topic, records in self.queue.items():
            expected.extend(records[self.read[topic]:])
            self.read[topic] = len(records)
        by_key = {r.key(): r for r in expected}
        keys = []
        for m in got:
            assert m.topic == "T"                    # a retry is handed over under its topic
            origin = m.properties.get("ORIGIN_MESSAGE_ID", m.msg_id)
            keys.append((m.body, m.reconsume_times, origin))
            if m.reconsume_times:
                assert m.properties["RETRY_TOPIC"] == "T" and "ORIGIN_MESSAGE_ID" in m.properties
                # delivered through its delay level: the record keeps DELAY, as 4.9.7's does
                assert int(m.properties["DELAY"]) > 0
            else:
                assert "ORIGIN_MESSAGE_ID" not in m.properties
            if keys[-1] in by_key:
                self.held.append((m, by_key[keys[-1]]))
        assert sorted(keys) == sorted(r.key() for r in expected)

    def _bounded(self):
        """Re-reads after restarts multiply the retries: keep the runs small."""
        return len(self.queue["%RETRY%g"]) + sum(map(len, self.scheduled.values())) < 48

    @precondition(lambda self: self.held)
    @rule(i=st.integers(min_value=0), level=st.sampled_from([0, 0, 1, 2, -1]))
    def reconsume_later(self, i, level):
        m, rec = self.held.pop(i % len(self.held))
        r = self.c.reconsume_later(m, level)
        assert r.is_ok()
        stored = self.b.look_message_by_offset(r.commitlog_offset)
        nxt = Rec(rec.body, rec.times + 1, rec.origin)
        assert (stored.body, stored.reconsume_times, stored.properties["ORIGIN_MESSAGE_ID"]) == nxt.key()
        assert stored.properties["RETRY_TOPIC"] == "T"
        if rec.times >= LIMIT or level < 0:
            assert stored.topic == "%DLQ%g" and stored.properties["DELAY"] == "0"
            self.dlq.append(nxt)
            if level >= 0:
                RetryMachine.limit_dlq += 1
                if currently_in_test_context():
                    event("dead-lettered at the limit")
        else:
            level = level or 3 + rec.times
            assert stored.topic == SCHEDULE_TOPIC and stored.properties["REAL_TOPIC"] == "%RETRY%g"
            assert stored.properties["DELAY"] == str(level)
            self.scheduled.setdefault(level, []).append(nxt)

    @precondition(_bounded)
    @rule(level=st.sampled_from([0, 1, 0, 1, 2, -1]), rounds=st.integers(1, LIMIT + 1))
    def fail_all(self, level, rounds):
        """A consumer that fails whatever it gets, ``rounds`` times: what is due is
        delivered, polled and handed back at ``level`` (the way to the retry limit)."""
        for _ in range(rounds):
            self.deliver()
            self.poll()
            while self.held:
                self.reconsume_later(0, level)

    @precondition(lambda self: self.held)
    @rule(i=st.integers(min_value=0))
    def ack(self, i):
        self.held.pop(i % len(self.held))           # consumed: nothing goes back

    @rule()
    def deliver(self):
        """Time passes: the schedule service delivers what is due (every level but 2)."""
        wait_dispatched(self.b)
        self.b.schedule_service.deliver_due()
        for level in sorted(self.scheduled):
            if level != 2:
                self.queue["%RETRY%g"].extend(self.scheduled.pop(level))

    @rule()
    def commit(self):
        self.c.commit()
        self.committed = dict(self.read)

    @rule()
    def restart(self):
        """The consumer goes away with the broker: reopened, a new one starts at the
        committed positions; what the old one held undecided is gone with it."""
        self.b.shutdown()
        self._open()
        self.read = dict(self.committed)
        self.held = []

    @invariant()
    def dead_letters_and_schedule(self):
        wait_dispatched(self.b)
        b = self.b
        dlq = []
        offset = 0
        while True:
            g = b.get_message("t", "%DLQ%g", 0, offset, 256)
            if not g.messages:
                break
            for m in g.messages:
                assert m.properties["RETRY_TOPIC"] == "T"
                dlq.append((m.body, m.reconsume_times, m.properties["ORIGIN_MESSAGE_ID"]))
            offset = g.next_begin_offset
        assert sorted(dlq) == sorted(r.key() for r in self.dlq)
        offsets = b.schedule_service.offsets
        for level in range(1, 19):
            waiting = b.get_max_offset_in_queue(SCHEDULE_TOPIC, level - 1) - offsets.get(level)
            assert waiting == len(self.scheduled.get(level, ())), level

    def teardown(self):
        self.b.shutdown()
        import shutil
        shutil.rmtree(self.dir, ignore_errors=True)


def test_retry_machine():
    """The machine, and proof that its runs reach the DLQ by the retry limit."""
    RetryMachine.limit_dlq = 0
    run_state_machine_as_test(RetryMachine, settings=settings(max_examples=20, stateful_step_count=30,
                                                              deadline=None))
    assert RetryMachine.limit_dlq > 0, "no run consumed a message to its retry limit"


def test_cli_lists_retry_and_dlq_topics_and_resends_dead_letters(tmp_path, capfd):
    from pymq import cli
    from pymq.store_sizes import save_sizes
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
