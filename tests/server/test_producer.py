"""Producer (official RocketMQ 5 Python client) against ``pymq serve``: normal, delayed,
FIFO and batch sends; receipts found in the store with pymq's query commands."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import grpc
import pytest

from .conftest import make_message, receive_all


def pymq_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pymq", *args], capture_output=True, text=True, timeout=60)


def test_send_normal_found_by_key_and_id(server, producer_factory):
    p = producer_factory(["TopicA"])
    receipts = [p.send(make_message("TopicA", f"body {i}".encode(), tag="TagA", keys=f"order-{i}",
                                    props={"color": "red"})) for i in range(10)]
    assert len({r.message_id for r in receipts}) == 10
    # the receipt's message id is the message's unique key: query-msg-by-key finds it (live store)
    out = pymq_cli("--store", server.store, "query-msg-by-key", "-t", "TopicA", "-k", receipts[3].message_id, "--json")
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    found = found if isinstance(found, list) else found["messages"]
    assert len(found) == 1
    out = pymq_cli("--store", server.store, "query-msg-by-key", "-t", "TopicA", "-k", "order-7", "--json")
    assert out.returncode == 0, out.stderr
    assert "order-7" in out.stdout and "body 7" in out.stdout
    # and the offset message id of what query-msg-by-key printed is what query-msg-by-id takes
    doc = found[0]
    out = pymq_cli("--store", server.store, "query-msg-by-id", "-i", doc["msg_id"], "--json")
    assert out.returncode == 0, out.stderr
    assert receipts[3].message_id in out.stdout
    # and query-msg-by-id takes the receipt's id (a unique key) directly
    out = pymq_cli("--store", server.store, "query-msg-by-id", "-i", receipts[5].message_id, "--json")
    assert out.returncode == 0, out.stderr
    assert "body 5" in out.stdout


def test_topic_auto_created_in_topics_json(server, producer_factory):
    p = producer_factory(["NewTopic"])
    p.send(make_message("NewTopic", b"x"))
    server.stop()
    with open(f"{server.store}/config/topics.json") as f:
        doc = json.load(f)
    cfg = doc["topicConfigTable"]["NewTopic"]
    assert cfg["readQueueNums"] >= 1 and cfg["writeQueueNums"] >= 1


def test_delay_message_delivered_after_its_time(server, producer_factory, simple_consumer_factory):
    c = simple_consumer_factory("g-delay", "DelayTopic", await_duration=2)
    p = producer_factory(["DelayTopic"])
    due = int(time.time() * 1000) + 3000
    p.send(make_message("DelayTopic", b"later", deliver_ms=due))
    p.send(make_message("DelayTopic", b"now"))
    first = receive_all(c, 1, timeout=10)
    assert [m.body for m in first] == [b"now"]
    late = receive_all(c, 1, timeout=15)
    assert [m.body for m in late] == [b"later"]
    assert time.time() * 1000 >= due - 50


def test_recall_a_delayed_message_before_its_time(server, producer_factory, simple_consumer_factory):
    """The receipt of a delayed send carries a recall handle; Producer.recall_message with it
    cancels the message (it is never delivered), a bad handle or one recalled too late is
    refused with the protocol's codes."""
    p = producer_factory(["RecallTopic"])
    c = simple_consumer_factory("g-recall", "RecallTopic", await_duration=2)
    due = int(time.time() * 1000) + 2500
    gone = p.send(make_message("RecallTopic", b"gone", deliver_ms=due))
    keep = p.send(make_message("RecallTopic", b"keep", deliver_ms=due))
    assert gone.recall_handle and keep.recall_handle and gone.recall_handle != keep.recall_handle
    assert not p.send(make_message("RecallTopic", b"now")).recall_handle
    assert p.recall_message("RecallTopic", gone.recall_handle) == gone.message_id
    with pytest.raises(Exception, match="BAD_REQUEST|recall handle"):
        p.recall_message("RecallTopic", "bm90IGEgaGFuZGxl")
    got = receive_all(c, 2, timeout=15)
    assert sorted(m.body for m in got) == [b"keep", b"now"]
    assert c.receive(32, 30) == []                     # the recalled one never comes
    with pytest.raises(Exception, match="ILLEGAL_DELIVERY_TIME|not recallable"):
        p.recall_message("RecallTopic", keep.recall_handle)


