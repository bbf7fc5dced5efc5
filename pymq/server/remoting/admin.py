"""The admin calls of mqadmin and the RocketMQ dashboard, and the per-queue offset queries.

Offsets: ``GET_MAX_OFFSET`` / ``GET_MIN_OFFSET`` (``offset``), ``SEARCH_OFFSET_BY_TIMESTAMP``
(the offset a 4.9.7 broker answers: :mod:`.offset_reset`), ``GET_EARLIEST_MSG_STORETIME``. Topics:
create or update, delete, the whole table, one topic, its per-queue stats. Groups: create
or update, delete, the table, consume stats (broker and consumer offsets per queue), who
consumes a topic, the connections of a consumer or producer group. The broker: runtime
info (a ``KVTable``), its config, every consumer offset, the delay offsets, a cleaning pass.

Some bodies are maps keyed by a ``MessageQueue`` object; the Java side writes and reads
them with fastjson, whose map keys may be objects::

    {"offsetTable": {{"brokerName": "broker-a", "queueId": 0, "topic": "T"}: {"maxOffset": 5, ...}}}

:func:`pymq.store.fastjson.dumps_fastjson` writes that form from an ``ObjectKeyMap``
(standard JSON cannot express it).

A topic's or group's 5.x attributes come as alterations (``+name=value``, ``-name``: the
``attributes`` header field of ``UPDATE_AND_CREATE_TOPIC``, the body's ``attributes`` of
``UPDATE_AND_CREATE_SUBSCRIPTIONGROUP``) merged into what it has, by
:mod:`pymq.broker.attributes`; an update without them keeps them.
"""

from __future__ import annotations

from pymq.broker.attributes import GROUP_ATTRIBUTES, TOPIC_ATTRIBUTES, alter_attributes, parse_alterations
from pymq.broker.broker_role import ADMIN_ON_SLAVE_REMARK
from pymq.broker.subscription_group import SubscriptionGroupConfig
from pymq.broker.topic_config import TopicConfig
from pymq.broker.validators import group_problem, is_internal_topic, is_system_topic, topic_problem
from pymq.store.fastjson import ObjectKeyMap, dumps_fastjson

from .codes import RequestCode, ResponseCode
from .headers import RequestError, json_body, json_bytes, opt_int, opt_str, req_int, require
from .offset_reset import offset_by_time


def _fastjson(doc) -> bytes:
    return dumps_fastjson(doc, pretty=False).encode()


