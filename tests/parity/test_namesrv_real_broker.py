"""A real Apache RocketMQ 4.9.7 broker registers with pymq's name server (its broker.conf
``namesrvAddr`` points there), and the official Java client sends and consumes through
pymq's name server to that broker; at shutdown the broker unregisters.

pymq serves only a name server here (``--broker-port off``), so every route it gives comes
from the real broker's registrations. One real broker and one pymq name server for the
module.
"""

from __future__ import annotations

import base64
import json
import time

import pytest

from remoting_wire import FrameReader, connect, request
from serve_process import ServeProcess


class Via:
    """A broker seen through another name server, shaped for ``Probe.run``."""

    def __init__(self, namesrv: str, broker) -> None:
        self.namesrv, self.address, self.run_dir = namesrv, broker.address, broker.run_dir
        self.log_tail = broker.log_tail


def ask(addr: str, code: int, ext: dict) -> tuple[dict, bytes]:
    s = connect(addr)
    try:
        s.sendall(request(code, ext))
        return FrameReader(s).frame()
    finally:
        s.close()


def cluster_info(namesrv: str) -> dict:
    header, body = ask(namesrv, 106, {})
    assert header["code"] == 0
    return json.loads(body)


@pytest.fixture(scope="module")
def pymq_namesrv(tmp_path_factory):
    p = ServeProcess(str(tmp_path_factory.mktemp("ns") / "store"), "--port", "off", "--namesrv-port", "0",
                     "--broker-port", "off").start()
    yield p
    p.stop()


@pytest.fixture(scope="module")
def real(rocketmq_home, tmp_path_factory, pymq_namesrv):
    from real_rocketmq import RealBroker
    run = tmp_path_factory.mktemp("real-broker")
    b = RealBroker(rocketmq_home, run / "run", run / "store",
                   conf={"namesrvAddr": pymq_namesrv.listening["namesrv"], "brokerName": "broker-r"})
    try:
        b.start()
        yield b
    finally:
        b.stop()


def wait_for(fn, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.2)


def test_real_broker_registers_and_clients_route_through_pymq(real, pymq_namesrv, rocketmq_probe):
    ns = pymq_namesrv.listening["namesrv"]
    info = wait_for(lambda: cluster_info(ns)["brokerAddrTable"].get("broker-r"))
    assert info == {"cluster": "DefaultCluster", "brokerName": "broker-r", "brokerAddrs": {"0": real.address}}
    assert cluster_info(ns)["clusterAddrTable"] == {"DefaultCluster": ["broker-r"]}
    # the real broker's topics came with its registration (TBW102: auto-creation is on)
    header, body = ask(ns, 105, {"topic": "TBW102"})
    route = json.loads(body)
    assert header["code"] == 0 and route["brokerDatas"][0]["brokerAddrs"] == {"0": real.address}
    assert route["queueDatas"][0]["brokerName"] == "broker-r"

    # the Java client and mqadmin through pymq's name server: a topic created on the real
    # broker is registered at once (registerIncrementBrokerData), then sent and consumed
    body64 = base64.b64encode(b"via pymq's name server").decode()
    results = rocketmq_probe.run(Via(ns, real), [
        {"op": "createTopic", "topic": "ViaPymqNs", "queues": 2},
        {"op": "route", "topic": "ViaPymqNs"},
        {"op": "send", "topic": "ViaPymqNs", "messages": [{"body": body64, "queue": 1}, {"body": body64, "queue": 0}]},
        {"op": "dump", "topics": ["ViaPymqNs"], "waitFor": {"ViaPymqNs": 2}, "waitMs": 10000},
        {"op": "mqadmin", "args": ["clusterList"]},
    ])
    assert results[0] == 2
    assert results[1]["brokerDatas"][0]["brokerAddrs"] == {"0": real.address}
    assert [r["status"] for r in results[2]] == ["SEND_OK", "SEND_OK"]
    dumped = results[3]["ViaPymqNs"]
    assert sorted(m["queueId"] for m in dumped) == [0, 1]
    assert all(base64.b64decode(m["body"]) == b"via pymq's name server" for m in dumped)
    assert "broker-r" in results[4] and real.address in results[4]


def test_real_broker_unregisters_at_shutdown(real, pymq_namesrv):
    ns = pymq_namesrv.listening["namesrv"]
    assert wait_for(lambda: "broker-r" in cluster_info(ns)["brokerAddrTable"])
    real.stop()                     # TERM: its shutdown hook sends UNREGISTER_BROKER
    assert cluster_info(ns) == {"brokerAddrTable": {}, "clusterAddrTable": {}}
    header, _ = ask(ns, 105, {"topic": "TBW102"})
    assert header["code"] == 17     # TOPIC_NOT_EXIST: its topics went with it
