"""Helpers of the hostile-client tests: a ``pymq serve`` with gRPC and remoting on free
ports, raw remoting frames, and probes (a send and a receive on each protocol, timed) made
of raw stubs and frames; the probes made of the official clients are in official_probes.py."""

from __future__ import annotations

import itertools
import json
import socket
import struct
import time

import grpc

from serve_process import ServeProcess, free_port  # noqa: F401  (tests/ is on sys.path)

_ids = itertools.count(1)

# remoting request codes (pymq.server.remoting.codes)
PULL_MESSAGE, UPDATE_CONSUMER_OFFSET, UPDATE_AND_CREATE_TOPIC, HEART_BEAT = 11, 15, 17, 34
GET_ROUTEINFO_BY_TOPIC, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, SEND_MESSAGE_V2 = 105, 200, 310


class BothServer(ServeProcess):
    """``pymq serve`` with gRPC, name server and broker on free loopback ports."""

    def __init__(self, store: str, *extra: str) -> None:
        self.port = free_port()
        super().__init__(store, "--port", str(self.port), "--namesrv-port", "0", "--broker-port", "0", *extra)

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def address(self, role: str) -> tuple[str, int]:
        """``(host, port)`` of ``grpc``, ``namesrv`` or ``broker``."""
        if role == "grpc":
            return "127.0.0.1", self.port
        host, port = self.listening[role].rsplit(":", 1)
        return host, int(port)


# -- remoting frames ----------------------------------------------------------------------------

def frame(code: int, ext: dict, body: bytes = b"", opaque: int | None = None) -> bytes:
    """A JSON-header request frame."""
    header = json.dumps({"code": code, "language": "JAVA", "version": 401, "flag": 0,
                         "opaque": next(_ids) if opaque is None else opaque, "extFields": ext}).encode()
    return struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body


def read_frame(sock: socket.socket, timeout: float = 5.0) -> tuple[dict, bytes]:
    """The next response frame's (header, body)."""
    sock.settimeout(timeout)

    def need(n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed by the server")
            out += chunk
        return out
    total = struct.unpack(">i", need(4))[0]
    raw = need(total)
    hlen = struct.unpack(">i", raw[:4])[0] & 0xFFFFFF
    return json.loads(raw[4:4 + hlen]), raw[4 + hlen:]


def call(addr: tuple[str, int], code: int, ext: dict, body: bytes = b"") -> tuple[dict, bytes]:
    """One request on a fresh connection; the response."""
    with socket.create_connection(addr, timeout=5) as s:
        s.sendall(frame(code, ext, body))
        return read_frame(s)


def heartbeat_body(consumer_group: str) -> bytes:
    return json.dumps({"clientID": "hostile@1", "producerDataSet": [], "consumerDataSet": [
        {"groupName": consumer_group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
         "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "subscriptionDataSet": [], "unitMode": False}]}).encode()


# -- probes ---------------------------------------------------------------------------------------

def grpc_send(stub, topic: str, body: bytes = b"probe", **system) -> object:
    """SendMessage of one message through a raw stub; the response."""
    from rocketmq.grpc_protocol import service_pb2 as svc
    req = svc.SendMessageRequest()
    m = req.messages.add(body=body)
    m.topic.name = topic
    m.system_properties.message_id = f"ID{next(_ids)}"
    for k, v in system.items():
        setattr(m.system_properties, k, v)
    return stub.SendMessage(req, metadata=[("x-mq-client-id", "hostile")], timeout=5)


def grpc_probe(endpoint: str, topic: str = "ProbeTopic") -> float:
    """Send one message and receive it (raw stubs, a fresh channel); the seconds taken."""
    from rocketmq.grpc_protocol import definition_pb2 as pb, service_pb2 as svc, MessagingServiceStub
    t0 = time.monotonic()
    body = b"probe-%d" % next(_ids)
    with grpc.insecure_channel(endpoint) as ch:
        stub = MessagingServiceStub(ch)
        sent = grpc_send(stub, topic, body)
        assert sent.status.code == pb.Code.OK, sent
        req = svc.ReceiveMessageRequest(batch_size=32)
        req.group.name = "probe-group"
        req.message_queue.topic.name = topic
        req.invisible_duration.seconds = 30
        req.long_polling_timeout.seconds = 5
        got = []
        deadline = time.monotonic() + 10
        while body not in got and time.monotonic() < deadline:
            items = list(stub.ReceiveMessage(req, metadata=[("x-mq-client-id", "hostile")], timeout=10))
            got += [x.message.body for x in items if x.HasField("message")]
        assert body in got, got
    return time.monotonic() - t0


def remoting_probe(broker: tuple[str, int], topic: str = "ProbeTopic4") -> float:
    """SEND_MESSAGE_V2 of one message, then PULL_MESSAGE of its offset (suspended until it
    is dispatched, as clients pull); the seconds taken."""
    t0 = time.monotonic()
    body = b"probe4-%d" % next(_ids)
    head, _ = call(broker, SEND_MESSAGE_V2, {"a": "PG", "b": topic, "c": "TBW102", "d": 4, "e": 0, "f": 0,
                                             "g": int(time.time() * 1000), "h": 0, "i": ""}, body)
    assert head["code"] == 0, head
    offset = int(head["extFields"]["queueOffset"])
    head, records = call(broker, PULL_MESSAGE, {"consumerGroup": "probe-group", "topic": topic, "queueId": 0,
                                                "queueOffset": offset, "maxMsgNums": 1, "sysFlag": 2,
                                                "commitOffset": 0, "suspendTimeoutMillis": 5000, "subVersion": 0})
    assert head["code"] == 0 and body in records, head
    return time.monotonic() - t0

