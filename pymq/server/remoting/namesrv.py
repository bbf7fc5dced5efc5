"""The name server role: where topics live, from the brokers registered with it.

RocketMQ's name server keeps the routes brokers register (``REGISTER_BROKER`` every 30 s,
``UNREGISTER_BROKER`` at shutdown, ``QUERY_DATA_VERSION``); so does this one, in a
:class:`~.route_table.RouteTable`: other brokers (pymq's or Apache RocketMQ's, masters and
slaves) register with it, and the broker in the same process is a permanent member whose
topics are read live from its topic table (``config/topics.json``). A route names every
member of each broker name that serves the topic (``brokerAddrs`` {0: master, 1: slave})::

    {"orderTopicConf": null,
     "queueDatas": [{"brokerName": "broker-a", "readQueueNums": 4, "writeQueueNums": 4,
                     "perm": 6, "topicSysFlag": 0}],
     "brokerDatas": [{"cluster": "DefaultCluster", "brokerName": "broker-a",
                      "brokerAddrs": {"0": "127.0.0.1:10911", "1": "127.0.0.1:10921"}}],
     "filterServerTable": {}}

Like RocketMQ's name server, it describes only topics that exist: for any other name the
answer is ``TOPIC_NOT_EXIST`` (17, "No topic route info in name server for the topic"),
and a route lookup never creates anything. A 4.x producer then sends a new topic's first
message along the route of ``TBW102`` (which the broker keeps while auto-creation is on),
and that send creates the topic; a consumer's retry topic ``%RETRY%group`` comes with the
group's first heartbeat.

A request code RocketMQ's name server does not serve gets no response at all, as from it
(its processor returns null; the client times out); one it serves that pymq does not
(KV writes, write permissions, its config) is answered ``REQUEST_CODE_NOT_SUPPORTED``.
"""

from __future__ import annotations

import json
import logging
import weakref
import zlib

from .codes import NAMESRV_REQUEST_CODES, RequestCode, ResponseCode, not_supported
from .headers import RequestError, json_bytes, opt_bool, opt_int, opt_str, req_int, require
from .register_body import BodyError, RegisterBrokerBody, check_name, data_version_from
from .route_table import RouteTable, RouteTableFull

log = logging.getLogger("pymq.server.remoting")


#: what RocketMQ's name server appends to that answer (``FAQUrl.suggestTodo``); the Java
#: client then adds no FAQ line of its own
_APPLY_TOPIC = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


