"""mqadmin and the Java client's admin calls, the same against RocketMQ 4.9.7 and pymq
(issue 25): clusterList, brokerStatus, searchOffset, resetOffsetByTime, a delay-level
message as its consumer gets it, routes, what the name server and the broker answer on the
wire to codes they do not serve, and how a C++ client's batch flag is read (raw frames)."""

from __future__ import annotations

import base64
import re
import struct
import time

import pytest

from remoting_wire import answers, call  # tests/ is on sys.path

#: the keys of a 4.9.7 broker's runtime table (brokerStatus); the commit log's path is
#: part of one key's name, written here as <dir>
BROKER_STATUS_KEYS = {
    "EndTransactionQueueSize", "EndTransactionThreadPoolQueueCapacity", "bootTimestamp", "brokerVersion",
    "brokerVersionDesc", "commitLogDirCapacity", "commitLogDiskRatio", "commitLogDiskRatio_<dir>",
    "commitLogMaxOffset", "commitLogMinOffset", "consumeQueueDiskRatio", "dispatchBehindBytes", "dispatchMaxBuffer",
    "earliestMessageTimeStamp", "getFoundTps", "getMessageEntireTimeMax", "getMissTps", "getTotalTps",
    "getTransferedTps", "msgGetTotalTodayMorning", "msgGetTotalTodayNow", "msgGetTotalYesterdayMorning",
    "msgPutTotalTodayMorning", "msgPutTotalTodayNow", "msgPutTotalYesterdayMorning", "pageCacheLockTimeMills",
    "pullThreadPoolQueueCapacity", "pullThreadPoolQueueHeadWaitTimeMills", "pullThreadPoolQueueSize",
    "putLatency99", "putLatency999", "putMessageAverageSize", "putMessageDistributeTime", "putMessageEntireTimeMax",
    "putMessageFailedTimes", "putMessageSizeTotal", "putMessageTimesTotal", "putTps", "queryThreadPoolQueueCapacity",
    "queryThreadPoolQueueHeadWaitTimeMills", "queryThreadPoolQueueSize", "remainHowManyDataToFlush",
    "remainTransientStoreBufferNumbs", "runtime", "sendThreadPoolQueueCapacity",
    "sendThreadPoolQueueHeadWaitTimeMills", "sendThreadPoolQueueSize", "startAcceptSendRequestTimeStamp",
}
PYMQ_EXTRA_KEYS = {"pymqVersion", "remotingConnections"}


def _messages(n: int, tag: str = "t", **extra) -> list:
    return [{"body": base64.b64encode(b"m%d" % i).decode(), "tags": tag, "queue": 0, **extra} for i in range(n)]


def _table(text: str) -> dict:
    """``key : value`` lines of brokerStatus."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def test_cluster_list_prints_the_broker_without_nulls(probe, counterpart):
    probe([{"op": "send", "topic": "ClusterTopic", "messages": _messages(3)}])
    out, = probe([{"op": "mqadmin", "args": ["clusterList"]}])
    row = next(x for x in out.splitlines() if counterpart.address in x)
    assert "V4_9_7" in row and "null" not in out and "Exception" not in out, out
    # #InTPS(LOAD) and #OutTPS(LOAD): "rate(queue size,head wait ms)"
    assert len(re.findall(r"\d+\.\d\d\(\d+,\d+ms\)", row)) == 2, row


def test_broker_status_has_every_key_of_a_4_9_7_broker(probe, counterpart):
    out, = probe([{"op": "mqadmin", "args": ["brokerStatus", "-b", counterpart.address]}])
    table = _table(out)
    keys = {re.sub(r"^commitLogDiskRatio_.*", "commitLogDiskRatio_<dir>", k) for k in table
            if not k.startswith("scheduleMessageOffset_")}      # one per delay level used: "delivered,max"
    assert all(re.fullmatch(r"\d+,\d+", v) for k, v in table.items() if k.startswith("scheduleMessageOffset_"))
    assert keys - PYMQ_EXTRA_KEYS == BROKER_STATUS_KEYS, sorted(keys ^ BROKER_STATUS_KEYS)
    assert table["brokerVersion"] == "407" and table["brokerVersionDesc"] == "V4_9_7"
    # rates over 10 s, 1 min, 10 min (a young 4.9.7 broker leaves the longer ones empty)
    assert all(float(x) >= 0 for x in table["putTps"].split()) and int(table["msgPutTotalTodayNow"]) >= 0
    assert re.fullmatch(r"Total : [\d.]+ \wiB, Free : [\d.]+ \wiB\.", table["commitLogDirCapacity"]), table


def test_search_offset_answers_the_nearest_message(probe):
    """Five messages in queue 0: a time after the last gives the last one's offset (4, not
    the queue's end), a time before the first gives 0."""
    probe([{"op": "createTopic", "topic": "SearchTopic", "queues": 1},
           {"op": "send", "topic": "SearchTopic", "messages": _messages(5)}])
    after, before = probe([{"op": "searchOffset", "topic": "SearchTopic", "deltaMs": 60_000},
                           {"op": "searchOffset", "topic": "SearchTopic", "deltaMs": -3_600_000}])
    assert after == {"0": 4} and before == {"0": 0}, (after, before)


