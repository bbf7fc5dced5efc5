"""A real RocketMQ 4.9.7 broker and pymq's, for the slave metadata sync (issue 28): the four
GET_ALL_* answers of pymq (GET_ALL_TOPIC_CONFIG 21, GET_ALL_CONSUMER_OFFSET 43,
GET_ALL_DELAY_OFFSET 45, GET_ALL_SUBSCRIPTIONGROUP_CONFIG 201) have the shape of 4.9.7's
(the wrappers its slave decodes: ``TopicConfigSerializeWrapper``,
``ConsumerOffsetSerializeWrapper``, the delay-offset text, ``SubscriptionGroupWrapper``), and
a pymq slave syncs a real 4.9.7 master's tables (metadata only: byte replication is the
store's). One real broker for the module."""

from __future__ import annotations

import time

import pytest

from pymq.store.fastjson import loads_fastjson
from remoting_wire import call                 # tests/ is on sys.path
from serve_process import ServeProcess

TOPIC_FIELDS = {"topicName", "readQueueNums", "writeQueueNums", "perm", "topicFilterType", "topicSysFlag", "order"}


@pytest.fixture(scope="module")
def real_master(rocketmq_home, tmp_path_factory):
    from real_rocketmq import RealBroker
    run = tmp_path_factory.mktemp("real-master")
    broker = RealBroker(rocketmq_home, run / "run", run / "store")
    try:
        broker.start()
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def pymq_master(tmp_path_factory):
    p = ServeProcess(str(tmp_path_factory.mktemp("pymq-master") / "store"), "--port", "off", "--namesrv-port",
                     "off", "--broker-port", "0", "--ha-port", "off").start()
    try:
        yield p
    finally:
        p.stop()


def _prepare(addr: str) -> None:
    assert call(addr, 17, {"topic": "HaT", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6,
                           "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"})[0]["code"] == 0
    body = (b'{"groupName":"ha_g","consumeEnable":true,"consumeFromMinEnable":true,"consumeBroadcastEnable":true,'
            b'"retryQueueNums":1,"retryMaxTimes":16,"brokerId":0,"whichBrokerWhenConsumeSlowly":1,'
            b'"notifyConsumerIdsChangedEnable":true}')
    assert call(addr, 200, {}, body)[0]["code"] == 0
    assert call(addr, 15, {"consumerGroup": "ha_g", "topic": "HaT", "queueId": 1, "commitOffset": 9})[0][
        "code"] == 0


def _bodies(addr: str) -> dict:
    out = {}
    for code in (21, 43, 45, 201):
        head, body = call(addr, code, {})
        assert head["code"] == 0, (code, head)
        out[code] = body
    return out


def test_get_all_bodies_shaped_as_4_9_7(real_master, pymq_master):
    _prepare(real_master.address)
    _prepare(pymq_master.listening["broker"])
    time.sleep(0.5)        # 4.9.7 commits offsets to its table at once, pymq too; a margin for the files
    real, ours = _bodies(real_master.address), _bodies(pymq_master.listening["broker"])
    for code in (21, 201):
        r, o = loads_fastjson(real[code]), loads_fastjson(ours[code])
        assert set(o) == set(r), code                                  # the table key and dataVersion
        assert set(o["dataVersion"]) >= {"timestamp", "counter"}
    rt, ot = loads_fastjson(real[21])["topicConfigTable"]["HaT"], loads_fastjson(ours[21])["topicConfigTable"]["HaT"]
    assert {k: ot[k] for k in TOPIC_FIELDS} == {k: rt[k] for k in TOPIC_FIELDS}
    rg = loads_fastjson(real[201])["subscriptionGroupTable"]["ha_g"]
    og = loads_fastjson(ours[201])["subscriptionGroupTable"]["ha_g"]
    assert set(rg) <= set(og) | {"attributes"}, set(rg) - set(og)
    assert {k: og[k] for k in rg if k in og} == {k: rg[k] for k in rg if k in og}
    # offsets: {"offsetTable": {"topic@group": {queueId: offset}}} with unquoted integer keys
    assert loads_fastjson(real[43])["offsetTable"]["HaT@ha_g"] == loads_fastjson(ours[43])["offsetTable"]["HaT@ha_g"]
    assert b'"HaT@ha_g":{1:9}' in ours[43].replace(b" ", b"").replace(b"\n", b"").replace(b"\t", b"")
    assert set(loads_fastjson(ours[45])) == set(loads_fastjson(real[45])) == {"offsetTable"}


def test_pymq_slave_syncs_real_master(real_master, tmp_path):
    _prepare(real_master.address)
    slave = ServeProcess(str(tmp_path / "slave"), "--port", "off", "--namesrv-port", "off", "--broker-port", "0",
                         "--ha-port", "off", "--broker-role", "slave", "--master", "127.0.0.1:1",
                         "--master-broker", real_master.address, "--slave-sync-interval", "0.3").start()
    try:
        s = slave.listening["broker"]
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            head, _ = call(s, 14, {"consumerGroup": "ha_g", "topic": "HaT", "queueId": 1})
            if head["code"] == 0 and head["extFields"]["offset"] == "9":
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"the real master's offset never reached the slave: {head}\n{''.join(slave.output[-20:])}")
        assert call(s, 21, {})[1] and loads_fastjson(call(s, 21, {})[1])["dataVersion"] == \
            loads_fastjson(call(real_master.address, 21, {})[1])["dataVersion"]
        head, body = call(s, 352, {"group": "ha_g"})
        assert head["code"] == 0 and loads_fastjson(body)["retryMaxTimes"] == 16
    finally:
        slave.stop()
