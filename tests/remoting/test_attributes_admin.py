"""5.x attributes through the remoting admin, as mqadmin 5.x sends them: ``updateTopic -a``
(the ``attributes`` header field) and ``updateSubGroup -a`` (the body's ``attributes``,
keys signed). They are merged into what the topic or group has; a 4.x update keeps them;
a refused alteration is ``SYSTEM_ERROR`` with RocketMQ's remark and changes nothing."""

from __future__ import annotations

import json

from remoting_wire import call  # tests/ is on sys.path

UPDATE_AND_CREATE_TOPIC, GET_TOPIC_CONFIG = 17, 351
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, GET_SUBSCRIPTIONGROUP_CONFIG = 200, 352
QUERY_ROUTE = 105


def update_topic(server, topic: str, attributes: str | None = None, queues: int = 4) -> dict:
    ext = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": queues, "writeQueueNums": queues,
           "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"}
    if attributes is not None:
        ext["attributes"] = attributes
    return call(server.broker, UPDATE_AND_CREATE_TOPIC, ext)[0]


def topic_attributes(server, topic: str) -> dict:
    head, body = call(server.broker, GET_TOPIC_CONFIG, {"topic": topic})
    assert head["code"] == 0, head
    return json.loads(body)["topicConfig"].get("attributes", {})


def test_topic_attributes_as_mqadmin_5_sends_them(remoting_server_module):
    server = remoting_server_module
    assert update_topic(server, "TypedTopic", "+message.type=FIFO")["code"] == 0
    assert topic_attributes(server, "TypedTopic") == {"message.type": "FIFO"}
    assert update_topic(server, "TypedTopic", queues=8)["code"] == 0          # mqadmin 4.x: kept
    assert topic_attributes(server, "TypedTopic") == {"message.type": "FIFO"}
    refused = update_topic(server, "TypedTopic", "+queue.type=SimpleCQ")
    assert (refused["code"], refused["remark"]) == (1, "attempt to update an unchangeable attribute. key: queue.type")
    refused = update_topic(server, "Fresh", "-message.type")
    assert (refused["code"], refused["remark"]) == (
        1, "only add attribute is supported while creating topic. key: message.type")
    assert call(server.namesrv, QUERY_ROUTE, {"topic": "Fresh"})[0]["code"] == 17     # nothing created
    assert update_topic(server, "TypedTopic", "+message.type=DELAY,+reserve.time=60")["code"] == 0
    assert topic_attributes(server, "TypedTopic") == {"message.type": "DELAY", "reserve.time": "60"}
    assert update_topic(server, "TypedTopic", "-reserve.time")["code"] == 0
    assert topic_attributes(server, "TypedTopic") == {"message.type": "DELAY"}


def test_group_attributes_as_mqadmin_5_sends_them(remoting_server_module):
    server = remoting_server_module

    def update(doc: dict) -> dict:
        return call(server.broker, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {},
                    json.dumps({"groupName": "LiteGroup", **doc}).encode())[0]

    def attributes() -> dict:
        head, body = call(server.broker, GET_SUBSCRIPTIONGROUP_CONFIG, {"group": "LiteGroup"})
        assert head["code"] == 0, head
        return json.loads(body).get("attributes", {})

    assert update({"attributes": {"+lite.bind.topic": "Parent", "+priority.factor": "20"}})["code"] == 0
    assert attributes() == {"lite.bind.topic": "Parent", "priority.factor": "20"}
    assert update({"retryMaxTimes": 3})["code"] == 0                           # mqadmin 4.x: kept
    assert attributes() == {"lite.bind.topic": "Parent", "priority.factor": "20"}
    refused = update({"attributes": {"+priority.factor": "101"}})
    assert (refused["code"], refused["remark"]) == (1, "value is not in range(0, 100)")
    assert update({"attributes": {"-priority.factor": ""}})["code"] == 0
    assert attributes() == {"lite.bind.topic": "Parent"}

