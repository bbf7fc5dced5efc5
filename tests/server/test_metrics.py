"""Prometheus metrics (``pymq.server.metrics``, ``pymq serve --metrics-port``): scraped over
HTTP, parsed with prometheus_client's parser, values checked against counted operations."""

from __future__ import annotations

import re
import time
import urllib.request

import pytest

pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

import pymq  # noqa: E402
from pymq.server.metrics import start_metrics_server  # noqa: E402

from .conftest import make_message, receive_all  # noqa: E402


def scrape(port: int) -> dict:
    """``{sample name: {labels tuple: value}}`` of one scrape."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        assert r.status == 200
        text = r.read().decode()
    out: dict = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def small_broker(path):
    cfg = pymq.StoreConfig(commitlog_file_size=1 << 20, consume_queue_entries=1000, index_hash_slots=64,
                           index_max_entries=4096, warm_mapped_file_enable=False)
    return pymq.Broker(path, cfg).start()


def test_store_metrics_match_counted_operations(tmp_path):
    broker = small_broker(tmp_path / "store")
    metrics = start_metrics_server(broker, "127.0.0.1", 0)
    try:
        for i in range(30):
            assert broker.put_message(pymq.Message("Orders", b"x" * 50, queue_id=i % 3)).is_ok()
        for i in range(5):
            assert broker.put_message(pymq.Message("Audit", b"y", queue_id=0)).is_ok()
        broker.put_message(pymq.Message("Orders", b"later", delay_level=4, queue_id=0))
        deadline = time.monotonic() + 5
        while broker.dispatch_behind_bytes() and time.monotonic() < deadline:
            time.sleep(0.005)
        r = broker.get_message("pull-g", "Orders", 0, 0, 4)
        assert len(r.messages) == 4
        broker.commit_offset("pull-g", "Orders", 0, 4)
        sc = pymq.SimpleConsumer(broker, "pop-g", "Audit")
        got = sc.receive(3, 60)
        assert len(got) == 3
        sc.ack(got[0])

        m = scrape(metrics.port)
        msgs_in = m["rocketmq_messages_in_total"]
        assert msgs_in[(("is_system", "false"), ("topic", "Orders"))] == 30
        assert msgs_in[(("is_system", "false"), ("topic", "Audit"))] == 5
        assert msgs_in[(("is_system", "true"), ("topic", "SCHEDULE_TOPIC_XXXX"))] == 1
        assert m["pymq_messages_put_total"][()] >= 36                      # + the pop records
        assert m["pymq_put_bytes_total"][()] > 35 * 50
        # the store's reads, whoever made them; served traffic (labelled) is the servers' only
        assert m["pymq_get_messages_total"][()] >= 4 + 3
        assert m["pymq_get_bytes_total"][()] > 4 * 50
        for name in ("rocketmq_messages_out_total", "rocketmq_throughput_out_total",
                     "rocketmq_throughput_in_total", "pymq_messages_sent_total"):
            assert name not in m, name
        lag = m["rocketmq_consumer_lag_messages"]
        assert lag[(("consumer_group", "pull-g"), ("is_system", "false"), ("topic", "Orders"))] == 10 - 4
        inflight = m["rocketmq_consumer_inflight_messages"]
        assert inflight[(("consumer_group", "pop-g"), ("topic", "Audit"))] == 2
        assert m["rocketmq_consumer_ready_messages"][(("consumer_group", "pop-g"), ("topic", "Audit"))] == 2
        assert m["pymq_delay_messages"][(("level", "4"),)] == 1
        assert m["rocketmq_storage_size"][()] >= 1 << 20
        assert m["rocketmq_topic_number"][()] >= 3
        assert "process_cpu_seconds_total" in m and "python_gc_objects_collected_total" in m
        assert all(v == 0 for v in m["pymq_service_failing"].values())
    finally:
        metrics.stop()
        broker.shutdown()


def _stored(store: str, topic: str) -> list:
    """The records of ``topic`` in the (stopped) server's store."""
    with pymq.MessageStore(store, read_only=True) as s:
        return [m for qid in s.get_topics().get(topic, ())
                for m in s.get_message("metrics-check", topic, qid, 0, 1000).messages]


