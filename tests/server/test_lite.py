"""LITE topics against ``pymq serve`` with the official RocketMQ 5 Python client, as its
``lite_producer_example.py`` and ``lite_push_consumer_example.py`` use them: a parent
topic declared ``message.type=LITE``, a group bound to it (``lite.bind.topic``), a lite
push consumer that subscribes lite topics and receives their messages, each lite topic
in send order, failures redelivered before the next message of their lite topic,
unsubscribing and subscribing again; and what the server refuses. One server for the
module.

The client (5.1.2) sends a PARTIAL_ADD's lite topic as a list of its characters; RocketMQ
takes those as one-letter lite topics, and so does pymq, so its subscriptions come right
with the full sync the client makes every 30 s. The fast tests call that sync at once
(``subscribe_lite_all``); ``test_the_examples_as_written`` waits for it, as a user of the
examples would.
"""

from __future__ import annotations

import threading
import time
import uuid

import grpc
import pytest

from .conftest import ServerProcess, write_groups, write_topics

pb = pytest.importorskip("rocketmq.grpc_protocol.definition_pb2")
from rocketmq import (ClientConfiguration, ConsumeResult, Credentials, LitePushConsumer, Message,  # noqa: E402
                      MessageListener, Producer)
from rocketmq.grpc_protocol import MessagingServiceStub, service_pb2 as svc  # noqa: E402

PARENT = "parent-topic"
GROUP = "consumer-group"
TOPICS = {PARENT: {"queues": 4, "attributes": {"message.type": "LITE"}},
          "other-parent": {"queues": 2, "attributes": {"message.type": "LITE"}},
          "plain-topic": {"queues": 2}}
GROUPS = {GROUP: {"attributes": {"lite.bind.topic": PARENT}},
          "small-group": {"attributes": {"lite.bind.topic": PARENT, "lite.sub.client.quota": "2"}},
          "example-group": {"attributes": {"lite.bind.topic": PARENT}}}


class Collector(MessageListener):
    """Records (lite topic, body, delivery attempt); fails the first attempt of bodies in
    ``fail_once``."""

    def __init__(self, fail_once=()) -> None:
        self.got: list = []
        self.fail_once = set(fail_once)
        self.lock = threading.Lock()

    def consume(self, message) -> ConsumeResult:
        body = message.body.decode()
        with self.lock:
            self.got.append((message.lite_topic, body, message.delivery_attempt))
            if body in self.fail_once:
                self.fail_once.discard(body)
                return ConsumeResult.FAILURE
        return ConsumeResult.SUCCESS

    def wait(self, n: int, timeout: float = 20.0) -> list:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.got) >= n:
                    return list(self.got)
            time.sleep(0.05)
        with self.lock:
            return list(self.got)

    def bodies_of(self, lite: str) -> list:
        with self.lock:
            return [b for t, b, _ in self.got if t == lite]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    store = str(tmp_path_factory.mktemp("lite") / "store")
    write_topics(store, TOPICS)
    write_groups(store, GROUPS)
    s = ServerProcess(store).start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def config(server):
    return ClientConfiguration(server.endpoint, Credentials(), request_timeout=5)


@pytest.fixture(scope="module")
def producer(config):
    p = Producer(config, (PARENT,))
    p.startup()
    yield p
    p.shutdown()


@pytest.fixture(scope="module")
def collector():
    return Collector(fail_once={"retry-1"})


@pytest.fixture(scope="module")
def consumer(config, collector):
    c = LitePushConsumer(config, GROUP, PARENT, collector)
    c.startup()
    yield c
    c.shutdown()


def lite_message(lite: str, body: str) -> Message:
    m = Message()
    m.topic = PARENT
    m.body = body.encode()
    m.lite_topic = lite
    return m


def subscribe(consumer, *lites) -> None:
    for lite in lites:
        consumer.subscribe_lite(lite)
    consumer.subscribe_lite_all()          # the full sync the client otherwise makes every 30 s


def test_the_examples_flow(producer, consumer, collector):
    """lite_push_consumer_example subscribes lite-test-0..9; lite_producer_example sends
    one message to each."""
    subscribe(consumer, *(f"lite-test-{i}" for i in range(10)))
    receipts = [producer.send(lite_message(f"lite-test-{i}", "hello, rocketmq.")) for i in range(10)]
    assert all(r.message_id for r in receipts)
    collector.wait(10)
    for i in range(10):
        assert collector.bodies_of(f"lite-test-{i}") == ["hello, rocketmq."]


def test_each_lite_topic_is_consumed_in_send_order(producer, consumer, collector):
    subscribe(consumer, "order-a", "order-b")
    for i in range(15):
        producer.send(lite_message("order-a", f"a{i}"))
        producer.send(lite_message("order-b", f"b{i}"))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and len(collector.bodies_of("order-a") + collector.bodies_of("order-b")) < 30:
        time.sleep(0.05)
    assert collector.bodies_of("order-a") == [f"a{i}" for i in range(15)]
    assert collector.bodies_of("order-b") == [f"b{i}" for i in range(15)]


