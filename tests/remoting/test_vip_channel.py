"""The broker's VIP channel (RocketMQ's fastListenPort, the broker port - 2): a second listener
of the broker's requests, where a RocketMQ slave fetches its master's topic table
(SlaveSynchronize asks GET_ALL_TOPIC_CONFIG there) and 4.x clients with vipChannelEnabled
send. ``pymq serve`` opens it at the broker port - 2 when the broker port is fixed."""

from __future__ import annotations

import json
import socket

from remoting_wire import call        # tests/ is on sys.path
from serve_process import ServeProcess

GET_ALL_TOPIC_CONFIG = 21
SEND = {"producerGroup": "pg", "topic": "VipT", "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
        "queueId": 0, "sysFlag": 0, "bornTimestamp": 1, "flag": 0, "properties": "", "reconsumeTimes": 0}


def _fixed_broker_port() -> int:
    """A port P with P - 2 free too (both probed, then released)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < 1026:
            continue
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port - 2))
            return port
        except OSError:
            continue
    raise RuntimeError("no free pair of ports")


def test_the_vip_channel_serves_the_broker_requests(tmp_path):
    port = _fixed_broker_port()
    srv = ServeProcess(str(tmp_path / "store"), "--port", "off", "--namesrv-port", "off", "--broker-port", str(port),
                       "--ha-port", "off").start()
    try:
        assert srv.listening["vip"] == f"127.0.0.1:{port - 2}"
        sent, _ = call(srv.listening["vip"], 10, SEND, b"through the VIP channel")
        assert sent["code"] == 0, sent
        header, body = call(srv.listening["vip"], GET_ALL_TOPIC_CONFIG, {})
        assert header["code"] == 0, header
        assert "VipT" in json.loads(body)["topicConfigTable"]
        header, body = call(srv.listening["broker"], GET_ALL_TOPIC_CONFIG, {})
        assert "VipT" in json.loads(body)["topicConfigTable"]
    finally:
        srv.stop()


def test_no_vip_channel_beside_a_picked_broker_port_or_when_off(tmp_path):
    srv = ServeProcess(str(tmp_path / "a"), "--port", "off", "--namesrv-port", "off", "--broker-port", "0",
                       "--ha-port", "off").start()
    try:
        assert "vip" not in srv.listening
    finally:
        srv.stop()
    port = _fixed_broker_port()
    srv = ServeProcess(str(tmp_path / "b"), "--port", "off", "--namesrv-port", "off", "--broker-port", str(port),
                       "--vip-port", "off", "--ha-port", "off").start()
    try:
        assert "vip" not in srv.listening
    finally:
        srv.stop()
