"""Refused inputs against a ``pymq serve`` subprocess (issue 24): every input SendMessage
refuses gets RocketMQ 5 proxy's code for it (never INTERNAL_SERVER_ERROR), and a name with
a trailing newline (which ``re.match`` with ``$`` let through) is refused on gRPC and
remoting alike and reaches neither ``config/topics.json`` nor the groups table."""

from __future__ import annotations

import json
import os
import re
import time

import grpc
import pytest

from .hostile_support import (GET_ROUTEINFO_BY_TOPIC, HEART_BEAT, PULL_MESSAGE, SEND_MESSAGE_V2,
                              UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, UPDATE_AND_CREATE_TOPIC, UPDATE_CONSUMER_OFFSET,
                              BothServer, call, grpc_probe, heartbeat_body, remoting_probe)

pb = pytest.importorskip("rocketmq.grpc_protocol.definition_pb2")
from rocketmq.grpc_protocol import service_pb2 as svc, MessagingServiceStub  # noqa: E402

MD = [("x-mq-client-id", "refused-inputs")]
DAY_MS = 86_400_000


def _set(field: str, value):
    """A case that sets one system property."""
    return lambda m: setattr(m.system_properties, field, value)


def _props(items: dict):
    return lambda m: m.user_properties.update(items)


def _topic(name: str):
    return lambda m: setattr(m.topic, "name", name)


def _fifo_without_group(m):
    m.system_properties.message_type = pb.MessageType.FIFO


def _far_delivery(m):
    m.system_properties.message_type = pb.MessageType.DELAY
    m.system_properties.delivery_timestamp.FromMilliseconds(int(time.time() * 1000) + 100 * DAY_MS)


def _not_gzip(m):
    m.system_properties.body_encoding = pb.Encoding.GZIP


# (what, how the one message of the request is spoiled, the proxy's code)
CASES = [
    ("topic with a trailing newline", _topic("NL\n"), "ILLEGAL_TOPIC"),
    ("topic with a space", _topic("a b"), "ILLEGAL_TOPIC"),
    ("topic of 128 characters", _topic("T" * 128), "ILLEGAL_TOPIC"),
    ("empty topic", _topic(""), "ILLEGAL_TOPIC"),
    ("a group's retry topic", _topic("%RETRY%g"), "ILLEGAL_TOPIC"),
    ("the transaction half topic", _topic("RMQ_SYS_TRANS_HALF_TOPIC"), "ILLEGAL_TOPIC"),
    ("tag with \\x01", _set("tag", "a\x01b"), "ILLEGAL_MESSAGE_TAG"),
    ("tag with \\x02", _set("tag", "a\x02"), "ILLEGAL_MESSAGE_TAG"),
    ("tag with a newline", _set("tag", "TagA\n"), "ILLEGAL_MESSAGE_TAG"),
    ("tag with DEL", _set("tag", "a\x7f"), "ILLEGAL_MESSAGE_TAG"),
    ("tag with a C1 control", _set("tag", "a\x85"), "ILLEGAL_MESSAGE_TAG"),
    ("tag with |", _set("tag", "a||b"), "ILLEGAL_MESSAGE_TAG"),
    ("blank tag", _set("tag", "  "), "ILLEGAL_MESSAGE_TAG"),
    ("key with \\x01", lambda m: m.system_properties.keys.extend(["k\x01"]), "ILLEGAL_MESSAGE_KEY"),
    ("key with a newline", lambda m: m.system_properties.keys.extend(["ok", "k\n"]), "ILLEGAL_MESSAGE_KEY"),
    ("blank key", lambda m: m.system_properties.keys.extend([" "]), "ILLEGAL_MESSAGE_KEY"),
    ("message group with \\x02", _set("message_group", "g\x02"), "ILLEGAL_MESSAGE_GROUP"),
    ("message group of 65 characters", _set("message_group", "g" * 65), "ILLEGAL_MESSAGE_GROUP"),
    ("reserved property key", _props({"UNIQ_KEY": "x"}), "ILLEGAL_MESSAGE_PROPERTY_KEY"),
    ("property key with \\x01", _props({"k\x01": "v"}), "ILLEGAL_MESSAGE_PROPERTY_KEY"),
    ("property value with \\x02", _props({"k": "v\x02"}), "ILLEGAL_MESSAGE_PROPERTY_KEY"),
    ("property value with a newline", _props({"k": "v\n"}), "ILLEGAL_MESSAGE_PROPERTY_KEY"),
    ("129 user properties", _props({f"k{i}": "v" for i in range(129)}), "MESSAGE_PROPERTIES_TOO_LARGE"),
    ("17 KiB property value", _props({"k": "v" * 17 * 1024}), "MESSAGE_PROPERTIES_TOO_LARGE"),
    ("16 KiB of keys", lambda m: m.system_properties.keys.extend(["k" * 1024] * 17),
     "MESSAGE_PROPERTIES_TOO_LARGE"),
    ("body of 4 MiB + 1", lambda m: setattr(m, "body", b"b" * (4 * 1024 * 1024 + 1)), "MESSAGE_BODY_TOO_LARGE"),
    ("empty body", lambda m: setattr(m, "body", b""), "MESSAGE_BODY_EMPTY"),
    ("empty message id", _set("message_id", ""), "ILLEGAL_MESSAGE_ID"),
    ("message id with a newline", _set("message_id", "ID1\n"), "ILLEGAL_MESSAGE_ID"),
    ("FIFO message without a message group", _fifo_without_group, "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE"),
    ("delivery 100 days ahead", _far_delivery, "ILLEGAL_DELIVERY_TIME"),
    ("GZIP body that is not gzip", _not_gzip, "MESSAGE_CORRUPTED"),
]