def test_reset_offset_by_time_with_no_consumer_online_moves_the_offsets(probe):
    """The group consumed all five and went away: resetOffsetByTime to a time before the
    first message is answered CONSUMER_NOT_ONLINE by the broker, mqadmin then writes the
    offsets itself, and the group's offsets are back at 0."""
    t0 = int(time.time() * 1000) - 60_000
    probe([{"op": "createTopic", "topic": "ResetTopic", "queues": 1},
           {"op": "send", "topic": "ResetTopic", "messages": _messages(5)},
           {"op": "consume", "group": "reset_group", "topic": "ResetTopic", "counts": {"0": 5}}])
    out, offsets = probe([{"op": "mqadmin", "args": ["resetOffsetByTime", "-g", "reset_group", "-t", "ResetTopic",
                                                     "-s", str(t0)]},
                          {"op": "offsets", "group": "reset_group", "topic": "ResetTopic"}])
    assert "Exception" not in out and "not supported" not in out, out
    assert offsets == {"0": 0}, (offsets, out)


def test_reset_offset_by_time_makes_an_online_push_consumer_consume_again(probe):
    """A push consumer of the group is online: the broker sends it the offsets of the time
    asked (RESET_CONSUMER_CLIENT_OFFSET), it moves to them and gets the messages again."""
    t0 = int(time.time() * 1000) - 60_000
    results = probe([{"op": "createTopic", "topic": "ResetLive", "queues": 2},
                     {"op": "send", "topic": "ResetLive", "messages": _messages(3) + [
                         dict(m, queue=1) for m in _messages(3)]},
                     {"op": "pushStart", "group": "reset_live", "topic": "ResetLive"},
                     {"op": "pushWait", "group": "reset_live", "count": 6, "waitMs": 30_000, "settleMs": 2_000},
                     # committed by the consumer's pulls, or at the latest by its offset persisting (10 s)
                     {"op": "committed", "group": "reset_live", "topic": "ResetLive", "waitFor": {"0": 3, "1": 3},
                      "waitMs": 20_000},
                     {"op": "mqadmin", "args": ["resetOffsetByTime", "-g", "reset_live", "-t", "ResetLive",
                                                "-s", str(t0)], "stderr": True},
                     {"op": "pushWait", "group": "reset_live", "count": 12, "waitMs": 30_000, "settleMs": 1_000}])
    first, committed, out, total = results[3:]
    assert first == 6 and committed == {"0": 3, "1": 3}, results
    assert out["err"] == "" and "#brokerName" in out["out"], out
    assert total == 12, (total, out)


def test_a_delivered_delay_message_keeps_its_delay_level(probe):
    sent, = probe([{"op": "send", "topic": "DelayTopic", "messages": _messages(1, delayLevel=1)}])
    dump, = probe([{"op": "dump", "topics": ["DelayTopic"], "waitFor": {"DelayTopic": 1}, "waitMs": 20_000}])
    got = dump["DelayTopic"]
    assert len(got) == 1, dump
    props = got[0]["properties"]
    assert props["DELAY"] == "1" and props["REAL_TOPIC"] == "DelayTopic" and props["REAL_QID"] == "0", props
    assert got[0]["msgId"] == sent[0]["msgId"] or props.get("UNIQ_KEY") == sent[0]["msgId"]


