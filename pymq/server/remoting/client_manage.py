"""Clients and their progress: heartbeats, consumer lists, consumer offsets, queue locks.

``HEART_BEAT`` registers a 4.x client (``ip@pid``) on its connection with the producer and
consumer groups its body states::

    {"clientID": "10.0.0.1@4242",
     "producerDataSet": [{"groupName": "PG"}],
     "consumerDataSet": [{"groupName": "CG", "consumeType": "CONSUME_PASSIVELY",
                          "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                          "subscriptionDataSet": [{"topic": "T", "subString": "TagA || TagB", ...}],
                          "unitMode": false}]}

A consumer group is created on first use (when auto-creation is on) with its retry topic
``%RETRY%{group}``. When a group's members change (a client joins, leaves, closes its
connection or goes silent for two minutes), its other members are told with a one-way
``NOTIFY_CONSUMER_IDS_CHANGED`` so they rebalance at once. ``GET_CONSUMER_LIST_BY_GROUP``
lists the members (an empty list, not RocketMQ's error, for a group with none: some clients
do not survive the error). Consumer offsets follow ``ConsumerManageProcessor``: a group
with no offset for a queue that still starts at 0 is told 0, else ``QUERY_NOT_FOUND``; an
offset is committed only for a known group, an existing topic and one of its queues.
"""

from __future__ import annotations

from pymq.broker.validators import group_problem

from .codec import ONEWAY_FLAG, RemotingCommand
from .codes import RequestCode, ResponseCode
from .headers import RequestError, json_body, json_bytes, opt_int, opt_str, req_int, require


def _queues(doc) -> list[tuple]:
    out = []
    for mq in doc.get("mqSet") or []:
        if isinstance(mq, dict):
            out.append((str(mq.get("topic", "")), str(mq.get("brokerName", "")), int(mq.get("queueId", 0))))
    return out


def _group_name(data) -> str:
    """The ``groupName`` of a producer or consumer entry of a heartbeat; "" when the entry
    is not an object or its name is null, empty or absent."""
    if not isinstance(data, dict):
        return ""
    name = data.get("groupName")
    return name if isinstance(name, str) else ""


def _mq(q: tuple) -> dict:
    return {"topic": q[0], "brokerName": q[1], "queueId": q[2]}


