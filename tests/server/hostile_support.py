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



# -- gRPC attacks: signed headers, the server's memory, a raw HTTP/2 client ------------------------

def signed_metadata(ak: str, sk: str, date_time: str | None = None, client_id: str = "hostile") -> list:
    """The headers of a call signed as the official clients sign (``date_time``: now, UTC,
    unless given)."""
    from pymq.server.grpc.auth import sign
    dt = date_time or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return [("x-mq-client-id", client_id), ("x-mq-date-time", dt),
            ("authorization", f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, "
                              f"Signature={sign(sk, dt)}")]


def memory_kib(pid: int) -> dict:
    """``{"VmRSS": KiB, "VmHWM": KiB}`` of a process, from /proc/PID/status."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
    return out


H2_DATA, H2_HEADERS, H2_RST_STREAM, H2_SETTINGS, H2_PING, H2_GOAWAY = 0, 1, 3, 4, 6, 7
H2_END_STREAM, H2_ACK, H2_END_HEADERS = 0x1, 0x1, 0x4
H2_CLIENT_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def h2_frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    """One HTTP/2 frame."""
    return len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream.to_bytes(4, "big") + payload


def _hpack_string(text: str) -> bytes:
    raw = text.encode()
    n, out = len(raw), bytearray()
    if n < 127:
        out.append(n)
    else:                               # 7-bit prefix integer, continued
        out.append(127)
        n -= 127
        while n >= 128:
            out.append(n % 128 + 128)
            n //= 128
        out.append(n)
    return bytes(out) + raw


def h2_headers_block(headers: list) -> bytes:
    """An HPACK block of literal fields without indexing (no Huffman, no table)."""
    return b"".join(b"\x00" + _hpack_string(k) + _hpack_string(v) for k, v in headers)


class RawGrpcCall:
    """A gRPC call spoken by hand over HTTP/2 (stream 1 of its own connection), to send
    what no gRPC library sends: headers and part of a message, then nothing."""

    def __init__(self, addr: tuple[str, int], method: str, metadata: list = ()) -> None:
        self.sock = socket.create_connection(addr, timeout=5)
        headers = [(":method", "POST"), (":scheme", "http"), (":path", f"/apache.rocketmq.v2.MessagingService/{method}"),
                   (":authority", f"{addr[0]}:{addr[1]}"), ("content-type", "application/grpc"), ("te", "trailers"),
                   *metadata]
        self.sock.sendall(H2_CLIENT_PREFACE + h2_frame(H2_SETTINGS, 0, 0)
                          + h2_frame(H2_HEADERS, H2_END_HEADERS, 1, h2_headers_block(headers)))
        self._buf = b""

    def send_partial(self, message_length: int, sent: bytes) -> None:
        """The 5-byte gRPC prefix announcing ``message_length`` bytes, then ``sent`` of them
        (in DATA frames of at most 16 KiB, HTTP/2's default frame size)."""
        data = b"\x00" + message_length.to_bytes(4, "big") + sent
        self.sock.sendall(b"".join(h2_frame(H2_DATA, 0, 1, data[i:i + 16384]) for i in range(0, len(data), 16384)))

    def wait_end(self, timeout: float) -> str | None:
        """Read (answering SETTINGS and PING) until the server ends stream 1 (``"trailers"``,
        ``"rst"``), the connection (``"goaway"``, ``"closed"``), or ``timeout`` passes (None)."""
        deadline = time.monotonic() + timeout
        while True:
            while len(self._buf) >= 9 and len(self._buf) >= 9 + int.from_bytes(self._buf[:3], "big"):
                n = int.from_bytes(self._buf[:3], "big")
                kind, flags, stream = self._buf[3], self._buf[4], int.from_bytes(self._buf[5:9], "big") & 0x7FFFFFFF
                payload, self._buf = self._buf[9:9 + n], self._buf[9 + n:]
                if kind == H2_SETTINGS and not flags & H2_ACK:
                    self.sock.sendall(h2_frame(H2_SETTINGS, H2_ACK, 0))
                elif kind == H2_PING and not flags & H2_ACK:
                    self.sock.sendall(h2_frame(H2_PING, H2_ACK, 0, payload))
                elif kind == H2_HEADERS and stream == 1 and flags & H2_END_STREAM:
                    return "trailers"
                elif kind == H2_RST_STREAM and stream == 1:
                    return "rst"
                elif kind == H2_GOAWAY:
                    return "goaway"
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                return None
            except OSError:
                return "closed"
            if not chunk:
                return "closed"
            self._buf += chunk

    def close(self) -> None:
        self.sock.close()
