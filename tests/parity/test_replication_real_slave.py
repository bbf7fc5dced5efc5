"""Issue 28, end to end: ``pymq serve`` as the master (ASYNC_MASTER, fixed ports: broker P,
VIP channel P - 2, HA P + 1, RocketMQ's layout) of a real Apache RocketMQ 4.9.7 slave
(brokerRole=SLAVE, brokerId=1, the same brokerName, haMasterAddress P + 1). The official Java
producer sends to pymq through the name server; pymq is stopped; a Java push consumer of a
group that never consumed reads every message from the real slave through the name server.

The real slave learns its master's broker address from its registration (the name server's
answer) and syncs the topics from pymq's VIP channel, which its pull needs (a 4.9.7 slave
answers TOPIC_NOT_EXIST for a topic it has no config of). The name server is pymq's (its own
process, alive after the master stops) or the real one started beside the slave.
``PYMQ_HA_E2E_MESSAGES`` sets the number of messages (CI: 1,000).
"""

from __future__ import annotations

import pytest

from replication_e2e import MESSAGES, SEGMENT, compile_ha_client, create_topic, java_json, queued, route_brokers, wait_for
from remoting_wire import call                 # tests/ is on sys.path
from serve_process import ServeProcess

TOPIC = "HaE2EReal"


@pytest.fixture(scope="module")
def ha_client(rocketmq_home, tmp_path_factory):
    return compile_ha_client(rocketmq_home, tmp_path_factory.mktemp("ha-client"))


def real_slave_has_topic(slave, topic: str) -> bool:
    """The real slave's topic table names ``topic`` (GET_ALL_TOPIC_CONFIG on its broker port)."""
    head, body = call(slave.address, 21, {})
    return head["code"] == 0 and f'"{topic}"'.encode() in body


@pytest.fixture(params=["pymq-namesrv", "rocketmq-namesrv"])
def namesrv_kind(request):
    return request.param


def test_pymq_master_to_real_slave_consumed_after_master_stops(namesrv_kind, real_broker, ha_client, tmp_path):
    from real_rocketmq import free_ports
    pymq_ns = master = None
    _, port = free_ports()                       # P, with P - 2 and P + 1 free too
    conf = {"mappedFileSizeCommitLog": SEGMENT, "brokerName": "broker-hb", "brokerId": 1, "brokerRole": "SLAVE",
            "haMasterAddress": f"127.0.0.1:{port + 1}", "registerNameServerPeriod": 10000}
    try:
        if namesrv_kind == "pymq-namesrv":
            pymq_ns = ServeProcess(str(tmp_path / "ns"), "--port", "off", "--namesrv-port", "0",
                                   "--broker-port", "off").start()
            ns = conf["namesrvAddr"] = pymq_ns.listening["namesrv"]
            master = _pymq_master(tmp_path, port, ns)
            slave = real_broker(tmp_path / "slave-store", conf).start()
        else:
            slave = real_broker(tmp_path / "slave-store", conf).start()
            ns = slave.namesrv
            master = _pymq_master(tmp_path, port, ns)
        create_topic(master.listening["broker"], TOPIC)
        sent = java_json(ha_client, tmp_path / "producer", "produce", ns, TOPIC, "0", str(MESSAGES))
        assert sent["statuses"] == {"SEND_OK": MESSAGES} and sent["errors"] == 0, sent
        wait_for(lambda: queued(slave.address, TOPIC) == MESSAGES, 60,
                 lambda: "the real slave to hold every message\n" + slave.log_tail())
        wait_for(lambda: real_slave_has_topic(slave, TOPIC), 45,
                 lambda: "the real slave to sync the topic from pymq\n" + slave.log_tail())
        wait_for(lambda: route_brokers(ns, TOPIC).get("broker-hb", {}).keys() == {0, 1}, 45,
                 "master and slave in the topic's route")
        assert master.stop() == 0                    # TERM: pymq unregisters
        master = None
        wait_for(lambda: route_brokers(ns, TOPIC).get("broker-hb", {}).keys() == {1}, 30,
                 "the route to name only the slave")
        got = java_json(ha_client, tmp_path / "consumer", "consume", ns, TOPIC, "hb_never_consumed",
                        str(MESSAGES), "120000")
        assert got["distinct"] == MESSAGES, ({k: v for k, v in got.items() if k != "bodies"}, slave.log_tail())
        assert got["bodies"] == list(range(MESSAGES))
        print(f"\n[{namesrv_kind}] {MESSAGES} sent to pymq in {sent['ms']} ms; read from the real slave in "
              f"{got['ms']} ms ({got['delivered']} deliveries)")
    finally:
        if master is not None:
            master.stop()
        if pymq_ns is not None:
            pymq_ns.stop()


def _pymq_master(tmp_path, port: int, namesrv: str) -> ServeProcess:
    m = ServeProcess(str(tmp_path / "master"), "--port", "off", "--namesrv-port", "off",
                     "--broker-port", str(port), "--namesrv-addr", namesrv, "--broker-name", "broker-hb",
                     "--broker-role", "async_master").start()
    assert m.listening["ha"].endswith(f":{port + 1}") and m.listening["vip"].endswith(f":{port - 2}"), m.listening
    return m
