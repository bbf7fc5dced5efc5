"""FIFO consumer groups (``consumeMessageOrderly`` in subscriptionGroup.json) through
``pymq serve``: the settings tell the client the group is FIFO, and the messages of one
message group come one at a time, in order."""

from __future__ import annotations

import threading
import time

from .conftest import make_message


def test_simple_consumer_fifo_group_one_message_of_a_group_at_a_time(server_factory):
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, Producer, SimpleConsumer
    srv = server_factory(groups={"g-fifo-simple": {"consumeMessageOrderly": True}})
    cfg = ClientConfiguration(srv.endpoint, Credentials(), request_timeout=5)
    p = Producer(cfg, ("FifoSimple",))
    p.startup()
    c = SimpleConsumer(cfg, "g-fifo-simple", {"FifoSimple": FilterExpression("*")}, 2)
    c.startup()
    try:
        for i in range(3):
            p.send(make_message("FifoSimple", f"a{i}".encode(), group="A"))
        order = []
        for _ in range(3):
            msgs = c.receive(32, 30)
            assert len(msgs) == 1, [m.body for m in msgs]      # the group's next one only
            assert msgs[0].message_group == "A" and msgs[0].properties["__SHARDINGKEY"] == "A"   # as RocketMQ 5
            order.append(msgs[0].body)
            c.ack(msgs[0])
        assert order == [b"a0", b"a1", b"a2"]
    finally:
        c.shutdown()
        p.shutdown()


def test_push_consumer_fifo_group_keeps_order(server_factory):
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, Producer, PushConsumer
    from rocketmq.v5.consumer.push.message_listener import ConsumeResult, MessageListener
    srv = server_factory(groups={"g-fifo-push": {"consumeMessageOrderly": True}})
    cfg = ClientConfiguration(srv.endpoint, Credentials(), request_timeout=5)
    lock = threading.Lock()
    seen: dict[str, list[int]] = {}

    class Listener(MessageListener):
        def consume(self, message):
            g, i = message.body.decode().split(":")
            with lock:
                seen.setdefault(g, []).append(int(i))
            return ConsumeResult.SUCCESS

    p = Producer(cfg, ("FifoPush",))
    p.startup()
    consumer = PushConsumer(cfg, "g-fifo-push", Listener(), {"FifoPush": FilterExpression("*")},
                            consumption_thread_count=4)
    consumer.startup()
    try:
        assert consumer.fifo                        # the server's settings said so
        for i in range(10):
            for g in "ABCD":
                p.send(make_message("FifoPush", f"{g}:{i}".encode(), group=g))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and sum(len(v) for v in seen.values()) < 40:
            time.sleep(0.2)
        assert {g: v for g, v in seen.items()} == {g: list(range(10)) for g in "ABCD"}
    finally:
        consumer.shutdown()
        p.shutdown()
