"""RocketMQ 5's official Node.js client (``rocketmq-client-nodejs`` from npm, installed by
ci/test.sh under tests/server/js) against ``pymq serve``, beside the official Python
client: one store shared by two languages. Node sends, Python receives (and the other
way round, with Node acking); delayed sends wait; a FIFO group hands a message group out
one at a time and in order to the Node consumer; what Node sent is found by the CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from .conftest import make_message, receive_all

HERE = os.path.dirname(os.path.abspath(__file__))
JS = os.path.join(HERE, "js")


def node(opts: dict, timeout: float = 90.0) -> list[dict]:
    """Run the driver to its end; its JSON lines (none of them an error)."""
    if shutil.which("node") is None:
        pytest.fail("node is not installed (ci/test.sh expects it)")
    if not os.path.isdir(os.path.join(JS, "node_modules", "rocketmq-client-nodejs")):
        pytest.fail("rocketmq-client-nodejs is not installed: run ci/test.sh (npm ci in tests/server/js)")
    p = subprocess.run(["node", "client5.js", json.dumps(opts)], cwd=JS, capture_output=True, text=True,
                       timeout=timeout)
    lines = [json.loads(x) for x in p.stdout.splitlines() if x.strip()]
    failed = [x for x in lines if "error" in x or "fatal" in x]
    assert p.returncode == 0 and not failed, (failed[:3] or lines[-3:], p.stderr[-2000:])
    return lines


def test_node_sends_python_receives(server, simple_consumer_factory):
    msgs = [{"body": f"from node {i}", "tag": "TagA" if i % 2 else "TagB", "keys": [f"nk-{i}"]} for i in range(20)]
    msgs.append({"body": "late", "tag": "TagA", "keys": ["nk-late"], "delayMs": 2000})
    t0 = time.time()
    sent = node({"mode": "produce", "endpoints": server.endpoint, "topic": "NodeTopic", "messages": msgs})
    ids = [x["messageId"] for x in sent]
    assert len(set(ids)) == 21
    c = simple_consumer_factory("g-from-node", "NodeTopic")
    got = receive_all(c, 21, timeout=30)
    by_id = {m.message_id: m for m in got}
    assert set(by_id) == set(ids), "every message Node sent, each once, under the id its receipt gave"
    for i, x in enumerate(msgs):
        m = by_id[ids[i]]
        assert (m.body.decode(), m.tag, list(m.keys)) == (x["body"], x["tag"], x["keys"])
    late = by_id[ids[-1]]
    assert late.delivery_timestamp is not None and late.delivery_timestamp / 1000 >= t0 + 1.5
    # the store holds them as RocketMQ does: the CLI finds a Node message by its key
    out = subprocess.run([sys.executable, "-m", "pymq", "--store", server.store, "query-msg-by-key", "-t",
                          "NodeTopic", "-k", "nk-7", "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "from node 7" in out.stdout and ids[7] in out.stdout


def test_python_sends_node_receives_and_acks(server, producer_factory, simple_consumer_factory):
    p = producer_factory(["PyToNode"])
    sent = {p.send(make_message("PyToNode", f"from python {i}".encode(), tag="T", keys=f"pk-{i}")).message_id: i
            for i in range(15)}
    lines = node({"mode": "consume", "endpoints": server.endpoint, "group": "g-node", "topic": "PyToNode",
                  "count": 15})
    got = [x for x in lines if "messageId" in x]
    assert lines[-1] == {"done": 15}
    assert {x["messageId"] for x in got} == set(sent) and len(got) == 15
    for x in got:
        i = sent[x["messageId"]]
        assert (x["body"], x["tag"], x["keys"], x["deliveryAttempt"]) == (f"from python {i}", "T", [f"pk-{i}"], 1)
    # Node acked every one: the group has nothing left, now or after the invisible time
    c = simple_consumer_factory("g-node", "PyToNode")
    assert c.receive(32, 30) == []


def test_node_fifo_group_in_order(server_factory):
    srv = server_factory(groups={"g-node-fifo": {"consumeMessageOrderly": True}})
    msgs = [{"body": f"{g}{i}", "tag": "F", "messageGroup": g} for i in range(6) for g in ("A", "B")]
    node({"mode": "produce", "endpoints": srv.endpoint, "topic": "NodeFifo", "messages": msgs})
    lines = node({"mode": "consume", "endpoints": srv.endpoint, "group": "g-node-fifo", "topic": "NodeFifo",
                  "count": 12})
    got = [x for x in lines if "messageId" in x]
    for g in ("A", "B"):
        assert [x["body"] for x in got if x["messageGroup"] == g] == [f"{g}{i}" for i in range(6)]
        batches = [x["batch"] for x in got if x["messageGroup"] == g]
        assert len(set(batches)) == 6, "a message group's next message only after the last was acked"
    assert all(x["deliveryAttempt"] == 1 for x in got)


def test_node_recalls_a_delayed_message(server, simple_consumer_factory):
    due_in = 2500
    msgs = [{"body": "keep", "delayMs": due_in}, {"body": "gone", "delayMs": due_in, "recall": True},
            {"body": "now"}]
    lines = node({"mode": "produce", "endpoints": server.endpoint, "topic": "NodeRecall", "messages": msgs})
    sent = {x["i"]: x for x in lines if "messageId" in x}
    recalled = [x for x in lines if "recalled" in x]
    assert recalled == [{"i": 1, "recalled": sent[1]["messageId"]}]
    assert sent[0]["recallHandle"] and not sent[2]["recallHandle"]
    c = simple_consumer_factory("g-node-recall", "NodeRecall")
    got = receive_all(c, 2, timeout=15)
    assert sorted(m.body for m in got) == [b"keep", b"now"]
    assert c.receive(32, 30) == []
