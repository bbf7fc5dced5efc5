"""Idle and slow peers of the remoting server are dropped.

RocketMQ's remoting server closes a channel that neither read nor wrote for
``serverChannelMaxIdleTimeSeconds`` (120 s, Netty's ``IdleStateHandler`` on all events);
clients heartbeat every 30 s and ask for routes as often, so only dead or silent peers meet
it. pymq does the same (``idle_timeout_s``), and also bounds how long a frame may take once
its first byte came (``frame_timeout_s``, 10 s): a peer that sends a length word, or part
of a header or body, and then stalls holds its buffer only that long.

One sweep a second (finer for short limits) walks the connections; nothing is added to the
read path but the two timestamps a connection keeps (:class:`.connection.RemotingConnection`).
A connection whose responses wait to be written counts as active while that backlog
shrinks, and its frame clock stops while its reading is paused for that backlog. A dropped
connection is aborted (what waits to be written to a peer that does not read is discarded).
"""

from __future__ import annotations

import asyncio
import logging
import time

log = logging.getLogger("pymq.server.remoting")

MAX_SWEEP_S = 1.0


def sweep_interval(idle_timeout_s: float, frame_timeout_s: float) -> float:
    """How often to look: a quarter of the shorter limit, at most once a second; 0 when
    both limits are off."""
    limits = [x for x in (idle_timeout_s, frame_timeout_s) if x > 0]
    return min(MAX_SWEEP_S, min(limits) / 4) if limits else 0.0


def overdue(conn, now: float, idle_timeout_s: float, frame_timeout_s: float):
    """Why ``conn`` should be dropped now (``"idle"`` or ``"slow frame"``), or None."""
    transport = conn.transport
    if transport is not None:
        backlog = transport.get_write_buffer_size()
        if backlog != conn.write_backlog:            # the peer reads what we write: alive
            conn.write_backlog = backlog
            conn.last_active = now
    if idle_timeout_s > 0 and now - conn.last_active > idle_timeout_s:
        return "idle"
    started = conn.frame_started
    if (frame_timeout_s > 0 and started is not None and not conn.reading_paused
            and now - started > frame_timeout_s):
        return "slow frame"
    return None


class ConnectionDeadlines:
    """Closes the server's connections that stay idle or take too long over a frame."""

    def __init__(self, server, idle_timeout_s: float, frame_timeout_s: float) -> None:
        self.server = server
        self.idle_timeout_s = idle_timeout_s
        self.frame_timeout_s = frame_timeout_s
        self.closed_idle = 0
        self.closed_slow = 0

    async def run(self) -> None:
        """Sweep until cancelled."""
        interval = sweep_interval(self.idle_timeout_s, self.frame_timeout_s)
        if not interval:
            return
        while True:
            await asyncio.sleep(interval)
            self.sweep(time.monotonic())

    def sweep(self, now: float) -> int:
        """Drop the overdue connections; how many were dropped."""
        dropped = 0
        for conn in list(self.server.connections):
            why = overdue(conn, now, self.idle_timeout_s, self.frame_timeout_s)
            if why is None or conn.closed:
                continue
            if why == "idle":
                self.closed_idle += 1
            else:
                self.closed_slow += 1
            log.debug("closing %s: %s", conn.peer, why)
            conn.abort()
            dropped += 1
        return dropped
