"""PullRequestHoldService: pulls parked until messages arrive or their time is up.

A pull that finds nothing new (``PULL_NOT_FOUND``) and asks for suspension is not answered;
it is parked under its queue with a deadline of the request's ``suspendTimeoutMillis``
(capped below the clients' 30 s socket timeout). The store's dispatcher calls this
service's listener with every batch of queues it extended; a parked pull of such a queue is
served again at once on the loop (without suspension: it never parks twice for the same
arrival, and still-empty answers re-park until the deadline). At the deadline the pull is
answered with whatever the queue holds then. Parked pulls of a closed connection are
dropped; at shutdown every parked pull is answered.
"""

from __future__ import annotations

import asyncio
import time
from typing import Optional

from .codes import ResponseCode


class ParkedPull:
    __slots__ = ("conn", "request", "key", "offset", "deadline", "timer")

    def __init__(self, conn, request, key: tuple, offset: int, deadline: float) -> None:
        self.conn = conn
        self.request = request          # a pull.PullRequest
        self.key = key
        self.offset = offset
        self.deadline = deadline
        self.timer: Optional[asyncio.TimerHandle] = None


class PullRequestHoldService:
    """Parked pulls of a :class:`RemotingServer`, woken by the store's notifier."""

    def __init__(self, server) -> None:
        self.server = server
        self._parked: dict[tuple, list[ParkedPull]] = {}
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._count = 0
        self._watched: set = set()           # connections whose closing drops their pulls

    def __len__(self) -> int:
        return self._count

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.server.broker.notifier.add_listener(self._on_arrived)

    def stop(self) -> None:
        """Answer every parked pull now."""
        self.server.broker.notifier.remove_listener(self._on_arrived)
        parked, self._parked = self._parked, {}
        for entries in parked.values():
            for p in entries:
                self._answer(p)

    # -- parking --------------------------------------------------------------------------

    def park(self, conn, request, key: tuple, offset: int, timeout_ms: int) -> None:
        """Hold ``request`` (a pull of queue ``key`` at ``offset``) up to ``timeout_ms``."""
        p = ParkedPull(conn, request, key, offset, time.monotonic() + timeout_ms / 1000.0)
        p.timer = self._loop.call_at(self._loop.time() + timeout_ms / 1000.0, self._expire, p)
        self._add(p)
        if conn not in self._watched:
            self._watched.add(conn)
            conn.on_close(self._drop_connection)

    def _add(self, p: ParkedPull) -> None:
        self._parked.setdefault(p.key, []).append(p)
        self._count += 1

    def _remove(self, p: ParkedPull) -> bool:
        entries = self._parked.get(p.key)
        if not entries or p not in entries:
            return False
        entries.remove(p)
        if not entries:
            del self._parked[p.key]
        self._count -= 1
        return True

    # -- waking ---------------------------------------------------------------------------

    def _on_arrived(self, arrived) -> None:
        """The dispatcher's thread: hand the queues with parked pulls to the loop."""
        parked = self._parked
        if not parked or self._loop is None:
            return
        if arrived is None:
            keys = list(parked)
        else:
            keys = [k for k in arrived if k in parked]
        if keys:
            try:
                self._loop.call_soon_threadsafe(self._wake, keys)
            except RuntimeError:       # the loop is closed: shutting down
                pass

    def _wake(self, keys) -> None:
        for key in keys:
            entries = self._parked.pop(key, None)
            if not entries:
                continue
            self._count -= len(entries)
            for p in entries:
                if p.conn.closed:
                    p.timer.cancel()
                    continue
                response = self.server.pull.serve(p.request)
                if response.code == ResponseCode.PULL_NOT_FOUND and time.monotonic() < p.deadline:
                    self._add(p)              # nothing for it yet: wait on
                    continue
                p.timer.cancel()
                p.conn.reply(p.request.cmd, response)

    def _expire(self, p: ParkedPull) -> None:
        if self._remove(p):
            self._answer(p)

    def _answer(self, p: ParkedPull) -> None:
        if p.timer is not None:
            p.timer.cancel()
        if not p.conn.closed:
            p.conn.reply(p.request.cmd, self.server.pull.serve(p.request))

    def _drop_connection(self, conn) -> None:
        self._watched.discard(conn)
        for key in list(self._parked):
            entries = self._parked[key]
            keep = [p for p in entries if p.conn is not conn]
            for p in entries:
                if p.conn is conn:
                    p.timer.cancel()
            self._count -= len(entries) - len(keep)
            if keep:
                self._parked[key] = keep
            else:
                del self._parked[key]
