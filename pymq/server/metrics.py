"""Prometheus metrics of a served store (``pymq serve --metrics-port P``).

Names follow RocketMQ 5's broker metrics (``BrokerMetricsConstant``,
``DefaultStoreMetricsConstant``, ``RemotingMetricsConstant``) where the figure exists
there; pymq's own figures carry a ``pymq_`` prefix. Three kinds of source:

* :class:`StoreCollector` reads ``store.stats()`` at scrape time (stored messages per
  topic, lag, in-flight, storage, the store's own put and get totals...): serving metrics
  adds no work to puts and pulls;
* :class:`TrafficMetrics` counts served traffic where RocketMQ's broker counts it, in the
  protocol adapters: bytes of each successful send by topic and message type
  (``rocketmq_throughput_in``), messages and bytes handed to consumers by topic and
  consumer group (``rocketmq_messages_out``, ``rocketmq_throughput_out``). The servers call
  it through their ``in_observer`` / ``out_observer`` hooks, None without metrics;
* :class:`RpcMetrics`: the latency histogram, through the servers' ``rpc_observer``.

Process metrics (CPU, memory, open files, GC) come from prometheus_client's own
collectors. ``docs/operations.md`` lists every metric with its labels and units.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Optional

from prometheus_client import CollectorRegistry, Counter, GCCollector, Histogram, PlatformCollector, ProcessCollector
from prometheus_client import start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from pymq.admin import topic_kind

#: bucket bounds of ``rocketmq_rpc_latency``, in ms (RocketMQ's, plus 50 and 500)
RPC_LATENCY_BUCKETS_MS = (1, 3, 5, 7, 10, 50, 100, 500, 1000, 3000, 5000, 10_000, 30_000)


def _gauge(name: str, doc: str, value, labels: Optional[dict] = None) -> GaugeMetricFamily:
    g = GaugeMetricFamily(name, doc, labels=list(labels) if labels else None)
    if labels:
        g.add_metric(list(labels.values()), value)
    elif value is not None:
        g.add_metric([], value)
    return g


class StoreCollector:
    """A prometheus_client collector reading ``store.stats()`` on each scrape; a
    :class:`pymq.Broker` adds its connected clients (every protocol's)."""

    def __init__(self, store) -> None:
        self.store = store

    def describe(self):
        return []      # built at scrape time: no checks at registration

    def collect(self):
        st = self.store.stats()
        is_sys = {t["topic"]: "true" if topic_kind(t["topic"]) else "false" for t in st["topics"]}

        msgs_in = CounterMetricFamily("rocketmq_messages_in", "Messages stored in a topic (its queues' max "
                                      "offsets: since the topic was created)", labels=["topic", "is_system"])
        for t in st["topics"]:
            msgs_in.add_metric([t["topic"], is_sys[t["topic"]]], sum(q["max_offset"] for q in t["queues"]))
        yield msgs_in
        # the store's own totals: every append and every read, whoever made it (embedded
        # callers, the broker's services); the served traffic is TrafficMetrics'
        yield CounterMetricFamily("pymq_messages_put", "Messages appended (every put, system topics "
                                  "included) since the store opened", value=st["put"]["messages_total"])
        yield CounterMetricFamily("pymq_put_bytes", "Bytes appended to the commit log (every put, system topics "
                                  "and segment-end blanks included) since the store opened",
                                  value=st["put"]["bytes_total"])
        yield CounterMetricFamily("pymq_get_messages", "Messages returned by the store's reads (pulls and pops "
                                  "of every client, embedded consumers, the broker's own services) since the "
                                  "store opened", value=st["get"]["messages_total"])
        yield CounterMetricFamily("pymq_get_bytes", "Bytes of the messages returned by the store's reads since "
                                  "the store opened", value=st["get"]["bytes_total"])

        lag = GaugeMetricFamily("rocketmq_consumer_lag_messages", "Messages of a topic the group has not "
                                "committed (broker offset - consumer offset, summed over queues)",
                                labels=["topic", "consumer_group", "is_system"])
        for g in st["groups"]:
            lag.add_metric([g["topic"], g["group"], is_sys.get(g["topic"], "false")], g["lag"])
        yield lag
        inflight = GaugeMetricFamily("rocketmq_consumer_inflight_messages", "Messages received (popped) and not "
                                     "acked yet", labels=["topic", "consumer_group"])
        ready = GaugeMetricFamily("rocketmq_consumer_ready_messages", "Messages the group has not received yet "
                                  "(pop)", labels=["topic", "consumer_group"])
        for p in st.get("pop", ()):
            inflight.add_metric([p["topic"], p["group"]], p["inflight"])
            ready.add_metric([p["topic"], p["group"]], p["unread"] + p["waiting"])
        yield inflight
        yield ready
        yield _gauge("rocketmq_topic_number", "Topics with a consume queue", len(st["topics"]))
        yield _gauge("rocketmq_consumer_group_number", "Consumer groups with committed offsets",
                     len({g["group"] for g in st["groups"]}))
        if "transactions" in st:
            yield _gauge("rocketmq_half_messages", "Half (prepared) messages not resolved yet",
                         st["transactions"]["half_pending"])
        yield from self._storage(st)
        yield from self._replication(st.get("replication") or {})
        yield from self._services(st)
        clients = getattr(self.store, "client_manager", None)
        if clients is not None:
            counts = clients.counts()
            producers = sum(v for k, v in counts.items() if k.upper() == "PRODUCER")
            yield _gauge("rocketmq_producer_connections", "Producer clients connected", producers)
            yield _gauge("rocketmq_consumer_connections", "Consumer clients connected",
                         sum(counts.values()) - producers)
        warnings = st.get("server", {}).get("warnings")
        if warnings is not None:
            warned = GaugeMetricFamily("pymq_server_warning", "1 for each warning of the serving process "
                                       "(open-access: a bind beyond loopback without access keys; plaintext; "
                                       "public-metrics; open-replication: an HA port beyond loopback), as "
                                       "printed at start", labels=["kind"])
            for w in warnings:
                warned.add_metric([w["kind"]], 1)
            yield warned

    @staticmethod
    def _replication(rep: dict):
        """Master/slave replication (docs/replication.md), when the store has HA: on a master
        what a failover to its most advanced slave would lose, per slave its own lag; on a
        slave what it lacks of what the master announced."""
        if not rep.get("ha"):
            return
        role = {"role": rep["role"]}
        if rep.get("lag_bytes") is not None:
            yield _gauge("pymq_replication_lag_bytes", "Commit-log bytes the master holds and the slave does not "
                         "(on a master: its most advanced slave; the loss bound of a failover)",
                         rep["lag_bytes"], role)
        if rep.get("lag_seconds") is not None:
            yield _gauge("pymq_replication_lag_seconds", "Age of the oldest record the slave lacks (on a slave: "
                         "seconds since it last held all the master announced, a bound)", rep["lag_seconds"], role)
        if "slaves_connected" in rep:
            yield _gauge("pymq_replication_slaves_connected", "Slaves connected to the HA port",
                         rep["slaves_connected"])
            per_bytes = GaugeMetricFamily("pymq_replication_slave_lag_bytes", "Bytes a connected slave has not "
                                          "acknowledged", labels=["slave"])
            per_seconds = GaugeMetricFamily("pymq_replication_slave_lag_seconds", "Age of the oldest record a "
                                            "connected slave has not acknowledged", labels=["slave"])
            for sl in rep.get("slaves", ()):
                if sl.get("lag_bytes") is not None:
                    per_bytes.add_metric([sl["address"]], sl["lag_bytes"])
                if sl.get("lag_seconds") is not None:
                    per_seconds.add_metric([sl["address"]], sl["lag_seconds"])
            yield per_bytes
            yield per_seconds
        if "connected" in rep:
            yield _gauge("pymq_replication_connected", "1 while the slave is connected to its master's HA port",
                         1 if rep["connected"] else 0)

    @staticmethod
    def _storage(st: dict):
        cl, disk = st["commitlog"], st["disk"]
        yield _gauge("rocketmq_storage_size", "Bytes of the store's files (commit log, consume queues, index)",
                     cl["size_bytes"] + cl["consume_queue_bytes"] + cl["index_bytes"])
        yield _gauge("rocketmq_storage_flush_behind_bytes", "Bytes appended and not flushed yet",
                     cl["flush_behind_bytes"])
        yield _gauge("rocketmq_storage_dispatch_behind_bytes", "Bytes appended and not dispatched to the "
                     "consume queues yet", cl["dispatch_behind_bytes"])
        earliest = cl["earliest_store_time_ms"]
        yield _gauge("rocketmq_storage_message_reserve_time", "Age of the oldest stored message (ms)",
                     max(0, int(time.time() * 1000) - earliest) if earliest > 0 else 0)
        yield _gauge("rocketmq_timing_messages", "Timer messages waiting for their delivery time",
                     st["timer"]["pending"])
        delay = GaugeMetricFamily("pymq_delay_messages", "Delay-level messages waiting for their level's delay",
                                  labels=["level"])
        for lv in st["delay"]["levels"]:
            delay.add_metric([str(lv["level"])], lv["pending"])
        yield delay
        if disk["used_ratio"] is not None:
            yield _gauge("pymq_disk_used_ratio", "Used share of the store's disk partition", disk["used_ratio"])
        yield _gauge("pymq_disk_warning_ratio", "Disk share past which puts are refused", disk["warning_ratio"])
        yield _gauge("pymq_puts_refused", "1 while puts are refused (disk full)", 1 if disk["puts_refused"] else 0)

    @staticmethod
    def _services(st: dict):
        failures = CounterMetricFamily("pymq_service_failures", "Failed passes of a background service",
                                       labels=["service"])
        failing = GaugeMetricFamily("pymq_service_failing", "Consecutive failed passes now (0: healthy)",
                                    labels=["service"])
        for s in st["services"]:
            failures.add_metric([s["name"]], s["failures"])
            failing.add_metric([s["name"]], s["failing"])
        yield failures
        yield failing


class TrafficMetrics:
    """Served traffic, counted by the protocol adapters where RocketMQ's broker counts it:
    after a successful send (``rocketmq_throughput_in`` by topic and message type, and
    ``pymq_messages_sent`` by the same labels) and after a receive or pull that hands
    messages to a consumer (``rocketmq_messages_out`` and ``rocketmq_throughput_out`` by
    topic and consumer group). Fed by each server's ``in_observer`` / ``out_observer``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.throughput_in = Counter("rocketmq_throughput_in", "Bytes of the records stored by successful sends "
                                     "served (gRPC and remoting), since the server started",
                                     ["topic", "message_type"], registry=registry)
        self.messages_sent = Counter("pymq_messages_sent", "Messages stored by successful sends served (gRPC "
                                     "and remoting), since the server started", ["topic", "message_type"],
                                     registry=registry)
        self.messages_out = Counter("rocketmq_messages_out", "Messages handed to consumers by receives (gRPC) "
                                    "and pulls (remoting), since the server started",
                                    ["topic", "consumer_group"], registry=registry)
        self.throughput_out = Counter("rocketmq_throughput_out", "Bytes of the records handed to consumers by "
                                      "receives and pulls, since the server started", ["topic", "consumer_group"],
                                      registry=registry)
        self._in: dict = {}         # (topic, type) -> (messages child, bytes child)
        self._out: dict = {}        # (topic, group) -> (messages child, bytes child)

    def sent(self, topic: str, message_type: str, messages: int, nbytes: int) -> None:
        """``messages`` of ``message_type`` (``normal``, ``fifo``, ``delay``, ``transaction``:
        RocketMQ's label values, :mod:`pymq.server.traffic`), ``nbytes`` as stored, went
        into ``topic``."""
        self._count(self._in, self.messages_sent, self.throughput_in, (topic, message_type), messages, nbytes)

    def delivered(self, topic: str, group: str, messages: int, nbytes: int) -> None:
        """``messages`` of ``topic`` (``nbytes`` as stored) were handed to ``group``."""
        self._count(self._out, self.messages_out, self.throughput_out, (topic, group), messages, nbytes)

    @staticmethod
    def _count(children_of: dict, messages_counter: Counter, bytes_counter: Counter, key: tuple,
               messages: int, nbytes: int) -> None:
        """Add to the two counters' children for ``key``, looked up once per label set."""
        children = children_of.get(key)
        if children is None:
            children = children_of[key] = (messages_counter.labels(*key), bytes_counter.labels(*key))
        children[0].inc(messages)
        children[1].inc(nbytes)


class RpcMetrics:
    """``rocketmq_rpc_latency`` (ms), fed by each server's ``rpc_observer`` hook."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.latency = Histogram("rocketmq_rpc_latency", "Latency of a served call (ms), from the request to "
                                 "the last response; ReceiveMessage includes its long poll, PULL_MESSAGE its "
                                 "time parked", ["protocol_type", "request_code", "response_code"],
                                 buckets=RPC_LATENCY_BUCKETS_MS, registry=registry)

    def observer(self, protocol: str):
        """The ``rpc_observer(request_code, response_code, seconds)`` of a server of
        ``protocol`` (``grpc``, ``remoting``)."""
        labels = self.latency.labels

        def observe(request_code: str, response_code: str, seconds: float) -> None:
            labels(protocol, request_code, response_code).observe(seconds * 1000.0)
        return observe


@dataclasses.dataclass
class MetricsServer:
    """What :func:`start_metrics_server` started."""

    registry: CollectorRegistry
    rpc: RpcMetrics
    traffic: TrafficMetrics
    httpd: object
    thread: object
    port: int

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def build_registry(store, servers=()) -> tuple[CollectorRegistry, RpcMetrics, TrafficMetrics]:
    """A registry with the store's metrics, the RPC histogram, the served traffic and
    process metrics; the histogram (labelled by each server's ``protocol_name``) and the
    traffic counters are hooked into each of ``servers``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(store))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    rpc = RpcMetrics(registry)
    traffic = TrafficMetrics(registry)
    for server in servers:
        if server is not None:
            server.rpc_observer = rpc.observer(server.protocol_name)
            server.in_observer = traffic.sent
            server.out_observer = traffic.delivered
    return registry, rpc, traffic


def start_metrics_server(store, host: str, port: int, servers=()) -> MetricsServer:
    """Serve Prometheus text at ``http://host:port/metrics`` (port 0 picks one) from a
    daemon thread, with the latencies and traffic of ``servers``; returns what was
    started (``port`` is the bound one)."""
    registry, rpc, traffic = build_registry(store, servers)
    httpd, thread = start_http_server(port, addr=host, registry=registry)
    return MetricsServer(registry, rpc, traffic, httpd, thread, httpd.server_address[1])
