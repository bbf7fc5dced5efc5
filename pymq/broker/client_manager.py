"""ClientManager: the producers and consumers connected to a broker, kept by heartbeat.

RocketMQ's broker keeps its clients in ``ProducerManager`` and ``ConsumerManager`` and drops
a channel that stayed silent for two minutes (``ClientHousekeepingService``); the 5.x proxy
keeps each gRPC client's settings beside it. pymq keeps one table for every protocol: a
client is known by its client id, registered by its first call (settings or heartbeat),
refreshed by every heartbeat, and forgotten when it says goodbye (``NotifyClientTermination``,
``UNREGISTER_CLIENT``), when its connection closes, or after ``expire_ms`` of silence.

A 5.x client is one producer or one consumer of one group (``client_type``, ``group``). A
4.x client (one ``ip@pid`` per process) may belong to several producer groups and consumer
groups at once: ``producer_groups`` and ``consumer_groups`` (group -> its subscriptions,
topic -> tag expression) hold what its heartbeats said.

A client may carry a ``channel``: whatever the protocol adapter needs to push commands to it
(the gRPC Telemetry stream, a remoting connection). The broker only hands it back, e.g. to
route a transaction check to a producer of the half message (``check_transaction``: any
channel with a ``check_transaction(msg)`` method). Adapters that must know when a client
goes (to stop renewals, to tell a group its members changed) add a listener.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Any, Callable, Optional

PRODUCER = "PRODUCER"
PUSH_CONSUMER = "PUSH_CONSUMER"
SIMPLE_CONSUMER = "SIMPLE_CONSUMER"

log = logging.getLogger("pymq.broker")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclasses.dataclass
class ClientInfo:
    """One connected client: its id, type (``PRODUCER``, ``PUSH_CONSUMER``,
    ``SIMPLE_CONSUMER``...), consumer group (None for producers), topics it publishes or
    subscribes, when it was last heard from (ms) and the adapter's ``channel``; for 4.x
    clients also the groups of its heartbeats, its address, language and version."""

    client_id: str
    client_type: str = ""
    group: Optional[str] = None
    topics: frozenset = frozenset()
    last_seen_ms: int = 0
    channel: Any = None
    settings: Any = None       # the adapter's view of the client's settings
    producer_groups: frozenset = frozenset()
    consumer_groups: dict = dataclasses.field(default_factory=dict)   # group -> {topic: expression}
    address: str = ""
    language: str = ""
    version: int = 0

    @property
    def is_producer(self) -> bool:
        return self.client_type == PRODUCER or bool(self.producer_groups)

    def in_consumer_group(self, group: str) -> bool:
        return (self.group == group and self.client_type != PRODUCER) or group in self.consumer_groups


class ClientManager:
    """Thread-safe table of :class:`ClientInfo` by client id."""

    def __init__(self, expire_ms: int = 120_000) -> None:
        self.expire_ms = expire_ms
        self._lock = threading.Lock()
        self._clients: dict[str, ClientInfo] = {}
        self._listeners: list[Callable[[ClientInfo], None]] = []

    def add_listener(self, fn: Callable[[ClientInfo], None]) -> None:
        """Call ``fn(info)`` for every client removed (goodbye, closed connection, expiry)."""
        self._listeners.append(fn)

    def _removed(self, gone) -> None:
        for info in gone:
            for fn in self._listeners:
                try:
                    fn(info)
                except Exception:
                    log.exception("client listener failed for %s", info.client_id)

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

    def heartbeat(self, client_id: str, channel: Any, producer_groups, consumer_groups: dict,
                  address: str = "", language: str = "", version: int = 0) -> tuple[ClientInfo, set]:
        """A 4.x heartbeat: the client's producer groups and consumer groups (group ->
        {topic: expression}) as it states them now. Returns its entry and the consumer
        groups whose membership changed (joined or left)."""
        with self._lock:
            info = self._clients.get(client_id)
            if info is None:
                info = self._clients[client_id] = ClientInfo(client_id)
            before = set(info.consumer_groups)
            info.channel = channel
            info.producer_groups = frozenset(producer_groups)
            info.consumer_groups = dict(consumer_groups)
            info.topics = frozenset(t for subs in consumer_groups.values() for t in subs)
            info.address = address or info.address
            info.language = language or info.language
            info.version = version or info.version
            info.client_type = info.client_type or (PUSH_CONSUMER if consumer_groups else PRODUCER)
            info.last_seen_ms = _now_ms()
            return info, before ^ set(consumer_groups)

    def leave_groups(self, client_id: str, producer_group: Optional[str] = None,
                     consumer_group: Optional[str] = None) -> bool:
        """A 4.x ``UNREGISTER_CLIENT``: the client leaves these groups; it is forgotten
        when it belongs to none. True when a consumer group lost it."""
        with self._lock:
            info = self._clients.get(client_id)
            if info is None:
                return False
            left = False
            if producer_group:
                info.producer_groups = info.producer_groups - {producer_group}
            if consumer_group and consumer_group in info.consumer_groups:
                info.consumer_groups = {g: s for g, s in info.consumer_groups.items() if g != consumer_group}
                left = True
            gone = not info.producer_groups and not info.consumer_groups and info.group is None
            if gone:
                del self._clients[client_id]
        if gone:
            self._removed([info])
        return left

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
            self._clients.pop(client_id)
        self._removed([info])
        return info

    def unregister_channel(self, channel: Any) -> list[ClientInfo]:
        """Forget every client whose channel is ``channel`` (its connection closed)."""
        with self._lock:
            gone = [c for c in self._clients.values() if c.channel is channel]
            for c in gone:
                del self._clients[c.client_id]
        self._removed(gone)
        return gone

    def scan_expired(self, now_ms: Optional[int] = None) -> list[ClientInfo]:
        """Remove and return the clients silent for more than ``expire_ms``."""
        now = _now_ms() if now_ms is None else now_ms
        with self._lock:
            gone = [c for c in self._clients.values() if now - c.last_seen_ms > self.expire_ms]
            for c in gone:
                del self._clients[c.client_id]
        self._removed(gone)
        return gone

    def clients(self) -> list[ClientInfo]:
        """Every known client."""
        with self._lock:
            return list(self._clients.values())

    def consumers_of_group(self, group: str) -> list[ClientInfo]:
        """The consumers of ``group``."""
        return [c for c in self.clients() if c.in_consumer_group(group)]

    def producers_of_group(self, group: str) -> list[ClientInfo]:
        """The 4.x producers of ``group``."""
        return [c for c in self.clients() if group in c.producer_groups]

    def subscriptions_of_group(self, group: str) -> dict[str, str]:
        """topic -> tag expression, as the group's 4.x consumers last stated them."""
        out: dict[str, str] = {}
        for c in self.consumers_of_group(group):
            out.update(c.consumer_groups.get(group, {}))
        return out

    def producer_for_topic(self, topic: str, group: Optional[str] = None) -> Optional[ClientInfo]:
        """A producer with a channel for a half message of ``topic`` sent by ``group``:
        the most recently heard from of ``group``'s producers, else of those publishing
        ``topic``, else any producer with a channel, else None. RocketMQ 4 routes a
        transaction check to the producer group, RocketMQ 5 to a producer of the topic."""
        best = by_topic = fallback = None
        for c in self.clients():
            if not c.is_producer or c.channel is None:
                continue
            if group and group in c.producer_groups:
                if best is None or c.last_seen_ms > best.last_seen_ms:
                    best = c
            elif topic in c.topics and c.client_type == PRODUCER:
                if by_topic is None or c.last_seen_ms > by_topic.last_seen_ms:
                    by_topic = c
            elif fallback is None or c.last_seen_ms > fallback.last_seen_ms:
                fallback = c
        return best or by_topic or fallback

    def check_transaction(self, msg) -> None:
        """A transaction checker for :meth:`pymq.Broker.set_transaction_checker` that
        asks a connected producer (``channel.check_transaction(msg)``); the producer's
        answer arrives later as an end-transaction call. Returns None (unknown for now)."""
        topic = msg.properties.get("REAL_TOPIC") or msg.topic
        info = self.producer_for_topic(topic, msg.properties.get("PGROUP"))
        check = getattr(info.channel, "check_transaction", None) if info is not None else None
        if check is None:
            log.info("no producer of %s connected to check a half message", topic)
            return None
        check(msg)
        return None

    def counts(self) -> dict[str, int]:
        """How many clients of each type."""
        out: dict[str, int] = {}
        for c in self.clients():
            key = c.client_type or "UNKNOWN"
            out[key] = out.get(key, 0) + 1
        return out
