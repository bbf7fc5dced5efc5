"""PRIORITY and LITE topics across the two protocols, one ``pymq serve`` (gRPC, 4.x name
server and broker) for the module:

* a RocketMQ 4 producer (rocketmq-client-cpp, the ``rocketmq`` wheel) publishes to them by
  the properties RocketMQ 5.4/5.5's broker reads on a remoting send: ``__LITE_TOPIC`` files
  the message in its lite topic, which the official 5.x lite push consumer then receives;
  ``_SYS_MSG_PRIORITY_`` picks the queue ``min(priority, writeQueueNums - 1)`` of a PRIORITY
  message and is dropped from a message of another type (here a delayed one);
* a message sent over gRPC (the official 5.x Python producer) is stored with the properties
  RocketMQ 5's proxy and broker give it: ``CLUSTER``, ``PGROUP`` (the topic),
  ``RECONSUME_TIME``, ``__BORNHOST``, ``BORN_TIMESTAMP`` and no ``WAIT``; read back with
  the 4.x pull consumer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from serve_process import ServeProcess, free_port

from .conftest import write_groups, write_topics

CPP_DEPS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "remoting", ".deps",
                        "rocketmq4")

pytest.importorskip("rocketmq.grpc_protocol.definition_pb2")
from rocketmq import (ClientConfiguration, ConsumeResult, Credentials, LitePushConsumer, Message,  # noqa: E402
                      MessageListener, Producer)

PARENT = "lite-parent"
PRIO = "prio-topic"
TOPICS = {PARENT: {"queues": 4, "attributes": {"message.type": "LITE"}},
          PRIO: {"queues": 8, "attributes": {"message.type": "PRIORITY"}},
          "grpc-plain": {"queues": 1}}
GROUPS = {"lite-group": {"attributes": {"lite.bind.topic": PARENT}}}

SEND_4X = r'''
import json, os
from rocketmq.client import Producer, Message
p = Producer("PG_4X"); p.set_namesrv_addr(os.environ["NS"]); p.start()
def send(topic, body, **props):
    m = Message(topic); m.set_body(body)
    level = props.pop("delay", None)
    if level:
        m.set_delay_time_level(level)
    for k, v in props.items():
        m.set_property(k, v)
    r = p.send_sync(m)
    print(json.dumps({"body": body, "status": int(r.status)}))
for i in range(3):
    send("lite-parent", "x%d" % i, __LITE_TOPIC="from-4x")
for prio in (9, 2, 0, 5):
    send("prio-topic", "p%d" % prio, _SYS_MSG_PRIORITY_=str(prio))
send("prio-topic", "d5", _SYS_MSG_PRIORITY_="5", delay=1)
p.shutdown()
'''

PULL_4X = r'''
import json, os
from rocketmq.client import PullConsumer
c = PullConsumer("PULL_4X"); c.set_namesrv_addr(os.environ["NS"]); c.start()
keys = ["_SYS_MSG_PRIORITY_", "CLUSTER", "WAIT", "PGROUP", "__BORNHOST", "BORN_TIMESTAMP", "RECONSUME_TIME",
        "__LITE_TOPIC", "INNER_MULTI_DISPATCH", "INNER_MULTI_QUEUE_OFFSET", "UNIQ_KEY"]
for m in c.pull(os.environ["TOPIC"]):
    props = {}
    for k in keys:
        v = m.get_property(k)
        v = v.decode() if isinstance(v, bytes) else v
        if v:
            props[k] = v
    print(json.dumps({"queue": m.queue_id, "body": m.body.decode(), "props": props}))
c.shutdown()
'''


class Collector(MessageListener):
    def __init__(self) -> None:
        self.got: list = []
        self.lock = threading.Lock()

    def consume(self, message) -> ConsumeResult:
        with self.lock:
            self.got.append((message.lite_topic, message.body.decode()))
        return ConsumeResult.SUCCESS


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    store = str(tmp_path_factory.mktemp("lite-remoting") / "store")
    write_topics(store, TOPICS)
    write_groups(store, GROUPS)
    s = ServeProcess(store, "--port", str(free_port()), "--namesrv-port", "0", "--broker-port", "0").start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def config(server):
    return ClientConfiguration(server.listening["grpc"], Credentials(), request_timeout=5)


@pytest.fixture(scope="module")
def sent_4x(server):
    return run_cpp(SEND_4X, NS=server.listening["namesrv"])


def run_cpp(script: str, **env) -> list:
    """``script`` run with the 4.x client (installed by ci/test.sh, as for tests/remoting);
    its JSON lines."""
    if not os.path.isdir(os.path.join(CPP_DEPS, "rocketmq")):
        pytest.fail("the rocketmq 4.x client is not installed: run ci/test.sh")
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=CPP_DEPS, **env))
    assert p.returncode == 0, p.stderr[-2000:]
    return [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]


def pull(server, topic: str) -> list:
    return run_cpp(PULL_4X, NS=server.listening["namesrv"], TOPIC=topic)


def test_a_4x_producer_publishes_to_a_lite_topic(server, config, sent_4x):
    assert [x["status"] for x in sent_4x] == [0] * 8
    collector = Collector()
    c = LitePushConsumer(config, "lite-group", PARENT, collector)
    c.startup()
    try:
        c.subscribe_lite("from-4x")
        c.subscribe_lite_all()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(collector.got) < 3:
            time.sleep(0.05)
    finally:
        c.shutdown()
    assert collector.got == [("from-4x", "x0"), ("from-4x", "x1"), ("from-4x", "x2")]
    stored = pull(server, PARENT)            # stored once in the parent, naming its LMQ
    assert sorted(x["body"] for x in stored) == ["x0", "x1", "x2"]
    for x in stored:
        assert x["props"]["__LITE_TOPIC"] == "from-4x"
        assert x["props"]["INNER_MULTI_DISPATCH"] == "%LMQ%$lite-parent$from-4x"
        assert "WAIT" not in x["props"]
    assert sorted(int(x["props"]["INNER_MULTI_QUEUE_OFFSET"]) for x in stored) == [0, 1, 2]


def test_a_4x_priority_picks_the_queue_and_other_types_lose_it(server, sent_4x):
    deadline = time.monotonic() + 20
    while True:
        got = {x["body"]: x for x in pull(server, PRIO)}
        if "d5" in got or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert {b: got[b]["queue"] for b in ("p9", "p2", "p0", "p5")} == {"p9": 7, "p2": 2, "p0": 0, "p5": 5}
    assert got["p9"]["props"]["_SYS_MSG_PRIORITY_"] == "9"
    assert "_SYS_MSG_PRIORITY_" not in got["d5"]["props"]      # a DELAY message: no priority


def test_grpc_sends_store_what_the_proxy_and_broker_store(server, config):
    p = Producer(config, ("grpc-plain",))
    p.startup()
    try:
        m = Message()
        m.topic = "grpc-plain"
        m.body = b"from-grpc"
        p.send(m)
    finally:
        p.shutdown()
    [x] = pull(server, "grpc-plain")
    props = x["props"]
    assert props["CLUSTER"] == "DefaultCluster"
    assert props["PGROUP"] == "grpc-plain"              # the proxy names the topic as producer group
    assert props["RECONSUME_TIME"] == "0"
    assert props["__BORNHOST"]                          # the client's address
    assert int(props["BORN_TIMESTAMP"]) > 0
    assert "WAIT" not in props
