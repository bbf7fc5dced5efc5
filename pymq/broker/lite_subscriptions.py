"""Which lite topics each lite consumer wants (RocketMQ's ``LiteSubscriptionRegistry``).

A 5.x lite push consumer binds to one parent topic and syncs the set of lite topics it
wants with ``SyncLiteSubscription``: PARTIAL_ADD and PARTIAL_REMOVE change the set,
COMPLETE_ADD replaces it (the client sends its whole set every 30 s), COMPLETE_REMOVE
drops the client. Subscriptions live in memory only, as in RocketMQ: a client that goes
away (terminates, its Telemetry stream ends, it expires) loses them and syncs them again
when it comes back.

As in RocketMQ, a client's PARTIAL_ADD past the broker's ``max_lite_subscription_count``
(client, lite topic) pairs is refused with :class:`LiteSubscriptionQuotaError`; the
per-client quota of its group (``lite.sub.client.quota`` + 300) is the server's check
(:mod:`pymq.server.grpc.lite`). In an exclusive group (``lite.sub.model=Exclusive``) a
PARTIAL_ADD takes each of its lite topics from the group's other clients, which are told
(``NotifyUnsubscribeLiteCommand``); in a shared group every subscribed client receives
the queued messages of a lite topic, one batch at a time (:mod:`.lite_pop`). RocketMQ's
wildcard groups and per-client event queues are not kept.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Optional


class LiteSubscriptionQuotaError(Exception):
    """A subscription past the quota (the protocol's ``LITE_SUBSCRIPTION_QUOTA_EXCEEDED``)."""


@dataclasses.dataclass
class LiteSubscription:
    """One client's lite subscription: its group, parent topic and LMQ names."""

    group: str
    topic: str
    lmqs: set = dataclasses.field(default_factory=set)
    update_time: float = dataclasses.field(default_factory=time.monotonic)


class LiteSubscriptionRegistry:
    """Client id -> :class:`LiteSubscription`, and LMQ name -> subscribed client ids."""

    def __init__(self, broker_config) -> None:
        self.broker_config = broker_config
        self._lock = threading.Lock()
        self._clients: dict[str, LiteSubscription] = {}
        self._by_lmq: dict[str, set] = {}
        self._active = 0
        #: bumped on every change: a parked receive looks again when it moved
        self.version = 0

    def _get(self, client_id: str, group: str, topic: str) -> LiteSubscription:
        sub = self._clients.get(client_id)
        if sub is None or sub.group != group or sub.topic != topic:
            if sub is not None:
                self._drop(client_id, sub)
            sub = self._clients[client_id] = LiteSubscription(group, topic)
        sub.update_time = time.monotonic()
        return sub

    def _add(self, client_id: str, sub: LiteSubscription, lmq: str) -> None:
        if lmq not in sub.lmqs:
            sub.lmqs.add(lmq)
            self._by_lmq.setdefault(lmq, set()).add(client_id)
            self._active += 1

    def _remove(self, client_id: str, sub: LiteSubscription, lmq: str) -> None:
        if lmq in sub.lmqs:
            sub.lmqs.discard(lmq)
            holders = self._by_lmq.get(lmq)
            if holders is not None:
                holders.discard(client_id)
                if not holders:
                    del self._by_lmq[lmq]
            self._active -= 1

    def _drop(self, client_id: str, sub: LiteSubscription) -> None:
        for lmq in list(sub.lmqs):
            self._remove(client_id, sub, lmq)
        self._clients.pop(client_id, None)

    def add_partial(self, client_id: str, group: str, topic: str, lmqs, exclusive: bool = False) -> list:
        """Add ``lmqs`` to the client's set. ``exclusive``: the group's other clients lose
        these LMQs; returns ``[(client id, lmq)]`` of what they lost."""
        evicted = []
        with self._lock:
            sub = self._get(client_id, group, topic)
            new = [lmq for lmq in lmqs if lmq not in sub.lmqs]
            if new and self._active + len(new) > self.broker_config.max_lite_subscription_count:
                raise LiteSubscriptionQuotaError(
                    f"lite subscription quota exceeded {self.broker_config.max_lite_subscription_count}")
            for lmq in lmqs:
                if exclusive:
                    for other in sorted(self._by_lmq.get(lmq, ())):
                        theirs = self._clients.get(other)
                        if other != client_id and theirs is not None and theirs.group == group:
                            self._remove(other, theirs, lmq)
                            evicted.append((other, lmq))
                self._add(client_id, sub, lmq)
            self.version += 1
        return evicted

    def remove_partial(self, client_id: str, group: str, topic: str, lmqs) -> None:
        """Remove ``lmqs`` from the client's set."""
        with self._lock:
            sub = self._get(client_id, group, topic)
            for lmq in lmqs:
                self._remove(client_id, sub, lmq)
            self.version += 1

    def add_complete(self, client_id: str, group: str, topic: str, lmqs) -> None:
        """Make the client's set exactly ``lmqs``."""
        wanted = set(lmqs)
        with self._lock:
            sub = self._get(client_id, group, topic)
            for lmq in sub.lmqs - wanted:
                self._remove(client_id, sub, lmq)
            for lmq in wanted - sub.lmqs:
                self._add(client_id, sub, lmq)
            self.version += 1

    def remove_complete(self, client_id: str) -> None:
        """Forget the client."""
        with self._lock:
            sub = self._clients.get(client_id)
            if sub is not None:
                self._drop(client_id, sub)
                self.version += 1

    def clean_subscription(self, lmq: str) -> list:
        """Drop every client's subscription of ``lmq`` (it expired), telling no one (as
        RocketMQ's ``cleanSubscription``); returns the ids of the clients that had it."""
        with self._lock:
            holders = sorted(self._by_lmq.get(lmq, ()))
            for client_id in holders:
                sub = self._clients.get(client_id)
                if sub is not None:
                    self._remove(client_id, sub, lmq)
            if holders:
                self.version += 1
        return holders

    def subscription(self, client_id: str) -> Optional[LiteSubscription]:
        """The client's subscription (a copy), or None."""
        with self._lock:
            sub = self._clients.get(client_id)
            return None if sub is None else LiteSubscription(sub.group, sub.topic, set(sub.lmqs), sub.update_time)

    def subscribers(self, lmq: str) -> set:
        """The client ids subscribed to ``lmq``."""
        with self._lock:
            return set(self._by_lmq.get(lmq, ()))

    def active_count(self) -> int:
        """How many (client, lite topic) subscriptions there are."""
        return self._active