def test_serve_exposes_metrics_and_rpc_latencies(server_factory, tmp_path):
    """Served traffic by topic and message type (in) and by topic and consumer group
    (out), checked against the records the store holds."""
    import grpc
    from rocketmq import ClientConfiguration, Credentials, Producer, FilterExpression, SimpleConsumer
    from rocketmq.grpc_protocol import definition_pb2 as pb, service_pb2 as svc, MessagingServiceStub
    server = server_factory("--metrics-port", "0")
    line = next(x for x in server.output if "metrics on" in x)
    port = int(re.search(r":(\d+)/metrics", line).group(1))
    cfg = ClientConfiguration(server.endpoint, Credentials(), request_timeout=5)
    p = Producer(cfg, ("MetricTopic",))
    p.startup()
    c = SimpleConsumer(cfg, "metric-g", {"MetricTopic": FilterExpression("*")}, 2)
    c.startup()
    try:
        for i in range(7):
            p.send(make_message("MetricTopic", b"m%d" % i))
        for i in range(2):
            p.send(make_message("MetricTopic", b"fifo%d" % i, group="mg"))
        p.send(make_message("MetricTopic", b"later", deliver_ms=int(time.time() * 1000) + 3_600_000))
        with grpc.insecure_channel(server.endpoint) as ch:
            stub = MessagingServiceStub(ch)
            batch = svc.SendMessageRequest()
            for i in range(5):
                msg = batch.messages.add(body=b"batch%d" % i)
                msg.topic.name = "MetricTopic"
                msg.system_properties.message_id = "METRICB%d" % i
            assert stub.SendMessage(batch, metadata=[("x-mq-client-id", "raw")], timeout=10).status.code == pb.Code.OK
            half = svc.SendMessageRequest()
            msg = half.messages.add(body=b"half")
            msg.topic.name = "MetricTopic"
            msg.system_properties.message_id = "METRICTX"
            msg.system_properties.message_type = pb.MessageType.TRANSACTION
            assert stub.SendMessage(half, metadata=[("x-mq-client-id", "raw")], timeout=10).status.code == pb.Code.OK
        got = receive_all(c, 14)
        assert len(got) == 14
        m = scrape(port)
    finally:
        c.shutdown()
        p.shutdown()
    sends = {k: v for k, v in m["rocketmq_rpc_latency_count"].items() if ("request_code", "SendMessage") in k}
    assert sum(sends.values()) == 7 + 2 + 1 + 2
    assert (("protocol_type", "grpc"), ("request_code", "SendMessage"), ("response_code", "OK")) in sends
    receives = [k for k in m["rocketmq_rpc_latency_count"] if ("request_code", "ReceiveMessage") in k]
    assert receives
    assert m["rocketmq_messages_in_total"][(("is_system", "false"), ("topic", "MetricTopic"))] == 14
    assert m["rocketmq_producer_connections"][()] >= 1
    assert "process_resident_memory_bytes" in m

    def by_type(name):
        return {dict(k)["message_type"]: v for k, v in m[name].items() if dict(k)["topic"] == "MetricTopic"}

    sent = by_type("pymq_messages_sent_total")
    assert sent == {"normal": 12, "fifo": 2, "delay": 1, "transaction": 1}, sent
    bytes_in = by_type("rocketmq_throughput_in_total")
    assert set(bytes_in) == {"normal", "fifo", "delay", "transaction"} and all(v > 0 for v in bytes_in.values())
    out_key = (("consumer_group", "metric-g"), ("topic", "MetricTopic"))
    assert m["rocketmq_messages_out_total"] == {out_key: 14}
    out_bytes = m["rocketmq_throughput_out_total"][out_key]

    assert server.stop() == 0
    records = _stored(server.store, "MetricTopic")
    assert len(records) == 14
    fifo = [r for r in records if r.properties.get("__SHARDINGKEY")]
    assert len(fifo) == 2
    assert bytes_in["fifo"] == sum(r.store_size for r in fifo)
    assert bytes_in["normal"] == sum(r.store_size for r in records) - bytes_in["fifo"]
    assert out_bytes == sum(r.store_size for r in records)
