"""``pymq serve`` as a server: access-key authentication, TLS, garbage on the socket, bad
consumer requests, clean SIGTERM shutdown."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time

import grpc
import pytest

from .conftest import make_message, receive_all

AK, SK = "test-ak", "test-secret"


def _config(endpoint, ak="", sk=""):
    from rocketmq import ClientConfiguration, Credentials
    return ClientConfiguration(endpoint, Credentials(ak, sk), request_timeout=3)


def test_auth_refuses_unsigned_and_wrong_secret_accepts_right_one(server_factory):
    from rocketmq.grpc_protocol import definition_pb2 as pb, service_pb2 as svc, MessagingServiceStub
    srv = server_factory("--access-key", AK, "--secret-key", SK)
    from rocketmq import Producer
    with grpc.insecure_channel(srv.endpoint) as ch:          # no credentials at all
        req = svc.QueryRouteRequest()
        req.topic.name = "AuthTopic"
        resp = MessagingServiceStub(ch).QueryRoute(req, timeout=5)
        assert resp.status.code == pb.Code.UNAUTHORIZED
    bad = Producer(_config(srv.endpoint, AK, "wrong"), ("AuthTopic",))
    bad.startup()                       # the client logs the failed route and goes on
    try:
        with pytest.raises(Exception):
            bad.send(make_message("AuthTopic", b"no"))
    finally:
        bad.shutdown()
    good = Producer(_config(srv.endpoint, AK, SK), ("AuthTopic",))
    good.startup()
    try:
        assert good.send(make_message("AuthTopic", b"yes")).message_id
    finally:
        good.shutdown()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl to make a certificate")
def test_tls(server_factory, tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"], check=True, capture_output=True)
    srv = server_factory("--tls-cert", str(cert), "--tls-key", str(key))
    from rocketmq.grpc_protocol import definition_pb2 as pb, service_pb2 as svc, MessagingServiceStub
    creds = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
    with grpc.secure_channel(srv.endpoint, creds) as ch:
        req = svc.QueryRouteRequest()
        req.topic.name = "TlsTopic"
        assert MessagingServiceStub(ch).QueryRoute(req, timeout=5).status.code == pb.Code.OK
    with grpc.insecure_channel(srv.endpoint) as ch:          # plaintext is not served
        with pytest.raises(grpc.RpcError):
            MessagingServiceStub(ch).QueryRoute(req, timeout=3)


def test_garbage_on_the_socket_does_not_hurt(server, producer_factory, simple_consumer_factory):
    p = producer_factory(["GarbageTopic"])
    p.send(make_message("GarbageTopic", b"before"))
    payloads = [b"\x00" * 64, os.urandom(4096), b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
                b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + os.urandom(512), b"\x16\x03\x01\x02\x00" + os.urandom(300)]
    for data in payloads * 4:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
            try:
                s.sendall(data)
                s.settimeout(0.5)
                s.recv(1024)
            except OSError:
                pass
    assert server.alive()
    p.send(make_message("GarbageTopic", b"after"))
    c = simple_consumer_factory("g-garbage", "GarbageTopic")
    assert sorted(m.body for m in receive_all(c, 2)) == [b"after", b"before"]


def test_bad_consumer_requests_get_codes(server):
    from rocketmq.grpc_protocol import definition_pb2 as pb, service_pb2 as svc, MessagingServiceStub
    md = [("x-mq-client-id", "raw-consumer")]
    with grpc.insecure_channel(server.endpoint) as ch:
        stub = MessagingServiceStub(ch)
        ack = svc.AckMessageRequest()
        ack.group.name, ack.topic.name = "g", "T"
        ack.entries.add(message_id="x", receipt_handle="garbage")
        assert stub.AckMessage(ack, metadata=md, timeout=5).status.code == pb.Code.INVALID_RECEIPT_HANDLE
        chg = svc.ChangeInvisibleDurationRequest(receipt_handle="1 0 0 0 1 Tg")
        chg.group.name, chg.topic.name = "g", "T"
        chg.invisible_duration.seconds = 5
        assert stub.ChangeInvisibleDuration(chg, metadata=md, timeout=5).status.code == pb.Code.INVALID_RECEIPT_HANDLE
        rcv = svc.ReceiveMessageRequest(batch_size=1)
        rcv.group.name = "bad group!"
        rcv.message_queue.topic.name = "T"
        rcv.invisible_duration.seconds = 10
        items = list(stub.ReceiveMessage(rcv, metadata=md, timeout=10))
        assert items[0].status.code == pb.Code.ILLEGAL_CONSUMER_GROUP
        rcv.group.name = "g"
        rcv.invisible_duration.seconds = 0
        items = list(stub.ReceiveMessage(rcv, metadata=md, timeout=10))
        assert items[0].status.code == pb.Code.ILLEGAL_INVISIBLE_TIME
        hb = svc.HeartbeatRequest(client_type=pb.ClientType.PRODUCER)
        assert stub.Heartbeat(hb, timeout=5).status.code == pb.Code.CLIENT_ID_REQUIRED


def test_sigterm_shuts_down_cleanly(server_factory, tmp_path):
    srv = server_factory("--status-interval", "0.5")
    from rocketmq import Producer
    p = Producer(_config(srv.endpoint), ("TermTopic",))
    p.startup()
    ids = [p.send(make_message("TermTopic", b"x%d" % i)).message_id for i in range(20)]
    p.shutdown()
    time.sleep(1.2)
    code = srv.stop(signal.SIGTERM)
    out = "".join(srv.output)
    assert code == 0, out
    assert "sent=20" in out                          # the status line counted them
    assert "stopped (store flushed, checkpoint written)" in out
    assert not os.path.exists(os.path.join(srv.store, "abort"))     # a clean exit
    # the store reopens with every message
    import pymq
    with pymq.MessageStore(srv.store, read_only=True) as s:
        found = [m for qid in s.get_topics()["TermTopic"]
                 for m in s.get_message("g", "TermTopic", qid, 0, 64).messages]
        assert sorted(m.properties["UNIQ_KEY"] for m in found) == sorted(ids)


def test_max_topics_caps_what_sends_create(server_factory):
    """With --max-topics 2, a third new topic is refused (route and send: TOPIC_NOT_FOUND,
    saying why), writes no topic entry and no files; the first two keep working."""
    from rocketmq.grpc_protocol import definition_pb2 as pb, service_pb2 as svc, MessagingServiceStub
    srv = server_factory("--max-topics", "2")

    def send(stub, topic, n):
        req = svc.SendMessageRequest()
        m = req.messages.add(body=b"x")
        m.topic.name = topic
        m.system_properties.message_id = f"ID{topic}N{n}"
        return stub.SendMessage(req, metadata=[("x-mq-client-id", "raw")], timeout=5).status

    with grpc.insecure_channel(srv.endpoint) as ch:
        stub = MessagingServiceStub(ch)
        assert [send(stub, t, 0).code for t in ("Cap1", "Cap2")] == [pb.Code.OK, pb.Code.OK]
        refused = send(stub, "Cap3", 0)
        assert refused.code == pb.Code.TOPIC_NOT_FOUND and "max_topics" in refused.message, refused
        route = svc.QueryRouteRequest()
        route.topic.name = "Cap3"
        assert stub.QueryRoute(route, timeout=5).status.code == pb.Code.TOPIC_NOT_FOUND
        assert send(stub, "Cap1", 1).code == pb.Code.OK
    deadline = time.monotonic() + 5         # changes within 200 ms of a write go with the next
    while True:
        with open(os.path.join(srv.store, "config", "topics.json")) as f:
            topics = json.load(f)["topicConfigTable"]
        if {"Cap1", "Cap2"} <= set(topics) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert {"Cap1", "Cap2"} <= set(topics) and "Cap3" not in topics
    assert not os.path.exists(os.path.join(srv.store, "consumequeue", "Cap3"))


def test_no_auto_create_topic(server_factory):
    """Routes and sends of an unknown topic are TOPIC_NOT_FOUND with the message of RocketMQ
    5's proxy (rocketmq-clients' Node.js test 'should startup fail when topic not exists'
    matches its "CODE: 17  DESC: No topic route info ..." part)."""
    from rocketmq.grpc_protocol import definition_pb2 as pb, service_pb2 as svc, MessagingServiceStub
    srv = server_factory("--no-auto-create-topic")
    proxy_says = ("CODE: 17  DESC: No topic route info in name server for the topic: Unknown\n"
                  "For more information, please visit the url, https://rocketmq.apache.org/docs/bestPractice/06FAQ")
    with grpc.insecure_channel(srv.endpoint) as ch:
        stub = MessagingServiceStub(ch)
        route = svc.QueryRouteRequest()
        route.topic.name = "Unknown"
        status = stub.QueryRoute(route, timeout=5).status
        assert (status.code, status.message) == (pb.Code.TOPIC_NOT_FOUND, proxy_says)
        req = svc.SendMessageRequest()
        m = req.messages.add(body=b"x")
        m.topic.name = "Unknown"
        m.system_properties.message_id = "ID1"
        resp = stub.SendMessage(req, metadata=[("x-mq-client-id", "raw")], timeout=5)
        assert (resp.status.code, resp.status.message) == (pb.Code.TOPIC_NOT_FOUND, proxy_says)
