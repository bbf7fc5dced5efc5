"""pymq brokers registering with pymq's name server, over the wire: a master (id 0) and a
slave (id 1) of one broker name give a route with both addresses, a topic created on the
master is routable within seconds, the slave leaves at shutdown, QUERY_DATA_VERSION and
UNREGISTER_BROKER answer as RocketMQ's, and garbage registrations are refused without
harm. One name server (``--broker-port off``: nothing but the registry) and two brokers
for the module."""

from __future__ import annotations

import json
import time
import zlib

import pytest

from remoting_wire import FrameReader, connect, request
from serve_process import ServeProcess


def ask(addr: str, code: int, ext: dict, body: bytes = b"") -> tuple[dict, bytes]:
    s = connect(addr)
    try:
        s.sendall(request(code, ext, body=body))
        return FrameReader(s).frame()
    finally:
        s.close()


def cluster(ns: str) -> dict:
    return json.loads(ask(ns, 106, {})[1])


def route_addrs(ns: str, topic: str):
    header, body = ask(ns, 105, {"topic": topic})
    return {d["brokerName"]: d["brokerAddrs"] for d in json.loads(body)["brokerDatas"]} if header["code"] == 0 else None


def wait_for(fn, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


@pytest.fixture(scope="module")
def cluster_of_two(tmp_path_factory):
    root = tmp_path_factory.mktemp("reg")
    started = []
    try:
        ns = ServeProcess(str(root / "ns"), "--port", "off", "--namesrv-port", "0", "--broker-port", "off").start()
        started.append(ns)
        addr = ns.listening["namesrv"]
        master = ServeProcess(str(root / "m"), "--port", "off", "--namesrv-port", "off", "--broker-port", "0",
                              "--namesrv-addr", addr).start()
        started.append(master)
        slave = ServeProcess(str(root / "s"), "--port", "off", "--namesrv-port", "0", "--broker-port", "0",
                             "--namesrv-addr", f"{addr};", "--broker-id", "1").start()
        started.append(slave)
        yield addr, master, slave
    finally:
        for p in reversed(started):
            p.stop()


def test_master_and_slave_in_one_route(cluster_of_two):
    ns, master, slave = cluster_of_two
    m, s = master.listening["broker"], slave.listening["broker"]
    assert wait_for(lambda: route_addrs(ns, "TBW102") == {"broker-a": {"0": m, "1": s}})
    assert cluster(ns)["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}
    # the slave's own name server agrees on what it is: id 1 of broker-a, no routes of its own
    assert cluster(slave.listening["namesrv"])["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {"1": s}
    assert route_addrs(slave.listening["namesrv"], "TBW102") is None
    # another slave is told the master's address (the master has no HA port here: "")
    header, _ = ask(ns, 103, {"clusterName": "DefaultCluster", "brokerAddr": "127.0.0.1:1", "brokerName": "broker-a",
                              "brokerId": "2", "haServerAddr": "127.0.0.1:2"})
    assert header["code"] == 0 and header["extFields"]["masterAddr"] == m
    assert wait_for(lambda: route_addrs(ns, "TBW102")["broker-a"] == {"0": m, "1": s}), "its connection closed: it left"


def test_a_new_topic_is_registered_within_seconds(cluster_of_two):
    ns, master, _ = cluster_of_two
    header, _ = ask(master.listening["broker"], 17, {"topic": "BornOnMaster", "defaultTopic": "TBW102",
                                                     "readQueueNums": "3", "writeQueueNums": "3", "perm": "6",
                                                     "topicFilterType": "SINGLE_TAG"})
    assert header["code"] == 0
    t0 = time.monotonic()
    assert wait_for(lambda: route_addrs(ns, "BornOnMaster"), timeout=5)
    assert time.monotonic() - t0 < 3
    assert "BornOnMaster" in json.loads(ask(ns, 206, {})[1])["topicList"]


def test_query_data_version_and_unregister(cluster_of_two):
    ns, master, _ = cluster_of_two
    member = {"clusterName": "DefaultCluster", "brokerAddr": master.listening["broker"], "brokerName": "broker-a",
              "brokerId": "0"}
    header, body = ask(ns, 322, member, b'{"counter":0,"timestamp":0}')
    assert header["code"] == 0 and header["extFields"]["changed"] == "true"
    known = json.loads(body)
    header, _ = ask(ns, 322, member, json.dumps(known).encode())
    assert header["extFields"]["changed"] == "false"
    # a registration on a connection kept open, then UNREGISTER_BROKER on another
    other = {"clusterName": "C2", "brokerAddr": "127.0.0.1:3", "brokerName": "broker-z", "brokerId": "0"}
    s = connect(ns)
    try:
        s.sendall(request(103, dict(other, haServerAddr="")))
        assert FrameReader(s).frame()[0]["code"] == 0
        assert "broker-z" in cluster(ns)["brokerAddrTable"]
        assert ask(ns, 104, other)[0]["code"] == 0
        assert "broker-z" not in cluster(ns)["brokerAddrTable"] and "C2" not in cluster(ns)["clusterAddrTable"]
    finally:
        s.close()


def _bomb() -> bytes:
    return zlib.compress(b"\x00" * (40 << 20), 9)


@pytest.mark.parametrize("ext,body,remark", [
    ({"bodyCrc32": "12345"}, b'{"topicConfigSerializeWrapper":{}}', "crc32 not match"),
    ({}, b"\xff\xfenot json", "not JSON"),
    ({"compressed": "true"}, b"not zlib", "zlib"),
    ({"compressed": "true"}, _bomb(), "inflates beyond"),
    ({}, b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"Bad":{"perm":99}}}}', "out of range"),
    ({"brokerName": "x" * 300}, b"", "broker name"),
    ({"brokerName": ""}, b"", "<brokerName> is null"),
    ({"brokerId": "one"}, b"", "not a number"),
])
def test_garbage_registrations_refused_without_harm(cluster_of_two, ext, body, remark):
    ns, master, slave = cluster_of_two
    before = cluster(ns)
    fields = dict({"clusterName": "Evil", "brokerAddr": "6.6.6.6:1", "brokerName": "evil", "brokerId": "0",
                   "haServerAddr": ""}, **ext)
    header, _ = ask(ns, 103, fields, body)
    assert header["code"] == 1 and remark in header["remark"], header
    assert cluster(ns) == before
    assert route_addrs(ns, "TBW102")["broker-a"]["0"] == master.listening["broker"]


def test_the_slave_unregisters_at_shutdown(cluster_of_two):
    ns, master, slave = cluster_of_two
    assert wait_for(lambda: "1" in (route_addrs(ns, "TBW102") or {}).get("broker-a", {}))
    assert slave.stop() == 0
    assert route_addrs(ns, "TBW102") == {"broker-a": {"0": master.listening["broker"]}}


def test_registration_signed_with_the_access_key(tmp_path):
    """With access keys, a pymq name server refuses unsigned registrations, and a pymq
    broker with the same keys signs its own."""
    from pymq.server.remoting.auth import sign
    keys = ("--access-key", "AK", "--secret-key", "SK")
    ns = ServeProcess(str(tmp_path / "ns"), "--port", "off", "--namesrv-port", "0", "--broker-port", "off", *keys)
    broker = None
    try:
        addr = ns.start().listening["namesrv"]
        unsigned, _ = ask(addr, 103, {"clusterName": "C", "brokerAddr": "127.0.0.1:1", "brokerName": "x",
                                      "brokerId": "0", "haServerAddr": ""})
        assert unsigned["code"] == 16                # NO_PERMISSION
        broker = ServeProcess(str(tmp_path / "b"), "--port", "off", "--namesrv-port", "off", "--broker-port", "0",
                              "--namesrv-addr", addr, "--broker-name", "signed", *keys).start()
        ext = {"AccessKey": "AK"}
        ext["Signature"] = sign("SK", ext, b"")
        assert wait_for(lambda: "signed" in json.loads(ask(addr, 106, dict(ext))[1])["brokerAddrTable"])
    finally:
        if broker is not None:
            broker.stop()
        ns.stop()
