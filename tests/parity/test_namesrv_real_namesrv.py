"""pymq brokers register with Apache RocketMQ 4.9.7's name server (``--namesrv-addr``).

One real name server and broker (``broker-a``, the master) for the module, started by
:mod:`real_rocketmq`. A ``pymq serve`` master of its own broker name (``broker-b``) is
listed by mqadmin's ``clusterList`` and ``topicRoute``, and the official Java client sends
to it and consumes from it through the real name server; a pymq slave of ``broker-a``
(broker id 1) is given the real master's address and HA address in the name server's
answer (its registration sent in the deflated form), and the route of ``broker-a`` then
names both; both leave the routes when they stop.
"""

from __future__ import annotations

import asyncio
import base64
import time

import pytest

import pymq
from pymq.server.remoting import RemotingConfig, RemotingServer
from pymq.store.fastjson import loads_fastjson
from remoting_wire import FrameReader, connect, request
from serve_process import ServeProcess


def ask(addr: str, code: int, ext: dict) -> tuple[dict, bytes]:
    s = connect(addr)
    try:
        s.sendall(request(code, ext))
        return FrameReader(s).frame()
    finally:
        s.close()


def read(addr: str, code: int, ext: dict):
    """The answer's body as RocketMQ's fastjson wrote it (map keys may be bare numbers), or None."""
    header, body = ask(addr, code, ext)
    return loads_fastjson(body.decode()) if header["code"] == 0 else None


def addrs(route) -> dict:
    return {d["brokerName"]: {int(k): v for k, v in d["brokerAddrs"].items()} for d in (route or {}).get("brokerDatas", [])}


def wait_for(fn, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.2)


class Via:
    """pymq's broker behind the real name server, shaped for ``Probe.run``."""

    def __init__(self, namesrv: str, address: str, run_dir, output) -> None:
        self.namesrv, self.address, self.run_dir = namesrv, address, run_dir
        self.log_tail = lambda *a, **k: "".join(output[-40:])


@pytest.fixture(scope="module")
def real(rocketmq_home, tmp_path_factory):
    from real_rocketmq import RealBroker
    run = tmp_path_factory.mktemp("real")
    b = RealBroker(rocketmq_home, run / "run", run / "store")
    try:
        b.start()
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def pymq_b(real, tmp_path_factory):
    p = ServeProcess(str(tmp_path_factory.mktemp("b") / "store"), "--port", "off", "--namesrv-port", "0",
                     "--broker-port", "0", "--broker-name", "broker-b", "--namesrv-addr", real.namesrv).start()
    yield p
    p.stop()


def test_pymq_master_in_the_real_name_servers_routes(real, pymq_b, rocketmq_probe, tmp_path):
    b_addr = pymq_b.listening["broker"]
    info = wait_for(lambda: read(real.namesrv, 106, {})["brokerAddrTable"].get("broker-b"))
    assert info["cluster"] == "DefaultCluster" and {int(k): v for k, v in info["brokerAddrs"].items()} == {0: b_addr}
    # a topic created on the pymq broker reaches the real name server with its next registration
    header, _ = ask(b_addr, 17, {"topic": "PymqViaRealNs", "defaultTopic": "TBW102", "readQueueNums": "2",
                                 "writeQueueNums": "2", "perm": "6", "topicFilterType": "SINGLE_TAG"})
    assert header["code"] == 0
    route = wait_for(lambda: read(real.namesrv, 105, {"topic": "PymqViaRealNs"}), timeout=5)
    assert addrs(route) == {"broker-b": {0: b_addr}}
    assert [(q["brokerName"], q["readQueueNums"], q["writeQueueNums"], q["perm"]) for q in route["queueDatas"]] \
        == [("broker-b", 2, 2, 6)]
    # pymq's own name server gives the same member for broker-b
    assert addrs(read(pymq_b.listening["namesrv"], 105, {"topic": "PymqViaRealNs"})) == {"broker-b": {0: b_addr}}

    body = base64.b64encode(b"through the real name server").decode()
    results = rocketmq_probe.run(Via(real.namesrv, b_addr, tmp_path / "probe", pymq_b.output), [
        {"op": "send", "topic": "PymqViaRealNs", "messages": [{"body": body, "queue": 0}, {"body": body, "queue": 1}]},
        {"op": "dump", "topics": ["PymqViaRealNs"], "waitFor": {"PymqViaRealNs": 2}, "waitMs": 10000},
        {"op": "mqadmin", "args": ["clusterList"]},
        {"op": "mqadmin", "args": ["topicRoute", "-t", "PymqViaRealNs"]},
    ])
    assert [r["status"] for r in results[0]] == ["SEND_OK", "SEND_OK"]
    assert sorted(m["queueId"] for m in results[1]["PymqViaRealNs"]) == [0, 1]
    assert all(base64.b64decode(m["body"]) == b"through the real name server" for m in results[1]["PymqViaRealNs"])
    cluster_list, topic_route = results[2], results[3]
    assert "broker-a" in cluster_list and "broker-b" in cluster_list and b_addr in cluster_list, cluster_list
    assert '"brokerName":"broker-b"' in topic_route.replace(" ", "") and b_addr in topic_route, topic_route


def test_pymq_slave_learns_its_master_from_the_real_name_server(real, tmp_path):
    cfg = pymq.StoreConfig(commitlog_file_size=1 << 20, consume_queue_entries=1000, index_hash_slots=1000,
                           index_max_entries=4000, warm_mapped_file_enable=False)
    # the deflated body form (compressedRegister): the real name server must inflate it
    bc = pymq.BrokerConfig(broker_name="broker-a", broker_id=1, namesrv_addr=real.namesrv, compressed_register=True)
    broker = pymq.Broker(str(tmp_path / "slave"), cfg, bc).start()
    told = []

    async def main():
        server = RemotingServer(broker, RemotingConfig(namesrv_port=None, broker_port=0,
                                                       ha_server_addr="127.0.0.1:1"))
        server.registration.on_master_changed = lambda master, ha: told.append((master, ha))
        await server.start()
        try:
            for _ in range(100):
                if told:
                    break
                await asyncio.sleep(0.1)
            route = read(real.namesrv, 105, {"topic": "TBW102"})
            return server.broker_address, route
        finally:
            await server.stop()             # UNREGISTER_BROKER

    try:
        slave, route = asyncio.run(main())
    finally:
        broker.shutdown()
    master, ha = told[0]
    assert master == real.address
    assert ha.endswith(f":{real.port + 1}")          # the real master's HA port (brokerIP2:haListenPort)
    assert addrs(route)["broker-a"] == {0: real.address, 1: slave}
    assert addrs(read(real.namesrv, 105, {"topic": "TBW102"}))["broker-a"] == {0: real.address}


def test_pymq_broker_leaves_the_real_name_server_at_shutdown(real, pymq_b):
    assert wait_for(lambda: "broker-b" in read(real.namesrv, 106, {})["brokerAddrTable"])
    pymq_b.stop()
    assert "broker-b" not in read(real.namesrv, 106, {})["brokerAddrTable"]
    assert read(real.namesrv, 105, {"topic": "PymqViaRealNs"}) is None
