"""FrameReader: the slave reads its master's frames in bursts (RocketMQ's
``HAClient.processReadEvent`` / ``dispatchReadRequest``).

The bytes are read as they come, whatever the frames' boundaries: a 12-byte header is
parsed where it lies (one cut by a read waits for the next), body bytes go on to the
replica log. One burst reads until the socket has nothing more to give at once, or
``BURST_BYTES`` were read; the slave then moves its visible end once (one record scan in
C) and reports once. The protocol does not ask for one report per frame (RocketMQ's
slave reports after each read round); a master only needs the reports to move forward,
and SYNC_MASTER puts wait for them, so a burst never waits for more bytes once the
socket is empty.

Two ways in, the same frames out:

* ``PipeFrameReader`` (Linux, the default): ``splice`` moves the socket's bytes into a
  pipe, headers are read out of it (12 bytes each) and bodies spliced on into the
  segment file: the body is copied once, by the kernel, from the socket's pages into the
  page cache.
* ``FrameReader``: ``recv`` into one reused buffer (``BUFFER_SIZE``), bodies ``pwrite``
  from it (two copies; where ``os.splice`` is missing).

Per read a handful of Python operations; per frame a header unpack.
"""

from __future__ import annotations

import fcntl
import os

from .channel import Channel
from .protocol import FRAME_HEADER, FRAME_HEADER_SIZE
from .replica_log import ReplicaLog

#: bytes one read may take (the pipe's or the buffer's size)
BUFFER_SIZE = 1 << 20
#: bytes one burst reads before the slave applies and reports what it has
BURST_BYTES = 8 << 20
#: fcntl's F_SETPIPE_SZ (Linux)
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


class FrameReader:
    """Parses the master's byte stream into frames and hands their bodies to the log
    (``recv`` into a buffer, ``pwrite`` from it)."""

    def __init__(self, replica: ReplicaLog, buffer_size: int = 0, burst_bytes: int = 0) -> None:
        self.replica = replica
        self.buffer_size = buffer_size or BUFFER_SIZE
        self.burst_bytes = burst_bytes or BURST_BYTES
        self.body_left = 0            # bytes of the current frame's body still to come
        self.frames = 0
        self.master_offset_seen = -1  # the newest frame's end (or a heartbeat's offset)
        self.buf = bytearray(self.buffer_size)
        self.view = memoryview(self.buf)
        self.fill = 0                 # bytes of a cut header kept at the buffer's start

    def read_burst(self, channel: Channel, wait_s: float) -> int:
        """Read what the master sent: wait up to ``wait_s`` for the first byte, then go on
        without waiting while bytes are there, up to about ``burst_bytes``. Returns the
        bytes read (0: nothing came)."""
        limit = self.burst_bytes
        total = 0
        n = self._read(channel, wait_s)
        while n:
            total += n
            if total >= limit:
                break
            n = self._read(channel, 0.0)
        return total

    def close(self) -> None:
        """Release what the reader holds (nothing for the buffer)."""

    def _header(self, data, pos: int) -> None:
        phy, size = FRAME_HEADER.unpack_from(data, pos)
        self.replica.check_frame(phy, size)
        self.body_left = size
        self.frames += 1
        if phy + size > self.master_offset_seen:
            self.master_offset_seen = phy + size

    def _read(self, channel: Channel, wait_s: float) -> int:
        """One recv into the buffer, then its frames: headers checked, bodies written."""
        n = channel.recv_some(self.view[self.fill:], wait_s)
        if not n:
            return 0
        replica, view = self.replica, self.view
        end = self.fill + n
        pos = 0
        while pos < end:
            left = self.body_left
            if left:
                k = left if left <= end - pos else end - pos
                replica.write(view[pos:pos + k])
                self.body_left = left - k
                pos += k
            elif end - pos >= FRAME_HEADER_SIZE:
                self._header(self.buf, pos)
                pos += FRAME_HEADER_SIZE
            else:
                break
        rest = end - pos
        if rest:
            self.buf[:rest] = self.view[pos:end]
        self.fill = rest
        return n


class PipeFrameReader(FrameReader):
    """As ``FrameReader``, with the bytes moved socket -> pipe -> segment file by ``splice``."""

    def __init__(self, replica: ReplicaLog, buffer_size: int = 0, burst_bytes: int = 0) -> None:
        super().__init__(replica, 1, burst_bytes)
        self.buffer_size = buffer_size or BUFFER_SIZE
        self.pipe_r, self.pipe_w = os.pipe()
        try:
            self.buffer_size = fcntl.fcntl(self.pipe_w, F_SETPIPE_SZ, self.buffer_size)
        except OSError:                   # above /proc/sys/fs/pipe-max-size: what the pipe has
            self.buffer_size = fcntl.fcntl(self.pipe_w, F_SETPIPE_SZ, 1 << 16)
        self.header = bytearray(FRAME_HEADER_SIZE)
        self.in_pipe = 0                  # bytes in the pipe (fewer than a header between reads)

    def close(self) -> None:
        for fd in (self.pipe_r, self.pipe_w):
            if fd >= 0:
                os.close(fd)
        self.pipe_r = self.pipe_w = -1

    def _read(self, channel: Channel, wait_s: float) -> int:
        n = channel.splice_some(self.pipe_w, self.buffer_size - self.in_pipe, wait_s)
        if not n:
            return 0
        replica = self.replica
        have = self.in_pipe + n
        while have:
            left = self.body_left
            if left:
                k = left if left <= have else have
                replica.splice_from(self.pipe_r, k)
                self.body_left = left - k
                have -= k
                continue
            got = self.fill
            if got + have < FRAME_HEADER_SIZE:
                break
            data = os.read(self.pipe_r, FRAME_HEADER_SIZE - got)
            have -= len(data)
            self.header[got:got + len(data)] = data
            self.fill = got = got + len(data)
            if got == FRAME_HEADER_SIZE:
                self.fill = 0
                self._header(self.header, 0)
        self.in_pipe = have
        return n


def frame_reader(replica: ReplicaLog) -> FrameReader:
    """The reader this platform does best: ``PipeFrameReader`` where ``os.splice`` exists."""
    if hasattr(os, "splice"):
        return PipeFrameReader(replica)
    return FrameReader(replica)
