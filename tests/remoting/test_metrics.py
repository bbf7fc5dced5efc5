"""``pymq serve --metrics-port`` with 4.x clients: request latencies labelled
``protocol_type=remoting`` by request and response code, the 4.x clients among the
connected ones, and the served traffic (sends by topic and message type, pulls by topic and
consumer group) checked against the records the store holds."""

from __future__ import annotations

import re

import pytest

from .conftest import NodeClient, run_node

pytest.importorskip("prometheus_client")


def test_remoting_latencies_and_connections(remoting_server):
    from server.test_metrics import _stored, scrape          # tests/ is on sys.path
    server = remoting_server("--metrics-port", "0", topics=("MetricTopic",))
    port = int(re.search(r":(\d+)/metrics", next(x for x in server.output if "metrics on" in x)).group(1))
    c = NodeClient({"mode": "consume", "nameSrv": server.namesrv, "group": "MG", "topic": "MetricTopic"})
    try:
        c.wait_for(lambda ls: any("ready" in x for x in ls), 30, "ready")
        sent = run_node({"mode": "produce", "nameSrv": server.namesrv, "topic": "MetricTopic", "count": 9})
        assert len(sent) == 9
        c.wait_for(lambda _: len(c.messages()) == 9, 30, "nine messages")
        m = scrape(port)
    finally:
        c.stop()
    counts = m["rocketmq_rpc_latency_count"]
    sends = counts[(("protocol_type", "remoting"), ("request_code", "SEND_MESSAGE_V2"), ("response_code", "SUCCESS"))]
    assert sends == 9
    assert counts[(("protocol_type", "remoting"), ("request_code", "PULL_MESSAGE"), ("response_code", "SUCCESS"))] >= 1
    routes = [k for k in counts if ("request_code", "GET_ROUTEINFO_BY_TOPIC") in k]
    assert routes, "the name server's calls are measured too"
    assert m["rocketmq_consumer_connections"][()] >= 1
    assert m["rocketmq_messages_in_total"][(("is_system", "false"), ("topic", "MetricTopic"))] == 9
    in_key = (("message_type", "normal"), ("topic", "MetricTopic"))
    assert m["pymq_messages_sent_total"] == {in_key: 9}
    out_key = (("consumer_group", "MG"), ("topic", "MetricTopic"))
    assert m["rocketmq_messages_out_total"][out_key] == 9
    bytes_in = m["rocketmq_throughput_in_total"][in_key]
    bytes_out = m["rocketmq_throughput_out_total"][out_key]

    assert server.stop() == 0
    records = _stored(server.store, "MetricTopic")
    assert len(records) == 9
    assert bytes_in == bytes_out == sum(r.store_size for r in records)
