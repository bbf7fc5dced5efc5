"""PRIORITY topics against ``pymq serve`` with the official RocketMQ 5 Python client, as
its ``priority_producer_example.py`` uses them: a topic declared ``message.type=PRIORITY``
takes PRIORITY messages only; priorities 0..9 on 8 queues are consumed highest first,
each queue in send order (priorities past the last queue share it); a received message
carries its priority. One server for the module."""

from __future__ import annotations

import time
import uuid

import grpc
import pytest

from .conftest import ServerProcess, write_topics

pb = pytest.importorskip("rocketmq.grpc_protocol.definition_pb2")
from rocketmq import (ClientConfiguration, Credentials, FilterExpression, Message, Producer,  # noqa: E402
                      SimpleConsumer)
from rocketmq.grpc_protocol import MessagingServiceStub, service_pb2 as svc  # noqa: E402

TOPICS = {"priority-topic": {"queues": 8, "attributes": {"message.type": "PRIORITY"}},
          "prio-order": {"queues": 8, "attributes": {"message.type": "PRIORITY"}},
          "plain-topic": {"queues": 4}}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    store = str(tmp_path_factory.mktemp("prio") / "store")
    write_topics(store, TOPICS)
    s = ServerProcess(store).start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def config(server):
    return ClientConfiguration(server.endpoint, Credentials(), request_timeout=5)


@pytest.fixture(scope="module")
def producer(config):
    p = Producer(config, tuple(TOPICS))
    p.startup()
    yield p
    p.shutdown()


def _priority_message(topic: str, body: str, priority: int) -> Message:
    m = Message()
    m.topic = topic
    m.body = body.encode()
    m.tag = "tag"
    m.keys = "keys"
    m.priority = priority
    return m


def test_the_example_sends_priorities_0_to_9(producer):
    """priority_producer_example.py: ten sends of one message with priority 0..9."""
    receipts = [producer.send(_priority_message("priority-topic", "hello, rocketmq.", i)) for i in range(10)]
    assert all(r.message_id for r in receipts)


def test_a_backlog_is_consumed_highest_priority_first(config, producer):
    for i in range(10):
        producer.send(_priority_message("prio-order", f"p{i}", i))
    consumer = SimpleConsumer(config, "prio-order-group", {"prio-order": FilterExpression()}, 2)
    consumer.startup()
    try:
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 10 and time.monotonic() < deadline:
            for m in consumer.receive(1, 20):
                got.append((m.body.decode(), m.priority))
                consumer.ack(m)
    finally:
        consumer.shutdown()
    # 8 queues: priorities 7, 8 and 9 share the last queue, in send order
    assert [b for b, _ in got] == ["p7", "p8", "p9", "p6", "p5", "p4", "p3", "p2", "p1", "p0"]
    assert all(p == int(b[1:]) for b, p in got)


def test_a_priority_topic_takes_priority_messages_only(producer):
    m = Message()
    m.topic = "priority-topic"
    m.body = b"normal"
    with pytest.raises(Exception, match="not match"):        # the route says PRIORITY only
        producer.send(m)
    with pytest.raises(Exception, match="not match"):        # a topic declaring no type takes no PRIORITY
        producer.send(_priority_message("plain-topic", "p", 1))


def _raw_send(server, topic: str, mtype: int, **system) -> pb.Status:
    msg = pb.Message(body=b"x")
    msg.topic.name = topic
    sp = msg.system_properties
    sp.message_id = uuid.uuid4().hex.upper()
    sp.message_type = mtype
    for k, v in system.items():
        setattr(sp, k, v)
    with grpc.insecure_channel(server.endpoint) as ch:
        resp = MessagingServiceStub(ch).SendMessage(svc.SendMessageRequest(messages=[msg]),
                                                    metadata=[("x-mq-client-id", "prio-raw")], timeout=5)
    return resp.status


def test_the_server_refuses_a_type_the_topic_does_not_take(server):
    """What RocketMQ's proxy answers a client that skips the route's check."""
    st = _raw_send(server, "priority-topic", pb.MessageType.NORMAL)
    assert pb.Code.Name(st.code) == "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE"
    assert "expected type is PRIORITY, but actual type is NORMAL" in st.message
    st = _raw_send(server, "plain-topic", pb.MessageType.PRIORITY, priority=2)
    assert pb.Code.Name(st.code) == "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE"
    st = _raw_send(server, "priority-topic", pb.MessageType.PRIORITY)          # no priority given
    assert pb.Code.Name(st.code) == "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE"
    assert pb.Code.Name(_raw_send(server, "priority-topic", pb.MessageType.PRIORITY, priority=3).code) == "OK"


def test_routes_say_which_types_queues_take(server):
    with grpc.insecure_channel(server.endpoint) as ch:
        stub = MessagingServiceStub(ch)

        def types(topic):
            req = svc.QueryRouteRequest()
            req.topic.name = topic
            resp = stub.QueryRoute(req, metadata=[("x-mq-client-id", "prio-route")], timeout=5)
            return {tuple(pb.MessageType.Name(t) for t in q.accept_message_types) for q in resp.message_queues}

        assert types("priority-topic") == {("PRIORITY",)}
        assert types("plain-topic") == {("NORMAL", "FIFO", "DELAY", "TRANSACTION")}