class ClientManageProcessor:
    """Client and offset calls of a :class:`RemotingServer`."""

    def __init__(self, server) -> None:
        self.server = server
        self.broker = server.broker
        self.clients = server.clients

    def handlers(self) -> dict:
        return {RequestCode.HEART_BEAT: self.heart_beat,
                RequestCode.UNREGISTER_CLIENT: self.unregister_client,
                RequestCode.GET_CONSUMER_LIST_BY_GROUP: self.get_consumer_list_by_group,
                RequestCode.QUERY_CONSUMER_OFFSET: self.query_consumer_offset,
                RequestCode.UPDATE_CONSUMER_OFFSET: self.update_consumer_offset,
                RequestCode.LOCK_BATCH_MQ: self.lock_batch_mq,
                RequestCode.UNLOCK_BATCH_MQ: self.unlock_batch_mq}

    # -- heartbeats and membership ----------------------------------------------------------

    def heart_beat(self, conn, cmd):
        doc = json_body(cmd, "heartbeat")
        if not isinstance(doc, dict) or not doc.get("clientID"):
            raise RequestError(ResponseCode.SYSTEM_ERROR, "heartbeat without clientID")
        producers = {g for g in (_group_name(p) for p in doc.get("producerDataSet") or []) if g}
        consumers, settings = {}, {}
        for c in doc.get("consumerDataSet") or []:
            group = _group_name(c)
            if not group:           # no group (null, empty, absent): nothing to register
                continue
            if group_problem(group) is not None:
                raise RequestError(ResponseCode.SYSTEM_ERROR, group_problem(group))
            self.broker.register_consumer_group(group)
            consumers[group] = {str(s.get("topic")): str(s.get("subString") or "*")
                                for s in c.get("subscriptionDataSet") or [] if isinstance(s, dict)}
            settings[group] = {k: c.get(k) for k in ("consumeType", "messageModel", "consumeFromWhere")}
        info, changed = self.clients.heartbeat(str(doc["clientID"]), conn, producers, consumers, conn.peer,
                                               cmd.language, cmd.version)
        info.settings = settings
        if not conn.heartbeat_seen:
            conn.heartbeat_seen = True
            conn.on_close(self.clients.unregister_channel)
        for group in changed:
            self.notify_consumer_ids_changed(group)
        return cmd.response(ResponseCode.SUCCESS)

    def unregister_client(self, conn, cmd):
        ext = cmd.ext_fields
        client_id = require(ext, "clientID")
        group = opt_str(ext, "consumerGroup")
        if self.clients.leave_groups(client_id, opt_str(ext, "producerGroup"), group) and group:
            self.notify_consumer_ids_changed(group)
        return cmd.response(ResponseCode.SUCCESS)

    def client_gone(self, info) -> None:
        """Listener of the client table: a 4.x client left (connection closed, expired)."""
        self.broker.rebalance_lock_manager.unlock_client(info.client_id)
        for group in info.consumer_groups:
            self.notify_consumer_ids_changed(group)

    def consumer_ids(self, group: str) -> list[str]:
        return sorted(c.client_id for c in self.clients.consumers_of_group(group) if group in c.consumer_groups)

    def notify_consumer_ids_changed(self, group: str) -> None:
        """Tell the members of ``group`` to rebalance (one-way, as RocketMQ does)."""
        cfg = self.broker.subscription_group_manager.get(group)
        if cfg is not None and not cfg.notify_consumer_ids_changed_enable:
            return
        for c in self.clients.consumers_of_group(group):
            conn = c.channel
            if group in c.consumer_groups and hasattr(conn, "write"):
                conn.write(RemotingCommand(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, self.server.next_opaque(),
                                           ONEWAY_FLAG, None, {"consumerGroup": group}))

    def get_consumer_list_by_group(self, conn, cmd):
        group = require(cmd.ext_fields, "consumerGroup")
        return cmd.response(ResponseCode.SUCCESS, body=json_bytes({"consumerIdList": self.consumer_ids(group)}))

    # -- consumer offsets ---------------------------------------------------------------------

    def query_consumer_offset(self, conn, cmd):
        ext = cmd.ext_fields
        group, topic, queue_id = require(ext, "consumerGroup"), require(ext, "topic"), req_int(ext, "queueId")
        offset = self.broker.query_offset(group, topic, queue_id)
        if offset < 0:
            if self.broker.get_min_offset_in_queue(topic, queue_id) > 0:
                return cmd.response(ResponseCode.QUERY_NOT_FOUND,
                                    "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")
            offset = 0
        return cmd.response(ResponseCode.SUCCESS, None, {"offset": offset})

    def update_consumer_offset(self, conn, cmd):
        """Commit a consumer offset (``ConsumerManageProcessor.updateConsumerOffset``): the
        group must exist (or be created on first use), the topic must exist
        (``TOPIC_NOT_EXIST``) and the queue be one of its read queues (``SYSTEM_ERROR``)."""
        ext = cmd.ext_fields
        group, topic, queue_id = require(ext, "consumerGroup"), require(ext, "topic"), req_int(ext, "queueId")
        offset = opt_int(ext, "commitOffset", -1)
        if self.broker.subscription_group_manager.find_subscription_group_config(group) is None:
            raise RequestError(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"Group {group} not exist!")
        tc = self.broker.topic_config_manager.select_topic_config(topic)
        if tc is None:
            raise RequestError(ResponseCode.TOPIC_NOT_EXIST, f"Topic {topic} not exist!")
        if not 0 <= queue_id < max(tc.read_queue_nums, 1):
            raise RequestError(ResponseCode.SYSTEM_ERROR,
                               f"queueId[{queue_id}] is illegal, topic:[{topic}] readQueueNums:[{tc.read_queue_nums}]")
        if offset >= 0:            # some clients send -1 for "nothing consumed yet"
            self.broker.commit_offset(group, topic, queue_id, offset)
        return cmd.response(ResponseCode.SUCCESS)

    # -- orderly consumers' queue locks ----------------------------------------------------------

    def lock_batch_mq(self, conn, cmd):
        doc = json_body(cmd, "lock batch")
        if not isinstance(doc, dict):
            raise RequestError(ResponseCode.SYSTEM_ERROR, "lock batch body is not an object")
        group, client_id = str(doc.get("consumerGroup", "")), str(doc.get("clientId", ""))
        locked = self.broker.rebalance_lock_manager.try_lock_batch(group, _queues(doc), client_id)
        return cmd.response(ResponseCode.SUCCESS, body=json_bytes({"lockOKMQSet": [_mq(q) for q in locked]}))

    def unlock_batch_mq(self, conn, cmd):
        doc = json_body(cmd, "unlock batch")
        if not isinstance(doc, dict):
            raise RequestError(ResponseCode.SYSTEM_ERROR, "unlock batch body is not an object")
        self.broker.rebalance_lock_manager.unlock_batch(str(doc.get("consumerGroup", "")), _queues(doc),
                                                        str(doc.get("clientId", "")))
        return cmd.response(ResponseCode.SUCCESS)
