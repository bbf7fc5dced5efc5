"""One client connection of the remoting server: frames in, commands dispatched, responses out.

Requests on one connection are served concurrently and answered out of order, matched by
``opaque`` (clients keep many calls in flight on one socket, a parked pull among them). A
handler returns a response, an awaitable of one, or None when it answers later itself (a
parked pull). Responses go out in the request's serialize type; a response whose body is a
list of buffers (records of the mapped commit log) is written without joining them.

Reading is :mod:`.frame_reader`'s (the connection is a ``BufferedProtocol``, so the reader
sizes every read's buffer), and a frame larger than one read is admitted against the
budgets of :mod:`.admission` before its body is kept. Garbage never stops the server: a
frame whose length word is below 4 or above 16 MiB, whose header is too large or cannot be
decoded, closes this connection (the stream cannot be resynchronised); a request code the
port does not serve is left to its processor's ``unknown`` (the broker answers
``REQUEST_CODE_NOT_SUPPORTED``, the name server only the codes RocketMQ's serves); a
handler that fails is answered
``SYSTEM_ERROR``. When a client stops reading and 4 MiB of responses wait to be written to
it, its connection stops reading its requests until the backlog drains.

A connection notes when it last read or wrote (``last_active``) and when the frame it is
reading began (``frame_started``, None between frames); :mod:`.deadlines` closes it when
either is too old (idle and slow peers).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import Optional

from .codec import RemotingCommand, encode_head
from .codes import RequestCode, ResponseCode, code_name
from .frame_reader import ADMITTED, CLOSED, REFUSED, WAITING, FrameReader
from .headers import RequestError

log = logging.getLogger("pymq.server.remoting")

_COPY_BELOW = 16 * 1024      # bodies smaller than this are joined to the header in one write
WRITE_BUFFER_HIGH = 4 << 20  # stop reading a client's requests while this much waits to be written


class RemotingConnection(asyncio.BufferedProtocol):
    """The server's end of one TCP connection; ``processor.handlers`` maps request codes
    to ``handler(connection, command)``."""

    def __init__(self, server, processor) -> None:
        self.server = server
        self.processor = processor
        self.transport: Optional[asyncio.Transport] = None
        self.peer = ""
        self.closed = False
        cfg = server.config
        self.reader = FrameReader(self, cfg.max_header_bytes, cfg.max_header_fields)
        self._tasks: set[asyncio.Task] = set()
        self._reading_paused = False         # responses back up
        self._transport_paused = False
        self._waiting_pool = None            # the budget a frame waits on
        self._frame_pool = None              # the budget the frame being read was admitted against
        self.authenticated = server.authenticator is None    # a signed request was accepted here
        self.held = 0                        # bytes of admitted frames and requests being served
        self.budget_wanted = 0               # bytes of the frame waiting for admission
        self._close_callbacks: list = []
        self.heartbeat_seen = False      # a client registered on this connection
        self.last_active = time.monotonic()      # the last read or write
        self.frame_started: Optional[float] = None   # when the frame being read began; None: between frames
        self.write_backlog = 0           # bytes waiting to be written at the last deadline sweep
        #: responses made while one read's frames are served, written together after it
        #: (None outside a read): pipelined requests get their answers in one write
        self._corked: Optional[list] = None

    # -- transport events ----------------------------------------------------------------

    def connection_made(self, transport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        # pull responses are up to 256 KiB: the default 64 KiB high-water mark would stop
        # reading requests after every one of them and serialise the pipeline
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH, low=WRITE_BUFFER_HIGH // 4)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else "0.0.0.0:0"
        self.server.connections.add(self)

    def connection_lost(self, exc) -> None:
        self.closed = True
        self.server.connections.discard(self)
        if self._waiting_pool is not None:
            self._waiting_pool.forget(self)
            self._waiting_pool = None
        admitted = self.reader.release()
        if admitted:
            self.release_frame(admitted)
        for t in self._tasks:
            t.cancel()
        for fn in self._close_callbacks:
            try:
                fn(self)
            except Exception:
                log.exception("closing %s", self.peer)
        self._close_callbacks.clear()

    def on_close(self, fn) -> None:
        """Call ``fn(connection)`` when the connection closes."""
        if self.closed:
            fn(self)
        else:
            self._close_callbacks.append(fn)

    def pause_writing(self) -> None:
        if not self._reading_paused:
            self._reading_paused = True
            self._reading()

    def resume_writing(self) -> None:
        if self._reading_paused and not self.closed:
            self._reading_paused = False
            if self.frame_started is not None:      # the frame could not progress while paused
                self.frame_started = time.monotonic()
            self._reading()

    @property
    def reading_paused(self) -> bool:
        """True while requests are not read because responses wait to be written."""
        return self._reading_paused

    # -- reading (:mod:`.frame_reader` sizes the buffers, :mod:`.admission` the frames) ------

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.reader.buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = time.monotonic()
        self._corked = []
        try:
            self.reader.filled(nbytes)
        finally:
            self._uncork()

    def _uncork(self) -> None:
        """Write the responses the frames of a read produced, in one call."""
        parts, self._corked = self._corked, None
        if parts and not self.closed and self.transport is not None and not self.transport.is_closing():
            self.transport.writelines(parts)

    def frame_begun(self, new: bool) -> None:
        """Part of a frame waits in the buffer; ``new``: it began in this read."""
        if new or self.frame_started is None:
            self.frame_started = self.last_active

    def frame_done(self) -> None:
        """Nothing of a frame is buffered."""
        self.frame_started = None

    def refuse(self, why: str) -> None:
        """Close over a frame that cannot be read (the stream cannot be resynchronised)."""
        self.server.note_error("garbage", f"closing {self.peer}: {why}")
        self.close()

    @property
    def pool(self):
        """The budget this connection's frames are admitted against."""
        return self.server.inflight if self.authenticated else self.server.unauthenticated

    def admit_frame(self, cmd: RemotingCommand, size: int) -> int:
        """A frame of ``size`` bytes, whose header is ``cmd``, has begun: may it be read?"""
        auth = self.server.authenticator
        if not self.authenticated and auth is not None and not auth.knows(cmd):
            self.server.stats.refused_frames += 1
            if not cmd.is_response:
                self.reply(cmd, cmd.response(ResponseCode.NO_PERMISSION,
                                             "this broker requires requests signed with a known access key"))
            return REFUSED
        pool = self.pool
        limit = self.server.config.max_connection_bytes
        if size > pool.limit or size > limit:
            self.refuse(f"a frame of {size} bytes is over the {pool.name} budget "
                        f"({pool.limit} bytes, {limit} per connection)")
            return CLOSED
        self.budget_wanted = size
        if not pool.waiters and self.budget_fits(pool):       # nobody waits ahead, and it fits
            self.budget_granted(resume=False)
            return ADMITTED
        pool.wait(self)
        self._waiting_pool = pool
        self._reading()
        return WAITING

    def budget_fits(self, pool) -> bool:
        """True when the frame this connection waits with fits ``pool`` and its own budget."""
        return (pool.used + self.budget_wanted <= pool.limit
                and self.held + self.budget_wanted <= self.server.config.max_connection_bytes)

    def budget_granted(self, resume: bool = True) -> None:
        """Take the bytes of the frame that waited and read on."""
        size, self.budget_wanted = self.budget_wanted, 0
        pool = self._frame_pool = self.pool
        pool.take(size)
        self.held += size
        if resume:
            self._waiting_pool = None
            self.reader.granted(size)
            self._reading()

    def release_frame(self, size: int) -> None:
        """The frame admitted for ``size`` bytes was read and served (or dropped)."""
        self.held -= size
        pool, self._frame_pool = self._frame_pool, None
        if pool is not None:
            pool.give(size)

    def _reading(self) -> None:
        """Pause or resume reading: paused while responses back up or a frame waits."""
        transport = self.transport
        if transport is None or self.closed:
            return
        paused = self._reading_paused or self._waiting_pool is not None
        if paused != self._transport_paused:
            self._transport_paused = paused
            if paused:
                transport.pause_reading()
            else:
                transport.resume_reading()

    # -- requests ------------------------------------------------------------------------

    def dispatch(self, cmd: RemotingCommand, size: int) -> None:
        """Serve a request (``size`` bytes of frame) or take a response."""
        if cmd.is_response:
            self.server.on_response(self, cmd)
            return
        self.server.stats.calls += 1
        if self.server.rpc_observer is not None:
            cmd.received_at = time.perf_counter()
        handler = self.processor.handlers.get(cmd.code)
        try:
            if self.server.authenticator is not None:
                self.server.authenticator.check(cmd)
                self.authenticated = True
            if handler is None:
                result = self.processor.unknown(self, cmd)
            else:
                result = handler(self, cmd)
        except RequestError as e:
            result = cmd.response(e.code, e.remark)
        except Exception as e:
            result = self._failed(cmd, e)
        if result is None:
            return
        if isinstance(result, RemotingCommand):
            self.reply(cmd, result)
            return
        # a request served later holds its bytes (a send waiting for the disk holds its body)
        pool = self.pool
        pool.take(size)
        self.held += size
        task = asyncio.ensure_future(self._finish(cmd, result))
        self._tasks.add(task)
        task.add_done_callback(lambda t: self._served(t, pool, size))

    def _served(self, task, pool, size: int) -> None:
        self._tasks.discard(task)
        self.held -= size
        pool.give(size)

    async def _finish(self, cmd: RemotingCommand, awaitable) -> None:
        try:
            result = await awaitable
        except asyncio.CancelledError:
            raise
        except RequestError as e:
            result = cmd.response(e.code, e.remark)
        except Exception as e:
            result = self._failed(cmd, e)
        if result is not None:
            self.reply(cmd, result)

    def _failed(self, cmd: RemotingCommand, e: Exception) -> RemotingCommand:
        self.server.note_error("handler", f"request {cmd.code} from {self.peer} failed", e)
        return cmd.response(ResponseCode.SYSTEM_ERROR, f"{type(e).__name__}: {e}")

    # -- writing -------------------------------------------------------------------------

    def reply(self, request: RemotingCommand, response: RemotingCommand) -> None:
        """Write ``response`` unless the request was one-way or the connection is gone."""
        observe = self.server.rpc_observer
        if observe is not None and request.received_at:
            try:
                observe(code_name(RequestCode, request.code), code_name(ResponseCode, response.code),
                        time.perf_counter() - request.received_at)
            except Exception as e:          # metrics must never break a call
                self.server.note_error("metrics", "rpc observer failed", e)
        if request.is_oneway:
            return
        self.write(response)

    def write(self, cmd: RemotingCommand) -> bool:
        """Write a command (a response, or a request the server sends); False when closed."""
        if self.closed or self.transport is None or self.transport.is_closing():
            return False
        self.last_active = time.monotonic()
        head = encode_head(cmd)
        body = cmd.body
        corked = self._corked
        if corked is not None:
            corked.append(head)
            if isinstance(body, list):
                corked.extend(body)
            elif body:
                corked.append(body)
            return True
        if isinstance(body, list):
            self.transport.writelines([head, *body])
        elif not body:
            self.transport.write(head)
        elif len(body) < _COPY_BELOW:
            self.transport.write(head + body)
        else:
            self.transport.writelines([head, body])
        return True

    def check_transaction(self, half) -> bool:
        """Ask this client (a producer) about a half message. The broker's check thread
        calls it: the write is handed to the loop."""
        loop = self.server.loop
        if self.closed or loop is None:
            return False
        try:
            loop.call_soon_threadsafe(self.server.transactions.send_check, self, half)
        except RuntimeError:           # the loop is closed: shutting down
            return False
        return True

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            if self._corked:                 # answers made before the close are still written
                self.transport.writelines(self._corked)
            self._corked = None
            self.closed = True
            self.transport.close()

    def abort(self) -> None:
        """Close at once, dropping what waits to be written (a peer that does not read)."""
        if self.transport is not None and not self.closed:
            self._corked = None
            self.closed = True
            self.transport.abort()

    def __repr__(self) -> str:
        return f"RemotingConnection({self.peer})"
