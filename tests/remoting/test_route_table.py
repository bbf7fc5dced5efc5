"""The name server's route table (RouteInfoManager's facts) and the register body's two
forms, without a network: masters and slaves under one broker name, expiry after 120 s,
unregister, connections closing, the local broker's permanence, and the bounds."""

from __future__ import annotations

import zlib

import pytest

from pymq.broker.topic_config import TopicConfig
from pymq.server.remoting.register_body import BodyError, RegisterBrokerBody, RegisteredTopic
from pymq.server.remoting.route_table import RouteTable, RouteTableFull

M, S = "10.0.0.1:10911", "10.0.0.2:10911"
V1 = {"counter": 1, "timestamp": 1000}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def topics(*names: str, queues: int = 4) -> dict:
    return {n: RegisteredTopic(n, queues, queues, 6) for n in names}


def addrs(route: dict) -> dict:
    return {d["brokerName"]: d["brokerAddrs"] for d in route["brokerDatas"]}


def test_master_and_slave_under_one_broker_name():
    t = RouteTable()
    assert t.register("C", M, "b", 0, "10.0.0.1:10912", V1, topics("T")) == (None, None)
    # a slave's topics are not taken; it is told its master and the master's HA address
    assert t.register("C", S, "b", 1, "10.0.0.2:10912", V1, topics("OnlyOnSlave")) == (M, "10.0.0.1:10912")
    route = t.route("T")
    assert addrs(route) == {"b": {"0": M, "1": S}}
    assert route["queueDatas"] == [{"brokerName": "b", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6,
                                    "topicSysFlag": 0}]
    assert t.route("OnlyOnSlave") is None
    assert t.cluster_info() == {"brokerAddrTable": {"b": {"cluster": "C", "brokerName": "b",
                                                          "brokerAddrs": {"0": M, "1": S}}},
                                "clusterAddrTable": {"C": ["b"]}}
    assert t.topics() == ["T"] and t.topics_of_cluster("C") == ["T"] and t.topics_of_cluster("X") == []


def test_slave_registered_first_learns_its_master_at_its_next_registration():
    t = RouteTable()
    assert t.register("C", S, "b", 1, "s-ha", V1, None) == (None, None)
    t.register("C", M, "b", 0, "m-ha", V1, topics("T"))
    assert t.register("C", S, "b", 1, "s-ha", V1, None) == (M, "m-ha")


def test_topics_taken_when_the_data_version_changes():
    t = RouteTable()
    t.register("C", M, "b", 0, "", V1, topics("T", queues=4))
    t.register("C", M, "b", 0, "", V1, topics("T", queues=8))          # same version: not read again
    assert t.route("T")["queueDatas"][0]["writeQueueNums"] == 4
    t.register("C", M, "b", 0, "", {"counter": 2, "timestamp": 2000}, topics("T", queues=8))
    assert t.route("T")["queueDatas"][0]["writeQueueNums"] == 8
    assert not t.is_changed(M, {"counter": 2, "timestamp": 2000}) and t.is_changed(M, V1) and t.is_changed(S, V1)


def test_expiry_after_120_s_keeps_the_slave_route_until_the_last_member_goes():
    clock = Clock()
    t = RouteTable(clock=clock)
    t.register("C", M, "b", 0, "", V1, topics("T"))
    clock.now += 60
    t.register("C", S, "b", 1, "", V1, None)
    clock.now += 61                                  # the master silent 121 s, the slave 61 s
    assert t.scan_not_active() == [M]
    assert addrs(t.route("T")) == {"b": {"1": S}}    # clients fall back to reading the slave
    clock.now += 30
    t.touch(S)                                       # QUERY_DATA_VERSION unchanged: still alive
    clock.now += 100
    assert t.scan_not_active() == []
    clock.now += 21
    assert t.scan_not_active() == [S]
    assert t.route("T") is None and t.cluster_info() == {"brokerAddrTable": {}, "clusterAddrTable": {}}
    assert t.queue_datas == 0


def test_unregister_and_connection_close():
    t = RouteTable()
    conn = object()
    t.register("C", M, "b", 0, "", V1, topics("T"), conn)
    t.register("C", S, "b", 1, "", V1, None, object())
    t.unregister("C", S, "b", 0)                     # another id: not this member
    assert addrs(t.route("T")) == {"b": {"0": M, "1": S}}
    t.unregister("C", S, "b", 1)
    assert addrs(t.route("T")) == {"b": {"0": M}}
    assert t.connection_closed(conn) == [M]
    assert t.route("T") is None and t.topics() == []


