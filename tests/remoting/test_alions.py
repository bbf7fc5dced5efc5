"""ali-ons (RocketMQ 4.x's pure-JavaScript client, from npm) against ``pymq serve``'s name
server and broker: sends (normal, keyed, delayed, compressed), a push-consumer group of two
consuming everything exactly once, retries and the dead-letter queue, restarts resuming from
committed offsets, long-poll wake-up, queries by key and id, and 16 connections at once."""

from __future__ import annotations

import base64
import os
import json
import signal
import time

import pytest

from .conftest import NodeClient, run_node

# retries are delayed by level 3 + attempts: make every level one second
FAST_LEVELS = " ".join(["1s"] * 18)


def invoke(server, *requests, role: str = "broker") -> list[dict]:
    return run_node({"mode": "invoke", "addr": getattr(server, role), "requests": list(requests)})


def consumer_ids(server, group: str) -> list[str]:
    r = invoke(server, {"code": 38, "header": {"consumerGroup": group}})[0]
    return json.loads(base64.b64decode(r["body"]))["consumerIdList"] if r.get("body") else []


def wait_group(server, group: str, n: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(consumer_ids(server, group)) == n:
            return
        time.sleep(0.3)
    raise AssertionError(f"group {group} never had {n} members")


def produce(server, **opts) -> list[dict]:
    lines = run_node(dict({"mode": "produce", "nameSrv": server.namesrv, "topic": "TopicTest"}, **opts))
    assert not [x for x in lines if "error" in x], lines[:3]
    return lines


def test_group_of_two_consumes_everything_exactly_once_then_resumes(remoting_server):
    server = remoting_server(topics=("TopicTest",))
    opts = {"mode": "consume", "nameSrv": server.namesrv, "group": "CG", "topic": "TopicTest",
            "expression": "TagA || TagB"}
    a, b = NodeClient(opts), NodeClient(opts)
    try:
        for c in (a, b):
            c.wait_for(lambda ls: any("ready" in x for x in ls), 30, "consumer ready")
        wait_group(server, "CG", 2)
        time.sleep(2.5)                                   # both rebalanced (every second)
        sent = produce(server, count=200, tags=["TagA", "TagB"])
        sent += produce(server, count=3, start=200, tags=["TagA"], bodySize=8192)    # compressed by ali-ons
        assert all(x["status"] == "SEND_OK" for x in sent)
        by_queue: dict[int, list[int]] = {}
        for x in sent:
            by_queue.setdefault(x["queueId"], []).append(x["queueOffset"])
        assert all(sorted(v) == list(range(len(v))) for v in by_queue.values()), "queue offsets dense from 0"
        ids = {x["msgId"] for x in sent}
        assert len(ids) == len(sent) and all(len(i) == 32 for i in ids)

        got = lambda: [m for c in (a, b) for m in c.messages()]        # noqa: E731
        a.wait_for(lambda _: {m["msgId"] for m in got()} >= ids, 60, "every message")
        time.sleep(1.0)
        msgs = got()
        assert sorted(m["msgId"] for m in msgs) == sorted(ids), "each message exactly once"
        assert a.messages() and b.messages(), "both members of the group consumed"
        for m in msgs:
            i = int(m["keys"].split("-")[1])
            if i < 200:
                assert m["body"] == f"body-{i}" and m["tags"] == ("TagA" if i % 2 == 0 else "TagB")
            else:
                assert m["bodyLength"] == 8192 and m["body"] == ("x" + str(i % 10)) * 4096
        assert not a.errors() and not b.errors(), a.errors() + b.errors()
    finally:
        a.stop()
        b.stop()

    # restart mid-stream: a new member starts while the producer is sending; offsets
    # committed by the closed consumers are where it resumes
    a2 = NodeClient(opts)
    try:
        a2.wait_for(lambda ls: any("ready" in x for x in ls), 30, "consumer ready")
        more = produce(server, count=50, start=300, tags=["TagA"])
        new_ids = {x["msgId"] for x in more}
        a2.wait_for(lambda _: {m["msgId"] for m in a2.messages()} >= new_ids, 60, "the new messages")
        time.sleep(1.5)
        assert {m["msgId"] for m in a2.messages()} == new_ids, "nothing consumed before the restart came back"
        assert len(a2.messages()) == len(new_ids)
    finally:
        a2.stop()
    for qid in range(4):
        r = invoke(server, {"code": 14, "header": {"consumerGroup": "CG", "topic": "TopicTest", "queueId": qid}},
                   {"code": 30, "header": {"topic": "TopicTest", "queueId": qid}})
        assert r[0]["code"] == 0 and r[0]["ext"]["offset"] == r[1]["ext"]["offset"], r


def test_consumer_killed_mid_stream_resumes_from_committed_offsets(remoting_server):
    """SIGKILL a consumer while a producer is still sending; a new member of the group
    resumes from the offsets the killed one committed (every 0.5 s): every message is
    consumed, nothing committed before the kill comes back, and only the messages of the
    last moments before the kill are delivered twice (at least once, as RocketMQ)."""
    import threading

    server = remoting_server(topics=("KillTopic",))
    opts = {"mode": "consume", "nameSrv": server.namesrv, "group": "KG", "topic": "KillTopic"}
    a = NodeClient(opts)
    try:
        a.wait_for(lambda ls: any("ready" in x for x in ls), 30, "consumer ready")
        first = produce(server, topic="KillTopic", count=300)
        a.wait_for(lambda _: len({m["msgId"] for m in a.messages()}) >= 300, 60, "the first 300")
        time.sleep(1.5)                                       # their offsets committed
        sent: list = []
        producer = threading.Thread(target=lambda: sent.extend(produce(server, topic="KillTopic", count=300,
                                                                       start=300, concurrent=4)))
        producer.start()
        a.wait_for(lambda _: len(a.messages()) >= 350, 60, "some of the second 300")
        a.kill()            # SIGKILL, then read what it printed to the end of the pipe
        killed_had = {m["msgId"] for m in a.messages()}
        producer.join(120)
        assert len(sent) == 300 and all(x["status"] == "SEND_OK" for x in sent)
    finally:
        a.stop()
    ids = {x["msgId"] for x in first + sent}
    early = {x["msgId"] for x in first}
    a2 = NodeClient(opts)
    try:
        try:
            a2.wait_for(lambda _: killed_had | {m["msgId"] for m in a2.messages()} >= ids, 90, "every message")
        except AssertionError:
            missing = ids - killed_had - {m["msgId"] for m in a2.messages()}
            where = [(x["i"], x.get("queueId"), x.get("queueOffset")) for x in first + sent if x["msgId"] in missing]
            raise AssertionError(f"{len(missing)} never consumed (i, queue, offset): {sorted(where)[:20]}") from None
        time.sleep(1.0)
        again = [m["msgId"] for m in a2.messages()]
    finally:
        a2.stop()
    assert not early & set(again), "messages committed before the kill were delivered again"
    assert len(again) == len(set(again)), "the new member got a message twice"
    assert ids - killed_had <= set(again), "a message was lost"
    redelivered = set(again) & killed_had
    assert len(redelivered) < len(killed_had - early), "the new member started over instead of resuming"


def test_retries_then_dead_letter_queue(remoting_server):
    server = remoting_server("--message-delay-level", FAST_LEVELS, topics=("RetryTopic",))
    c = NodeClient({"mode": "consume", "nameSrv": server.namesrv, "group": "RG", "topic": "RetryTopic",
                    "maxReconsumeTimes": 2, "fail": {"key-3": 1, "key-5": -1}})
    try:
        c.wait_for(lambda ls: any("ready" in x for x in ls), 30, "consumer ready")
        sent = produce(server, topic="RetryTopic", count=8)
        first = {x["i"]: x["msgId"] for x in sent}
        # key-3 fails once, then succeeds from %RETRY%RG; key-5 fails 3 times (attempts 0..2), then DLQ
        c.wait_for(lambda ls: len([x for x in ls if x.get("keys") == "key-5" and x.get("failed")]) == 3
                   and any(x.get("keys") == "key-3" and not x.get("failed") and "msgId" in x for x in ls),
                   60, "retries")
        ok3 = [x for x in c.lines if x.get("keys") == "key-3" and not x.get("failed") and "queueOffset" in x]
        assert len(ok3) == 1 and ok3[0]["reconsumeTimes"] == 1 and ok3[0]["originMsgId"] == first[3]
        failed5 = [x for x in c.lines if x.get("keys") == "key-5" and x.get("failed")]
        assert [x["reconsumeTimes"] for x in failed5] == [0, 1, 2]
        delivered = [x for x in c.lines if "queueOffset" in x and not x.get("failed")]
        assert sorted(int(x["keys"].split("-")[1]) for x in delivered) == [0, 1, 2, 3, 4, 6, 7]
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            r = invoke(server, {"code": 30, "header": {"topic": "%DLQ%RG", "queueId": 0}})[0]
            if r["code"] == 0 and int(r["ext"]["offset"]) == 1:
                break
            time.sleep(0.5)
        else:
            raise AssertionError("key-5 never reached %DLQ%RG")
        time.sleep(2.0)
        assert len([x for x in c.lines if x.get("keys") == "key-5"]) == 3, "no delivery after the DLQ"
    finally:
        c.stop()
    r = invoke(server, {"code": 12, "header": {"topic": "%DLQ%RG", "key": "key-5", "maxNum": 32, "beginTimestamp": 0,
                                              "endTimestamp": int(time.time() * 1000) + 1000}, "decode": True})[0]
    assert r["code"] == 0 and len(r["messages"]) == 1
    dead = r["messages"][0]
    assert dead["reconsumeTimes"] == 3 and dead["properties"]["RETRY_TOPIC"] == "RetryTopic"
    assert dead["properties"]["ORIGIN_MESSAGE_ID"] == first[5] and dead["body"] == "body-5"


def test_delayed_messages_and_long_poll_wake_up(remoting_server):
    server = remoting_server(topics=("DelayTopic",))
    c = NodeClient({"mode": "consume", "nameSrv": server.namesrv, "group": "DG", "topic": "DelayTopic"})
    try:
        c.wait_for(lambda ls: any("ready" in x for x in ls), 30, "consumer ready")
        time.sleep(1.5)            # the consumer's pulls are parked on the empty queues
        now = produce(server, topic="DelayTopic", count=1, keyPrefix="now-")
        delayed = produce(server, topic="DelayTopic", count=1, start=1, keyPrefix="level-", delayLevel=1)
        timed = produce(server, topic="DelayTopic", count=1, start=2, keyPrefix="at-", deliverAfterMs=1500)
        c.wait_for(lambda _: len(c.messages()) == 3, 30, "three messages")
        got = {m["keys"].split("-")[0]: m for m in c.messages()}
        assert got["now"]["at"] - now[0]["sentAt"] < 1000, "woken by the arrival, not the 15 s hold"
        # from before the send (the deliver time is set then; a loaded machine's send
        # latency would eat the margin if measured from its completion)
        assert got["level"]["at"] - delayed[0]["createdAt"] >= 950, "delay level 1 is one second"
        assert got["at"]["at"] - timed[0]["createdAt"] >= 1450, "__STARTDELIVERTIME"
    finally:
        c.stop()


def test_query_by_key_and_by_id(remoting_server):
    server = remoting_server(topics=("QueryTopic",))
    sent = produce(server, topic="QueryTopic", count=20)
    seven = next(x for x in sent if x["i"] == 7)
    now = int(time.time() * 1000) + 1000
    offset = int(seven["msgId"][16:], 16)        # offset message id: host (8 bytes) + commit-log offset
    r = invoke(server,
               {"code": 12, "header": {"topic": "QueryTopic", "key": "key-7", "maxNum": 32, "beginTimestamp": 0,
                                       "endTimestamp": now}, "decode": True},
               {"code": 33, "header": {"offset": offset}, "decode": True},
               {"code": 12, "header": {"topic": "QueryTopic", "key": "no-such-key", "maxNum": 32,
                                       "beginTimestamp": 0, "endTimestamp": now}},
               {"code": 33, "header": {"offset": offset + 1}})
    by_key, by_id, missing, bad_offset = r
    assert by_key["code"] == 0 and [m["msgId"] for m in by_key["messages"]] == [seven["msgId"]]
    assert by_key["messages"][0]["keys"] == "key-7" and by_key["messages"][0]["body"] == "body-7"
    assert by_id["code"] == 0 and by_id["messages"][0]["msgId"] == seven["msgId"]
    assert missing["code"] == 22 and bad_offset["code"] == 1


def test_sixteen_connections_at_once(remoting_server):
    server = remoting_server(topics=("SwarmTopic", "SwarmIdle"))
    lines = run_node({"mode": "swarm", "addr": server.broker, "connections": 16, "messages": 50,
                      "topic": "SwarmTopic", "queues": 4, "idleTopic": "SwarmIdle"})
    conns = [x for x in lines if "connection" in x]
    assert len(conns) == 16 and all(x["ok"] == 50 for x in conns), lines
    # a pull parked on each connection never held its sends back, and came back at its time
    assert all(x["parkedCode"] == 19 for x in conns)
    assert all(x["sentMs"] < x["parkedMs"] for x in conns)
    r = invoke(server, *[{"code": 30, "header": {"topic": "SwarmTopic", "queueId": q}} for q in range(4)])
    assert sum(int(x["ext"]["offset"]) for x in r) == 800


def test_max_topics_refuses_a_new_topic(remoting_server):
    """Against --max-topics 1, a send along TBW102's route (what the Java client does for
    a topic with no route) creates the first new topic; a second new topic is refused
    (route and send), with no topic entry written for it."""
    server = remoting_server("--max-topics", "1")

    def send(topic: str) -> dict:
        return invoke(server, {"code": 310, "header": {"a": "PG", "b": topic, "c": "TBW102", "d": 4, "e": 0, "f": 0,
                                                       "g": int(time.time() * 1000), "h": 0, "i": ""},
                               "body": base64.b64encode(b"x").decode()})[0]
    assert send("FirstTopic")["code"] == 0
    assert send("SecondTopic")["code"] == 17
    lines = run_node({"mode": "produce", "nameSrv": server.namesrv, "topic": "FirstTopic", "count": 2})
    assert lines and all("error" not in x for x in lines), lines
    assert invoke(server, {"code": 105, "header": {"topic": "SecondTopic"}}, role="namesrv")[0]["code"] == 17
    with open(os.path.join(server.store, "config", "topics.json")) as f:
        table = json.load(f)["topicConfigTable"]
    assert "FirstTopic" in table and "SecondTopic" not in table


def test_refusals(remoting_server):
    server = remoting_server("--no-auto-create-topic")
    lines = run_node({"mode": "produce", "nameSrv": server.namesrv, "topic": "NoSuchTopic", "count": 1})
    assert lines and "error" in lines[0], lines
    now_pull = {"consumerGroup": "G", "topic": "NoSuchTopic", "queueId": 0, "queueOffset": 5, "maxMsgNums": 32,
                "sysFlag": 0, "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0}
    r = invoke(server, {"code": 105, "header": {"topic": "NoSuchTopic"}},
               {"code": 11, "header": now_pull},
               {"code": 999, "header": {}}, role="broker")
    # the broker port answers name-server codes it does not serve with REQUEST_CODE_NOT_SUPPORTED
    assert [x["code"] for x in r] == [3, 17, 3]
    assert invoke(server, {"code": 105, "header": {"topic": "NoSuchTopic"}}, role="namesrv")[0]["code"] == 17


@pytest.mark.parametrize("offset, code, next_offset", [(9, 21, 3), (3, 19, 3), (1, 0, 3)])
def test_pull_statuses(remoting_server, offset, code, next_offset):
    server = remoting_server(topics=("PullTopic",))
    produce(server, topic="PullTopic", count=12)          # 3 per queue
    header = {"consumerGroup": "PG", "topic": "PullTopic", "queueId": 0, "queueOffset": offset, "maxMsgNums": 32,
              "sysFlag": 0, "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0}
    r = invoke(server, {"code": 11, "header": header, "decode": True})[0]
    assert r["code"] == code and int(r["ext"]["nextBeginOffset"]) == next_offset
    assert int(r["ext"]["minOffset"]) == 0 and int(r["ext"]["maxOffset"]) == 3
    if code == 0:
        assert [m["queueOffset"] for m in r["messages"]] == [1, 2]


def test_server_killed_and_restarted_clients_reconnect(remoting_server):
    server = remoting_server(topics=("KillTopic",))
    ns_port, br_port = server.port("namesrv"), server.port("broker")
    c = NodeClient({"mode": "consume", "nameSrv": server.namesrv, "group": "KG", "topic": "KillTopic"})
    try:
        c.wait_for(lambda ls: any("ready" in x for x in ls), 30, "consumer ready")
        first = {x["msgId"] for x in produce(server, topic="KillTopic", count=40)}
        c.wait_for(lambda _: {m["msgId"] for m in c.messages()} >= first, 30, "the first messages")
        server.stop(signal.SIGKILL)
        time.sleep(1.0)
        server.start(namesrv_port=ns_port, broker_port=br_port)
        second = {x["msgId"] for x in produce(server, topic="KillTopic", count=40, start=40)}
        assert not second & first
        c.wait_for(lambda _: {m["msgId"] for m in c.messages()} >= second, 60, "messages after the restart")
        got = [m["msgId"] for m in c.messages()]
        assert set(got) == first | second, "nothing lost"
        # at least once: what the killed server had not persisted of the group's progress comes again
        assert all(got.count(i) == 1 for i in second)
    finally:
        c.stop()
