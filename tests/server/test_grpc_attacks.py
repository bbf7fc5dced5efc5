"""Hostile gRPC clients against a ``pymq serve`` subprocess (issue 24, the gRPC half): huge
messages without credentials, huge messages with them, more calls than the cap, calls that
stall half-sent, signatures replayed after the clock-skew window. Every bound is measured
from outside the process: its memory (VmHWM, the peak RSS, from /proc) and a probe (a
signed send and receive on a fresh channel) that must answer within 1 s meanwhile."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import grpc
import pytest

from .conftest import ServerProcess
from .attack_support import probe_thread
from .hostile_support import RawGrpcCall, grpc_probe, memory_kib, signed_metadata

AK, SK = "attack-ak", "attack-sk"
MIB = 1024 * 1024
INBOUND = 5 * MIB                   # the default limit: max_body_size (4 MiB) + 1 MiB
PROBE_LIMIT_S = 1.0
HWM_LIMIT_KIB = 64 * 1024


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory):
    """Access keys, frame timeout 1 s, the default inbound and concurrency limits."""
    s = ServerProcess(str(tmp_path_factory.mktemp("attacks") / "store"), "--access-key", AK, "--secret-key", SK,
                      "--frame-timeout", "1").start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client_probe(auth_server):
    """The official Python client (rocketmq-python-client 5.x, with the server's
    credentials): ``round()`` sends a message and receives it, in seconds."""
    from .official_probes import GrpcClientProbe
    with GrpcClientProbe(auth_server.endpoint, "GrpcProbeTopic", "grpc-probe-group", AK, SK) as probe:
        yield probe


@pytest.fixture(scope="module")
def capped_server(tmp_path_factory):
    """No access keys, at most 4 calls at once, frame timeout 1 s."""
    s = ServerProcess(str(tmp_path_factory.mktemp("capped") / "store"), "--grpc-max-concurrent-calls", "4",
                      "--frame-timeout", "1").start()
    yield s
    s.stop()


FLOOD = os.path.join(os.path.dirname(__file__), "grpc_flood.py")


def _attack(srv, probe, topic: str, waves: int, specs: list, sign: bool = False) -> dict:
    """:mod:`grpc_flood` (its own process) sends ``waves`` waves of ``specs`` (``(body size,
    count)``) to ``srv`` while ``probe()`` (the official client's round) runs here; the
    outcome of each call, the probes' seconds and the server's peak RSS over its level
    before the attack."""
    probe()
    probe()                                         # topics, groups and caches exist
    before = memory_kib(srv.proc.pid)
    done = threading.Event()
    prober, probes = probe_thread(probe, until=done, pause=0.05)
    cmd = [sys.executable, FLOOD, srv.endpoint, topic, str(waves), *(f"{size}:{n}" for size, n in specs)]
    try:
        out = subprocess.run(cmd + (["--sign", AK, SK] if sign else []), capture_output=True, text=True, timeout=120)
    finally:
        time.sleep(0.3)
        done.set()
        prober.join(20)
    assert out.returncode == 0, out.stderr[-3000:]
    after = memory_kib(srv.proc.pid)
    return {"outcomes": [json.loads(x) for x in out.stdout.splitlines()], "probes": probes,
            "hwm_delta_kib": after["VmHWM"] - before["VmHWM"], "rss_before_kib": before["VmRSS"],
            "rss_after_kib": after["VmRSS"]}


def _assert_held(result: dict) -> None:
    probes = result["probes"]
    print("attack:", {k: v for k, v in result.items() if k != "probes"},
          "probes: n=%d max=%.3f s" % (len(probes), max(p for p in probes if isinstance(p, float))))
    assert probes and all(isinstance(p, float) and p < PROBE_LIMIT_S for p in probes), probes
    assert result["hwm_delta_kib"] < HWM_LIMIT_KIB, result


def _persisted_topics(store: str) -> set:
    """Topic names the server wrote to config/topics.json and queue directories it made."""
    names = set()
    path = os.path.join(store, "config", "topics.json")
    if os.path.exists(path):
        with open(path) as f:
            names |= set(json.load(f).get("topicConfigTable", {}))
    cq = os.path.join(store, "consumequeue")
    if os.path.isdir(cq):
        names |= set(os.listdir(cq))
    return names


def test_huge_unsigned_sends_are_refused_before_their_body_is_read(auth_server, client_probe):
    """8 sends of 100 MiB and 8 just under the 5 MiB limit, twice, without credentials:
    refused (UNAUTHORIZED in the response, or RESOURCE_EXHAUSTED for the ones beyond the
    limit) while the server's peak RSS grows < 64 MiB and a signed probe answers < 1 s."""
    from rocketmq.grpc_protocol import definition_pb2 as pb
    result = _attack(auth_server, client_probe.round, "UnsignedHugeTopic", 2, [(100 * MIB, 8), (INBOUND - 4096, 8)])
    _assert_held(result)
    for wave in result["outcomes"]:
        assert all(x in (pb.Code.UNAUTHORIZED, "RESOURCE_EXHAUSTED") for x in wave[:8]), wave
        assert wave[8:] == [pb.Code.UNAUTHORIZED] * 8, wave
    time.sleep(0.5)                                  # topics.json is written at most every 200 ms
    assert "UnsignedHugeTopic" not in _persisted_topics(auth_server.store)


def test_oversized_signed_sends_get_resource_exhausted_before_they_are_buffered(auth_server, client_probe):
    """8 signed sends of 100 MiB: gRPC refuses them (RESOURCE_EXHAUSTED) from the announced
    length, the peak RSS grows < 64 MiB, the probe answers < 1 s; nothing is stored."""
    result = _attack(auth_server, client_probe.round, "SignedHugeTopic", 1, [(100 * MIB, 8)], sign=True)
    _assert_held(result)
    assert result["outcomes"] == [["RESOURCE_EXHAUSTED"] * 8], result["outcomes"]
    time.sleep(0.5)
    assert "SignedHugeTopic" not in _persisted_topics(auth_server.store)


def _batch(n: int, body_size: int):
    from rocketmq.grpc_protocol import service_pb2 as svc
    batch = svc.SendMessageRequest()
    for i in range(n):
        m = batch.messages.add(body=b"b" * body_size)
        m.topic.name = "LimitTopic"
        m.system_properties.message_id = f"0A0B0C0D0E0F{i:020d}"
        m.system_properties.tag = "TagA"
        m.system_properties.keys.append(f"order-{i:08d}")
        m.system_properties.born_host = "10.0.0.1"
        m.system_properties.born_timestamp.seconds = int(time.time())
    return batch


@pytest.mark.parametrize("body_size", [1024, 100])
def test_what_the_broker_accepts_still_fits_the_inbound_limit(auth_server, body_size):
    """The largest batch the store takes (its encoded size, properties included, within
    the 4 MiB max_message_size) of 1 KiB or 100-byte bodies with a tag and keys each, and a
    message at the 4 MiB body limit with 16 KiB of properties, fit the 5 MiB inbound limit
    and are stored; a body over 4 MiB is the broker's MESSAGE_BODY_TOO_LARGE, not a broken
    call."""
    from rocketmq.grpc_protocol import definition_pb2 as pb, service_pb2 as svc, MessagingServiceStub
    single = svc.SendMessageRequest()
    m = single.messages.add(body=b"s" * (4 * MIB))
    m.topic.name = "LimitTopic"
    m.system_properties.message_id = "SINGLE0001"
    for i in range(16):
        m.user_properties[f"k{i:02d}"] = "v" * 1000
    too_big = svc.SendMessageRequest()
    m = too_big.messages.add(body=b"t" * (4 * MIB + 1))
    m.topic.name = "LimitTopic"
    m.system_properties.message_id = "TOOBIG0001"
    with grpc.insecure_channel(auth_server.endpoint) as ch:
        stub = MessagingServiceStub(ch)
        assert single.ByteSize() < INBOUND
        assert stub.SendMessage(single, metadata=signed_metadata(AK, SK), timeout=10).status.code == pb.Code.OK
        # the store counts 20 + body + 2 + properties bytes per message of a batch (as
        # RocketMQ's broker does) against max_message_size; these messages' properties
        # (UNIQ_KEY, TAGS, KEYS, and what RocketMQ 5's proxy and broker add: CLUSTER,
        # PGROUP, RECONSUME_TIME, __BORNHOST, BORN_TIMESTAMP) take 178 bytes
        n = 4 * MIB // (body_size + 200)
        batch = _batch(n, body_size)
        resp = stub.SendMessage(batch, metadata=signed_metadata(AK, SK), timeout=10)
        print(f"batch of {n} x {body_size} B: {batch.ByteSize()} bytes on the wire")
        assert resp.status.code == pb.Code.OK and len(resp.entries) == n, resp.status
        assert batch.ByteSize() < INBOUND
        resp = stub.SendMessage(_batch(n + 1, body_size), metadata=signed_metadata(AK, SK), timeout=10)
        assert resp.status.code == pb.Code.MESSAGE_BODY_TOO_LARGE and "batch of" in resp.status.message, resp.status
        resp = stub.SendMessage(too_big, metadata=signed_metadata(AK, SK), timeout=10)
        assert resp.status.code == pb.Code.MESSAGE_BODY_TOO_LARGE, resp.status


@pytest.mark.parametrize("date_time, why", [
    ("20010101T000000Z", "behind the server's clock"),                     # long ago, correctly signed
    ("16 minutes ago", "16m"),                                              # replayed after the window
    ("last tuesday", "is not a date-time"),
])
def test_signatures_bind_to_the_server_clock(auth_server, date_time, why):
    """Correctly signed calls whose date-time is outside ±15 min of the server's clock, or
    not a date-time, get UNAUTHORIZED with the reason, in every method's response shape
    (unary, ReceiveMessage, Telemetry); a date-time of now is accepted; refused sends store
    nothing."""
    from rocketmq.grpc_protocol import definition_pb2 as pb, service_pb2 as svc, MessagingServiceStub
    topic = "SkewTopic%d" % abs(hash(date_time))
    if date_time == "16 minutes ago":       # taken now, not when the tests were collected
        date_time = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() - 16 * 60))
    with grpc.insecure_channel(auth_server.endpoint) as ch:
        stub = MessagingServiceStub(ch)
        req = svc.SendMessageRequest()
        m = req.messages.add(body=b"replayed")
        m.topic.name = topic
        m.system_properties.message_id = "SKEW0001"
        stale = signed_metadata(AK, SK, date_time)
        resp = stub.SendMessage(req, metadata=stale, timeout=5)
        assert resp.status.code == pb.Code.UNAUTHORIZED and why in resp.status.message, resp.status
        receive = svc.ReceiveMessageRequest(batch_size=1)
        receive.group.name = "skew-group"
        receive.message_queue.topic.name = topic
        items = list(stub.ReceiveMessage(receive, metadata=stale, timeout=5))
        assert [x.status.code for x in items] == [pb.Code.UNAUTHORIZED], items
        commands = list(stub.Telemetry(iter([svc.TelemetryCommand()]), metadata=stale, timeout=5))
        assert [x.status.code for x in commands] == [pb.Code.UNAUTHORIZED], commands
        assert stub.SendMessage(req, metadata=signed_metadata(AK, SK), timeout=5).status.code == pb.Code.OK
    time.sleep(0.5)
    stored = _persisted_topics(auth_server.store)
    assert topic in stored                  # the signed send of now created it...
    req.messages[0].topic.name = topic + "Never"
    with grpc.insecure_channel(auth_server.endpoint) as ch:
        resp = MessagingServiceStub(ch).SendMessage(req, metadata=stale, timeout=5)
    assert resp.status.code == pb.Code.UNAUTHORIZED
    time.sleep(0.5)
    assert topic + "Never" not in _persisted_topics(auth_server.store)     # ...the stale one nothing


