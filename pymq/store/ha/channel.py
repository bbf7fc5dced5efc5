"""Channel: one HA connection's socket, non-blocking, every wait bounded.

Both ends of a replication connection wait on the socket with ``poll`` in short slices, so
a thread blocked on a peer notices a shutdown (``stop``) within ``SLICE_S``, and a peer
that stops reading or writing is given up after ``stall_s`` without progress (RocketMQ's
``haHousekeepingInterval``): a slave that never reads can hold one connection's writer
thread and the socket's buffers, never the store. Commit-log bytes leave from the
segment's mapping (no copy through Python; runs of frames in one call without the GIL,
``send_frames``) and arrive through ``ha_wire.receive_frames`` (the
slave's ``FrameReader``); the master reads its slaves' reports with ``recv_some``.
"""

from __future__ import annotations

import select
import socket
import threading
import time

from pymq._core import ha_wire

from .protocol import FRAME_HEADER_SIZE

#: longest single wait, so a stop is seen quickly
SLICE_S = 0.2


class ChannelClosed(Exception):
    """The peer closed, stalled past its limit, or the channel was stopped."""


class Channel:
    """A connected socket put in non-blocking mode."""

    def __init__(self, sock: socket.socket, stall_s: float, stop: threading.Event) -> None:
        self.sock = sock
        self.stall_s = stall_s
        self.stop = stop
        sock.setblocking(False)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        self.fd = sock.fileno()
        self.last_read = time.monotonic()
        self.last_write = time.monotonic()
        self.bytes_in = 0
        self.bytes_out = 0
        self._closed = False

    # -- waiting ---------------------------------------------------------------------------

    def wait(self, events: int, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for ``events`` (``select.POLLIN``/``POLLOUT``); True
        when ready. Raises ChannelClosed once stopped or closed."""
        if self.stop.is_set() or self._closed:
            raise ChannelClosed("stopped")
        p = select.poll()
        p.register(self.fd, events)
        return bool(p.poll(max(0.0, timeout_s) * 1000))

    def _wait_progress(self, events: int, since: float) -> None:
        """Wait for ``events``; ChannelClosed when nothing moved for ``stall_s`` since ``since``."""
        while True:
            left = since + self.stall_s - time.monotonic()
            if left <= 0:
                raise ChannelClosed(f"no progress for {self.stall_s:.1f} s")
            if self.wait(events, min(left, SLICE_S)):
                return

    # -- writing ---------------------------------------------------------------------------

    def send_all(self, data, more: bool = False) -> None:
        """Send every byte of ``data`` (``more``: more follows at once, MSG_MORE)."""
        view = memoryview(data)
        flags = socket.MSG_MORE if more else 0
        since = time.monotonic()
        while view:
            try:
                n = self.sock.send(view, flags)
            except (BlockingIOError, InterruptedError):
                self._wait_progress(select.POLLOUT, since)
                continue
            except OSError as e:
                raise ChannelClosed(str(e)) from e
            view = view[n:]
            since = self.last_write = time.monotonic()
            self.bytes_out += n

    def send_frames(self, mf, phy_offset: int, pos: int, count: int, batch: int) -> None:
        """Send ``count`` bytes of segment ``mf`` from ``pos`` (commit-log offset
        ``phy_offset``) as replication frames of at most ``batch`` body bytes, in one call
        without the GIL (``ha_wire.send_frames``)."""
        if self.stop.is_set() or self._closed:
            raise ChannelClosed("stopped")
        try:
            sent = ha_wire.send_frames(self.fd, mf, phy_offset, pos, count, batch, int(self.stall_s * 1000))
        except OSError as e:
            raise ChannelClosed(str(e)) from e
        self.last_write = time.monotonic()
        self.bytes_out += sent + -(-sent // batch) * FRAME_HEADER_SIZE
        if sent < count:
            raise ChannelClosed(f"no progress for {self.stall_s:.1f} s")

    # -- reading ---------------------------------------------------------------------------

    def recv_some(self, view, wait_s: float) -> int:
        """Read what is there into ``view`` (at most its length), waiting up to ``wait_s``
        for the first byte; 0 when nothing came. ChannelClosed at EOF, an error, a stop,
        or ``stall_s`` without any byte read."""
        return self._read(self.sock.recv_into, view, wait_s)

    def check_open(self) -> None:
        """ChannelClosed once stopped or closed, or after ``stall_s`` without a byte read."""
        if self.stop.is_set() or self._closed:
            raise ChannelClosed("stopped")
        if time.monotonic() - self.last_read > self.stall_s:
            raise ChannelClosed(f"nothing read for {self.stall_s:.1f} s")

    def received(self, n: int) -> None:
        """``n`` bytes were read off the socket by ``ha_wire.receive_frames``."""
        self.last_read = time.monotonic()
        self.bytes_in += n

    def _read(self, read, arg, wait_s: float) -> int:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                n = read(arg)
            except (BlockingIOError, InterruptedError):
                now = time.monotonic()
                if now - self.last_read > self.stall_s:
                    raise ChannelClosed(f"nothing read for {self.stall_s:.1f} s") from None
                if now >= deadline:
                    return 0
                self.wait(select.POLLIN, min(deadline - now, SLICE_S))
                continue
            except OSError as e:
                raise ChannelClosed(str(e)) from e
            if n == 0:
                raise ChannelClosed("peer closed the connection")
            self.last_read = time.monotonic()
            self.bytes_in += n
            return n

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.sock.close()
