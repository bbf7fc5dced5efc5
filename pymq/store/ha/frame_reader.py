"""FrameReader: the slave reads its master's frames in bursts (RocketMQ's
``HAClient.processReadEvent`` / ``dispatchReadRequest``).

The socket is read into one reused buffer (``BUFFER_SIZE``), as many bytes as are there
per ``recv``, whatever the frames' boundaries: a 12-byte header is parsed where it lies
(a header cut by the buffer's end waits for the next read), and body bytes go on to the
replica log (``ReplicaLog.write``) in as few ``pwrite`` calls as the buffer allows. One
burst reads until the socket has nothing more to give at once, or ``BURST_BYTES`` were
read; the slave then moves its visible end once (one record scan in C) and reports once.
The protocol does not ask for one report per frame; RocketMQ's slave reports after each
read round, and a master only needs the reports to move forward (SYNC_MASTER puts wait
for them, so a burst never waits for more bytes once the socket is empty).

Nothing here allocates per byte: per ``recv`` a view of the buffer, per frame a header
unpack and a view of its body.
"""

from __future__ import annotations

from .channel import Channel
from .protocol import FRAME_HEADER, FRAME_HEADER_SIZE
from .replica_log import ReplicaLog

#: bytes one recv may take (the socket's receive buffer holds a few MiB on loopback)
BUFFER_SIZE = 1 << 20
#: bytes one burst reads before the slave applies and reports what it has
BURST_BYTES = 8 << 20


class FrameReader:
    """Parses the master's byte stream into frames and hands their bodies to the log."""

    def __init__(self, replica: ReplicaLog, buffer_size: int = 0, burst_bytes: int = 0) -> None:
        self.replica = replica
        self.buf = bytearray(buffer_size or BUFFER_SIZE)
        self.burst_bytes = burst_bytes or BURST_BYTES
        self.view = memoryview(self.buf)
        self.fill = 0                 # bytes of a cut header kept at the buffer's start
        self.body_left = 0            # bytes of the current frame's body still to come
        self.frames = 0
        self.master_offset_seen = -1  # the newest frame's end (or a heartbeat's offset)

    def read_burst(self, channel: Channel, wait_s: float) -> int:
        """Read what the master sent: wait up to ``wait_s`` for the first byte, then go on
        without waiting while bytes are there, up to about ``burst_bytes``. Returns the
        bytes read (0: nothing came)."""
        limit = self.burst_bytes
        total = 0
        n = channel.recv_some(self.view[self.fill:], wait_s)
        while n:
            total += n
            self._consume(self.fill + n)
            if total >= limit:
                break
            n = channel.recv_some(self.view[self.fill:], 0.0)
        return total

    def _consume(self, end: int) -> None:
        """Parse ``buf[:end]``: headers checked, bodies written; a cut header kept."""
        replica, view = self.replica, self.view
        pos = 0
        while pos < end:
            left = self.body_left
            if left:
                k = left if left <= end - pos else end - pos
                replica.write(view[pos:pos + k])
                self.body_left = left - k
                pos += k
                continue
            if end - pos < FRAME_HEADER_SIZE:
                break
            phy, size = FRAME_HEADER.unpack_from(self.buf, pos)
            pos += FRAME_HEADER_SIZE
            replica.check_frame(phy, size)
            self.body_left = size
            self.frames += 1
            if phy + size > self.master_offset_seen:
                self.master_offset_seen = phy + size
        rest = end - pos
        if rest:
            self.buf[:rest] = self.view[pos:end]
        self.fill = rest
