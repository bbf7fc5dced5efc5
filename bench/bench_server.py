"""Benchmark of ``pymq serve`` with the official RocketMQ 5 Python client, next to the limit
of the same stack: the same clients against a do-nothing gRPC server of the same shape
(``null_server.py``), in the same run.

Workloads, each from N client processes (``--procs``):

* ``send``     ``Producer.send`` of single 100-byte messages (one call each, synchronous)
* ``batch``    ``SendMessage`` calls of 100 messages through grpcio (the official Python client
               sends one message per call, so batches use the protocol directly); the
               requests are built and serialized before the clock starts
* ``receive``  ``SimpleConsumer.receive(32)`` then ``ack`` of each message
* ``embedded`` ``MessageStore.put_messages`` of 100 messages in this process (no server): the
               ceiling the batched sends are compared with

Prints messages/s and p50/p99 latency per call, and pymq as a share of the null server.

    python bench/bench_server.py                     # defaults: 2 processes, 2000 messages each
                                                     # (20000 in batches)
    python bench/bench_server.py --procs 4 --messages 5000 --json out.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
BODY = b"x" * 100


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cmd: list[str]) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = proc.stdout.readline()
    if "listening" not in line:
        proc.kill()
        raise RuntimeError(f"{cmd} did not start: {line}{proc.stdout.read()}")
    return proc


def _config(endpoint):
    from rocketmq import ClientConfiguration, Credentials
    return ClientConfiguration(endpoint, Credentials(), request_timeout=10)


def _message(topic: str):
    from rocketmq import Message
    m = Message()
    m.topic = topic
    m.body = BODY
    return m


def worker(kind: str, endpoint: str, topic: str, n: int, out: mp.Queue) -> None:
    """One client process: ``n`` messages of workload ``kind``; puts (start, end, count, latencies)."""
    import logging
    logging.disable(logging.CRITICAL)
    lat: list[float] = []
    count = 0
    if kind == "send":
        from rocketmq import Producer
        p = Producer(_config(endpoint), (topic,))
        p.startup()
        for _ in range(20):
            p.send(_message(topic))
        t0 = time.time()
        for _ in range(n):
            s = time.perf_counter()
            p.send(_message(topic))
            lat.append(time.perf_counter() - s)
        count = n
        t1 = time.time()
        p.shutdown()
    elif kind == "batch":
        import grpc
        from rocketmq.grpc_protocol import definition_pb2 as pb, service_pb2 as svc, MessagingServiceStub
        ch = grpc.insecure_channel(endpoint)
        stub = MessagingServiceStub(ch)
        md = [("x-mq-client-id", "bench-" + uuid.uuid4().hex)]
        prefix = uuid.uuid4().hex[:16].upper()

        def request(k: int):
            req = svc.SendMessageRequest()
            for i in range(100):
                m = req.messages.add(body=BODY)
                m.topic.name = topic
                sp = m.system_properties
                sp.message_id = f"{prefix}{k:08X}{i:04X}"
                sp.message_type = pb.MessageType.NORMAL
                sp.born_timestamp.FromMilliseconds(int(time.time() * 1000))
            return req

        stub.SendMessage(request(0), metadata=md, timeout=30)
        # requests built and serialized before the clock starts: the client only sends
        # bytes, so what is measured is the server (a Python client building 100 protocol
        # messages per call is slower than either server)
        payloads = [request(k).SerializeToString() for k in range(1, n // 100 + 1)]
        send = ch.unary_unary("/apache.rocketmq.v2.MessagingService/SendMessage",
                              request_serializer=None, response_deserializer=svc.SendMessageResponse.FromString)
        t0 = time.time()
        for payload in payloads:
            s = time.perf_counter()
            resp = send(payload, metadata=md, timeout=30)
            lat.append(time.perf_counter() - s)
            assert resp.status.code == pb.Code.OK, resp.status
            count += 100
        t1 = time.time()
        ch.close()
    else:
        from rocketmq import FilterExpression, SimpleConsumer
        c = SimpleConsumer(_config(endpoint), "bench-group", {topic: FilterExpression("*")}, 5)
        c.startup()
        t0 = time.time()
        empty = 0
        while count < n and empty < 2:
            s = time.perf_counter()
            msgs = c.receive(32, 60)
            for m in msgs:
                c.ack(m)
            lat.append(time.perf_counter() - s)
            count += len(msgs)
            empty = 0 if msgs else empty + 1
        t1 = time.time()
        c.shutdown()
    out.put((t0, t1, count, lat))


def run_workload(kind: str, endpoint: str, topic: str, procs: int, n: int) -> dict:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=worker, args=(kind, endpoint, topic, n, q)) for _ in range(procs)]
    for p in ps:
        p.start()
    results = [q.get(timeout=600) for _ in ps]
    for p in ps:
        p.join()
    start = min(r[0] for r in results)
    end = max(r[1] for r in results)
    count = sum(r[2] for r in results)
    lat = sorted(x for r in results for x in r[3])
    pct = (lambda f: lat[min(len(lat) - 1, int(f * len(lat)))] * 1000) if lat else (lambda f: float("nan"))
    return {"messages": count, "seconds": end - start, "rate": count / max(end - start, 1e-9),
            "p50_ms": pct(0.50), "p99_ms": pct(0.99)}


def embedded_put_messages(seconds: float = 2.0) -> dict:
    import pymq
    with tempfile.TemporaryDirectory() as d:
        with pymq.MessageStore(d) as store:
            batches = 0
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                store.put_messages([pymq.Message(topic="BenchTopic", body=BODY) for _ in range(100)])
                batches += 1
            el = time.perf_counter() - t0
    return {"messages": batches * 100, "seconds": el, "rate": batches * 100 / el, "p50_ms": float("nan"),
            "p99_ms": float("nan")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=2, help="client processes per workload (default 2)")
    ap.add_argument("--messages", type=int, default=2000, help="messages per process (default 2000)")
    ap.add_argument("--batch-messages", type=int, default=20000,
                    help="messages per process in batches of 100 (default 20000)")
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as store:
        pport, nport = free_port(), free_port()
        pymq_proc = start([sys.executable, "-m", "pymq", "serve", "--store", store, "--port", str(pport),
                           "--namesrv-port", "off", "--broker-port", "off"])
        null_proc = start([sys.executable, os.path.join(HERE, "null_server.py"), str(nport)])
        try:
            for kind in ("send", "batch", "receive"):
                for name, port in (("null", nport), ("pymq", pport)):
                    print(f"{kind} against {name}...", file=sys.stderr, flush=True)
                    n = args.batch_messages if kind == "batch" else args.messages
                    r = run_workload(kind, f"127.0.0.1:{port}", "BenchTopic", args.procs, n)
                    rows.append({"workload": kind, "server": name, **r})
        finally:
            for p in (pymq_proc, null_proc):
                p.terminate()
                p.wait(timeout=60)
    rows.append({"workload": "batch", "server": "embedded put_messages", **embedded_put_messages()})
    print(f"\n{'workload':<9} {'server':<22} {'msgs':>8} {'msg/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'of limit':>8}")
    limit = {r["workload"]: r["rate"] for r in rows if r["server"] == "null"}
    for r in rows:
        share = ""
        if r["server"] == "pymq":
            share = f"{100 * r['rate'] / limit[r['workload']]:.0f}%"
        print(f"{r['workload']:<9} {r['server']:<22} {r['messages']:>8} {r['rate']:>10.0f} {r['p50_ms']:>8.2f} "
              f"{r['p99_ms']:>8.2f} {share:>8}")
    emb = next(r["rate"] for r in rows if r["server"] == "embedded put_messages")
    pb = next(r["rate"] for r in rows if r["server"] == "pymq" and r["workload"] == "batch")
    print(f"\nbatched sends through the server: {100 * pb / emb:.0f}% of embedded put_messages "
          f"({args.procs} client processes, 100-byte bodies)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"procs": args.procs, "messages": args.messages, "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