def test_one_address_one_id_and_one_broker_name():
    t = RouteTable()
    t.register("C", S, "b", 1, "", V1, None)
    t.register("C", S, "b", 0, "", V1, topics("T"))  # the slave became the master
    assert t.cluster_info()["brokerAddrTable"]["b"]["brokerAddrs"] == {"0": S}
    t.register("C2", S, "other", 0, "", V1, topics("U"))   # moved: leaves b (and b's topics) behind
    assert t.cluster_info()["clusterAddrTable"] == {"C2": ["other"]}
    assert t.route("T") is None and addrs(t.route("U")) == {"other": {"0": S}}


def test_bounds_refuse_a_registration_whole():
    t = RouteTable(max_brokers=2, max_queue_datas=3)
    t.register("C", "a:1", "a", 0, "", V1, topics("T1", "T2"))
    t.register("C", "b:1", "b", 0, "", V1, topics("T1"))
    with pytest.raises(RouteTableFull):
        t.register("C", "c:1", "c", 0, "", V1, {})    # a third address
    with pytest.raises(RouteTableFull):
        t.register("C", "b:1", "b", 0, "", {"counter": 9, "timestamp": 9}, topics("T1", "T2", "T3"))
    assert t.topics() == ["T1", "T2"] and t.queue_datas == 3 and t.data_version("b:1") == V1
    t.register("C", "b:1", "b", 0, "", V1, None)      # re-registering what it has: fine


class Local:
    cluster_name, broker_name, broker_id, address, ha_server_addr = "C", "b", 0, "127.0.0.1:10911", "127.0.0.1:10912"

    def __init__(self) -> None:
        self.table = {"Live": TopicConfig("Live", 2, 2)}

    def topics(self) -> dict:
        return self.table


def test_the_local_broker_is_permanent_and_its_topics_live():
    clock = Clock()
    t = RouteTable(clock=clock)
    local = Local()
    t.set_local(local)
    assert addrs(t.route("Live")) == {"b": {"0": local.address}}
    local.table["New"] = TopicConfig("New", 1, 1)      # created by a send: routable at once
    assert t.route("New")["queueDatas"][0]["readQueueNums"] == 1
    assert t.register("C", S, "b", 1, "", V1, None) == (local.address, local.ha_server_addr)
    for bad in (("C", "9.9.9.9:1", "b", 0), ("C", local.address, "x", 0)):    # its slot, its address
        with pytest.raises(RouteTableFull):
            t.register(*bad, "", V1, topics("Hijack"))
    t.unregister("C", local.address, "b", 0)
    clock.now += 1000
    assert t.scan_not_active() == [S]
    assert addrs(t.route("Live")) == {"b": {"0": local.address}} and t.route("Hijack") is None


@pytest.mark.parametrize("compressed", [False, True])
def test_register_body_both_forms(compressed):
    body = RegisterBrokerBody({"T": RegisteredTopic("T", 3, 5, 6, topic_sys_flag=0), "%RETRY%g": RegisteredTopic(
        "%RETRY%g", 1, 1, 6)}, {"counter": 7, "timestamp": 1700000000000})
    back = RegisterBrokerBody.decode(body.encode(compressed), compressed)
    assert back.topics == body.topics and back.data_version == body.data_version
    assert RegisterBrokerBody.decode(b"", compressed).topics == {}


def _compressed(*parts: bytes) -> bytes:
    return zlib.compress(b"".join(len(p).to_bytes(4, "big") + p for p in parts))


@pytest.mark.parametrize("data,compressed", [
    (b"{not json", False),
    (b'{"topicConfigSerializeWrapper": {"topicConfigTable": {"T": {"readQueueNums": 99999}}}}', False),
    (b'{"topicConfigSerializeWrapper": {"topicConfigTable": {"a b": {}}}}', False),
    (b'{"topicConfigSerializeWrapper": {"dataVersion": {"counter": "x"}}}', False),
    (b"\x00\x01garbage", True),
    (zlib.compress(b"\x00" * (40 << 20)), True),                  # inflates past 32 MiB
    (_compressed(b'{"counter":1,"timestamp":1}') + b"", True),     # ends inside the topic count
    (_compressed(b'{"counter":1,"timestamp":1}', b"") [:-1], True),
    (zlib.compress(b"\x00\x00\x00\x02{}" + (10 ** 9).to_bytes(4, "big")), True),
])
def test_garbage_bodies_are_refused(data, compressed):
    with pytest.raises(BodyError):
        RegisterBrokerBody.decode(data, compressed)
