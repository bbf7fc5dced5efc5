"""Auto-renew: push consumers' messages stay hidden while their client holds them.

A RocketMQ 5 push consumer receives with ``auto_renew`` and no invisible duration; the proxy
then hides each message for a short slice and renews it before the slice ends, as long as
the client holds it (until it acks, changes the invisible duration or forwards it to the
dead-letter queue, or goes away), up to a maximum. The client keeps using the handle it
received; the renewer maps it to the current one. pymq does the same with the broker's
``change_invisible_time``: ``hold`` after a receive, ``release`` (giving the current
handle) on the client's ack / change / forward, ``drop_client`` when a client ends.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from pymq.broker.receipt_handle import InvalidReceiptHandleError
from pymq.store.episode_log import EpisodeLog

from .convert import now_ms

log = logging.getLogger("pymq.server")

TICK_S = 1.0


@dataclasses.dataclass
class _Held:
    client_id: str
    current: str
    deadline_ms: int
    since_ms: int


class ReceiptRenewer:
    """Renews held receipt handles of a :class:`~pymq.server.grpc.GrpcServer`."""

    def __init__(self, server, slice_ms: int, max_hold_ms: int) -> None:
        self.server = server
        self.slice_ms = slice_ms
        # renew this long before a slice ends: up to 10 s, and always more than one tick
        self.ahead_ms = max(min(10_000, slice_ms // 3), int(TICK_S * 1000) + 500)
        self.max_hold_ms = max_hold_ms
        self._held: dict[str, _Held] = {}
        self.renewed = 0
        #: renewals that fail (a full disk refusing the pop state) are logged once per episode
        self.errors = EpisodeLog(log, "auto-renewing receipt handles")

    def hold(self, client_id: str, handle: str, invisible_ms: int) -> None:
        """Keep the message of ``handle`` hidden while ``client_id`` holds it."""
        now = now_ms()
        self._held[handle] = _Held(client_id, handle, now + invisible_ms, now)

    def release(self, handle: str) -> str:
        """Stop renewing ``handle``; returns the message's current handle (``handle``
        itself when it is not held)."""
        held = self._held.pop(handle, None)
        return handle if held is None else held.current

    def drop_client(self, client_id: str) -> None:
        """Stop renewing the messages of a client that ended (they come back after their
        current slice)."""
        for h in [h for h, e in self._held.items() if e.client_id == client_id]:
            del self._held[h]

    def __len__(self) -> int:
        return len(self._held)

    async def renew_due(self) -> int:
        """Renew every held handle whose slice ends within ``ahead_ms``; returns how many."""
        pop = self.server.broker.pop_service
        now = now_ms()
        n = 0
        for original, e in list(self._held.items()):
            if e.deadline_ms - now > self.ahead_ms:
                continue
            if now - e.since_ms >= self.max_hold_ms:
                self._held.pop(original, None)       # held too long: let it come back
                continue
            try:
                new = await self.server.call(pop.change_invisible_time, e.current, self.slice_ms)
            except InvalidReceiptHandleError:
                self._held.pop(original, None)       # acked or redelivered meanwhile
                continue
            except Exception as exc:
                self.errors.failed(exc, exc_info=True)
                continue
            self.errors.succeeded()
            if self._held.get(original) is e:
                e.current = new
                e.deadline_ms = now_ms() + self.slice_ms
                n += 1
        self.renewed += n
        return n

    async def run(self) -> None:
        """Renew every ``TICK_S`` until the server stops."""
        while not self.server.stopping:
            await asyncio.sleep(TICK_S)
            try:
                await self.renew_due()
            except Exception as exc:
                self.errors.failed(exc, exc_info=True)
