"""The probes of the hostile-client tests made of the official clients (official_probes.py)
against a ``pymq serve`` subprocess, with and without access keys: the Java 4.9.7 client over
remoting (through the name server) and the Python 5.x client over gRPC each complete rounds
of "send one message, read that message back" on a topic they share (each skipping the
other's messages), and a probe with a wrong secret key fails with its client's permission
error."""

from __future__ import annotations

import signal
import time

import pytest

from .hostile_support import BothServer
from .official_probes import ROUND_TIMEOUT, ProbeError, ProbeTimeout, latency_summary

AK, SK = "probe-ak", "probe-secret"
ROUNDS = 6


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """``{"open": server without keys, "keyed": server requiring AK/SK}``, gRPC and remoting."""
    made = {}
    try:
        made["open"] = BothServer(str(tmp_path_factory.mktemp("open") / "store")).start()
        made["keyed"] = BothServer(str(tmp_path_factory.mktemp("keyed") / "store"),
                                   "--access-key", AK, "--secret-key", SK).start()
        yield made
    finally:
        for s in made.values():
            s.stop()


@pytest.mark.parametrize("kind", ["open", "keyed"])
def test_probes_complete_rounds(kind, servers, java_probe_factory, grpc_probe_factory):
    srv = servers[kind]
    keys = (AK, SK) if kind == "keyed" else ()
    java = java_probe_factory(srv.listening["namesrv"], "OfficialProbeTopic", "java_probe_group", *keys)
    grpc = grpc_probe_factory(srv.endpoint, "OfficialProbeTopic", "grpc-probe-group", *keys)
    skipped = 0
    for _ in range(ROUNDS):
        assert java.round() < java.timeout
        last = java.last
        assert last["body"] == last["sent"] and last["msgId"] == last["sentMsgId"], last
        assert last["status"] == "SEND_OK" and last["total_ms"] <= last["seconds"] * 1000, last
        assert grpc.round() < grpc.timeout
        last = grpc.last
        assert last["body"] == last["sent"] and last["message_id"] == last["sent_id"], last
        skipped += last["skipped"]
    assert len(java.rounds) == len(grpc.rounds) == ROUNDS
    # the gRPC consumer group reads the topic the Java probe writes too: those were skipped
    assert skipped >= 1
    print(f"\n[{kind}] java remoting (warm-up {java.warmup['warmup_ms']:.0f} ms): {latency_summary(java.rounds)}"
          f"\n[{kind}] python grpc: {latency_summary(grpc.rounds)} (skipped {skipped} others)")


def test_java_probe_with_wrong_secret_fails(servers, java_probe_factory):
    with pytest.raises(ProbeError) as failed:
        java_probe_factory(servers["keyed"].listening["namesrv"], "OfficialProbeTopic", "java_probe_group",
                           AK, "wrong")
    assert failed.value.code == 16, failed.value           # ResponseCode.NO_PERMISSION
    assert "access key or signature not accepted" in str(failed.value)


def test_grpc_probe_with_wrong_secret_fails(servers, grpc_probe_factory):
    from rocketmq.grpc_protocol import Code
    from rocketmq.v5.exception import UnauthorizedException
    with pytest.raises(ProbeError) as failed:
        grpc_probe_factory(servers["keyed"].endpoint, "OfficialProbeTopic", "grpc-probe-group", AK, "wrong")
    assert isinstance(failed.value.__cause__, UnauthorizedException), repr(failed.value.__cause__)
    assert failed.value.code == Code.UNAUTHORIZED


def test_probes_time_out_while_the_server_is_stopped_then_recover(tmp_path, java_probe_factory,
                                                                   grpc_probe_factory):
    """SIGSTOP the server: a round of each probe raises ProbeTimeout after the probe's
    timeout (1 s here); SIGCONT: the next rounds complete, the stalled rounds' late answers
    and messages ignored."""
    srv = BothServer(str(tmp_path / "store")).start()
    try:
        java = java_probe_factory(srv.listening["namesrv"], "StallTopic", "java_stall_group")
        grpc = grpc_probe_factory(srv.endpoint, "StallTopic", "grpc-stall-group")
        srv.proc.send_signal(signal.SIGSTOP)
        try:
            for probe in (java, grpc):
                probe.timeout = 1.0
                t0 = time.monotonic()
                with pytest.raises(ProbeTimeout):
                    probe.round()
                assert 1.0 <= time.monotonic() - t0 < 3.0
                probe.timeout = ROUND_TIMEOUT
        finally:
            srv.proc.send_signal(signal.SIGCONT)
        for probe in (java, grpc):
            for _ in range(2):
                probe.round()
            assert len(probe.rounds) == 2
        print(f"\n[after SIGCONT] java: {latency_summary(java.rounds)}; grpc: {latency_summary(grpc.rounds)}")
    finally:
        srv.stop()
