"""The admin calls (mqadmin's and the dashboard's), transactions, access keys and the binary
header type, through ali-ons' own channel and codec (and a raw socket for the binary type)."""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import struct
import time

from .conftest import NodeClient, run_node
from .test_codec import binary_header, parse_binary_header


def invoke(addr: str, *requests) -> list[dict]:
    return run_node({"mode": "invoke", "addr": addr, "requests": list(requests)})


def body_json(r: dict):
    return json.loads(base64.b64decode(r["body"]))


def b64(doc) -> str:
    return base64.b64encode(json.dumps(doc).encode()).decode()


def pull_header(topic: str, queue_id: int, offset: int = 0) -> dict:
    return {"consumerGroup": "AG", "topic": topic, "queueId": queue_id, "queueOffset": offset, "maxMsgNums": 32,
            "sysFlag": 0, "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0}


def test_topics_groups_and_stats(remoting_server):
    server = remoting_server()
    ns, br = server.namesrv, server.broker
    r = invoke(br, {"code": 17, "header": {"topic": "AdminTopic", "defaultTopic": "TBW102", "readQueueNums": 8,
                                           "writeQueueNums": 8, "perm": 6, "topicFilterType": "SINGLE_TAG",
                                           "topicSysFlag": 0, "order": False}},
               {"code": 17, "header": {"topic": "bad/topic", "readQueueNums": 1, "writeQueueNums": 1}},
               {"code": 200, "body": b64({"groupName": "AdminGroup", "consumeEnable": True, "retryMaxTimes": 3,
                                          "retryQueueNums": 1, "consumeMessageOrderly": True})},
               {"code": 352, "header": {"group": "AdminGroup"}},
               {"code": 21})
    assert [x["code"] for x in r[:3]] == [0, 1, 0]
    assert body_json(r[3])["retryMaxTimes"] == 3 and body_json(r[3])["consumeMessageOrderly"] is True
    assert body_json(r[4])["topicConfigTable"]["AdminTopic"]["writeQueueNums"] == 8

    route, cluster, topics = invoke(ns, {"code": 105, "header": {"topic": "AdminTopic"}}, {"code": 106},
                                    {"code": 206})
    q = body_json(route)["queueDatas"][0]
    assert (q["readQueueNums"], q["writeQueueNums"], q["perm"]) == (8, 8, 6)
    assert body_json(route)["brokerDatas"][0]["brokerAddrs"] == {"0": br}
    assert body_json(cluster)["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}
    assert "AdminTopic" in body_json(topics)["topicList"]

    sent = run_node({"mode": "produce", "nameSrv": ns, "topic": "AdminTopic", "count": 16})
    assert len(sent) == 16
    invoke(br, {"code": 15, "header": {"consumerGroup": "AdminGroup", "topic": "AdminTopic", "queueId": 0,
                                       "commitOffset": 1}})
    stats, consume, runtime, who = invoke(
        br, {"code": 202, "header": {"topic": "AdminTopic"}},
        {"code": 208, "header": {"consumerGroup": "AdminGroup", "topic": "AdminTopic"}},
        {"code": 28}, {"code": 300, "header": {"topic": "AdminTopic"}})
    text = base64.b64decode(stats["body"]).decode()
    # fastjson: a map keyed by MessageQueue objects
    entries = re.findall(r'\{"brokerName":"broker-a","queueId":(\d+),"topic":"AdminTopic"\}:\{([^}]*)\}', text)
    assert len(entries) == 8
    assert sum(json.loads("{" + e + "}")["maxOffset"] for _q, e in entries) == 16
    ctext = base64.b64decode(consume["body"]).decode()
    q0 = re.search(r'"queueId":0,"topic":"AdminTopic"\}:\{([^}]*)\}', ctext).group(1)
    assert json.loads("{" + q0 + "}")["consumerOffset"] == 1
    table = body_json(runtime)["table"]
    assert int(table["commitLogMaxOffset"]) > 0 and table["brokerVersionDesc"].startswith("V4")
    assert "AdminGroup" in body_json(who)["groupList"]

    d = invoke(br, {"code": 215, "header": {"topic": "AdminTopic"}}, {"code": 207, "header": {"groupName": "AdminGroup"}},
               {"code": 21}, {"code": 30, "header": {"topic": "AdminTopic", "queueId": 0}})
    assert d[0]["code"] == 0 and d[1]["code"] == 0
    assert "AdminTopic" not in body_json(d[2])["topicConfigTable"]
    assert d[3]["ext"]["offset"] == "0"


def test_consumer_connections(remoting_server):
    server = remoting_server(topics=("ConnTopic",))
    assert invoke(server.broker, {"code": 203, "header": {"consumerGroup": "ConnGroup"}})[0]["code"] == 206
    c = NodeClient({"mode": "consume", "nameSrv": server.namesrv, "group": "ConnGroup", "topic": "ConnTopic",
                    "expression": "TagA"})
    try:
        c.wait_for(lambda ls: any("ready" in x for x in ls), 30, "ready")
        r = invoke(server.broker, {"code": 203, "header": {"consumerGroup": "ConnGroup"}})[0]
        doc = body_json(r)
        assert len(doc["connectionSet"]) == 1 and "@" in doc["connectionSet"][0]["clientId"]
        assert doc["subscriptionTable"]["ConnTopic"]["subString"] == "TagA"
        assert "%RETRY%ConnGroup" in doc["subscriptionTable"]
    finally:
        c.stop()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:       # the consumer unregistered on close
        if invoke(server.broker, {"code": 203, "header": {"consumerGroup": "ConnGroup"}})[0]["code"] == 206:
            break
        time.sleep(0.3)
    else:
        raise AssertionError("the closed consumer is still listed")


def _prepared(addr: str, n: int, group: str = "TX_PG") -> list[dict]:
    reqs = []
    for i in range(n):
        reqs.append({"code": 310, "header": {"a": group, "b": "TxTopic", "c": "TBW102", "d": 4, "e": 0, "f": 4,
                                             "g": int(time.time() * 1000), "h": 0, "i": f"KEYS\x01tx-{i}\x02",
                                             "j": 0, "k": False},
                     "body": base64.b64encode(f"tx-{i}".encode()).decode()})
    return invoke(addr, *reqs)


def _visible(addr: str) -> list[str]:
    r = invoke(addr, {"code": 11, "header": pull_header("TxTopic", 0), "decode": True})[0]
    return [m["body"] for m in r.get("messages") or []]


def test_transactions_end_and_check(remoting_server):
    server = remoting_server("--transaction-timeout", "300", "--transaction-check-interval", "300")
    br = server.broker
    sent = _prepared(br, 2)
    assert [x["code"] for x in sent] == [0, 0]
    assert _visible(br) == [], "half messages are invisible"
    offsets = [int(x["ext"]["msgId"][16:], 16) for x in sent]
    r = invoke(br, {"code": 37, "header": {"producerGroup": "TX_PG", "tranStateTableOffset": 0,
                                           "commitLogOffset": offsets[0], "commitOrRollback": 8,
                                           "fromTransactionCheck": False, "msgId": sent[0]["ext"]["msgId"]}},
               {"code": 37, "header": {"producerGroup": "TX_PG", "tranStateTableOffset": 1,
                                       "commitLogOffset": offsets[1], "commitOrRollback": 12,
                                       "fromTransactionCheck": False, "msgId": sent[1]["ext"]["msgId"]}})
    assert [x["code"] for x in r] == [0, 0]
    assert _visible(br) == ["tx-0"], "committed once, the rolled back one never"

    # a half left open is checked with a producer of its group, which commits it
    checker = NodeClient({"mode": "checker", "addr": br, "group": "TX_CHECK", "answer": 8, "runMs": 20000})
    try:
        checker.wait_for(lambda ls: any(x.get("heartbeat") == 0 for x in ls), 10, "heartbeat")
        assert _prepared(br, 1, "TX_CHECK")[0]["code"] == 0
        checker.wait_for(lambda ls: any(x.get("ended") == 0 for x in ls), 15, "check answered")
        check = next(x for x in checker.lines if x.get("request") == 39)
        assert check["messages"][0]["topic"] == "TxTopic" and check["messages"][0]["body"] == "tx-0"
        assert check["ext"]["transactionId"] == check["messages"][0]["properties"]["UNIQ_KEY"]
    finally:
        checker.kill()
    deadline = time.monotonic() + 10
    while _visible(br) != ["tx-0", "tx-0"] and time.monotonic() < deadline:
        time.sleep(0.3)
    assert _visible(br) == ["tx-0", "tx-0"], "the checked half was committed"


def test_access_keys(remoting_server):
    server = remoting_server("--access-key", "ak", "--secret-key", "sk")
    server.create_topics("AuthTopic", accessKey="ak", secretKey="sk")
    signed = run_node({"mode": "produce", "nameSrv": server.namesrv, "topic": "AuthTopic", "count": 2,
                       "accessKey": "ak", "secretKey": "sk"})
    assert [x.get("status") for x in signed] == ["SEND_OK", "SEND_OK"]
    wrong = run_node({"mode": "invoke", "addr": server.broker, "accessKey": "ak", "secretKey": "nope",
                      "requests": [{"code": 30, "header": {"topic": "AuthTopic", "queueId": 0}}]})
    unsigned = invoke(server.broker, {"code": 30, "header": {"topic": "AuthTopic", "queueId": 0}})
    assert wrong[0]["code"] == 16 and unsigned[0]["code"] == 16


def test_binary_headers_answered_in_binary(remoting_server):
    server = remoting_server()
    host, port = server.broker.rsplit(":", 1)
    h = binary_header(30, 0, 437, 4242, 0, "", {"topic": "BinTopic", "queueId": "0"})
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(struct.pack(">ii", 4 + len(h), (1 << 24) | len(h)) + h)
        data = b""
        while len(data) < 8 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
            data += s.recv(65536)
    word = struct.unpack(">i", data[4:8])[0]
    assert word >> 24 == 1
    back = parse_binary_header(data[8:8 + (word & 0xFFFFFF)])
    assert back["opaque"] == 4242 and back["flag"] & 1 and back["code"] == 0 and back["ext"]["offset"] == "0"


def test_queue_numbers_are_capped_and_refused_sends_create_no_topic(remoting_server):
    """updateTopic with 5,000,000 queues is refused (SYSTEM_ERROR naming the cap) and
    creates nothing; a first send to a new topic with a queue id past its default queues
    is refused before the topic is created: neither leaves a topic entry."""
    server = remoting_server("--max-queues-per-topic", "64")
    br = server.broker
    huge, fits = invoke(br, {"code": 17, "header": {"topic": "Huge", "readQueueNums": 5_000_000,
                                                     "writeQueueNums": 5_000_000, "perm": 6}},
                        {"code": 17, "header": {"topic": "Fits", "readQueueNums": 64, "writeQueueNums": 64,
                                                "perm": 6}})
    assert huge["code"] == 1 and "max_queues_per_topic" in huge["remark"], huge
    assert fits["code"] == 0, fits
    bad, good = invoke(br, *[{"code": 310, "header": {"a": "PG", "b": topic, "c": "TBW102", "d": 4, "e": qid, "f": 0,
                                                      "g": int(time.time() * 1000), "h": 0, "i": "", "j": 0,
                                                      "k": False},
                              "body": base64.b64encode(b"x").decode()}
                             for topic, qid in (("NewTopic", 99), ("OtherTopic", 1))])
    assert bad["code"] == 1 and "queueId[99] is illegal" in bad["remark"], bad
    assert good["code"] == 0, good
    table = body_json(invoke(br, {"code": 21})[0])["topicConfigTable"]
    assert "Fits" in table and "OtherTopic" in table
    assert "Huge" not in table and "NewTopic" not in table
    deadline = time.monotonic() + 5         # changes within 200 ms of a write go with the next
    while True:
        with open(os.path.join(server.store, "config", "topics.json")) as f:
            saved = f.read()
        if "OtherTopic" in saved or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert "NewTopic" not in saved and "Huge" not in saved and "OtherTopic" in saved
