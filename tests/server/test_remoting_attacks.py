"""Attacks on the remoting listeners of a ``pymq serve`` subprocess (issue 24), each with its
bound asserted from outside: the server's memory from /proc, and a probe that must keep
answering within 1 s while the attack runs: the official Java 4.9.7 client (a producer and
a pull consumer in one JVM, signing with ``AclClientRPCHook`` when the server has keys,
:mod:`.official_probes`) sends a message through the name server and pulls it back.

- 500 connections each begin a 16 MiB frame and stall: with access keys the server holds
  them under 256 MiB of RSS whether their header names no key, or a known key with a bad
  signature; without keys, ``--max-inflight-bytes`` bounds them.
- huge headers and headers with too many fields close their connection at once.
- frames refused at their header are answered NO_PERMISSION and their bodies dropped.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest

from .attack_support import AK, SK, memory_mib, probe_thread, signed, signed_call, stalled_frames, wait_closed
from .hostile_support import BothServer, frame, read_frame

FRAME_S = 4.0
STALLED = 500
SEND_EXT = {"a": "PG", "b": "AttackTopic", "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": 0, "h": 0, "i": ""}


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory):
    s = BothServer(str(tmp_path_factory.mktemp("attacks") / "store"), "--access-key", AK, "--secret-key", SK,
                   "--frame-timeout", str(FRAME_S), "--port", "off").start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def java_probe(keyed_server, rocketmq_home, latency_probe_classes):
    """The official Java client, signing with the server's keys: ``round()`` -> seconds."""
    from .official_probes import JavaRemotingProbe
    with JavaRemotingProbe(keyed_server.listening["namesrv"], "JavaProbeTopic", "java_probe_group", AK, SK,
                           home=rocketmq_home, classes=latency_probe_classes) as probe:
        yield probe


def _attack(srv, probe, ext: dict, count: int = STALLED) -> dict:
    """``count`` stalled 16 MiB frames with header ``ext`` while probes run; the server's
    memory before, at the worst, and how many connections it closed within the frame
    deadline."""
    pid = srv.proc.pid
    probe()
    base_rss, _ = memory_mib(pid)
    prober, probes = probe_thread(probe, seconds=3.0)
    t0 = time.monotonic()
    socks = stalled_frames(srv.address("broker"), count, ext)
    sent_s = time.monotonic() - t0
    time.sleep(0.5)
    rss, hwm = memory_mib(pid)
    prober.join(30)
    closed = wait_closed(socks, FRAME_S + 3)
    time.sleep(0.5)
    after, _ = memory_mib(pid)           # closed connections give their buffers back at once
    for s in socks:
        s.close()
    print(f"{count} stalled frames: RSS {base_rss:.0f} -> {rss:.0f} MiB (peak {hwm:.0f}), probes "
          f"{[round(x, 3) if isinstance(x, float) else x for x in probes]}, closed {closed}")
    return {"base": base_rss, "rss": rss, "hwm": hwm, "after": after, "probes": probes, "closed": closed,
            "sent_s": sent_s}


def _probes_ok(probes: list) -> bool:
    return len(probes) >= 3 and all(isinstance(x, float) and x < 1.0 for x in probes)


def test_stalled_frames_naming_no_known_key_hold_nothing(keyed_server, java_probe):
    """Refused at their header: answered NO_PERMISSION, bodies read and dropped, closed at
    the frame deadline; the server's memory hardly moves."""
    r = _attack(keyed_server, java_probe.round, dict(SEND_EXT, AccessKey="nobody", Signature="x"))
    assert r["hwm"] < 256 and r["rss"] - r["base"] < 64, r
    assert _probes_ok(r["probes"]), r
    assert r["closed"] == STALLED, r


def test_stalled_frames_with_a_known_key_and_a_bad_signature_share_a_small_budget(keyed_server, java_probe):
    """A known access key but no valid signature yet: the frames wait on the 16 MiB budget of
    connections not yet signed in; each holds at most one read's buffer meanwhile."""
    r = _attack(keyed_server, java_probe.round, dict(SEND_EXT, AccessKey=AK, Signature="forged"))
    assert r["hwm"] < 256 and r["rss"] - r["base"] < 96, r
    assert r["after"] - r["base"] < 24, r      # each frame admitted in turn (16 MiB) was freed with its connection
    assert _probes_ok(r["probes"]), r
    assert r["closed"] == STALLED, r


def test_without_keys_the_inflight_budget_bounds_stalled_frames(tmp_path, java_probe_factory):
    srv = BothServer(str(tmp_path / "store"), "--frame-timeout", str(FRAME_S), "--port", "off",
                     "--max-inflight-bytes", str(48 << 20)).start()
    try:
        probe = java_probe_factory(srv.listening["namesrv"])
        r = _attack(srv, probe.round, SEND_EXT, count=300)
    finally:
        srv.stop()
    # 48 MiB admitted (two frames), the others one read's buffer (64 KiB) each
    assert r["rss"] - r["base"] < 48 + 300 * 64 / 1024 + 32, r
    assert _probes_ok(r["probes"]), r
    assert r["closed"] == 300, r


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        while sock.recv(65536):
            pass
        return True
    except socket.timeout:
        return False
    except OSError:
        return True


