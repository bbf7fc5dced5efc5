"""``NamesrvClient``: the broker's side of a connection to one name server.

A RocketMQ broker keeps one connection to each name server and sends its registrations on
it; the name server ties the registration to that connection (when it closes, the broker
is dropped from the routes at once). So the connection here is kept open between calls
and opened again when it broke. Requests are remoting frames with JSON headers, written
with :mod:`.codec`; responses are matched by ``opaque``. Frames from the name server are
bounded by the codec's 16 MiB limit.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Optional

from .codec import MAX_FRAME, FrameError, RemotingCommand, decode_frame, encode

_LEN = struct.Struct(">i")


class NamesrvError(Exception):
    """A call that got no answer (connection refused or lost, timeout)."""


class NamesrvClient:
    """Requests to the name server at ``addr`` ("host:port") over one kept connection."""

    def __init__(self, addr: str) -> None:
        host, _, port = addr.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"name server address {addr!r} is not host:port")
        self.addr = addr.strip()
        self.host, self.port = host.strip("[]"), int(port)
        self._reader: Optional[asyncio.StreamReader] = None
        self._writer: Optional[asyncio.StreamWriter] = None
        self._read_task: Optional[asyncio.Task] = None
        self._pending: dict[int, asyncio.Future] = {}
        self._opaque = 0
        self._lock = asyncio.Lock()

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def _connect(self, timeout: float) -> None:
        async with self._lock:
            if self.connected:
                return
            try:
                self._reader, self._writer = await asyncio.wait_for(
                    asyncio.open_connection(self.host, self.port), timeout)
            except (OSError, asyncio.TimeoutError) as e:
                raise NamesrvError(f"cannot connect to name server {self.addr}: {e or 'timeout'}") from None
            self._read_task = asyncio.ensure_future(self._read_loop(self._reader))

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                (total,) = _LEN.unpack(await reader.readexactly(4))
                if not 4 <= total <= MAX_FRAME:
                    raise FrameError(f"frame length {total}")
                cmd = decode_frame(memoryview(await reader.readexactly(total)))
                fut = self._pending.pop(cmd.opaque, None) if cmd.is_response else None
                if fut is not None and not fut.done():
                    fut.set_result(cmd)
        except (OSError, EOFError, asyncio.IncompleteReadError, FrameError):
            pass
        finally:
            self._drop("connection to name server lost")

    def _drop(self, why: str) -> None:
        if self._writer is not None:
            self._writer.close()
        self._writer = None
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(NamesrvError(f"{why} ({self.addr})"))

    async def call(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send ``cmd`` (a request) and return its response; raises :class:`NamesrvError`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        await self._connect(timeout)
        self._opaque = (self._opaque + 1) & 0x7FFFFFFF
        cmd.opaque = self._opaque
        fut = loop.create_future()
        self._pending[cmd.opaque] = fut
        try:
            self._writer.write(encode(cmd))
            await asyncio.wait_for(asyncio.shield(fut), max(0.001, deadline - loop.time()))
        except asyncio.TimeoutError:
            raise NamesrvError(f"name server {self.addr} did not answer within {timeout:.1f} s") from None
        except OSError as e:
            self._drop(str(e))
            raise NamesrvError(f"name server {self.addr}: {e}") from None
        finally:
            self._pending.pop(cmd.opaque, None)
        return fut.result()

    async def close(self) -> None:
        """Close the connection (a registration tied to it ends on the name server)."""
        task, self._read_task = self._read_task, None
        self._drop("client closed")
        if task is not None:
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
