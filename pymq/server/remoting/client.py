"""A blocking remoting client for one request at a time: what a broker asks another broker
(a slave its master's tables, :mod:`.slave_sync`). JSON headers, as RocketMQ's Java
``NettyRemotingClient`` writes them; one connection per address, reopened after a failure.
"""

from __future__ import annotations

import socket
import struct
from typing import Optional

from .codec import MAX_FRAME, RemotingCommand, decode_frame, encode

_LEN = struct.Struct(">i")


class RemotingClientError(OSError):
    """The peer could not be reached, closed the connection, or answered nonsense."""


class RemotingClient:
    """``invoke(addr, code)`` sends a request and returns the response
    :class:`~.codec.RemotingCommand` (``code``, ``remark``, ``ext_fields``, ``body``)."""

    def __init__(self, timeout_s: float = 3.0) -> None:
        self.timeout_s = timeout_s          # RocketMQ's BrokerOuterAPI waits 3 s
        self._socks: dict[str, socket.socket] = {}
        self._opaque = 0

    def invoke(self, addr: str, code: int, ext_fields: Optional[dict] = None, body: bytes = b"") -> RemotingCommand:
        """Send request ``code`` to ``host:port``; the response. Raises
        :class:`RemotingClientError` (the connection is dropped, the next call reconnects)."""
        self._opaque += 1
        request = RemotingCommand(code, self._opaque, 0, None, dict(ext_fields or {}), body)
        sock = self._connection(addr)
        try:
            sock.sendall(encode(request))
            while True:
                response = self._read(sock)
                if response.is_response and response.opaque == request.opaque:
                    return response
        except (OSError, ValueError) as e:
            self._drop(addr)
            if isinstance(e, RemotingClientError):
                raise
            raise RemotingClientError(f"{addr}: {e}") from None

    def _connection(self, addr: str) -> socket.socket:
        sock = self._socks.get(addr)
        if sock is None:
            host, _, port = addr.rpartition(":")
            try:
                sock = socket.create_connection((host.strip("[]"), int(port)), timeout=self.timeout_s)
            except (OSError, ValueError) as e:
                raise RemotingClientError(f"cannot connect to {addr}: {e}") from None
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._socks[addr] = sock
        return sock

    def _recv(self, sock: socket.socket, n: int) -> bytes:
        chunks, got = [], 0
        while got < n:
            chunk = sock.recv(min(n - got, 1 << 20))
            if not chunk:
                raise RemotingClientError("the peer closed the connection")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def _read(self, sock: socket.socket) -> RemotingCommand:
        total = _LEN.unpack(self._recv(sock, 4))[0]
        if not 4 <= total <= MAX_FRAME:
            raise RemotingClientError(f"frame length {total} out of range")
        return decode_frame(memoryview(self._recv(sock, total)))

    def _drop(self, addr: str) -> None:
        sock = self._socks.pop(addr, None)
        if sock is not None:
            sock.close()

    def close(self) -> None:
        """Close every connection."""
        for addr in list(self._socks):
            self._drop(addr)
