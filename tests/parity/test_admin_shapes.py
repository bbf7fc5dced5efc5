"""mqadmin's topic, consumer and message commands print the same against RocketMQ 4.9.7 and
pymq (issue 25): topicList, topicStatus, topicRoute, consumerProgress, queryMsgByKey,
queryMsgById, queryMsgByUniqueKey, queryMsgByOffset and deleteTopic.

Each counterpart gets the same data from the official Java client (one module-wide plan: a
topic with six messages, two of them one batch, a group that consumed one, a topic to
delete), then one plan runs every command; each test compares a command's output, after
:func:`normalized`, with the text RocketMQ 4.9.7 prints. What ``normalized`` rewrites is
what legitimately differs between two runs or two brokers, and only that.
"""

from __future__ import annotations

import base64
import pathlib
import re

import pytest

TOPIC, GONE, GROUP = "ShapeTopic", "ShapeGone", "shape_group"

#: what the test sends: (queue, keys, body, user properties); the last two go as one batch
MESSAGES = [(0, "k0 shared", b"body-0", {"p": "0"}), (1, "k1 shared", b"body-1", {"p": "1"}),
            (0, "k2 shared", b"body-2", {"p": "2"}), (1, "k3 shared", b"body-3", {"p": "3", "note": "caf\u00e9"})]
BATCH = [(1, "b0 shared", b"batch-0", {"p": "b0"}), (1, "b1 shared", b"batch-1", {"p": "b1"})]

#: topics a 4.9.7 broker holds from its first start and pymq does not keep as topics; the
#: name server lists them in topicList. Left out of both sides' lists:
SYSTEM_TOPICS = {
    "TBW102",               # template of topics created by their first send (autoCreateTopicEnable);
                            # pymq creates them from its own defaults
    "SELF_TEST_TOPIC",      # created at start by TopicConfigManager, used by nothing here
    "BenchmarkTest",        # the same, for RocketMQ's benchmark tool
    "OFFSET_MOVED_EVENT",   # the same; RocketMQ puts an event there when a pull's offset was moved
    "SCHEDULE_TOPIC_XXXX",  # delay-level messages; pymq keeps it out of its topic table
    "DefaultCluster_REPLY_TOPIC",   # {cluster}_REPLY_TOPIC, request-reply answers
    "DefaultCluster",       # a topic named after the cluster (clusterTopicEnable) and one after
    "broker-a",             # the broker (brokerTopicEnable); pymq answers them as system topics only
}


def _message(queue: int, keys: str, body: bytes, props: dict) -> dict:
    return {"body": base64.b64encode(body).decode(), "tags": "TagA", "keys": keys, "props": props, "queue": queue}


@pytest.fixture(scope="module")
def shapes(rocketmq_probe, counterpart):
    """(what the sends returned, {command: (stdout, stderr)}) on this counterpart."""
    setup = rocketmq_probe.run(counterpart, [
        {"op": "createTopic", "topic": TOPIC, "queues": 2},
        {"op": "createTopic", "topic": GONE, "queues": 1},
        {"op": "send", "topic": TOPIC, "messages": [_message(*m) for m in MESSAGES]},
        {"op": "send", "topic": TOPIC, "messages": [_message(*m) for m in BATCH], "batch": True},
        {"op": "send", "topic": GONE, "messages": [_message(0, "gone", b"gone", {})]},
        {"op": "consume", "group": GROUP, "topic": TOPIC, "counts": {"0": 1}},
        # a push consumer's heartbeat registers its group and creates %RETRY%{group}, whose
        # route consumerProgress and the queryMsgBy* message tracks look up; the pull
        # consumer's own first heartbeat would come too late (it waits a second)
        {"op": "heartbeat", "group": GROUP},
        {"op": "mqadmin", "args": ["clusterList"]},
    ])
    sent = setup[2] + setup[3]
    assert [s["status"] for s in sent] == ["SEND_OK"] * 6, sent
    broker_name = next(line.split()[1] for line in setup[-1].splitlines() if counterpart.address in line)
    commands = {
        "topicList": ["topicList"],
        "topicList -c": ["topicList", "-c"],
        "topicStatus": ["topicStatus", "-t", TOPIC],
        "topicRoute": ["topicRoute", "-t", TOPIC],
        "consumerProgress -g": ["consumerProgress", "-g", GROUP],
        "consumerProgress": ["consumerProgress"],
        "queryMsgByKey": ["queryMsgByKey", "-t", TOPIC, "-k", "shared"],
        "queryMsgById": ["queryMsgById", "-i", sent[1]["offsetMsgId"]],
        "queryMsgByUniqueKey": ["queryMsgByUniqueKey", "-t", TOPIC, "-i", sent[5]["msgId"]],
        "queryMsgByOffset": ["queryMsgByOffset", "-t", TOPIC, "-b", broker_name, "-i", "0", "-o", "1"],
        "deleteTopic": ["deleteTopic", "-t", GONE, "-c", "DefaultCluster"],
        "topicList after": ["topicList"],
        "topicRoute after": ["topicRoute", "-t", GONE],
        "topicStatus after": ["topicStatus", "-t", GONE],
    }
    outs = rocketmq_probe.run(counterpart, [{"op": "mqadmin", "args": a, "stderr": True} for a in commands.values()])
    yield sent, {name: (o["out"], o["err"]) for name, o in zip(commands, outs)}
    for s in sent:                   # queryMsgBy* wrote the bodies there
        pathlib.Path("/tmp/rocketmq/msgbodys", s["msgId"]).unlink(missing_ok=True)