def test_fifo_message_groups_keep_order_in_one_queue(server, producer_factory, simple_consumer_factory):
    p = producer_factory(["FifoTopic"])
    sent = {}
    for i in range(40):
        g = f"order-{i % 4}"
        r = p.send(make_message("FifoTopic", f"{g}:{i}".encode(), group=g))
        sent.setdefault(g, set()).add(r.message_queue.topic and r.offset)
    c = simple_consumer_factory("g-fifo", "FifoTopic")
    got = receive_all(c, 40, timeout=30)
    by_group = {}
    for m in got:
        g, i = m.body.decode().split(":")
        assert m.message_group == g
        by_group.setdefault(g, []).append(int(i))
    for g, seq in by_group.items():
        assert seq == sorted(seq), (g, seq)
    assert sum(len(v) for v in by_group.values()) == 40


def test_batch_send_raw_stub(server):
    """A SendMessageRequest with 100 messages (the protocol's batch): one entry each."""
    from rocketmq.grpc_protocol import definition_pb2 as pb, service_pb2 as svc, MessagingServiceStub
    with grpc.insecure_channel(server.endpoint) as ch:
        stub = MessagingServiceStub(ch)
        req = svc.SendMessageRequest()
        for i in range(100):
            m = req.messages.add()
            m.topic.name = "BatchTopic"
            m.body = b"b%d" % i
            m.system_properties.message_id = "ID%08d" % i
            m.system_properties.message_type = pb.MessageType.NORMAL
            m.system_properties.keys.append("bk%d" % i)
        resp = stub.SendMessage(req, metadata=[("x-mq-client-id", "raw")], timeout=10)
        assert resp.status.code == pb.Code.OK, resp.status
        assert len(resp.entries) == 100
        offsets = [e.offset for e in resp.entries]
        assert offsets == list(range(offsets[0], offsets[0] + 100))


@pytest.mark.parametrize("mutate, code", [
    (lambda m: setattr(m.topic, "name", "bad topic!"), "ILLEGAL_TOPIC"),
    (lambda m: setattr(m, "body", b""), "MESSAGE_BODY_EMPTY"),
    (lambda m: setattr(m, "body", b"x" * (4 * 1024 * 1024 + 1)), "MESSAGE_BODY_TOO_LARGE"),
    (lambda m: setattr(m.system_properties, "message_id", ""), "ILLEGAL_MESSAGE_ID"),
    (lambda m: setattr(m.system_properties, "tag", "a|b"), "ILLEGAL_MESSAGE_TAG"),
    (lambda m: m.user_properties.__setitem__("UNIQ_KEY", "x"), "ILLEGAL_MESSAGE_PROPERTY_KEY"),
    (lambda m: setattr(m.system_properties, "message_type", 2), "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE"),
    (lambda m: m.system_properties.delivery_timestamp.FromMilliseconds(int(time.time() * 1000) + 10 * 86400_000),
     "ILLEGAL_DELIVERY_TIME"),
])
def test_bad_sends_get_protocol_codes(server, mutate, code):
    from rocketmq.grpc_protocol import definition_pb2 as pb, service_pb2 as svc, MessagingServiceStub
    with grpc.insecure_channel(server.endpoint, options=[("grpc.max_send_message_length", -1)]) as ch:
        stub = MessagingServiceStub(ch)
        req = svc.SendMessageRequest()
        m = req.messages.add()
        m.topic.name = "GoodTopic"
        m.body = b"ok"
        m.system_properties.message_id = "ID1"
        mutate(m)
        resp = stub.SendMessage(req, metadata=[("x-mq-client-id", "raw")], timeout=10)
        assert pb.Code.Name(resp.status.code) == code, resp.status
        ok = svc.SendMessageRequest()
        good = ok.messages.add()
        good.topic.name = "GoodTopic"
        good.body = b"fine"
        good.system_properties.message_id = "ID2"
        assert stub.SendMessage(ok, metadata=[("x-mq-client-id", "raw")], timeout=10).status.code == pb.Code.OK