class AdminProcessor:
    """Admin and offset queries of a :class:`RemotingServer`."""

    def __init__(self, server) -> None:
        self.server = server
        self.broker = server.broker

    def handlers(self) -> dict:
        return {
            RequestCode.GET_MAX_OFFSET: self.get_max_offset,
            RequestCode.GET_MIN_OFFSET: self.get_min_offset,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self.search_offset_by_timestamp,
            RequestCode.GET_EARLIEST_MSG_STORETIME: self.get_earliest_msg_storetime,
            RequestCode.UPDATE_AND_CREATE_TOPIC: self.update_and_create_topic,
            RequestCode.DELETE_TOPIC_IN_BROKER: self.delete_topic,
            RequestCode.GET_ALL_TOPIC_CONFIG: self.get_all_topic_config,
            RequestCode.GET_TOPIC_CONFIG: self.get_topic_config,
            RequestCode.GET_TOPIC_NAME_LIST: self.get_topic_name_list,
            RequestCode.GET_TOPIC_STATS_INFO: self.get_topic_stats_info,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER: self.get_system_topic_list,
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.update_and_create_subscription_group,
            RequestCode.DELETE_SUBSCRIPTIONGROUP: self.delete_subscription_group,
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.get_all_subscription_group_config,
            RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG: self.get_subscription_group_config,
            RequestCode.GET_CONSUME_STATS: self.get_consume_stats,
            RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: self.query_topic_consume_by_who,
            RequestCode.GET_CONSUMER_CONNECTION_LIST: self.get_consumer_connection_list,
            RequestCode.GET_PRODUCER_CONNECTION_LIST: self.get_producer_connection_list,
            RequestCode.GET_BROKER_RUNTIME_INFO: self.get_broker_runtime_info,
            RequestCode.GET_BROKER_CONFIG: self.get_broker_config,
            RequestCode.GET_ALL_CONSUMER_OFFSET: self.get_all_consumer_offset,
            RequestCode.GET_ALL_DELAY_OFFSET: self.get_all_delay_offset,
            RequestCode.TRIGGER_DELETE_FILES: self.delete_expired_files,
            RequestCode.DELETE_EXPIRED_COMMITLOG: self.delete_expired_files,
        }

    # -- per-queue offsets ------------------------------------------------------------------

    @staticmethod
    def _queue(cmd) -> tuple[str, int]:
        return require(cmd.ext_fields, "topic"), req_int(cmd.ext_fields, "queueId")

    def get_max_offset(self, conn, cmd):
        topic, qid = self._queue(cmd)
        return cmd.response(ResponseCode.SUCCESS, None, {"offset": self.broker.get_max_offset_in_queue(topic, qid)})

    def get_min_offset(self, conn, cmd):
        topic, qid = self._queue(cmd)
        return cmd.response(ResponseCode.SUCCESS, None, {"offset": self.broker.get_min_offset_in_queue(topic, qid)})

    def search_offset_by_timestamp(self, conn, cmd):
        topic, qid = self._queue(cmd)
        offset = offset_by_time(self.broker, cmd.ext_fields, topic, qid, req_int(cmd.ext_fields, "timestamp"))
        return cmd.response(ResponseCode.SUCCESS, None, {"offset": offset})

    def get_earliest_msg_storetime(self, conn, cmd):
        topic, qid = self._queue(cmd)
        return cmd.response(ResponseCode.SUCCESS, None, {"timestamp": self.broker.get_earliest_message_time(topic, qid)})

    # -- topics -------------------------------------------------------------------------------

    @staticmethod
    def _check_admin_topic(topic: str) -> None:
        """The checks of ``AdminBrokerProcessor`` before a topic is created, changed or
        deleted: a legal name, and not one of the broker's internal topics (schedule, timer,
        revive, transaction ...: they hold live state). A group's retry and dead-letter
        topics are allowed, as in RocketMQ."""
        why = topic_problem(topic)
        if why is not None:
            raise RequestError(ResponseCode.SYSTEM_ERROR, why)
        if is_internal_topic(topic):
            raise RequestError(ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic.")

    def _validate_slave(self) -> None:
        """``validateSlave``: a slave's topics and groups are its master's (synced every
        10 s), so changing them there is refused before the request is read."""
        if self.broker.is_slave:
            raise RequestError(ResponseCode.SYSTEM_ERROR, ADMIN_ON_SLAVE_REMARK)

    def update_and_create_topic(self, conn, cmd):
        self._validate_slave()
        ext = cmd.ext_fields
        topic = require(ext, "topic")
        self._check_admin_topic(topic)
        if topic == self.broker.broker_config.cluster_name:
            raise RequestError(ResponseCode.SYSTEM_ERROR, f"topic [{topic}] conflicts with the cluster name")
        tc = TopicConfig(topic, req_int(ext, "readQueueNums"), req_int(ext, "writeQueueNums"),
                         opt_int(ext, "perm", 6), opt_str(ext, "topicFilterType") or "SINGLE_TAG",
                         opt_int(ext, "topicSysFlag"), (opt_str(ext, "order") or "false").lower() == "true")
        tcm = self.broker.topic_config_manager
        try:
            current = tcm.get(topic)
            tc.attributes = alter_attributes(current is None, TOPIC_ATTRIBUTES, current.attributes if current else {},
                                             parse_alterations(opt_str(ext, "attributes")))
            tcm.update_topic_config(tc)
        except ValueError as e:
            raise RequestError(ResponseCode.SYSTEM_ERROR, str(e)) from None
        return cmd.response(ResponseCode.SUCCESS)

    def delete_topic(self, conn, cmd):
        self._validate_slave()
        topic = require(cmd.ext_fields, "topic")
        self._check_admin_topic(topic)
        return self.server.call_blocking(self._delete_topic, cmd, topic)

    def _delete_topic(self, cmd, topic: str):
        self.broker.delete_topic(topic)
        return cmd.response(ResponseCode.SUCCESS)

    def get_all_topic_config(self, conn, cmd):
        return cmd.response(ResponseCode.SUCCESS, body=self.broker.topic_config_manager.encode(False).encode())

    def get_topic_config(self, conn, cmd):
        topic = require(cmd.ext_fields, "topic")
        tc = self.broker.topic_config_manager.select_topic_config(topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"No topic in this broker. topic: {topic}")
        return cmd.response(ResponseCode.SUCCESS, body=json_bytes({"topicConfig": tc.to_json()}))

    def get_topic_name_list(self, conn, cmd):
        return cmd.response(ResponseCode.SUCCESS,
                            body=json_bytes({"topicList": sorted(self.broker.topic_config_manager.topics())}))

    def get_system_topic_list(self, conn, cmd):
        topics = sorted(t for t in self.broker.topic_config_manager.topics() if is_system_topic(t))
        return cmd.response(ResponseCode.SUCCESS, body=json_bytes({"topicList": topics}))

    def _mq(self, topic: str, qid: int) -> dict:
        return {"brokerName": self.broker.broker_config.broker_name, "queueId": qid, "topic": topic}

    def get_topic_stats_info(self, conn, cmd):
        topic = require(cmd.ext_fields, "topic")
        tc = self.broker.topic_config_manager.select_topic_config(topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        b = self.broker
        table = ObjectKeyMap()
        for qid in range(max(tc.write_queue_nums, tc.read_queue_nums)):
            max_o = b.get_max_offset_in_queue(topic, qid)
            last = b.get_message_store_timestamp(topic, qid, max_o - 1) if max_o > 0 else 0
            table.append((self._mq(topic, qid), {"lastUpdateTimestamp": max(last, 0), "maxOffset": max_o,
                                                 "minOffset": b.get_min_offset_in_queue(topic, qid)}))
        return cmd.response(ResponseCode.SUCCESS, body=_fastjson({"offsetTable": table}))

    # -- groups -------------------------------------------------------------------------------

    def update_and_create_subscription_group(self, conn, cmd):
        self._validate_slave()
        doc = json_body(cmd, "subscription group")
        name = doc.get("groupName") if isinstance(doc, dict) else None
        if group_problem(name) is not None:
            raise RequestError(ResponseCode.SYSTEM_ERROR, group_problem(name))
        sgm = self.broker.subscription_group_manager
        try:
            cfg = SubscriptionGroupConfig.from_json(name, doc)
            current = sgm.get(name)
            cfg.attributes = alter_attributes(current is None, GROUP_ATTRIBUTES, current.attributes if current else {},
                                              cfg.attributes)
            sgm.update_subscription_group_config(cfg)
        except (TypeError, ValueError) as e:
            raise RequestError(ResponseCode.SYSTEM_ERROR, str(e)) from None
        return cmd.response(ResponseCode.SUCCESS)

    def delete_subscription_group(self, conn, cmd):
        self._validate_slave()
        group = require(cmd.ext_fields, "groupName")
        self.broker.subscription_group_manager.delete_subscription_group_config(group)
        return cmd.response(ResponseCode.SUCCESS)

    def get_all_subscription_group_config(self, conn, cmd):
        return cmd.response(ResponseCode.SUCCESS, body=self.broker.subscription_group_manager.encode(False).encode())

    def get_subscription_group_config(self, conn, cmd):
        group = require(cmd.ext_fields, "group")
        cfg = self.broker.subscription_group_manager.get(group)
        if cfg is None:
            return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"No group in this broker. group: {group}")
        return cmd.response(ResponseCode.SUCCESS, body=json_bytes(cfg.to_json()))

    def get_consume_stats(self, conn, cmd):
        group = require(cmd.ext_fields, "consumerGroup")
        topic = opt_str(cmd.ext_fields, "topic")
        b = self.broker
        topics = [topic] if topic else sorted(b.consumer_offsets.which_topic_by_consumer(group))
        table = ObjectKeyMap()
        for t in topics:
            tc = b.topic_config_manager.select_topic_config(t)
            if tc is None:
                continue
            for qid in range(tc.read_queue_nums):
                max_o = b.get_max_offset_in_queue(t, qid)
                consumed = max(b.query_offset(group, t, qid), 0)
                last = b.get_message_store_timestamp(t, qid, consumed - 1) if consumed > 0 else 0
                table.append((self._mq(t, qid), {"brokerOffset": max_o, "consumerOffset": consumed,
                                                 "lastTimestamp": max(last, 0)}))
        return cmd.response(ResponseCode.SUCCESS, body=_fastjson({"offsetTable": table, "consumeTps": 0.0}))

    def query_topic_consume_by_who(self, conn, cmd):
        topic = require(cmd.ext_fields, "topic")
        groups = set(self.broker.consumer_offsets.which_group_by_topic(topic))
        groups.update(c_group for c in self.server.clients.clients() for c_group, subs in c.consumer_groups.items()
                      if topic in subs)
        return cmd.response(ResponseCode.SUCCESS, body=json_bytes({"groupList": sorted(groups)}))

    @staticmethod
    def _connection(c) -> dict:
        return {"clientId": c.client_id, "clientAddr": c.address, "language": c.language or "JAVA",
                "version": c.version}

    def get_consumer_connection_list(self, conn, cmd):
        group = require(cmd.ext_fields, "consumerGroup")
        members = [c for c in self.server.clients.consumers_of_group(group) if group in c.consumer_groups]
        if not members:
            return cmd.response(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
        data = (members[0].settings or {}).get(group, {})
        subs = {t: {"topic": t, "subString": e, "classFilterMode": False, "tagsSet": [], "codeSet": [],
                    "subVersion": 0, "expressionType": "TAG"}
                for t, e in self.server.clients.subscriptions_of_group(group).items()}
        doc = {"connectionSet": [self._connection(c) for c in members], "subscriptionTable": subs,
               "consumeType": data.get("consumeType") or "CONSUME_PASSIVELY",
               "messageModel": data.get("messageModel") or "CLUSTERING",
               "consumeFromWhere": data.get("consumeFromWhere") or "CONSUME_FROM_LAST_OFFSET"}
        return cmd.response(ResponseCode.SUCCESS, body=json_bytes(doc))

    def get_producer_connection_list(self, conn, cmd):
        group = require(cmd.ext_fields, "producerGroup")
        members = self.server.clients.producers_of_group(group)
        return cmd.response(ResponseCode.SUCCESS,
                            body=json_bytes({"connectionSet": [self._connection(c) for c in members]}))

    # -- the broker ----------------------------------------------------------------------------

    def get_broker_runtime_info(self, conn, cmd):
        return cmd.response(ResponseCode.SUCCESS, body=json_bytes({"table": self.server.runtime_info.table()}))

    def get_broker_config(self, conn, cmd):
        bc, sc = self.broker.broker_config, self.broker.config
        props = {"brokerName": bc.broker_name, "brokerClusterName": bc.cluster_name, "brokerId": 0,
                 "autoCreateTopicEnable": bc.auto_create_topic_enable,
                 "autoCreateSubscriptionGroup": bc.auto_create_subscription_group,
                 "defaultTopicQueueNums": bc.default_topic_queue_nums, "storePathRootDir": self.broker.store_path,
                 "mappedFileSizeCommitLog": sc.commitlog_file_size, "flushDiskType": sc.flush_disk_type,
                 "messageDelayLevel": sc.message_delay_level, "fileReservedTime": sc.file_reserved_time,
                 "deleteWhen": sc.delete_when, "brokerIP1": self.server.broker_address.rsplit(":", 1)[0],
                 "listenPort": self.server.ports.get("broker", 0)}
        text = "".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}\n" for k, v in props.items())
        return cmd.response(ResponseCode.SUCCESS, body=text.encode())

    def get_all_consumer_offset(self, conn, cmd):
        return cmd.response(ResponseCode.SUCCESS, body=self.broker.consumer_offsets.encode(False).encode())

    def get_all_delay_offset(self, conn, cmd):
        return cmd.response(ResponseCode.SUCCESS, body=self.broker.schedule_service.offsets.encode(False).encode())

    def delete_expired_files(self, conn, cmd):
        return self.server.call_blocking(self._delete_expired, cmd)

    def _delete_expired(self, cmd):
        self.broker.delete_expired_files()
        return cmd.response(ResponseCode.SUCCESS)
