"""ClientManager: the producers and consumers connected to a broker, kept by heartbeat.

RocketMQ's broker keeps its clients in ``ProducerManager`` and ``ConsumerManager`` and drops
a channel that stayed silent for two minutes (``ClientHousekeepingService``); the 5.x proxy
keeps each gRPC client's settings beside it. pymq keeps one table for both: a client is
known by its client id, registered by its first call (settings or heartbeat), refreshed by
every heartbeat, and forgotten when it says goodbye (``NotifyClientTermination``) or after
``expire_ms`` of silence.

A client may carry a ``channel``: whatever the protocol adapter needs to push commands to it
(the gRPC Telemetry stream); the broker only hands it back, e.g. to route a transaction
check to a producer of the half message's topic.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any, Optional

PRODUCER = "PRODUCER"
PUSH_CONSUMER = "PUSH_CONSUMER"
SIMPLE_CONSUMER = "SIMPLE_CONSUMER"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclasses.dataclass
class ClientInfo:
    """One connected client: its id, type (``PRODUCER``, ``PUSH_CONSUMER``,
    ``SIMPLE_CONSUMER``...), consumer group (None for producers), topics it publishes or
    subscribes, when it was last heard from (ms) and the adapter's ``channel``."""

    client_id: str
    client_type: str = ""
    group: Optional[str] = None
    topics: frozenset = frozenset()
    last_seen_ms: int = 0
    channel: Any = None
    settings: Any = None       # the adapter's view of the client's settings

    @property
    def is_producer(self) -> bool:
        return self.client_type == PRODUCER


class ClientManager:
    """Thread-safe table of :class:`ClientInfo` by client id."""

    def __init__(self, expire_ms: int = 120_000) -> None:
        self.expire_ms = expire_ms
        self._lock = threading.Lock()
        self._clients: dict[str, ClientInfo] = {}

    def register(self, client_id: str, client_type: Optional[str] = None, group: Optional[str] = None,
                 topics=None, channel: Any = None, settings: Any = None) -> ClientInfo:
        """Record that ``client_id`` was heard from now; set whichever of its fields are
        given. Returns its entry."""
        with self._lock:
            info = self._clients.get(client_id)
            if info is None:
                info = self._clients[client_id] = ClientInfo(client_id)
            if client_type:
                info.client_type = client_type
            if group:
                info.group = group
            if topics is not None:
                info.topics = frozenset(topics)
            if channel is not None:
                info.channel = channel
            if settings is not None:
                info.settings = settings
            info.last_seen_ms = _now_ms()
            return info

    def get(self, client_id: str) -> Optional[ClientInfo]:
        """The entry of ``client_id``, or None."""
        return self._clients.get(client_id)

    def unregister(self, client_id: str, channel: Any = None) -> Optional[ClientInfo]:
        """Forget ``client_id`` (when ``channel`` is given: only its channel, if it is that
        one). Returns the entry that was removed or changed."""
        with self._lock:
            info = self._clients.get(client_id)
            if info is None:
                return None
            if channel is not None:
                if info.channel is channel:
                    info.channel = None
                return info
            return self._clients.pop(client_id)

    def scan_expired(self, now_ms: Optional[int] = None) -> list[ClientInfo]:
        """Remove and return the clients silent for more than ``expire_ms``."""
        now = _now_ms() if now_ms is None else now_ms
        with self._lock:
            gone = [c for c in self._clients.values() if now - c.last_seen_ms > self.expire_ms]
            for c in gone:
                del self._clients[c.client_id]
        return gone

    def clients(self) -> list[ClientInfo]:
        """Every known client."""
        with self._lock:
            return list(self._clients.values())

    def consumers_of_group(self, group: str) -> list[ClientInfo]:
        """The consumers of ``group``."""
        return [c for c in self.clients() if c.group == group and not c.is_producer]

    def producer_for_topic(self, topic: str) -> Optional[ClientInfo]:
        """A producer with a channel that publishes ``topic`` (the most recently heard
        from), else any producer with a channel, else None. RocketMQ 5 routes a
        transaction check to a producer of the half message's topic."""
        best = None
        fallback = None
        for c in self.clients():
            if not c.is_producer or c.channel is None:
                continue
            if topic in c.topics:
                if best is None or c.last_seen_ms > best.last_seen_ms:
                    best = c
            elif fallback is None or c.last_seen_ms > fallback.last_seen_ms:
                fallback = c
        return best or fallback

    def counts(self) -> dict[str, int]:
        """How many clients of each type."""
        out: dict[str, int] = {}
        for c in self.clients():
            key = c.client_type or "UNKNOWN"
            out[key] = out.get(key, 0) + 1
        return out