def test_huge_headers_and_too_many_fields_close_at_once(keyed_server, java_probe):
    srv = keyed_server
    broker = srv.address("broker")
    huge = frame(34, {"AccessKey": "nobody", "pad": "y" * (11 << 20)})      # an 11 MiB JSON header
    fields = frame(34, signed({f"f{i}": "v" for i in range(200)}))
    for raw in (huge, fields):
        with socket.create_connection(broker, timeout=5) as s:
            t0 = time.monotonic()
            try:
                s.sendall(raw)
            except OSError:
                pass                           # closed while we were still sending
            assert _closed_within(s, 2.0)
            assert time.monotonic() - t0 < 1.0
        assert java_probe.round() < 1.0
    # at the limit is fine: 100 fields, signed
    with socket.create_connection(broker, timeout=5) as s:
        s.sendall(frame(30, signed({"topic": "T", "queueId": 0, **{f"f{i}": "v" for i in range(100)}})))
        head, _ = read_frame(s)
        assert head["code"] == 0, head


def test_a_frame_refused_at_its_header_is_answered_and_the_connection_goes_on(keyed_server):
    """A 2 MiB unsigned send is answered NO_PERMISSION before its body is read; the body is
    dropped and the next request on the same connection, signed, is served."""
    broker = keyed_server.address("broker")
    with socket.create_connection(broker, timeout=5) as s:
        s.sendall(frame(310, dict(SEND_EXT), b"z" * (2 << 20)))
        head, _ = read_frame(s)
        assert head["code"] == 16, head                       # NO_PERMISSION
        s.sendall(frame(30, signed({"topic": "AttackTopic2", "queueId": 0})))
        head, _ = read_frame(s)
        assert head["code"] == 0, head


def test_topic_flood_and_huge_queue_counts_while_the_probe_runs(tmp_path, java_probe_factory):
    """A signed client (it holds the keys) sends to 1,000 new topic names on 4 connections,
    and asks for topics of 5,000,000 queues: sends create at most --max-topics topics, the
    others are refused (TOPIC_NOT_EXIST) with nothing written, the huge topics are refused
    (SYSTEM_ERROR) in milliseconds, topics.json stays small, and the probe answers within
    1 s throughout."""
    import json
    import os
    store = str(tmp_path / "store")
    srv = BothServer(store, "--access-key", AK, "--secret-key", SK, "--port", "off", "--max-topics", "200").start()
    broker = srv.address("broker")
    try:
        probe = java_probe_factory(srv.listening["namesrv"], "JavaProbeTopic", "java_probe_group", AK, SK)
        base_rss, _ = memory_mib(srv.proc.pid)
        prober, probes = probe_thread(probe.round, seconds=4.0)
        codes: dict = {}

        def flood(worker: int) -> None:
            with socket.create_connection(broker, timeout=10) as s:
                for i in range(worker, 1000, 4):
                    body = b"flood"
                    s.sendall(frame(310, signed(dict(SEND_EXT, b=f"Flood{i}", g=int(time.time() * 1000)), body),
                                    body))
                    head, _ = read_frame(s)
                    codes[head["code"]] = codes.get(head["code"], 0) + 1
        floods = [threading.Thread(target=flood, args=(w,)) for w in range(4)]
        for t in floods:
            t.start()
        huge_s = []
        for i in range(20):
            t0 = time.monotonic()
            head, _ = signed_call(broker, 17, {"topic": f"Huge{i}", "readQueueNums": 5_000_000,
                                               "writeQueueNums": 5_000_000, "perm": 6})
            huge_s.append(time.monotonic() - t0)
            assert head["code"] == 1, head                             # SYSTEM_ERROR
        for t in floods:
            t.join(60)
        prober.join(30)
        rss, hwm = memory_mib(srv.proc.pid)
    finally:
        srv.stop()
    with open(os.path.join(store, "config", "topics.json")) as f:
        table = json.load(f)["topicConfigTable"]
    flooded = [t for t in table if t.startswith("Flood")]
    print(f"flood: codes {codes}, {len(flooded)} topics kept, topics.json "
          f"{os.path.getsize(os.path.join(store, 'config', 'topics.json'))} bytes, huge topic refusals "
          f"max {max(huge_s) * 1000:.1f} ms, RSS {base_rss:.0f} -> {rss:.0f} MiB (peak {hwm:.0f}), probes "
          f"{[round(x, 3) if isinstance(x, float) else x for x in probes]}")
    assert codes.get(0, 0) == len(flooded) <= 200 and codes.get(17, 0) == 1000 - codes.get(0, 0), codes
    assert not any(t.startswith("Huge") for t in table)
    assert max(huge_s) < 0.5, huge_s
    assert _probes_ok(probes), probes
