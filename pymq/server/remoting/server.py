"""``RemotingServer``: a :class:`pymq.Broker` behind RocketMQ 4.x's remoting protocol.

Two listeners on one asyncio loop: the name server (port 9876), which tells clients where
topics live (always this broker), and the broker (port 10911), which serves sends, pulls,
offsets, heartbeats, retries, transactions, queries and the admin calls. Either can be
turned off. Calls that return at once (appends under ``ASYNC_FLUSH``, pulls, offsets) run on
the loop; calls that may block (anything under ``SYNC_FLUSH``) run on a small thread pool.
Pulls park on the store's arrival notifications (``PullRequestHoldService``).

The server holds no message state: topics, groups, offsets, retries and transactions are
the broker's; clients are kept in the broker's client table, shared with the gRPC server.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
import ssl
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

from pymq.errors import PymqError

from ..addresses import route_host
from ..error_log import RequestErrorLog
from .admin import AdminProcessor
from .admission import (MAX_CONNECTION_BYTES, MAX_HEADER_BYTES, MAX_HEADER_FIELDS, MAX_INFLIGHT_BYTES,
                        MAX_UNAUTHENTICATED_BYTES, ByteBudget)
from .auth import RemotingAuthenticator
from .client_manage import ClientManageProcessor
from .codes import not_supported
from .connection import RemotingConnection
from .deadlines import ConnectionDeadlines
from .broker_registration import BrokerRegistration
from .namesrv import LocalBroker, NameServerProcessor
from .offset_reset import OffsetResetProcessor
from .pull import PullMessageProcessor
from .pull_hold import PullRequestHoldService
from .query import QueryMessageProcessor
from .route_table import MAX_BROKERS, MAX_QUEUE_DATAS
from .runtime_info import RuntimeInfo
from .send import SendMessageProcessor
from .send_queue import SendQueue
from .transaction import EndTransactionProcessor

log = logging.getLogger("pymq.server.remoting")

HOUSEKEEPING_S = 10.0


@dataclasses.dataclass
class RemotingConfig:
    """Settings of :class:`RemotingServer`; a port of None turns that listener off, 0
    picks a free one."""

    host: str = "127.0.0.1"
    namesrv_port: Optional[int] = 9876
    broker_port: Optional[int] = 10911
    # RocketMQ's "VIP channel" (fastListenPort, the broker port - 2): a second listener of
    # the broker's requests. A RocketMQ slave fetches its master's topics there
    # (SlaveSynchronize), and 4.x clients with vipChannelEnabled send there. None: off.
    vip_port: Optional[int] = None
    advertised_host: Optional[str] = None
    access_key: Optional[str] = None
    secret_key: Optional[str] = None
    tls_cert: Optional[str] = None         # PEM files: both listeners speak TLS only (RocketMQ's
    tls_key: Optional[str] = None          # tls.server.mode=enforcing; clients set tls.enable / useTLS)
    max_workers: int = 16
    pull_hold_max_ms: int = 20_000         # clients give up on a parked pull after 30 s
    default_query_max_num: int = 32        # defaultQueryMaxNum
    idle_timeout_s: float = 120.0          # serverChannelMaxIdleTimeSeconds: no read or write this long
                                           # closes a connection; 0: never
    frame_timeout_s: float = 10.0          # a frame begun must be complete within this; 0: no limit
    # what peers may make the server hold (:mod:`.admission`)
    max_inflight_bytes: int = MAX_INFLIGHT_BYTES                # frames being read or served, all connections
    max_unauthenticated_bytes: int = MAX_UNAUTHENTICATED_BYTES  # the same, connections not yet signed in
    max_connection_bytes: int = MAX_CONNECTION_BYTES            # the same, one connection
    max_header_bytes: int = MAX_HEADER_BYTES                    # a frame's header
    max_header_fields: int = MAX_HEADER_FIELDS                  # a header's ext fields
    # the send queue of SYNC_FLUSH (:mod:`.send_queue`): RocketMQ's names and defaults
    send_thread_pool_queue_capacity: int = 10_000   # sendThreadPoolQueueCapacity; 0: unbounded
    wait_time_ms_in_send_queue: int = 200           # waitTimeMillsInSendQueue; 0: no limit
    # the name server's registry (:mod:`.route_table`): what unauthenticated peers may register
    namesrv_max_brokers: int = MAX_BROKERS          # broker addresses besides this process's
    namesrv_max_queue_datas: int = MAX_QUEUE_DATAS  # (topic, broker name) routes
    ha_server_addr: Optional[str] = None            # the store's HA address to register (None: none)

    def __post_init__(self) -> None:
        for name in ("namesrv_port", "broker_port", "vip_port"):
            port = getattr(self, name)
            if port is not None and not 0 <= port <= 65535:
                raise PymqError(f"{name} must be in 0..65535 or None, not {port}")
        if self.idle_timeout_s < 0 or self.frame_timeout_s < 0:
            raise PymqError("idle_timeout_s and frame_timeout_s must be >= 0")
        for name in ("max_inflight_bytes", "max_unauthenticated_bytes", "max_connection_bytes",
                     "max_header_bytes", "max_header_fields"):
            if getattr(self, name) < 1:
                raise PymqError(f"{name} must be >= 1")
        if self.send_thread_pool_queue_capacity < 0 or self.wait_time_ms_in_send_queue < 0:
            raise PymqError("send_thread_pool_queue_capacity and wait_time_ms_in_send_queue must be >= 0")
        if bool(self.access_key) != bool(self.secret_key):
            raise PymqError("access_key and secret_key go together")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise PymqError("tls_cert and tls_key go together")


@dataclasses.dataclass
class RemotingStats:
    """Counters for the status line."""

    calls: int = 0
    sent: int = 0
    pulled: int = 0
    pulled_bytes: int = 0
    errors: int = 0
    refused_frames: int = 0     # frames answered at their header (no known access key), bodies dropped


class Processor:
    """A request-code table (``handlers``) built from the processors given; ``unknown(conn,
    cmd)`` answers a code none of them serves (None: no response at all)."""

    def __init__(self, *parts, unknown=not_supported) -> None:
        self.handlers: dict = {}
        for p in parts:
            self.handlers.update(p.handlers())
        self.unknown = unknown


class RemotingServer:
    """Serves ``broker`` (a started :class:`pymq.Broker`) to 4.x clients."""

    protocol_name = "remoting"      # the protocol_type label of its metrics

    def __init__(self, broker, config: Optional[RemotingConfig] = None) -> None:
        self.broker = broker
        self.config = cfg = config or RemotingConfig()
        self.clients = broker.client_manager
        self.authenticator = (RemotingAuthenticator({cfg.access_key: cfg.secret_key})
                              if cfg.access_key else None)
        self.executor = ThreadPoolExecutor(max_workers=cfg.max_workers, thread_name_prefix="pymq-remoting")
        self.stats = RemotingStats()
        self.connections: set[RemotingConnection] = set()
        self.inflight = ByteBudget("in-flight", cfg.max_inflight_bytes)
        self.unauthenticated = ByteBudget("unauthenticated", cfg.max_unauthenticated_bytes)
        self.stopping = False
        self.ports: dict[str, int] = {}
        self._inline = not broker.config.sync_flush
        self.send_queue = SendQueue(self, cfg.send_thread_pool_queue_capacity, cfg.wait_time_ms_in_send_queue)
        self._servers: list[asyncio.AbstractServer] = []
        self._tasks: list[asyncio.Task] = []
        self.error_log = RequestErrorLog(log)
        self.started_at = time.monotonic()
        self._opaque = 0
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        #: ``fn(request_code, response_code, seconds)`` for every request answered (metrics)
        self.rpc_observer = None
        #: ``in_observer(topic, message_type, messages, bytes)`` after a successful send and
        #: ``out_observer(topic, group, messages, bytes)`` after messages were handed to a
        #: consumer (the metrics' traffic counters, :mod:`pymq.server.traffic`); None: not counted
        self.in_observer = None
        self.out_observer = None
        self.hold = PullRequestHoldService(self)
        self.deadlines = ConnectionDeadlines(self, cfg.idle_timeout_s, cfg.frame_timeout_s)
        self.client_manage = ClientManageProcessor(self)
        self.pull = PullMessageProcessor(self)
        self.send = SendMessageProcessor(self)
        self.transactions = EndTransactionProcessor(self)
        self.broker_processor = Processor(self.send, self.pull, self.client_manage, QueryMessageProcessor(self),
                                          AdminProcessor(self), self.transactions, OffsetResetProcessor(self))
        self.namesrv = namesrv = NameServerProcessor(self)
        self.namesrv_processor = Processor(namesrv, unknown=namesrv.unknown)
        #: registration with the name servers of ``BrokerConfig.namesrv_addr`` (None: none);
        #: its ``on_master_changed`` is the hook a slave's replication is pointed with
        self.registration: Optional[BrokerRegistration] = None
        if broker.broker_config.namesrv_addr and cfg.broker_port is not None:
            self.registration = BrokerRegistration(self)
        self.runtime_info = RuntimeInfo(self)

    # -- helpers for the processors ----------------------------------------------------

    async def call(self, fn, *args):
        """``fn(*args)`` on the loop (``ASYNC_FLUSH``) or on the thread pool (``SYNC_FLUSH``)."""
        if self._inline:
            return fn(*args)
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    async def call_blocking(self, fn, *args):
        """``fn(*args)`` on the thread pool, whatever the flush mode (slow calls)."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    @property
    def broker_address(self) -> str:
        """``host:port`` that routes give clients for this broker."""
        cfg = self.config
        return f"{route_host(cfg.host, cfg.advertised_host)}:{self.ports.get('broker', cfg.broker_port or 0)}"

    @property
    def ha_server_addr(self) -> Optional[str]:
        """``host:port`` of the store's HA service that registrations carry (``ha_server_addr``
        when given, else the started master's HA port at the advertised host), or None."""
        if self.config.ha_server_addr:
            return self.config.ha_server_addr
        ha = getattr(self.broker, "ha", None)
        port = getattr(ha, "port", None) if not getattr(self.broker, "is_slave", False) else None
        if not port:
            return None
        return f"{route_host(self.config.host, self.config.advertised_host)}:{port}"

    def note_error(self, kind: str, message: str, exc: Optional[BaseException] = None) -> None:
        """Count a failure; log it at most once a minute per kind (:mod:`..error_log`)."""
        self.stats.errors += 1
        self.error_log.note(kind, message, exc)

    def next_opaque(self) -> int:
        """The opaque of a request the server sends."""
        self._opaque = (self._opaque + 1) & 0x7FFFFFFF
        return self._opaque

    def on_response(self, conn: RemotingConnection, cmd) -> None:
        """A response to a request the server sent (none expect one)."""

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self, sockets: Optional[dict] = None) -> dict[str, int]:
        """Listen on the enabled ports (or on ``sockets``, ``{"broker": sock, "vip": sock,
        "namesrv": sock}`` bound beforehand, see :func:`bind_listeners`); returns
        ``{"namesrv": port, "broker": port, "vip": port}`` (the enabled ones)."""
        cfg = self.config
        loop = self.loop = asyncio.get_running_loop()
        sockets = sockets or {}
        tls = {}
        if cfg.tls_cert:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(cfg.tls_cert, cfg.tls_key)
            # a handshake is a frame's worth of bytes: it gets the frame deadline
            tls = {"ssl": context, "ssl_handshake_timeout": cfg.frame_timeout_s or None}
        for name, port, processor in (("broker", cfg.broker_port, self.broker_processor),
                                      ("vip", cfg.vip_port, self.broker_processor),
                                      ("namesrv", cfg.namesrv_port, self.namesrv_processor)):
            if port is None:
                continue
            factory = (lambda p=processor: RemotingConnection(self, p))
            if name in sockets:
                server = await loop.create_server(factory, sock=sockets[name], backlog=1024, **tls)
            else:
                server = await loop.create_server(factory, cfg.host, port, reuse_address=True, backlog=1024, **tls)
            self._servers.append(server)
            self.ports[name] = server.sockets[0].getsockname()[1]
        if "broker" in self.ports:
            self.namesrv.attach_local(LocalBroker(self))    # this broker, in its own name server's table
        self.hold.start()
        self.clients.add_listener(self.client_manage.client_gone)
        self.broker.set_transaction_checker(self.clients.check_transaction)
        self._tasks.append(asyncio.ensure_future(self._housekeeping()))
        self._tasks.append(asyncio.ensure_future(self.deadlines.run()))
        if self.registration is not None:
            self.registration.start()
        return dict(self.ports)

    async def _housekeeping(self) -> None:
        while not self.stopping:
            await asyncio.sleep(HOUSEKEEPING_S)
            for info in self.clients.scan_expired():
                log.info("client %s expired", info.client_id)
            self.namesrv.scan_not_active()
            try:
                self.runtime_info.roll_day()
            except Exception as e:          # a figure of brokerStatus must never stop the housekeeping
                self.note_error("housekeeping", "recording the day's totals failed", e)

    async def stop(self) -> None:
        """Stop listening, answer parked pulls, close the connections."""
        if self.stopping:
            return
        self.stopping = True
        if self.registration is not None:
            await self.registration.stop()      # UNREGISTER_BROKER while the broker still serves
        for t in self._tasks:
            t.cancel()
        for s in self._servers:
            s.close()
        self.hold.stop()
        for conn in list(self.connections):
            conn.close()
        for s in self._servers:
            await s.wait_closed()
        self.executor.shutdown(wait=True, cancel_futures=True)

    def status_line(self) -> str:
        """One line: connections, calls, messages sent and pulled."""
        s = self.stats
        d = self.deadlines
        return (f"remoting connections={len(self.connections)} calls={s.calls} sent={s.sent} "
                f"pulled={s.pulled} pulled_bytes={s.pulled_bytes} parked={len(self.hold)} errors={s.errors} "
                f"closed_idle={d.closed_idle} closed_slow={d.closed_slow} refused_frames={s.refused_frames} "
                f"inflight={self.inflight.used >> 20}/{self.inflight.limit >> 20}MiB")


def bind_listeners(config: RemotingConfig) -> dict:
    """Bind the enabled listening sockets of ``config`` now (port 0 picks a free one), so
    that the broker's address is known before the store opens (records carry it as their
    store host, and the message ids clients compute from it point back here)."""
    out = {}
    for name, port in (("broker", config.broker_port), ("vip", config.vip_port), ("namesrv", config.namesrv_port)):
        if port is not None:
            out[name] = socket.create_server((config.host, port), reuse_port=False,
                                             family=socket.AF_INET6 if ":" in config.host else socket.AF_INET)
    return out
