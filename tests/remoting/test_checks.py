"""Requests that must be refused before they touch the broker's state: admin calls on the
broker's own topics, heartbeats without a group name, consumer offsets of unknown topics or
queues. Raw frames on a socket (the helpers of ``test_robustness``)."""

from __future__ import annotations

import json
import pathlib
import time

from .test_robustness import FrameReader, connect, request

SYSTEM_TOPICS = ("RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "SCHEDULE_TOPIC_XXXX",
                 "rmq_sys_REVIVE_LOG_DefaultCluster", "rmq_sys_wheel_timer", "TBW102")


class Calls:
    """Request / response over one connection to the broker port."""

    def __init__(self, addr: str) -> None:
        self.sock = connect(addr)
        self.reader = FrameReader(self.sock)
        self.opaque = 0

    def __call__(self, code: int, ext: dict | None = None, body: bytes = b"") -> tuple[dict, bytes]:
        self.opaque += 1
        self.sock.sendall(request(code, {k: str(v) for k, v in (ext or {}).items()}, self.opaque, body))
        while True:
            head, data = self.reader.frame()
            if head["opaque"] == self.opaque and head["flag"] & 1:
                return head, data

    def json(self, code: int, ext: dict | None = None) -> dict:
        head, data = self(code, ext)
        assert head["code"] == 0, head
        return json.loads(data)

    def close(self) -> None:
        self.sock.close()


def _send(calls: Calls, topic: str, body: bytes, sys_flag: int = 0, queue_id: int = 0) -> dict:
    head, _ = calls(310, {"a": "PG", "b": topic, "c": "TBW102", "d": 4, "e": queue_id, "f": sys_flag,
                          "g": int(time.time() * 1000), "h": 0, "i": "", "j": 0, "k": "false"}, body)
    return head


def test_system_topics_are_neither_deleted_nor_updated(remoting_server):
    server = remoting_server()
    c = Calls(server.broker)
    try:
        # a pending half message lives in RMQ_SYS_TRANS_HALF_TOPIC
        half = _send(c, "TxT", b"pending", sys_flag=4)
        assert half["code"] == 0, half
        assert _send(c, "Plain", b"x")["code"] == 0
        before = c.json(21)["topicConfigTable"]
        for topic in SYSTEM_TOPICS:
            head, _ = c(215, {"topic": topic})
            assert head["code"] == 1 and "system topic" in head["remark"], (topic, head)
            head, _ = c(17, {"topic": topic, "readQueueNums": 1, "writeQueueNums": 1, "perm": 0})
            assert head["code"] == 1 and "system topic" in head["remark"], (topic, head)
        assert c.json(21)["topicConfigTable"] == before, "nothing changed in topics.json"
        # the half message is still there: committing it makes it visible in its topic
        offset = int(half["extFields"]["msgId"][16:], 16)
        head, _ = c(37, {"producerGroup": "PG", "tranStateTableOffset": 0, "commitLogOffset": offset,
                         "commitOrRollback": 8, "fromTransactionCheck": "false", "msgId": half["extFields"]["msgId"]})
        assert head["code"] == 0, head
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            head, _ = c(30, {"topic": "TxT", "queueId": 0})
            if int(head["extFields"]["offset"]) == 1:
                break
            time.sleep(0.05)
        assert int(head["extFields"]["offset"]) == 1, "the committed half reached its topic"

        # a group's retry and dead-letter topics may be created and deleted, and plain topics
        for topic in ("%RETRY%SomeGroup", "%DLQ%SomeGroup", "Plain"):
            head, _ = c(17, {"topic": topic, "readQueueNums": 1, "writeQueueNums": 1, "perm": 6})
            assert head["code"] == 0, (topic, head)
            head, _ = c(215, {"topic": topic})
            assert head["code"] == 0, (topic, head)
        assert not {"%RETRY%SomeGroup", "%DLQ%SomeGroup", "Plain"} & set(c.json(21)["topicConfigTable"])
    finally:
        c.close()


def test_heartbeat_with_null_or_empty_group_names_creates_nothing(remoting_server):
    server = remoting_server()
    c = Calls(server.broker)
    try:
        hb = {"clientID": "10.0.0.1@1",
              "producerDataSet": [{"groupName": None}, {"groupName": ""}, {}],
              "consumerDataSet": [{"groupName": None, "consumeType": "CONSUME_PASSIVELY",
                                   "subscriptionDataSet": [{"topic": "T", "subString": "*"}]},
                                  {"groupName": "", "subscriptionDataSet": []},
                                  {"subscriptionDataSet": []},
                                  {"groupName": "RealGroup", "subscriptionDataSet": [{"topic": "T", "subString": "*"}]}]}
        head, _ = c(34, {}, json.dumps(hb).encode())
        assert head["code"] == 0, head
        groups = c.json(201)["subscriptionGroupTable"]
        topics = c.json(21)["topicConfigTable"]
        assert "RealGroup" in groups and "%RETRY%RealGroup" in topics
        assert not {"None", "null", ""} & set(groups), groups.keys()
        assert not {"%RETRY%None", "%RETRY%null", "%RETRY%"} & set(topics), topics.keys()
        head, body = c(204, {"producerGroup": "None"})
        assert head["code"] == 0 and json.loads(body)["connectionSet"] == []
        head, _ = c(203, {"consumerGroup": "RealGroup"})
        assert head["code"] == 0
        head, _ = c(203, {"consumerGroup": "None"})
        assert head["code"] == 206
    finally:
        c.close()


