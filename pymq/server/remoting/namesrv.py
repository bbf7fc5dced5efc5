"""The name server role: where topics live (always on this one broker).

RocketMQ's name server keeps the routes brokers register; here the broker is in the same
process, so routes come from its topic table (``config/topics.json``) and always name this
broker (``broker_name``, id 0 = master, at the advertised address)::

    {"orderTopicConf": null,
     "queueDatas": [{"brokerName": "broker-a", "readQueueNums": 4, "writeQueueNums": 4,
                     "perm": 6, "topicSysFlag": 0}],
     "brokerDatas": [{"cluster": "DefaultCluster", "brokerName": "broker-a",
                      "brokerAddrs": {"0": "127.0.0.1:10911"}}],
     "filterServerTable": {}}

Like RocketMQ's name server, it describes only topics that exist: for any other name the
answer is ``TOPIC_NOT_EXIST`` (17, "No topic route info in name server for the topic"),
and a route lookup never creates anything. A 4.x producer then sends a new topic's first
message along the route of ``TBW102`` (which the broker keeps while auto-creation is on),
and that send creates the topic; a consumer's retry topic ``%RETRY%group`` comes with the
group's first heartbeat.

A request code RocketMQ's name server does not serve gets no response at all, as from it
(its processor returns null; the client times out); one it serves that pymq does not
(broker registration, KV writes, its config) is answered ``REQUEST_CODE_NOT_SUPPORTED``.
"""

from __future__ import annotations

from .codes import NAMESRV_REQUEST_CODES, RequestCode, ResponseCode, not_supported
from .headers import json_bytes, require


#: what RocketMQ's name server appends to that answer (``FAQUrl.suggestTodo``); the Java
#: client then adds no FAQ line of its own
_APPLY_TOPIC = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


class NameServerProcessor:
    """Route and cluster queries (``DefaultRequestProcessor`` of the name server)."""

    def __init__(self, server) -> None:
        self.server = server
        self.broker = server.broker

    def handlers(self) -> dict:
        return {
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_route_info_by_topic,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.get_broker_cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.get_topic_list,
            RequestCode.GET_TOPICS_BY_CLUSTER: self.get_topic_list,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: self.get_system_topic_list,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic_in_namesrv,
            RequestCode.GET_KV_CONFIG: self.get_kv_config,
            RequestCode.GET_KVLIST_BY_NAMESPACE: self.get_kv_list_by_namespace,
        }

    def _broker_data(self) -> dict:
        bc = self.broker.broker_config
        return {"cluster": bc.cluster_name, "brokerName": bc.broker_name,
                "brokerAddrs": {"0": self.server.broker_address}}

    def get_route_info_by_topic(self, conn, cmd):
        topic = require(cmd.ext_fields, "topic")
        tc = self.broker.topic_config_manager.select_topic_config(topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST,
                                f"No topic route info in name server for the topic: {topic}{_APPLY_TOPIC}")
        bc = self.broker.broker_config
        route = {"orderTopicConf": None,
                 "queueDatas": [{"brokerName": bc.broker_name, "readQueueNums": tc.read_queue_nums,
                                 "writeQueueNums": tc.write_queue_nums, "perm": tc.perm,
                                 "topicSysFlag": tc.topic_sys_flag}],
                 "brokerDatas": [self._broker_data()],
                 "filterServerTable": {}}
        return cmd.response(ResponseCode.SUCCESS, body=json_bytes(route))

    def get_broker_cluster_info(self, conn, cmd):
        bc = self.broker.broker_config
        info = {"brokerAddrTable": {bc.broker_name: self._broker_data()},
                "clusterAddrTable": {bc.cluster_name: [bc.broker_name]}}
        return cmd.response(ResponseCode.SUCCESS, body=json_bytes(info))

    def get_topic_list(self, conn, cmd):
        topics = sorted(self.broker.topic_config_manager.topics())
        return cmd.response(ResponseCode.SUCCESS, body=json_bytes({"topicList": topics}))

    def get_system_topic_list(self, conn, cmd):
        bc = self.broker.broker_config
        return cmd.response(ResponseCode.SUCCESS, body=json_bytes(
            {"topicList": [bc.cluster_name, bc.broker_name], "brokerAddr": self.server.broker_address}))

    def delete_topic_in_namesrv(self, conn, cmd):
        # the route comes from the broker's table: DELETE_TOPIC_IN_BROKER removed it already
        require(cmd.ext_fields, "topic")
        return cmd.response(ResponseCode.SUCCESS)

    def get_kv_config(self, conn, cmd):
        # no KV config is kept here (RocketMQ's remark names what was asked)
        ext = cmd.ext_fields
        return cmd.response(ResponseCode.QUERY_NOT_FOUND,
                            f"No config item, Namespace: {ext.get('namespace', 'null')} Key: {ext.get('key', 'null')}")

    def get_kv_list_by_namespace(self, conn, cmd):
        return cmd.response(ResponseCode.QUERY_NOT_FOUND,
                            f"No config item, Namespace: {cmd.ext_fields.get('namespace', 'null')}")

    def unknown(self, conn, cmd):
        """No response to a code RocketMQ's name server does not serve either."""
        return not_supported(conn, cmd) if cmd.code in NAMESRV_REQUEST_CODES else None
