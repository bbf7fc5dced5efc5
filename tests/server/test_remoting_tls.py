"""``pymq serve --remoting-tls``: both remoting ports speak TLS only (RocketMQ's
``tls.server.mode=enforcing``). A TLS client sends, pulls and routes through them; a large
frame is admitted over TLS as in plaintext; a plaintext client and a stalled handshake are
closed."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import time

import pytest

from .hostile_support import (BothServer, GET_ROUTEINFO_BY_TOPIC, PULL_MESSAGE, SEND_MESSAGE_V2, frame,
                              read_frame)

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl to make a certificate")


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"], check=True, capture_output=True)
    s = BothServer(str(d / "store"), "--port", "off", "--tls-cert", str(cert), "--tls-key", str(key),
                   "--remoting-tls", "--frame-timeout", "2").start()
    s.cert = cert
    yield s
    s.stop()


def _tls(srv, role: str) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=str(srv.cert))
    raw = socket.create_connection(srv.address(role), timeout=5)
    return context.wrap_socket(raw, server_hostname="127.0.0.1")


def test_send_pull_and_route_over_tls(tls_server):
    body = b"over-tls" * 300_000                     # 2.4 MiB: admitted before it is read
    with _tls(tls_server, "broker") as s:
        s.sendall(frame(SEND_MESSAGE_V2, {"a": "PG", "b": "TlsTopic", "c": "TBW102", "d": 1, "e": 0, "f": 0,
                                          "g": int(time.time() * 1000), "h": 0, "i": ""}, body))
        head, _ = read_frame(s)
        assert head["code"] == 0, head
        offset = int(head["extFields"]["queueOffset"])
        s.sendall(frame(PULL_MESSAGE, {"consumerGroup": "G", "topic": "TlsTopic", "queueId": 0, "queueOffset": offset,
                                       "maxMsgNums": 1, "sysFlag": 2, "commitOffset": 0, "suspendTimeoutMillis": 5000,
                                       "subVersion": 0}))
        head, records = read_frame(s)
        assert head["code"] == 0 and body in records, head
    with _tls(tls_server, "namesrv") as s:
        s.sendall(frame(GET_ROUTEINFO_BY_TOPIC, {"topic": "TlsTopic"}))
        head, route = read_frame(s)
        assert head["code"] == 0 and b"brokerAddrs" in route, head


def _closed_within(sock: socket.socket, seconds: float) -> float:
    t0 = time.monotonic()
    sock.settimeout(seconds)
    try:
        while sock.recv(65536):
            pass
    except socket.timeout:
        return float("inf")
    except OSError:
        pass
    return time.monotonic() - t0


def test_plaintext_and_stalled_handshakes_are_closed(tls_server):
    with socket.create_connection(tls_server.address("broker"), timeout=5) as s:
        s.sendall(frame(30, {"topic": "TlsTopic", "queueId": 0}))        # a plaintext request
        assert _closed_within(s, 3) < 1.0
    with socket.create_connection(tls_server.address("broker"), timeout=5) as s:
        s.sendall(b"\x16\x03\x01\x02\x00")           # a ClientHello begun, then silence
        assert _closed_within(s, 5) < 3.0             # the frame deadline (2 s) bounds a handshake


def test_the_official_java_client_over_tls(tls_server, java_probe_factory):
    """RocketMQ 4.9.7's client with ``-Dtls.enable=true`` (it then speaks TLS to the name
    server and the broker, trusting the server's certificate as its default does) sends and
    pulls back; without it, it cannot reach the TLS-only ports."""
    from .official_probes import ProbeError
    probe = java_probe_factory(tls_server.listening["namesrv"], "JavaTlsTopic", "java_tls_group",
                               jvm_options=("-Dtls.enable=true",))
    assert all(probe.round() < 1.0 for _ in range(3))
    with pytest.raises(ProbeError):
        java_probe_factory(tls_server.listening["namesrv"], "JavaTlsTopic", "java_plain_group", start_timeout=20)
