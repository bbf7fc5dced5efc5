"""Raw RocketMQ remoting frames over a socket (JSON headers), for tests that must see the
wire itself: what a server answers, and what it leaves unanswered."""

from __future__ import annotations

import json
import socket
import struct


def frame(header: dict, body: bytes = b"", serialize_type: int = 0) -> bytes:
    """One frame: length word, header word (serialize type, header length), header, body."""
    h = json.dumps(header).encode()
    return struct.pack(">ii", 4 + len(h) + len(body), (serialize_type << 24) | len(h)) + h + body


def request(code: int, ext: dict, opaque: int = 1, body: bytes = b"") -> bytes:
    """A request frame with a JSON header."""
    return frame({"code": code, "language": "PYTHON", "version": 1, "opaque": opaque, "flag": 0,
                  "extFields": ext}, body)


class FrameReader:
    """Frames from a socket, keeping what one recv brought beyond a frame for the next."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.data = b""

    def _need(self, n: int, timeout: float) -> bool:
        self.sock.settimeout(timeout)
        while len(self.data) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                return False
            self.data += chunk
        return True

    def frame(self, timeout: float = 5.0):
        """The next frame's (header dict, body), or None when the server closed; raises
        ``socket.timeout`` when none came within ``timeout`` seconds."""
        if not self._need(4, timeout):
            return None
        total = struct.unpack(">i", self.data[:4])[0]
        if not self._need(4 + total, timeout):
            return None
        raw, self.data = self.data[:4 + total], self.data[4 + total:]
        hlen = struct.unpack(">i", raw[4:8])[0] & 0xFFFFFF
        return json.loads(raw[8:8 + hlen]), raw[8 + hlen:]


def connect(addr: str) -> socket.socket:
    """A connection to ``host:port``."""
    host, port = addr.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=5)


def answers(addr: str, requests: list, quiet_s: float = 1.5) -> dict:
    """Sends ``requests`` ((code, ext) pairs, opaque = 1, 2, ...) on one connection and
    returns the headers of the responses that came, by opaque, once none came for
    ``quiet_s`` seconds."""
    got = {}
    with connect(addr) as s:
        for i, (code, ext) in enumerate(requests, 1):
            s.sendall(request(code, ext, opaque=i))
        reader = FrameReader(s)
        while True:
            try:
                got_frame = reader.frame(timeout=quiet_s)
            except socket.timeout:
                return got
            if got_frame is None:
                return got
            head, _body = got_frame
            got[head["opaque"]] = head


def call(addr: str, code: int, ext: dict, body: bytes = b"") -> tuple[dict, bytes]:
    """One request on a new connection: its response's header and body."""
    with connect(addr) as s:
        s.sendall(request(code, {k: str(v) for k, v in ext.items()}, opaque=1, body=body))
        got = FrameReader(s).frame()
        assert got is not None, "the server closed the connection"
        return got