def _long_polls(endpoint: str, n: int) -> list:
    """``n`` ReceiveMessage long polls (20 s) on an empty topic, each on its own channel;
    (channel, call) pairs, the calls in progress."""
    from rocketmq.grpc_protocol import service_pb2 as svc, MessagingServiceStub
    out = []
    for i in range(n):
        ch = grpc.insecure_channel(endpoint)
        req = svc.ReceiveMessageRequest(batch_size=1)
        req.group.name = "holders"
        req.message_queue.topic.name = "EmptyTopic"
        req.invisible_duration.seconds = 30
        req.long_polling_timeout.seconds = 20
        call = MessagingServiceStub(ch).ReceiveMessage(req, metadata=[("x-mq-client-id", f"holder{i}")], timeout=30)
        out.append((ch, call))
    return out


def test_calls_beyond_the_cap_get_resource_exhausted_and_the_server_recovers(capped_server):
    """With ``--grpc-max-concurrent-calls 4``, four long polls fill the server: a fifth
    call gets RESOURCE_EXHAUSTED at once; when they end, calls are served again."""
    srv = capped_server
    grpc_probe(srv.endpoint)
    polls = _long_polls(srv.endpoint, 4)
    try:
        time.sleep(0.5)                              # the four are parked on the server
        t0 = time.monotonic()
        with pytest.raises(grpc.RpcError) as refused:
            grpc_probe(srv.endpoint)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert time.monotonic() - t0 < PROBE_LIMIT_S
    finally:
        for ch, call in polls:
            call.cancel()
            ch.close()
    time.sleep(0.3)
    assert grpc_probe(srv.endpoint) < PROBE_LIMIT_S