def test_update_consumer_offset_checks_topic_and_queue(remoting_server):
    server = remoting_server()
    c = Calls(server.broker)
    try:
        head, _ = c(17, {"topic": "OneQueue", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6})
        assert head["code"] == 0
        cases = [({"topic": "OneQueue", "queueId": 77}, 1),
                 ({"topic": "OneQueue", "queueId": -1}, 1),
                 ({"topic": "bad topic!", "queueId": 0}, 17),
                 ({"topic": "NeverCreated", "queueId": 0}, 17),
                 ({"topic": "OneQueue", "queueId": 0, "consumerGroup": "bad group!"}, 26)]
        for ext, code in cases:
            head, _ = c(15, {"consumerGroup": "OffGroup", "commitOffset": 5, **ext})
            assert head["code"] == code, (ext, head)
            assert head.get("remark"), head
        head, _ = c(15, {"consumerGroup": "OffGroup", "topic": "OneQueue", "queueId": 0, "commitOffset": 3})
        assert head["code"] == 0, head
        head, body = c(43)                          # fastjson: integer map keys
        assert head["code"] == 0
        text = body.decode()
        assert "OneQueue@OffGroup" in text and "77" not in text and "bad topic" not in text
        assert "NeverCreated" not in text and "bad group" not in text, text
        head, _ = c(14, {"consumerGroup": "OffGroup", "topic": "OneQueue", "queueId": 0})
        assert head["code"] == 0 and int(head["extFields"]["offset"]) == 3
    finally:
        c.close()


def test_message_type_of_a_send():
    """The metrics' message_type label of a 4.x send (RocketMQ's
    TopicMessageType.parseFromMessageProperty)."""
    from pymq.server.remoting.send import message_type
    assert message_type({}, 0) == "normal"
    assert message_type({"DELAY": "0"}, 0) == "normal"
    assert message_type({"DELAY": "3"}, 0) == "delay"
    assert message_type({"__STARTDELIVERTIME": "1700000000000"}, 0) == "delay"
    assert message_type({"TIMER_DELIVER_MS": "1700000000000"}, 0) == "delay"
    assert message_type({"__SHARDINGKEY": "order-1"}, 0) == "fifo"
    assert message_type({"DELAY": "3"}, 4) == "transaction"          # TRANSACTION_PREPARED_TYPE
    assert message_type({}, 8) == "normal"                            # commit type: not prepared


def test_a_send_naming_lmqs_is_stored_without_them(remoting_server):
    """INNER_MULTI_DISPATCH / INNER_MULTI_QUEUE_OFFSET are the broker's (a lite message's LMQ
    and its place): a 4.x send that carries them is stored without them, filed nowhere else."""
    server = remoting_server()
    calls = Calls(server.broker)
    try:
        props = "INNER_MULTI_DISPATCH\x01%LMQ%$Victim$x,Victim\x02INNER_MULTI_QUEUE_OFFSET\x010,0\x02KEYS\x01k1\x02"
        head, _ = calls(310, {"a": "PG", "b": "Sender", "c": "TBW102", "d": 4, "e": 0, "f": 0,
                              "g": int(time.time() * 1000), "h": 0, "i": props}, b"payload")
        assert head["code"] == 0, head
        time.sleep(0.5)
        pulled, data = calls(11, {"consumerGroup": "G", "topic": "Sender", "queueId": 0, "queueOffset": 0,
                                  "maxMsgNums": 32, "sysFlag": 0, "commitOffset": 0, "suspendTimeoutMillis": 0,
                                  "subscription": "*", "subVersion": 0})
        assert pulled["code"] == 0 and b"INNER_MULTI" not in data and b"KEYS\x01k1" in data, (pulled, data)
        for queue in ("%LMQ%$Victim$x", "Victim"):
            head, _ = calls(30, {"topic": queue, "queueId": 0})          # GET_MAX_OFFSET
            assert head["code"] != 0 or head["extFields"]["offset"] == "0", (queue, head)
    finally:
        calls.close()
    assert not (pathlib.Path(server.store) / "consumequeue" / "%LMQ%$Victim$x").exists()