def test_routes_only_for_topics_that_exist(probe):
    """The name server describes only existing topics (a lookup creates nothing, a group's
    retry topic included); the Java producer sends a new topic's first message along
    TBW102's route, and that send creates the topic with the producer's 4 queues."""
    def queues(route: dict) -> tuple:
        q, = route["queueDatas"]
        return q["perm"], q["readQueueNums"], q["writeQueueNums"]
    missing, retry, tbw = probe([{"op": "route", "topic": "NotYetThere"},
                                 {"op": "route", "topic": "%RETRY%never_heard_of"},
                                 {"op": "route", "topic": "TBW102"}], allow_errors=True)
    assert "CODE: 17" in missing["error"] and "No topic route info in name server for the topic: NotYetThere" \
        in missing["error"], missing
    assert "CODE: 17" in retry["error"], retry
    assert queues(tbw) == (7, 8, 8), tbw
    sent, route, again = probe([{"op": "send", "topic": "BornOnSend", "messages": _messages(2)},
                                {"op": "route", "topic": "BornOnSend"},
                                {"op": "route", "topic": "%RETRY%never_heard_of"}], allow_errors=True)
    assert [x["status"] for x in sent] == ["SEND_OK"] * 2, sent
    assert queues(route) == (6, 4, 4), route
    assert "CODE: 17" in again["error"], again


def test_name_server_leaves_codes_it_does_not_serve_unanswered(counterpart):
    """RocketMQ's name server gives no response at all to a code it does not serve (ali-ons'
    GET_KV_CONFIG_BY_VALUE, 217, say: its client times out), and answers a KV lookup with
    the namespace and key it was asked for."""
    kv = {"namespace": "PROJECT_CONFIG", "key": "127.0.0.1"}
    got = answers(counterpart.namesrv, [(217, kv), (9999, {}), (101, kv), (219, {"namespace": "ORDER_TOPIC_CONFIG"})])
    assert sorted(got) == [3, 4], got
    assert (got[3]["code"], got[3]["remark"]) == (22, "No config item, Namespace: PROJECT_CONFIG Key: 127.0.0.1")
    assert (got[4]["code"], got[4]["remark"]) == (22, "No config item, Namespace: ORDER_TOPIC_CONFIG")


def test_broker_answers_codes_it_does_not_serve(counterpart):
    got = answers(counterpart.address, [(9999, {}), (217, {})], quiet_s=1.0)
    assert [(got[i]["code"], got[i]["remark"]) for i in (1, 2)] == [
        (3, " request type 9999 not supported"), (3, " request type 217 not supported")], got


def _encoded_batch(bodies: list) -> bytes:
    """``MessageDecoder.encodeMessages``: per message its size, magic 0, body CRC 0, flag,
    body length, body, properties length, properties."""
    out = b""
    for body in bodies:
        props = b"KEYS\x01k\x02"
        out += struct.pack(">iiiii", 20 + len(body) + 2 + len(props), 0, 0, 0, len(body)) + body
        out += struct.pack(">h", len(props)) + props
    return out


def test_a_batch_flag_of_1_is_false(counterpart):
    """The C++ client sends its batches as SEND_MESSAGE_V2 with ``m`` (batch) = "1"; the
    broker reads Boolean fields with Boolean.parseBoolean, so it stores one message whose
    body is the encoded batch. ``m`` = "true" stores the batch's three messages."""
    create = {"topic": "CppBatch", "defaultTopic": "TBW102", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6,
              "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"}
    assert call(counterpart.address, 17, create)[0]["code"] == 0
    body = _encoded_batch([b"b0", b"b1", b"b2"])
    for flag, stored in (("1", 1), ("true", 4)):
        send = {"a": "CPP_PG", "b": "CppBatch", "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": int(time.time() * 1000),
                "h": 0, "i": "", "j": 0, "k": "0", "m": flag}
        head, _ = call(counterpart.address, 310, send, body)
        assert head["code"] == 0, head
        # the broker files queue entries after the send is answered: read until 1 s passes unchanged
        seen, steady = None, time.monotonic()
        while time.monotonic() - steady < 1.0:
            offset = int(call(counterpart.address, 30, {"topic": "CppBatch", "queueId": 0})[0]["extFields"]["offset"])
            if offset != seen:
                seen, steady = offset, time.monotonic()
            time.sleep(0.05)
        assert seen == stored, (flag, seen)


@pytest.fixture(autouse=True)
def _timing(request, counterpart):
    t0 = time.monotonic()
    yield
    print(f"{request.node.name}: {time.monotonic() - t0:.1f} s")