def test_a_failure_is_redelivered_before_the_next_message_of_its_lite_topic(producer, consumer, collector):
    subscribe(consumer, "retry")
    for body in ("retry-0", "retry-1", "retry-2"):
        producer.send(lite_message("retry", body))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and len(collector.bodies_of("retry")) < 4:
        time.sleep(0.05)
    with collector.lock:
        seen = [(b, a) for t, b, a in collector.got if t == "retry"]
    assert seen == [("retry-0", 1), ("retry-1", 1), ("retry-1", 2), ("retry-2", 1)]


def test_unsubscribed_lite_topics_wait_until_subscribed_again(producer, consumer, collector):
    subscribe(consumer, "later", "stays")
    producer.send(lite_message("later", "l0"))
    producer.send(lite_message("stays", "s0"))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not (collector.bodies_of("later") and collector.bodies_of("stays")):
        time.sleep(0.05)
    consumer.unsubscribe_lite("later")
    producer.send(lite_message("later", "l1"))
    producer.send(lite_message("stays", "s1"))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and len(collector.bodies_of("stays")) < 2:
        time.sleep(0.05)
    time.sleep(1.0)
    assert collector.bodies_of("stays") == ["s0", "s1"]
    assert collector.bodies_of("later") == ["l0"]
    subscribe(consumer, "later")           # the group's offset kept: l1 comes now
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and len(collector.bodies_of("later")) < 2:
        time.sleep(0.05)
    assert collector.bodies_of("later") == ["l0", "l1"]


def test_the_group_quota_reaches_the_client(config):
    from rocketmq.v5.exception import LiteSubscriptionQuotaExceededException
    c = LitePushConsumer(config, "small-group", PARENT, Collector())
    c.startup()
    try:
        c.subscribe_lite("q1")
        c.subscribe_lite("q2")
        with pytest.raises(LiteSubscriptionQuotaExceededException):
            c.subscribe_lite("q3")
    finally:
        c.shutdown()


def test_an_illegal_lite_topic_is_refused(producer):
    with pytest.raises(Exception, match="lite topic can only contain"):
        producer.send(lite_message("not allowed!", "x"))


def test_a_lite_topic_takes_lite_messages_only(producer):
    m = Message()
    m.topic = PARENT
    m.body = b"normal"
    with pytest.raises(Exception, match="not match"):
        producer.send(m)


def _sync(server, topic: str, group: str, lites, action=pb.LiteSubscriptionAction.PARTIAL_ADD) -> pb.Status:
    req = svc.SyncLiteSubscriptionRequest(action=action, lite_topic_set=list(lites))
    req.topic.name = topic
    req.group.name = group
    with grpc.insecure_channel(server.endpoint) as ch:
        resp = MessagingServiceStub(ch).SyncLiteSubscription(
            req, metadata=[("x-mq-client-id", "lite-raw-" + uuid.uuid4().hex[:8])], timeout=5)
    return resp.status


def test_sync_lite_subscription_checks(server):
    assert pb.Code.Name(_sync(server, PARENT, GROUP, ["x"]).code) == "OK"
    st = _sync(server, "other-parent", GROUP, ["x"])           # the group is bound to PARENT
    assert pb.Code.Name(st.code) == "ILLEGAL_TOPIC"
    assert "expected to bind topic parent-topic" in st.message
    assert pb.Code.Name(_sync(server, "plain-topic", "plain-group", ["x"]).code) == "BAD_REQUEST"
    assert pb.Code.Name(_sync(server, PARENT, GROUP, ["a b"]).code) == "ILLEGAL_LITE_TOPIC"
    many = [f"t{i}" for i in range(2 + 300 + 1)]               # small-group's quota 2, + 300 of slack
    st = _sync(server, PARENT, "small-group", many, pb.LiteSubscriptionAction.COMPLETE_ADD)
    assert pb.Code.Name(st.code) == "LITE_SUBSCRIPTION_QUOTA_EXCEEDED"


@pytest.mark.slow
def test_the_examples_as_written(config, producer):
    """The examples' calls only: subscribe_lite ten times, then the messages arrive once
    the client's own full sync (30 s after start) has corrected its PARTIAL_ADDs."""
    collector = Collector()
    c = LitePushConsumer(config, "example-group", PARENT, collector)
    c.startup()
    try:
        for i in range(10):
            c.subscribe_lite("example-" + str(i))
        for i in range(10):
            producer.send(lite_message("example-" + str(i), "hello, rocketmq."))
        got = collector.wait(10, timeout=45)
    finally:
        c.shutdown()
    assert sorted(t for t, _, _ in got) == sorted(f"example-{i}" for i in range(10))


def test_a_lite_simple_consumer_receives_its_lite_topics(config, producer):
    from rocketmq import LiteSimpleConsumer
    c = LiteSimpleConsumer(PARENT, config, "simple-lite-group", 2)
    c.startup()
    try:
        deadline = time.monotonic() + 10     # it starts without waiting for its settings (the quota)
        while True:
            try:
                c.subscribe_lite("simple-a")
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        c.subscribe_lite_all()
        for i in range(3):
            producer.send(lite_message("simple-a", f"s{i}"))
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 3 and time.monotonic() < deadline:
            for m in c.receive(32, 15):
                got.append((m.lite_topic, m.body.decode()))
                c.ack(m)
        assert got == [("simple-a", "s0"), ("simple-a", "s1"), ("simple-a", "s2")]
    finally:
        c.shutdown()
