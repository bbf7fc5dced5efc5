"""Issue 28, end to end: a real Apache RocketMQ 4.9.7 master (ASYNC_MASTER) replicated by
``pymq serve --broker-role slave``, registered under the master's broker name with id 1.
The official Java producer sends through the name server; the real master is stopped; a
Java push consumer of a group that never consumed reads every message from the pymq slave,
found through the name server alone (RocketMQ's slave read fallback: with no broker id 0 in
the route, the client pulls from id 1).

Both with the real name server (the one started beside the real master) and with pymq's.
``PYMQ_HA_E2E_MESSAGES`` sets the number of messages (CI: 1,000; the issue's 10,000 by hand).
Each case starts its own master, slave and name server: the master is stopped in it.
"""

from __future__ import annotations

import pytest

from replication_e2e import MESSAGES, SEGMENT, compile_ha_client, create_topic, java_json, queued, route_brokers, wait_for
from remoting_wire import call                 # tests/ is on sys.path
from serve_process import ServeProcess

TOPIC = "HaE2E"


@pytest.fixture(scope="module")
def ha_client(rocketmq_home, tmp_path_factory):
    return compile_ha_client(rocketmq_home, tmp_path_factory.mktemp("ha-client"))


@pytest.fixture(params=["rocketmq-namesrv", "pymq-namesrv"])
def namesrv_kind(request):
    return request.param


def test_real_master_to_pymq_slave_consumed_after_master_stops(namesrv_kind, rocketmq_home, real_broker,
                                                              ha_client, tmp_path):
    pymq_ns = None
    conf = {"mappedFileSizeCommitLog": SEGMENT, "brokerName": "broker-ha"}
    if namesrv_kind == "pymq-namesrv":
        pymq_ns = ServeProcess(str(tmp_path / "ns"), "--port", "off", "--namesrv-port", "0",
                               "--broker-port", "off").start()
        conf["namesrvAddr"] = pymq_ns.listening["namesrv"]
    slave = None
    try:
        master = real_broker(tmp_path / "master-store", conf).start()
        ns = pymq_ns.listening["namesrv"] if pymq_ns else master.namesrv
        slave = ServeProcess(str(tmp_path / "slave"), "--port", "off", "--namesrv-port", "off",
                             "--broker-port", "0", "--ha-port", "off", "--broker-role", "slave",
                             "--master", f"127.0.0.1:{master.port + 1}", "--master-broker", master.address,
                             "--namesrv-addr", ns, "--broker-name", "broker-ha", "--broker-id", "1",
                             "--slave-sync-interval", "1").start()
        create_topic(master.address, TOPIC)
        sent = java_json(ha_client, tmp_path / "producer", "produce", ns, TOPIC, "0", str(MESSAGES))
        assert sent["statuses"] == {"SEND_OK": MESSAGES} and sent["errors"] == 0, sent
        # the slave has every message (replicated bytes, dispatched into its queues) and the topic
        wait_for(lambda: queued(slave.listening["broker"], TOPIC) == MESSAGES, 60, "the slave to hold every message")
        wait_for(lambda: route_brokers(ns, TOPIC).get("broker-ha", {}).keys() == {0, 1}, 45,
                 "master and slave in the topic's route")
        master.stop_broker()                         # TERM: it unregisters, as a stopped master does
        wait_for(lambda: route_brokers(ns, TOPIC).get("broker-ha", {}).keys() == {1}, 30,
                 "the route to name only the slave")
        got = java_json(ha_client, tmp_path / "consumer", "consume", ns, TOPIC, "ha_never_consumed",
                        str(MESSAGES), "120000")
        assert got["distinct"] == MESSAGES, {k: v for k, v in got.items() if k != "bodies"}
        assert got["bodies"] == list(range(MESSAGES))
        print(f"\n[{namesrv_kind}] {MESSAGES} sent in {sent['ms']} ms; read from the slave in {got['ms']} ms "
              f"({got['delivered']} deliveries)")
        # the consumer's progress stayed on the slave (RocketMQ's slave keeps offsets locally)
        head, _ = call(slave.listening["broker"], 14, {"consumerGroup": "ha_never_consumed", "topic": TOPIC,
                                                       "queueId": 0})
        assert head["code"] == 0 and int(head["extFields"]["offset"]) > 0, head
    finally:
        if slave is not None:
            slave.stop()
        if pymq_ns is not None:
            pymq_ns.stop()
