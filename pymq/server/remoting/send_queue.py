"""The send queue's flow control: RocketMQ's ``BrokerFastFailure`` for sends that wait.

With ``SYNC_FLUSH`` a put waits for the disk, so sends are served on the server's thread
pool and queue for it. A RocketMQ broker bounds that queue the same two ways, and answers
``SYSTEM_BUSY`` (2) at once rather than let a send wait past its client's timeout:

- ``sendThreadPoolQueueCapacity`` (10,000): a send that finds the queue full is refused
  on arrival, ``[OVERLOAD]system busy, start flow control for a while``;
- ``waitTimeMillsInSendQueue`` (200 ms): a send that waited longer than that for a
  worker is answered ``[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while,
  period in queue: <ms>ms, size of queue: <n>`` instead of being stored.

A client then backs off from the broker for a while (the Java producer's fault strategy)
and the caller decides whether to retry; nothing refused was stored. With ``ASYNC_FLUSH``
(the default) a send is served on the event loop as it is read, so there is no queue:
what the server has not read waits in the socket, and the client's own window bounds it.
"""

from __future__ import annotations

import time

from .codes import ResponseCode
from .headers import RequestError


class SendQueue:
    """Puts handed to the thread pool, with RocketMQ's two limits (module docstring)."""

    def __init__(self, server, capacity: int, wait_ms: int) -> None:
        self.server = server
        self.capacity = capacity
        self.wait_s = wait_ms / 1000.0
        self.size = 0                    # puts queued or being served
        self.refused_full = 0            # [OVERLOAD]
        self.refused_waited = 0          # [TIMEOUT_CLEAN_QUEUE]

    async def put(self, fn, *args):
        """``fn(*args)`` on the thread pool, unless the queue refuses it (``RequestError``
        with ``SYSTEM_BUSY``)."""
        if self.capacity and self.size >= self.capacity:
            self.refused_full += 1
            raise RequestError(ResponseCode.SYSTEM_BUSY,
                               "[OVERLOAD]system busy, start flow control for a while")
        self.size += 1
        try:
            outcome = await self.server.call_blocking(self._timed, time.monotonic(), fn, args)
        finally:
            self.size -= 1
        if isinstance(outcome, _Waited):
            waited_ms = outcome.waited_ms
            self.refused_waited += 1
            raise RequestError(ResponseCode.SYSTEM_BUSY,
                               f"[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, period in "
                               f"queue: {waited_ms}ms, size of queue: {self.size}")
        return outcome

    def _timed(self, queued_at: float, fn, args):
        """On a worker: the put, unless it waited too long for this worker."""
        waited = time.monotonic() - queued_at
        if self.wait_s > 0 and waited > self.wait_s:
            return _Waited(int(waited * 1000))
        return fn(*args)


class _Waited:
    """A put not made: it waited ``waited_ms`` for a worker."""

    __slots__ = ("waited_ms",)

    def __init__(self, waited_ms: int) -> None:
        self.waited_ms = waited_ms
