"""Fixtures for the gRPC server tests: a ``pymq serve`` subprocess on a free loopback port,
and the official RocketMQ 5 Python client (``rocketmq-python-client``) pointed at it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

pytest.importorskip("grpc")
pytest.importorskip("rocketmq.v5")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def prepare_store(path: str) -> None:
    """Create the store with test-sized files (16 MiB commit-log segments, small queue and
    index files) unless it exists; ``pymq serve`` keeps the sizes recorded in
    ``config/storeSizes.json`` (the defaults would allocate 1 GiB segments per test)."""
    if os.path.exists(os.path.join(path, "config", "storeSizes.json")):
        return
    import pymq
    cfg = pymq.StoreConfig(commitlog_file_size=16 * 1024 * 1024, consume_queue_entries=20_000,
                           index_hash_slots=20_000, index_max_entries=400_000, warm_mapped_file_enable=False)
    pymq.MessageStore(path, cfg).shutdown()


class ServerProcess:
    """``pymq serve`` in a subprocess; ``endpoint`` is ``127.0.0.1:PORT``."""

    def __init__(self, store: str, *extra: str, port: int | None = None) -> None:
        self.store = store
        self.extra = list(extra)
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None
        self.output: list[str] = []

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> "ServerProcess":
        prepare_store(self.store)
        cmd = [sys.executable, "-m", "pymq", "serve", "--store", self.store, "--port", str(self.port),
               "--namesrv-port", "off", "--broker-port", "off", *self.extra]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.output.append(line)
            if "listening on" in line:
                return self
        self.proc.kill()
        raise RuntimeError("pymq serve did not start:\n" + "".join(self.output) + (self.proc.stdout.read() or ""))

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """Send ``sig``, wait for the exit; returns the exit code."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
        self.output.append(out or "")
        code = self.proc.returncode
        self.proc = None
        return code

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@pytest.fixture
def server_factory(tmp_path):
    servers = []

    def make(*extra: str, store: str | None = None, groups: dict | None = None) -> ServerProcess:
        path = store or str(tmp_path / "store")
        if groups:
            write_groups(path, groups)
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
