"""Channel: one HA connection's socket, non-blocking, every wait bounded.

Both ends of a replication connection wait on the socket with ``poll`` in short slices, so
a thread blocked on a peer notices a shutdown (``stop``) within ``SLICE_S``, and a peer
that stops reading or writing is given up after ``stall_s`` without progress (RocketMQ's
``haHousekeepingInterval``): a slave that never reads can hold one connection's writer
thread and the socket's buffers, never the store. Commit-log bytes leave through
``sendfile`` (page cache to socket, no copy through Python; runs of frames in one call
without the GIL, ``send_frames``) and arrive through ``splice`` into a pipe
(``splice_some``) or ``recv_into`` a buffer (``recv_some``).
"""

from __future__ import annotations

import os
import select
import socket
import threading
import time

from pymq._core import ha_wire

from .protocol import FRAME_HEADER_SIZE

#: longest single wait, so a stop is seen quickly
SLICE_S = 0.2
#: splice(2)'s SPLICE_F_MOVE (a hint: move pages rather than copy them)
SPLICE_F_MOVE = getattr(os, "SPLICE_F_MOVE", 1)


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

    def send_file(self, fd: int, offset: int, count: int) -> None:
        """Send ``count`` bytes of file ``fd`` from ``offset`` (sendfile: no user-space copy)."""
        since = time.monotonic()
        while count > 0:
            try:
                n = os.sendfile(self.fd, fd, offset, count)
            except (BlockingIOError, InterruptedError):
                self._wait_progress(select.POLLOUT, since)
                continue
            except OSError as e:
                raise ChannelClosed(str(e)) from e
            if n == 0:
                raise ChannelClosed("sendfile sent nothing (file shorter than asked)")
            offset += n
            count -= n
            since = self.last_write = time.monotonic()
            self.bytes_out += n

    def send_frames(self, fd: int, phy_offset: int, pos: int, count: int, batch: int) -> None:
        """Send ``count`` bytes of file ``fd`` from ``pos`` (commit-log offset
        ``phy_offset``) as replication frames of at most ``batch`` body bytes, in one call
        without the GIL (``ha_wire.send_frames``)."""
        if self.stop.is_set() or self._closed:
            raise ChannelClosed("stopped")
        try:
            sent = ha_wire.send_frames(self.fd, fd, phy_offset, pos, count, batch, int(self.stall_s * 1000))
        except EOFError as e:
            raise ChannelClosed(f"sendfile sent nothing ({e})") from e
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

    def splice_some(self, pipe_w: int, count: int, wait_s: float) -> int:
        """As ``recv_some``, but the bytes (at most ``count``) move into the pipe
        ``pipe_w`` without a copy through user space (``os.splice``, Linux)."""
        return self._read(lambda n: os.splice(self.fd, pipe_w, n, flags=SPLICE_F_MOVE), count, wait_s)

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

    def recv_exact(self, view, wait_s: float = SLICE_S) -> None:
        """Fill all of ``view`` (``stall_s`` bounds each wait for more)."""
        view = memoryview(view)
        while view:
            n = self.recv_some(view, wait_s)
            view = view[n:]

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.sock.close()