def normalized(text: str, counterpart, sent: list) -> str:
    """``text`` with what differs between runs and brokers replaced, each line's runs of
    blanks made one (the columns are mqadmin's printf widths, alike when the values are):

    * the broker's address -> ``<broker>``; the client's (Born Host) -> ``<client>``;
    * the sends' unique keys and offset message ids -> ``<uniq N>``, ``<offset-id N>`` (N:
      the message's place in what the test sent, so a row names the right message);
    * times (``2026-11-27 05:24:10,379``, without ms in consumerProgress) -> ``<time>``;
    * ``CommitLog Offset`` -> ``<offset>``: pymq's records are 20 bytes longer, their
      ``__CRC32#`` property (pymq's record checksum, RocketMQ 5's ``__CRC32#``), which is
      also taken out of the ``Properties`` map; that map's entries are sorted (the Java
      client's HashMap order follows the record's, which may differ).
    """
    text = text.replace(counterpart.address, "<broker>")
    for i, s in enumerate(sent):
        text = text.replace(s["msgId"], f"<uniq {i}>").replace(s["offsetMsgId"], f"<offset-id {i}>")
    text = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(,\d{3})?", "<time>", text)
    text = re.sub(r"^(Born Host:\s+)\S+", r"\1<client>", text, flags=re.M)
    text = re.sub(r"^(CommitLog Offset:\s+)\d+", r"\1<offset>", text, flags=re.M)

    def props(m) -> str:
        entries = [e for e in m.group(2).split(", ") if not e.startswith("__CRC32#=")]
        return m.group(1) + "{" + ", ".join(sorted(entries)) + "}"
    text = re.sub(r"^(Properties:\s+)\{(.*)\}$", props, text, flags=re.M)
    return "\n".join(re.sub(r"\s+", " ", line).strip() for line in text.splitlines()).strip()


def _clean(out: str, err: str) -> None:
    assert "null" not in out and "Exception" not in out and not err.strip(), out + err


def test_topic_list_lists_the_topics_made_without_the_columns_changing(shapes, counterpart):
    sent, outs = shapes
    (plain, err), (by_cluster, err_c) = outs["topicList"], outs["topicList -c"]
    _clean(plain, err)
    _clean(by_cluster, err_c)
    topics = sorted(set(plain.split()) - SYSTEM_TOPICS)
    assert topics == ["%RETRY%probe_dump", f"%RETRY%{GROUP}", GONE, TOPIC], plain
    lines = [line.split() for line in by_cluster.splitlines() if line.strip()]
    assert lines[0] == ["#Cluster", "Name", "#Topic", "#Consumer", "Group"], by_cluster
    rows = sorted(tuple(x) for x in lines[1:] if x[1] not in SYSTEM_TOPICS)
    # -c leaves out retry topics; a topic's consumer groups are those with offsets on it
    assert rows == [("DefaultCluster", GONE), ("DefaultCluster", TOPIC, GROUP)], by_cluster


def test_topic_status_and_route(shapes, counterpart):
    sent, outs = shapes
    for name in ("topicStatus", "topicRoute"):
        _clean(*outs[name])
    assert normalized(outs["topicStatus"][0], counterpart, sent) == "\n".join([
        "#Broker Name #QID #Min Offset #Max Offset #Last Updated",
        "broker-a 0 0 2 <time>",
        "broker-a 1 0 4 <time>"])
    assert normalized(outs["topicRoute"][0], counterpart, sent) == "\n".join([
        '{', '"brokerDatas":[', '{', '"brokerAddrs":{0:"<broker>"', '},', '"brokerName":"broker-a",',
        '"cluster":"DefaultCluster"', '}', '],', '"filterServerTable":{},', '"queueDatas":[', '{',
        '"brokerName":"broker-a",', '"perm":6,', '"readQueueNums":2,', '"topicSysFlag":0,', '"writeQueueNums":2',
        '}', ']', '}'])


def test_consumer_progress_shows_the_groups_diff(shapes, counterpart):
    sent, outs = shapes
    for name in ("consumerProgress -g", "consumerProgress"):
        _clean(*outs[name])
    # queue 0: 2 messages, 1 consumed (its last consume time); queue 1: 4, none consumed
    assert normalized(outs["consumerProgress -g"][0], counterpart, sent) == "\n".join([
        "#Topic #Broker Name #QID #Broker Offset #Consumer Offset #Diff #LastTime",
        f"{TOPIC} broker-a 0 2 1 1 <time>",
        f"{TOPIC} broker-a 1 4 0 4 N/A",
        "",
        "Consume TPS: 0.00",
        "Diff Total: 5"])
    # every group with a retry topic; the probe's consumers are gone: OFFLINE
    assert normalized(outs["consumerProgress"][0], counterpart, sent) == "\n".join([
        "#Group #Count #Version #Type #Model #TPS #Diff Total",
        f"{GROUP} 0 OFFLINE 0 5",
        "probe_dump 0 OFFLINE 0 0"])