class NameServerProcessor:
    """Route and cluster queries (``DefaultRequestProcessor`` of the name server)."""

    def __init__(self, server) -> None:
        self.server = server
        self.broker = server.broker
        cfg = server.config
        self.route_table = RouteTable(max_brokers=cfg.namesrv_max_brokers, max_queue_datas=cfg.namesrv_max_queue_datas)
        self._watched: "weakref.WeakSet" = weakref.WeakSet()      # connections brokers registered on

    def handlers(self) -> dict:
        return {
            RequestCode.REGISTER_BROKER: self.register_broker,
            RequestCode.UNREGISTER_BROKER: self.unregister_broker,
            RequestCode.QUERY_DATA_VERSION: self.query_data_version,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_route_info_by_topic,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.get_broker_cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.get_topic_list,
            RequestCode.GET_TOPICS_BY_CLUSTER: self.get_topics_by_cluster,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: self.get_system_topic_list,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic_in_namesrv,
            RequestCode.GET_KV_CONFIG: self.get_kv_config,
            RequestCode.GET_KVLIST_BY_NAMESPACE: self.get_kv_list_by_namespace,
        }

    def attach_local(self, local) -> None:
        """Register the broker of this process (a :class:`LocalBroker`) as a permanent member."""
        self.route_table.set_local(local)

    # -- registration (REGISTER_BROKER, UNREGISTER_BROKER, QUERY_DATA_VERSION) ------------

    @staticmethod
    def _member(ext: dict) -> tuple[str, str, str, int]:
        try:
            return (check_name(require(ext, "clusterName"), "cluster"), check_name(require(ext, "brokerAddr"), "address"),
                    check_name(require(ext, "brokerName"), "broker name"), req_int(ext, "brokerId"))
        except BodyError as e:
            raise RequestError(ResponseCode.SYSTEM_ERROR, str(e)) from None

    def register_broker(self, conn, cmd):
        ext = cmd.ext_fields
        cluster, addr, name, broker_id = self._member(ext)
        ha_addr = opt_str(ext, "haServerAddr") or ""
        crc = opt_int(ext, "bodyCrc32", 0)
        body = bytes(cmd.body)
        if crc != 0 and zlib.crc32(body) & 0x7FFFFFFF != crc:     # UtilAll.crc32: 31 bits
            return cmd.response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        try:
            if len(ha_addr) > 255 or not 0 <= broker_id < 1 << 63:
                raise BodyError("haServerAddr or brokerId out of bounds")
            parsed = RegisterBrokerBody.decode(body, opt_bool(ext, "compressed"))
            master, master_ha = self.route_table.register(cluster, addr, name, broker_id, ha_addr,
                                                          parsed.data_version, parsed.topics, conn)
        except (BodyError, RouteTableFull) as e:
            self.route_table.refused += 1
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"register broker refused: {e}")
        if conn is not None and conn not in self._watched:
            self._watched.add(conn)
            conn.on_close(self._connection_closed)
        fields = {}
        if master is not None:
            fields = {"masterAddr": master, "haServerAddr": master_ha}
        return cmd.response(ResponseCode.SUCCESS, ext_fields=fields)

    def _connection_closed(self, conn) -> None:
        for addr in self.route_table.connection_closed(conn):
            log.info("name server: broker %s left (its connection closed)", addr)

    def unregister_broker(self, conn, cmd):
        cluster, addr, name, broker_id = self._member(cmd.ext_fields)
        self.route_table.unregister(cluster, addr, name, broker_id)
        return cmd.response(ResponseCode.SUCCESS)

    def query_data_version(self, conn, cmd):
        _, addr, _, _ = self._member(cmd.ext_fields)
        try:
            version = data_version_from(json.loads(bytes(cmd.body) or b"{}"))
        except (ValueError, BodyError) as e:
            raise RequestError(ResponseCode.SYSTEM_ERROR, f"dataVersion: {e}") from None
        changed = self.route_table.is_changed(addr, version)
        if not changed:
            self.route_table.touch(addr)
        known = self.route_table.data_version(addr)
        return cmd.response(ResponseCode.SUCCESS, ext_fields={"changed": "true" if changed else "false"},
                            body=json_bytes(known) if known is not None else b"")

    def scan_not_active(self) -> None:
        """Remove brokers silent for 120 s (the server's housekeeping calls it every 10 s)."""
        for addr in self.route_table.scan_not_active():
            log.warning("name server: broker %s expired (no registration for %.0f s)", addr,
                        self.route_table.expiry_s)

    # -- routes and lists ----------------------------------------------------------------

    def get_route_info_by_topic(self, conn, cmd):
        topic = require(cmd.ext_fields, "topic")
        route = self.route_table.route(topic)
        if route is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST,
                                f"No topic route info in name server for the topic: {topic}{_APPLY_TOPIC}")
        return cmd.response(ResponseCode.SUCCESS, body=json_bytes(route))

    def get_broker_cluster_info(self, conn, cmd):
        return cmd.response(ResponseCode.SUCCESS, body=json_bytes(self.route_table.cluster_info()))

    def get_topic_list(self, conn, cmd):
        return cmd.response(ResponseCode.SUCCESS, body=json_bytes({"topicList": self.route_table.topics()}))

    def get_topics_by_cluster(self, conn, cmd):
        cluster = require(cmd.ext_fields, "cluster")
        return cmd.response(ResponseCode.SUCCESS,
                            body=json_bytes({"topicList": self.route_table.topics_of_cluster(cluster)}))

    def get_system_topic_list(self, conn, cmd):
        return cmd.response(ResponseCode.SUCCESS, body=json_bytes(self.route_table.system_topics()))

    def delete_topic_in_namesrv(self, conn, cmd):
        # the local broker's topics come from its table: DELETE_TOPIC_IN_BROKER removed them
        topic = require(cmd.ext_fields, "topic")
        self.route_table.delete_topic(topic, opt_str(cmd.ext_fields, "clusterName"))
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


class LocalBroker:
    """The broker of this process as a member of its name server's table."""

    def __init__(self, server) -> None:
        bc = server.broker.broker_config
        self.server = server
        self.cluster_name = bc.cluster_name
        self.broker_name = bc.broker_name
        self.broker_id = bc.broker_id
        self.address = server.broker_address
        self.ha_server_addr = server.ha_server_addr

    def topics(self) -> dict:
        return self.server.broker.topic_config_manager.topics()