def test_half_sent_calls_are_ended_after_the_frame_timeout(capped_server):
    """Four calls that send their headers and part of a message (or no message at all),
    then stall, fill the capped server; the frame timeout (1 s) ends each of them (its
    trailers), the connections stay up, and calls are served again."""
    srv = capped_server
    addr = ("127.0.0.1", srv.port)
    grpc_probe(srv.endpoint)
    stalled = [RawGrpcCall(addr, "SendMessage"), RawGrpcCall(addr, "SendMessage"),
               RawGrpcCall(addr, "ReceiveMessage"), RawGrpcCall(addr, "QueryRoute")]
    t0 = time.monotonic()
    try:
        stalled[0].send_partial(1000, b"\x0a" * 100)            # 100 bytes of 1000
        stalled[1].send_partial(4 * MIB, b"\x0a" * 60_000)      # most of a window of 4 MiB
        stalled[2].send_partial(200, b"")                       # the prefix only
        # stalled[3]: headers only
        time.sleep(0.3)
        with pytest.raises(grpc.RpcError) as refused:
            grpc_probe(srv.endpoint)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        ends = [(c.wait_end(3.0), time.monotonic() - t0) for c in stalled]
        assert all(how == "trailers" and 0.9 < at < 1.8 for how, at in ends), ends
        assert grpc_probe(srv.endpoint) < PROBE_LIMIT_S
    finally:
        for c in stalled:
            c.close()
