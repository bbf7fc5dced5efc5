"""FrameReader: the slave reads its master's frames in bursts (RocketMQ's
``HAClient.processReadEvent`` / ``dispatchReadRequest``).

The socket's bytes are spliced into a pipe (``BUFFER_SIZE``), each 12-byte header read out
of it and each body spliced on into the segment file (``ha_wire.receive_frames``, without
the GIL): the body is copied once, by the kernel, from the socket's pages into the page
cache, and runs of frames that continue the segment move in one call, whatever the
other threads of the slave (the dispatcher) do with the GIL meanwhile. A header the
compiled loop does not take itself (the first of a connection, a heartbeat, a frame for
the next segment or past the blocks reserved so far, one at a wrong offset) comes back
here and goes through ``ReplicaLog.check_frame``, which rejects it or makes its segment
ready; then the loop goes on.

One burst reads until the socket has nothing more to give at once, or ``BURST_BYTES``
were read; the slave then moves its visible end once (one record scan in C) and reports
once. The protocol does not ask for one report per frame (RocketMQ's slave reports after
each read round); a master only needs the reports to move forward, and SYNC_MASTER puts
wait for them, so a burst never waits for more bytes once the socket is empty.
"""

from __future__ import annotations

import fcntl
import os
import time

from pymq._core import ha_wire

from .channel import SLICE_S, Channel, ChannelClosed
from .replica_log import ReplicaLog

#: bytes the pipe holds (one splice from the socket moves at most this much)
BUFFER_SIZE = 1 << 20
#: the pipe's least size: 16 pages. A pipe holds a packet's pieces one per slot (a page
#: each), and the reader splices from the socket only with fewer than a header's 12 bytes
#: left in it: with 16 slots one is always free, so that splice never waits on a full
#: pipe that only this thread would empty (a one-page pipe deadlocked so)
MIN_PIPE_SIZE = 16 * 4096
#: bytes one burst reads before the slave applies and reports what it has
BURST_BYTES = 8 << 20
#: fcntl's F_SETPIPE_SZ / F_GETPIPE_SZ (Linux)
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
F_GETPIPE_SZ = getattr(fcntl, "F_GETPIPE_SZ", 1032)


class FrameReader:
    """Moves the master's frames from a channel into the replica log."""

    def __init__(self, replica: ReplicaLog) -> None:
        self.replica = replica
        self.burst_bytes = BURST_BYTES
        self.body_left = 0            # bytes of the current frame's body still to come
        self.in_pipe = 0              # bytes in the pipe (fewer than a header between calls)
        self.frames = 0
        self.master_offset_seen = -1  # the newest frame's end (or a heartbeat's offset)
        self.pipe_r, self.pipe_w = os.pipe()
        try:
            self.pipe_size = fcntl.fcntl(self.pipe_w, F_SETPIPE_SZ, max(BUFFER_SIZE, MIN_PIPE_SIZE))
        except OSError:               # above /proc/sys/fs/pipe-max-size: the pipe's own size
            self.pipe_size = fcntl.fcntl(self.pipe_w, F_GETPIPE_SZ)

    def close(self) -> None:
        """Close the pipe."""
        for fd in (self.pipe_r, self.pipe_w):
            if fd >= 0:
                os.close(fd)
        self.pipe_r = self.pipe_w = -1

    def read_burst(self, channel: Channel, wait_s: float) -> int:
        """Read what the master sent: wait up to ``wait_s`` for the first byte, then go on
        without waiting while bytes are there, up to about ``burst_bytes``. Returns the
        bytes read (0: nothing came). ChannelClosed as ``Channel.recv_some`` raises it."""
        replica = self.replica
        deadline = time.monotonic() + wait_s
        total = 0
        while True:
            channel.check_open()
            wait_ms = 0 if total else int(max(0.0, min(deadline - time.monotonic(), SLICE_S)) * 1000)
            fd, seg_from, limit = replica.write_window()
            try:
                (status, replica.received_end, self.body_left, self.in_pipe, n, frames, phy,
                 size) = ha_wire.receive_frames(channel.fd, self.pipe_r, self.pipe_w, self.pipe_size, fd,
                                                seg_from, limit, replica.received_end, self.body_left,
                                                self.in_pipe, self.burst_bytes - total, wait_ms)
            except OSError as e:
                raise ChannelClosed(str(e)) from e
            if n:
                channel.received(n)
                total += n
            if frames:
                self.frames += frames
                if replica.received_end + self.body_left > self.master_offset_seen:
                    self.master_offset_seen = replica.received_end + self.body_left
            if status == ha_wire.HEADER:
                replica.check_frame(phy, size)
                self.body_left = size
                self.frames += 1
                if phy + size > self.master_offset_seen:
                    self.master_offset_seen = phy + size
                continue
            if status == ha_wire.CLOSED:
                raise ChannelClosed("peer closed the connection")
            if total and (not n or total >= self.burst_bytes):
                return total
            if not total and time.monotonic() >= deadline:
                return 0
