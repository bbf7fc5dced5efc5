"""Priority topics: a message goes to queue min(priority, queues - 1); a pop of a topic
declared PRIORITY drains highest priority first, a queue in send order. Checked against
a simple oracle (a stable sort by clamped priority, descending) over random sends, and
the group's priority.factor, priorityOrderAsc and FIFO groups."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import pymq
from pymq.broker.priority import PROPERTY_PRIORITY, priority_queue_id, scan_order, use_priority_mode
from pymq.broker.subscription_group import SubscriptionGroupConfig
from pymq.broker.topic_config import TopicConfig

try:
    from . import pop_testlib as lib
except ImportError:
    import pop_testlib as lib

TOPIC = "prio"


def declare(broker, topic=TOPIC, queues=4, kind="PRIORITY"):
    broker.topic_config_manager.update_topic_config(
        TopicConfig(topic, queues, queues, attributes={"message.type": kind}))


def send(broker, priorities, topic=TOPIC, queues=4):
    """Put messages the way the broker files PRIORITY messages; bodies are their send index."""
    for i, p in enumerate(priorities):
        m = pymq.Message(topic, str(i).encode(), properties={PROPERTY_PRIORITY: str(p)})
        m.queue_id = priority_queue_id(p, queues)
        assert broker.put_message(m).status is pymq.PutMessageStatus.PUT_OK
    dispatched(broker)


def dispatched(broker, timeout: float = 10.0) -> None:
    """Wait until the dispatcher filed everything put so far."""
    deadline = time.monotonic() + timeout
    while broker.dispatch_behind_bytes() and time.monotonic() < deadline:
        time.sleep(0.002)


def drain(broker, group="g", batch=1, topic=TOPIC) -> list[int]:
    """Pop ``batch`` at a time, acking each, until nothing is left; the send indexes."""
    out = []
    while True:
        r = broker.pop_message(group, topic, batch, 60_000)
        if not r.messages:
            return out
        for m in r.messages:
            out.append(int(m.body))
            broker.ack_message(m.properties["POP_CK"])


def oracle(priorities, queues):
    """Highest clamped priority first; equal ones in send order."""
    return sorted(range(len(priorities)), key=lambda i: -min(priorities[i], queues - 1))


def test_queue_of_a_priority_is_clamped_to_the_last_queue():
    assert [priority_queue_id(p, 4) for p in (0, 1, 3, 4, 99)] == [0, 1, 3, 3, 3]
    with pytest.raises(ValueError):
        priority_queue_id(-1, 4)


def test_scan_order_and_priority_mode():
    assert scan_order([0, 1, 2, 3], 5, True) == [3, 2, 1, 0]
    assert scan_order([0, 1, 2, 3], 5, True, order_asc=False) == [0, 1, 2, 3]
    assert scan_order([0, 1, 2, 3], 5, False) == [1, 2, 3, 0]
    assert [use_priority_mode(n, 30) for n in (0, 29, 30, 99, 100, 129, 130)] == [True, True, False, False,
                                                                                   True, True, False]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(priorities=st.lists(st.integers(0, 9), min_size=1, max_size=40), queues=st.integers(1, 8),
       batch=st.sampled_from([1, 3, 32]))
def test_pops_follow_the_oracle(tmp_path_factory, priorities, queues, batch):
    with lib.open_broker(tmp_path_factory.mktemp("prio")) as b:
        declare(b, queues=queues)
        send(b, priorities, queues=queues)
        assert drain(b, batch=batch) == oracle(priorities, queues)


def test_backlog_always_gives_the_highest_priority_first(tmp_path):
    """RocketMQ's test_priority_consume_always_high_priority: with every queue holding a
    backlog, each single pop comes from the highest queue."""
    with lib.open_broker(tmp_path / "b") as b:
        declare(b, queues=4)
        send(b, [p for p in range(4) for _ in range(5)])
        for _ in range(5):
            r = b.pop_message("g", TOPIC, 1, 60_000)
            assert [m.queue_id for m in r.messages] == [3]
            b.ack_message(r.messages[0].properties["POP_CK"])


def test_an_undeclared_topic_rotates_over_its_queues(tmp_path):
    with lib.open_broker(tmp_path / "b") as b:
        send(b, [0, 1, 2, 3] * 2, topic="plain")
        firsts = []
        for _ in range(4):
            r = b.pop_message("g", "plain", 1, 60_000)
            firsts.append(r.messages[0].queue_id)
            b.ack_message(r.messages[0].properties["POP_CK"])
        assert sorted(firsts) == [0, 1, 2, 3]


def test_priority_order_asc_false_makes_queue_0_the_highest(tmp_path):
    with lib.open_broker(tmp_path / "b", priority_order_asc=False) as b:
        declare(b, queues=4)
        send(b, [3, 0, 2, 1])
        assert drain(b) == [1, 3, 2, 0]


def test_priority_factor_0_turns_priority_scanning_off(tmp_path):
    """A group with priority.factor 0 rotates: the first pops take every queue in turn."""
    with lib.open_broker(tmp_path / "b") as b:
        declare(b, queues=4)
        b.subscription_group_manager.update_subscription_group_config(
            SubscriptionGroupConfig("g0", attributes={"priority.factor": "0"}))
        send(b, [p for p in range(4) for _ in range(3)])
        firsts = []
        for _ in range(4):
            r = b.pop_message("g0", TOPIC, 1, 60_000)
            firsts.append(r.messages[0].queue_id)
            b.ack_message(r.messages[0].properties["POP_CK"])
        assert sorted(firsts) == [0, 1, 2, 3]


def test_a_redelivered_message_keeps_its_priority(tmp_path):
    clock = lib.FakeClock()
    with lib.open_broker(tmp_path / "b", clock) as b:
        declare(b, queues=4)
        send(b, [1, 3])
        first = b.pop_message("g", TOPIC, 1, 1_000).messages[0]
        assert int(first.body) == 1            # priority 3
        clock.advance(2_000)                   # not acked: it comes back, still before priority 1
        again = b.pop_message("g", TOPIC, 1, 60_000).messages[0]
        assert (int(again.body), again.reconsume_times) == (1, 1)