@pytest.fixture(scope="module")
def both_server(tmp_path_factory):
    s = BothServer(str(tmp_path_factory.mktemp("refused") / "store")).start()
    yield s
    s.stop()


def _request(spoil=None) -> svc.SendMessageRequest:
    req = svc.SendMessageRequest()
    m = req.messages.add(body=b"x")
    m.topic.name = "Codes"
    m.system_properties.message_id = "ID1"
    if spoil is not None:
        spoil(m)
    return req


def test_send_message_refusals_get_the_proxy_codes(both_server):
    srv = both_server
    wrong = {}
    with grpc.insecure_channel(srv.endpoint) as ch:
        stub = MessagingServiceStub(ch)
        for what, spoil, code in CASES:
            got = stub.SendMessage(_request(spoil), metadata=MD, timeout=10).status
            if got.code != pb.Code.Value(code):
                wrong[what] = (pb.Code.Name(got.code), got.message)
        empty = stub.SendMessage(svc.SendMessageRequest(), metadata=MD, timeout=10).status
        if empty.code != pb.Code.MESSAGE_CORRUPTED:
            wrong["no message"] = (pb.Code.Name(empty.code), empty.message)
        two = _request()
        second = two.messages.add(body=b"y")
        second.topic.name, second.system_properties.message_id = "Other", "ID2"
        mixed = stub.SendMessage(two, metadata=MD, timeout=10).status
        if mixed.code != pb.Code.MESSAGE_CORRUPTED:
            wrong["two topics in one request"] = (pb.Code.Name(mixed.code), mixed.message)
    assert not wrong, wrong
    # nothing refused left a trace: no topic entry, no queue; the server still serves
    assert grpc_probe(srv.endpoint) < 1.0
    with open(os.path.join(srv.store, "config", "topics.json")) as f:
        topics = json.load(f)["topicConfigTable"]
    assert "Codes" not in topics and "Other" not in topics
    assert not {"Codes", "Other"} & set(os.listdir(os.path.join(srv.store, "consumequeue")))


def test_names_with_a_trailing_newline_are_refused_everywhere(tmp_path):
    """``"NL\\n"`` topics and ``"G\\n"`` groups, on every call that creates or names them,
    on both protocols: refused, and after a clean stop neither ``topics.json`` nor
    ``subscriptionGroup.json`` nor the queue directories hold a name outside RocketMQ's
    rule."""
    srv = BothServer(str(tmp_path / "store")).start()
    broker, namesrv = srv.address("broker"), srv.address("namesrv")
    try:
        with grpc.insecure_channel(srv.endpoint) as ch:
            stub = MessagingServiceStub(ch)
            route = svc.QueryRouteRequest()
            route.topic.name = "NL\n"
            assert stub.QueryRoute(route, metadata=MD, timeout=5).status.code == pb.Code.ILLEGAL_TOPIC
            assert stub.SendMessage(_request(_topic("NL\n")), metadata=MD,
                                    timeout=5).status.code == pb.Code.ILLEGAL_TOPIC
            hb = svc.HeartbeatRequest(client_type=pb.ClientType.SIMPLE_CONSUMER)
            hb.group.name = "G\n"
            assert stub.Heartbeat(hb, metadata=MD, timeout=5).status.code == pb.Code.ILLEGAL_CONSUMER_GROUP
            rcv = svc.ReceiveMessageRequest(batch_size=1)
            rcv.group.name, rcv.message_queue.topic.name = "G\n", "T"
            rcv.invisible_duration.seconds = 10
            items = list(stub.ReceiveMessage(rcv, metadata=MD, timeout=10))
            assert items[0].status.code == pb.Code.ILLEGAL_CONSUMER_GROUP
        send = {"a": "PG", "b": "NL\n", "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": 0, "h": 0, "i": ""}
        refused = {
            "send": call(broker, SEND_MESSAGE_V2, send, b"x"),
            "create topic": call(broker, UPDATE_AND_CREATE_TOPIC, {"topic": "NL\n", "readQueueNums": 4,
                                                                   "writeQueueNums": 4, "perm": 6}),
            "heartbeat": call(broker, HEART_BEAT, {}, heartbeat_body("G\n")),
            "create group": call(broker, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {},
                                 json.dumps({"groupName": "G\n"}).encode()),
            "retry route": call(namesrv, GET_ROUTEINFO_BY_TOPIC, {"topic": "%RETRY%G\n"}),
            "commit offset": call(broker, UPDATE_CONSUMER_OFFSET, {"consumerGroup": "G\n", "topic": "T",
                                                                   "queueId": 0, "commitOffset": 1}),
            "pull": call(broker, PULL_MESSAGE, {"consumerGroup": "G\n", "topic": "T", "queueId": 0,
                                                "queueOffset": 0, "maxMsgNums": 1, "sysFlag": 0}),
        }
        accepted = {k: head for k, (head, _) in refused.items() if head["code"] == 0}
        assert not accepted, accepted
        assert grpc_probe(srv.endpoint) < 1.0 and remoting_probe(broker) < 1.0
    finally:
        assert srv.stop() == 0
    rule = re.compile(r"[%|a-zA-Z0-9_-]+")
    with open(os.path.join(srv.store, "config", "topics.json")) as f:
        topics = set(json.load(f)["topicConfigTable"])
    with open(os.path.join(srv.store, "config", "subscriptionGroup.json")) as f:
        groups = set(json.load(f)["subscriptionGroupTable"])
    queues = set(os.listdir(os.path.join(srv.store, "consumequeue")))
    assert {"ProbeTopic", "ProbeTopic4"} <= topics and "probe-group" in groups
    assert [n for n in topics | groups | queues if not rule.fullmatch(n)] == []
