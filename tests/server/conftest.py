"""Fixtures for the gRPC server tests: a ``pymq serve`` subprocess on a free loopback port,
and the official RocketMQ 5 Python client (``rocketmq-python-client``) pointed at it."""

from __future__ import annotations

import json
import os
import time

import pytest

pytest.importorskip("grpc")
pytest.importorskip("rocketmq.v5")

from serve_process import ServeProcess, free_port  # noqa: E402  (tests/ is on sys.path)



def write_groups(store: str, groups: dict) -> None:
    """Pre-create subscription groups in ``config/subscriptionGroup.json`` (RocketMQ's
    shape): ``{name: {"retryMaxTimes": n, "consumeMessageOrderly": bool}}``."""
    os.makedirs(os.path.join(store, "config"), exist_ok=True)
    table = {}
    for name, over in groups.items():
        cfg = {"groupName": name, "consumeEnable": True, "consumeFromMinEnable": True,
               "consumeBroadcastEnable": True, "retryQueueNums": 1, "retryMaxTimes": 16, "brokerId": 0,
               "whichBrokerWhenConsumeSlowly": 1, "notifyConsumerIdsChangedEnable": True,
               "consumeMessageOrderly": False}
        cfg.update(over)
        table[name] = cfg
    doc = {"subscriptionGroupTable": table, "dataVersion": {"timestamp": int(time.time() * 1000), "counter": 1}}
    with open(os.path.join(store, "config", "subscriptionGroup.json"), "w") as f:
        json.dump(doc, f)


def write_topics(store: str, topics: dict) -> None:
    """Pre-create topics in ``config/topics.json`` (RocketMQ's shape): ``{name: {"queues": n,
    "attributes": {...}}}``; ``{"message.type": "PRIORITY"}`` is what mqadmin's
    ``updateTopic -a +message.type=PRIORITY`` writes."""
    os.makedirs(os.path.join(store, "config"), exist_ok=True)
    table = {}
    for name, over in topics.items():
        n = over.get("queues", 8)
        table[name] = {"topicName": name, "readQueueNums": n, "writeQueueNums": n, "perm": 6,
                       "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False,
                       "attributes": dict(over.get("attributes", {}))}
    doc = {"topicConfigTable": table, "dataVersion": {"timestamp": int(time.time() * 1000), "counter": 1}}
    with open(os.path.join(store, "config", "topics.json"), "w") as f:
        json.dump(doc, f)


class ServerProcess(ServeProcess):
    """``pymq serve`` with gRPC on a free loopback port (remoting off); ``endpoint`` is
    ``127.0.0.1:PORT``."""

    def __init__(self, store: str, *extra: str, port: int | None = None) -> None:
        self.port = port or free_port()
        super().__init__(store, "--port", str(self.port), "--namesrv-port", "off", "--broker-port", "off", *extra)

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"


@pytest.fixture
def server_factory(tmp_path):
    servers = []

    def make(*extra: str, store: str | None = None, groups: dict | None = None,
             topics: dict | None = None) -> ServerProcess:
        path = store or str(tmp_path / "store")
        if groups:
            write_groups(path, groups)
        if topics:
            write_topics(path, topics)
        s = ServerProcess(path, *extra)
        servers.append(s)
        return s.start()

    yield make
    for s in servers:
        s.stop()


@pytest.fixture
def server(server_factory):
    """A running ``pymq serve`` on a fresh store."""
    return server_factory()


@pytest.fixture
def client_config(server):
    from rocketmq import ClientConfiguration, Credentials
    return ClientConfiguration(server.endpoint, Credentials(), request_timeout=5)


def make_message(topic: str, body: bytes, tag: str | None = None, keys=None, group: str | None = None,
                 deliver_ms: int | None = None, props: dict | None = None):
    from rocketmq import Message
    m = Message()
    m.topic = topic
    m.body = body
    if tag:
        m.tag = tag
    if keys:
        m.keys = keys
    if group:
        m.message_group = group
    if deliver_ms:
        m.delivery_timestamp = deliver_ms
    for k, v in (props or {}).items():
        m.add_property(k, v)
    return m


@pytest.fixture
def producer_factory(client_config):
    from rocketmq import Producer
    made = []

    def make(topics=(), checker=None, config=None):
        p = Producer(config or client_config, tuple(topics), checker) if checker else Producer(config or client_config, tuple(topics))
        p.startup()
        made.append(p)
        return p

    yield make
    for p in made:
        try:
            p.shutdown()
        except Exception:
            pass


@pytest.fixture
def simple_consumer_factory(client_config):
    from rocketmq import FilterExpression, SimpleConsumer
    made = []

    def make(group, topic, await_duration=2, expression="*"):
        c = SimpleConsumer(client_config, group, {topic: FilterExpression(expression)}, await_duration)
        c.startup()
        made.append(c)
        return c

    yield make
    for c in made:
        try:
            c.shutdown()
        except Exception:
            pass


def receive_all(consumer, n: int, timeout: float = 30.0, invisible: int = 30, ack: bool = True) -> list:
    """Receive until ``n`` messages came (acking each unless ``ack`` is False)."""
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        for m in consumer.receive(32, invisible):
            if ack:
                consumer.ack(m)
            got.append(m)
    return got


# -- probes made of the official clients (official_probes.py) --------------------------------

@pytest.fixture(scope="session")
def latency_probe_classes(rocketmq_home, tmp_path_factory):
    """tests/java/LatencyProbe.java compiled once per session (skipped, naming
    PYMQ_ROCKETMQ_HOME, without a RocketMQ distribution or a JDK)."""
    from .official_probes import compile_latency_probe
    return compile_latency_probe(rocketmq_home, tmp_path_factory.mktemp("latency-probe"))


@pytest.fixture
def java_probe_factory(rocketmq_home, latency_probe_classes):
    """``make(namesrv, topic=.., group=.., access_key=None, secret_key=None, **kw)`` starts a
    :class:`~official_probes.JavaRemotingProbe`; all are closed after the test."""
    from .official_probes import JavaRemotingProbe
    made = []

    def make(namesrv, *args, **kwargs):
        probe = JavaRemotingProbe(namesrv, *args, home=rocketmq_home, classes=latency_probe_classes, **kwargs)
        made.append(probe)
        return probe.start()

    yield make
    for probe in made:
        probe.close()


@pytest.fixture
def grpc_probe_factory():
    """``make(endpoint, topic=.., group=.., access_key="", secret_key="", **kw)`` starts a
    :class:`~official_probes.GrpcClientProbe`; all are closed after the test."""
    from .official_probes import GrpcClientProbe
    made = []

    def make(endpoint, *args, **kwargs):
        probe = GrpcClientProbe(endpoint, *args, **kwargs)
        made.append(probe)
        return probe.start()

    yield make
    for probe in made:
        probe.close()