def test_query_msg_by_key_lists_every_match_in_store_order(shapes, counterpart):
    sent, outs = shapes
    _clean(*outs["queryMsgByKey"])
    assert normalized(outs["queryMsgByKey"][0], counterpart, sent) == "\n".join([
        "#Message ID #QID #Offset",
        "<uniq 0> 0 0", "<uniq 1> 1 0", "<uniq 2> 0 1", "<uniq 3> 1 1", "<uniq 4> 1 2", "<uniq 5> 1 3"])


def _message_block(i: int, queue_offset: int, props: dict, with_offset_id: bool = True) -> list:
    queue, keys, body, user = (MESSAGES + BATCH)[i]
    shown = {**user, "KEYS": keys, "TAGS": "TagA", "UNIQ_KEY": f"<uniq {i}>", **props}
    return ([f"OffsetID: <offset-id {i}>"] if with_offset_id else []) + [
        f"Topic: {TOPIC}", "Tags: [TagA]", f"Keys: [{keys}]", f"Queue ID: {queue}", f"Queue Offset: {queue_offset}",
        "CommitLog Offset: <offset>", "Reconsume Times: 0", "Born Timestamp: <time>", "Store Timestamp: <time>",
        "Born Host: <client>", "Store Host: <broker>", "System Flag: 0",
        "Properties: {" + ", ".join(sorted(f"{k}={v}" for k, v in shown.items())) + "}",
        f"Message Body Path: /tmp/rocketmq/msgbodys/<uniq {i}>", "", "",
        # the group is known (it has offsets on the topic) and offline
        f"MessageTrack [consumerGroup={GROUP}, trackType=NOT_ONLINE, "
        f"exceptionDesc=CODE:206 DESC:the consumer group[{GROUP}] not online]"]


def _body_of(out: str) -> bytes:
    path = re.search(r"^Message Body Path:\s+(\S+)", out, re.M).group(1)
    return pathlib.Path(path).read_bytes()


def test_query_msg_by_id_unique_key_and_offset_show_the_message(shapes, counterpart):
    """The broker adds ``CLUSTER`` to what the producer sent and stores no ``WAIT``; a
    batch's messages keep the batch's ``WAIT`` and get ``CLUSTER`` after their own."""
    sent, outs = shapes
    for name in ("queryMsgById", "queryMsgByUniqueKey", "queryMsgByOffset"):
        _clean(*outs[name])
    by_id = outs["queryMsgById"][0]
    assert normalized(by_id, counterpart, sent) == "\n".join(_message_block(1, 0, {"CLUSTER": "DefaultCluster"}))
    assert _body_of(by_id) == b"body-1"
    by_key = outs["queryMsgByUniqueKey"][0]
    assert normalized(by_key, counterpart, sent) == "\n".join(
        _message_block(5, 3, {"CLUSTER": "DefaultCluster", "WAIT": "true"}, with_offset_id=False))
    assert _body_of(by_key) == b"batch-1"
    by_offset = outs["queryMsgByOffset"][0]        # queue 0, offset 1: the third message;
    assert normalized(by_offset, counterpart, sent) == "\n".join(   # a pull: the client adds MIN/MAX_OFFSET
        _message_block(2, 1, {"CLUSTER": "DefaultCluster", "MIN_OFFSET": "0", "MAX_OFFSET": "2"}))
    assert _body_of(by_offset) == b"body-2"


def test_delete_topic_removes_it_from_the_broker_and_the_name_server(shapes, counterpart):
    sent, outs = shapes
    _clean(*outs["deleteTopic"])
    assert outs["deleteTopic"][0].splitlines() == [
        f"delete topic [{GONE}] from cluster [DefaultCluster] success.",
        f"delete topic [{GONE}] from NameServer success."]
    after, err = outs["topicList after"]
    _clean(after, err)
    assert GONE not in after.split() and TOPIC in after.split(), after


def test_a_deleted_topic_has_no_route(shapes):
    """Both commands fail at the route lookup: mqadmin prints nothing and the stack trace
    of the name server's CODE 17."""
    for name, command in (("topicRoute after", "TopicRouteSubCommand"), ("topicStatus after", "TopicStatusSubCommand")):
        out, err = shapes[1][name]
        causes = [line for line in err.splitlines() if not line.startswith("\t")]
        assert out == "" and causes[:3] == [
            f"org.apache.rocketmq.tools.command.SubCommandException: {command} command failed",
            "Caused by: org.apache.rocketmq.client.exception.MQClientException: CODE: 17  DESC: "
            f"No topic route info in name server for the topic: {GONE}",
            "See http://rocketmq.apache.org/docs/faq/ for further details."], (out, err)
