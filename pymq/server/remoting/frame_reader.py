"""Frames out of a connection's byte stream, read into a buffer the reader sizes itself.

The connection is an :class:`asyncio.BufferedProtocol`: the loop asks the reader for a
buffer (:meth:`FrameReader.buffer`), reads the socket into it and tells it how much came
(:meth:`FrameReader.filled`). So the reader decides how much a peer can make the server
hold: an idle connection holds 8 KiB, a busy one 64 KiB, and a frame whose body is still on
its way holds more only once :mod:`.admission` admits its length. Until then its bytes stay
in the kernel (the connection stops reading while it waits).

Checks at each frame, before anything is buffered for it::

    length word   4 <= total_len <= 16 MiB          else the connection is closed
    header word   header_len <= max_header_bytes     else the connection is closed
    header        at most max_header_fields ext fields (checked once it is decoded)
    body          admitted (or arrived whole in one read) before it is kept

A frame refused at its header (no known access key, :mod:`.admission`) is answered and its
body read into a scratch buffer and dropped.
"""

from __future__ import annotations

import struct

from .codec import MAX_FRAME, FrameError, decode_frame, decode_header

SMALL = 8 << 10          # an idle connection's buffer
CHUNK = 64 << 10         # a busy one's: the most one read brings
_SCRATCH = memoryview(bytearray(CHUNK))     # where the bodies of refused frames are dropped
_PREFIX = struct.Struct(">ii")
_I32 = struct.Struct(">i")

ADMITTED, WAITING, REFUSED, CLOSED = range(4)


class FrameReader:
    """The read side of one connection (``conn``, a :class:`.connection.RemotingConnection`):
    its buffer, the frame in progress, and its admission."""

    __slots__ = ("conn", "buf", "view", "start", "end", "skip", "admitted", "max_header", "max_fields")

    def __init__(self, conn, max_header_bytes: int, max_header_fields: int) -> None:
        self.conn = conn
        self.buf = bytearray(SMALL)
        self.view = memoryview(self.buf)
        self.start = 0               # the buffered bytes are buf[start:end]
        self.end = 0
        self.skip = 0                # bytes of a refused frame still to be read and dropped
        self.admitted = 0            # bytes admitted for the frame being buffered (0: none)
        self.max_header = max_header_bytes
        self.max_fields = max_header_fields

    @property
    def in_frame(self) -> bool:
        """True while part of a frame has been read (or a refused one is being dropped)."""
        return self.end > self.start or self.skip > 0

    # -- the loop's side -------------------------------------------------------------------

    def buffer(self) -> memoryview:
        """Where the next read goes."""
        if self.skip:
            return _SCRATCH[:min(self.skip, CHUNK)]
        free = len(self.buf) - self.end
        if free < 512 and self.start:
            self._move(len(self.buf))
            free = len(self.buf) - self.end
        if free < 512 and len(self.buf) < CHUNK:
            self._move(CHUNK)
            free = len(self.buf) - self.end
        return self.view[self.end:self.end + free]

    def filled(self, n: int) -> None:
        """``n`` bytes came into the last buffer: serve every whole frame, then decide what
        the next one may hold."""
        if self.skip:
            self.skip -= n
            if not self.skip:
                self.conn.frame_done()
            return
        self.end += n
        self._frames()

    # -- frames ------------------------------------------------------------------------------

    def _frames(self) -> None:
        conn = self.conn
        buf = self.buf
        view = self.view
        first = start = self.start
        end = self.end
        while end - start >= 4:
            total = _I32.unpack_from(buf, start)[0]
            if total < 4 or total > MAX_FRAME:
                conn.refuse(f"frame length {total} outside 4..{MAX_FRAME}")
                return
            if end - start < 8:
                break
            header_len = _I32.unpack_from(buf, start + 4)[0] & 0xFFFFFF
            if header_len > self.max_header:
                conn.refuse(f"header of {header_len} bytes (at most {self.max_header}: --max-header-bytes)")
                return
            size = 4 + total
            if end - start < size:
                break
            try:
                cmd = decode_frame(view[start + 4:start + size])
            except FrameError as e:
                conn.refuse(str(e))
                return
            start += size
            self.start = start
            if len(cmd.ext_fields) > self.max_fields:
                conn.refuse(f"header with {len(cmd.ext_fields)} fields (at most {self.max_fields})")
                return
            conn.dispatch(cmd, size)
            if self.admitted:
                conn.release_frame(self.admitted)
                self.admitted = 0
            if conn.closed:
                return
        self.start = start
        if start == end:
            self.start = self.end = 0
            if len(buf) > CHUNK:
                self._replace(SMALL)
            conn.frame_done()
            return
        conn.frame_begun(start != first)
        if end - start < 8:
            return
        if self.admitted or size <= CHUNK:      # a frame that fits a read's buffer needs no admission
            self._room(size)
        else:
            self._admit(start, end)

    def _admit(self, start: int, end: int) -> None:
        """The frame at ``start`` is partly read: once its header is here, ask to keep it."""
        total, word = _PREFIX.unpack_from(self.buf, start)
        size = 4 + total
        head = 8 + (word & 0xFFFFFF)
        if end - start < head:
            self._room(head)            # at most max_header_bytes + 8
            return
        try:
            cmd = decode_header(self.view[start + 4:start + head])
        except FrameError as e:
            self.conn.refuse(str(e))
            return
        if len(cmd.ext_fields) > self.max_fields:
            self.conn.refuse(f"header with {len(cmd.ext_fields)} fields (at most {self.max_fields})")
            return
        outcome = self.conn.admit_frame(cmd, size)
        if outcome == ADMITTED:
            self.admitted = size
            self._room(size)
        elif outcome == REFUSED:
            self.skip = size - (end - start)
            self.start = self.end = 0
            if len(self.buf) > CHUNK:
                self._replace(SMALL)

    def granted(self, size: int) -> None:
        """The frame that waited was admitted (``size`` bytes)."""
        self.admitted = size
        self._room(size)

    # -- the buffer --------------------------------------------------------------------------

    def _room(self, size: int) -> None:
        """Make room for the frame at ``start`` to be ``size`` bytes long."""
        if self.start + size <= len(self.buf):
            return
        self._move(max(size, len(self.buf)))

    def _move(self, capacity: int) -> None:
        """Move the buffered bytes to the front of a buffer of ``capacity`` bytes."""
        n = self.end - self.start
        if capacity == len(self.buf):
            self.buf[:n] = self.buf[self.start:self.end]
        else:
            new = bytearray(capacity)
            new[:n] = self.buf[self.start:self.end]
            self.buf = new
            self.view = memoryview(new)
        self.start, self.end = 0, n

    def _replace(self, capacity: int) -> None:
        """An empty buffer of ``capacity`` bytes (a large one is not kept once drained)."""
        self.buf = bytearray(capacity)
        self.view = memoryview(self.buf)

    def release(self) -> int:
        """The connection closed: the bytes it had admitted (to be given back). The buffer
        goes at once: the connection and its reader refer to each other, so without this a
        closed connection's buffer would wait for the cycle collector, which a quiet server
        seldom runs (16 MiB per stalled frame, measured)."""
        n, self.admitted = self.admitted, 0
        self.start = self.end = self.skip = 0
        try:
            self.view.release()
        except BufferError:         # a slice still exported: it goes with its last reference
            pass
        self.buf = bytearray()
        self.view = memoryview(self.buf)
        return n
