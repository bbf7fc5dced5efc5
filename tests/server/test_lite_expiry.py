"""Lite-topic expiry against ``pymq serve`` (:mod:`pymq.broker.lite_lifecycle`), with a
raw-gRPC lite push consumer: an idle lite topic goes, its subscriptions with it; an
active one stays and all its messages are delivered, in order; a message after expiry
starts a fresh lite topic, delivered from its start once the client subscribes again.
The server reads a broker.conf that makes the intervals short (``liteTopicExpirationUnitMs``:
a "minute" of ``lite.topic.expiration`` is 1.5 s). One server for the module.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from .conftest import ServerProcess, write_groups, write_topics
from .test_lite_groups import PARENT, RawLiteClient, send

pb = pytest.importorskip("rocketmq.grpc_protocol.definition_pb2")
from rocketmq import ClientConfiguration, Credentials, Producer  # noqa: E402

TOPICS = {PARENT: {"queues": 2, "attributes": {"message.type": "LITE", "lite.topic.expiration": "1"}}}
GROUPS = {"expiry-group": {"attributes": {"lite.bind.topic": PARENT}}}
BROKER_CONF = """\
liteTtlCheckInterval=200
minLiteTTl=500
liteTopicExpirationUnitMs=1500
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("lite-expiry")
    store = str(root / "store")
    write_topics(store, TOPICS)
    write_groups(store, GROUPS)
    conf = root / "broker.conf"
    conf.write_text(BROKER_CONF)
    s = ServerProcess(store, "--broker-config", str(conf)).start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def producer(server):
    p = Producer(ClientConfiguration(server.endpoint, Credentials(), request_timeout=5), (PARENT,))
    p.startup()
    yield p
    p.shutdown()


def test_an_idle_lite_topic_expires_an_active_one_stays(server, producer):
    tag = uuid.uuid4().hex[:6]
    idle, active = "idle-" + tag, "active-" + tag
    c = RawLiteClient(server.endpoint, "expiry-group")
    try:
        assert c.sync([idle, active]).code == pb.Code.OK
        send(producer, idle, "i0", "i1")
        assert [b for _t, b in c.receive_all(2)] == ["i0", "i1"]
        deadline = time.monotonic() + 4.0           # past 1.5 s idle, checked every 0.2 s
        n = 0
        while time.monotonic() < deadline:
            send(producer, active, f"k{n}")
            n += 1
            time.sleep(0.3)
        got = c.receive_all(n, tries=2 * n)
        assert got == [(active, f"k{i}") for i in range(n)]      # active: all, in order
        # the idle one went, the client's subscription of it too (it is not told): a receive
        # (long-polling 5 s at least) gets nothing while the lite topic, afresh, gets
        # messages (sent every 0.3 s, so it stays)
        stop = threading.Event()
        sent: list = []

        def keep_sending() -> None:
            while not stop.is_set():
                sent.append(f"f{len(sent)}")
                send(producer, idle, sent[-1])
                stop.wait(0.3)
        sender = threading.Thread(target=keep_sending, daemon=True)
        sender.start()
        try:
            assert c.receive(0.5) == []
            assert c.sync([idle]).code == pb.Code.OK
            got = c.receive_all(3, tries=20)
        finally:
            stop.set()
            sender.join()
        assert got[:3] == [(idle, "f0"), (idle, "f1"), (idle, "f2")]   # a fresh lite topic, from its start
    finally:
        c.close()


def test_a_lite_topic_with_unconsumed_messages_expires_too(server, producer):
    """RocketMQ asks only how long ago the last message came, not whether it was consumed."""
    lite = "unread-" + uuid.uuid4().hex[:6]
    send(producer, lite, "u0", "u1")
    time.sleep(2.5)                                  # past 1.5 s idle, checked every 0.2 s
    c = RawLiteClient(server.endpoint, "expiry-group")
    try:
        assert c.sync([lite]).code == pb.Code.OK
        send(producer, lite, "after")
        assert c.receive_all(1) == [(lite, "after")]     # u0, u1 went with the lite topic
        assert c.receive(0.3) == []
    finally:
        c.close()
