"""``GrpcServer``: a :class:`pymq.Broker` behind RocketMQ 5's gRPC protocol (``grpc.aio``).

One asyncio loop runs every call. Broker calls that return at once (appends under
``ASYNC_FLUSH``, pops that find messages, acks) run on the loop itself, which is the fastest
path for small calls; calls that wait for the disk (anything under ``SYNC_FLUSH``) run on a
thread pool. Long polls park on the loop (:mod:`.consume`). Stopping refuses new calls, lets in-flight ones finish
(up to ``grace_s``), ends the Telemetry streams, and leaves the broker to its owner (``pymq
serve`` shuts it down: store flushed, checkpoint written).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

import grpc
from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc

from pymq.broker.client_manager import ClientManager
from pymq.broker.receipt_handle import InvalidReceiptHandleError, decode_receipt_handle

from ..error_log import RequestErrorLog
from .admission import Admission
from .auth import Authenticator
from .consume import ConsumeActivity
from .groups import GroupView
from .lite import LiteActivity
from .renewal import ReceiptRenewer
from .route import RouteActivity
from .send import SendActivity
from .server_config import ServerConfig
from .service import MessagingService, observe_call
from .telemetry import TelemetryActivity, TelemetryChannel
from .transactions import TransactionActivity

log = logging.getLogger("pymq.server")

HOUSEKEEPING_S = 5.0
STOP_POLL_S = 0.05      # stop: how often the in-flight count is looked at
STOP_DRAIN_S = 0.25     # stop: once no call is in flight, how long the last responses get to leave


@dataclasses.dataclass
class ServerStats:
    """Counters for the status line."""

    calls: int = 0
    in_flight: int = 0
    errors: int = 0
    sent: int = 0
    received: int = 0
    acked: int = 0


class GrpcServer:
    """Serves ``broker`` (a started :class:`pymq.Broker`) as configured by ``config``."""

    protocol_name = "grpc"          # the protocol_type label of its metrics

    def __init__(self, broker, config: Optional[ServerConfig] = None) -> None:
        self.broker = broker
        self.config = config or ServerConfig()
        cfg = self.config
        self.authenticator = (Authenticator({cfg.access_key: cfg.secret_key}, cfg.max_clock_skew_s,
                                            any_zone=cfg.clock_zones == "any")
                              if cfg.access_key else None)
        clients = getattr(broker, "client_manager", None)
        self.clients: ClientManager = clients if clients is not None else ClientManager(cfg.client_expire_ms)
        self.executor = ThreadPoolExecutor(max_workers=cfg.max_workers, thread_name_prefix="pymq-grpc")
        self.stats = ServerStats()
        self.error_log = RequestErrorLog(log)
        self.stopping = False
        self.port = cfg.port
        self._inline = not broker.config.sync_flush
        self.groups = GroupView(broker)
        self.route = RouteActivity(self)
        self.send = SendActivity(self)
        self.consume = ConsumeActivity(self)
        self.telemetry = TelemetryActivity(self)
        self.lite = LiteActivity(self)
        self.transactions = TransactionActivity(self)
        self.renewer = ReceiptRenewer(self, cfg.auto_renew_invisible_ms, cfg.auto_renew_max_ms)
        self.clients.add_listener(self._client_gone)
        self._server: Optional[grpc.aio.Server] = None
        self._tasks: list[asyncio.Task] = []
        self.started_at = time.monotonic()
        #: ``observer(method, response code name, seconds)`` after each call (the metrics'
        #: ``rocketmq_rpc_latency``, set by pymq.server.metrics); None: no timing
        self.rpc_observer = None
        #: ``in_observer(topic, message_type, messages, bytes)`` after a successful send and
        #: ``out_observer(topic, group, messages, bytes)`` after messages were handed to a
        #: consumer (the metrics' traffic counters, :mod:`pymq.server.traffic`); None: not counted
        self.in_observer = None
        self.out_observer = None

    def note_error(self, kind: str, message: str, exc: Optional[BaseException] = None) -> None:
        """Count a failed call; log it at most once a minute per kind (:mod:`..error_log`)."""
        self.stats.errors += 1
        self.error_log.note(kind, message, exc)

    async def call(self, fn, *args):
        """``fn(*args)`` on the loop (``ASYNC_FLUSH``) or on the thread pool (``SYNC_FLUSH``)."""
        if self._inline:
            return fn(*args)
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    def dead_letter(self, group: str, receipt_handle: str) -> None:
        """Move the message of ``receipt_handle`` to ``%DLQ%{group}`` and ack it, in one
        step under the pop lock (``forward_to_dead_letter``). Raises
        :class:`InvalidReceiptHandleError` when the delivery is not current or the
        handle is another group's."""
        h = decode_receipt_handle(receipt_handle)
        if h.group != group:
            raise InvalidReceiptHandleError(f"the receipt handle is group {h.group!r}'s, not {group!r}'s")
        self.broker.forward_to_dead_letter(receipt_handle)

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> int:
        """Bind and start serving; returns the port (useful with port 0)."""
        cfg = self.config
        options = [
            ("grpc.max_receive_message_length", cfg.inbound_limit),
            ("grpc.max_send_message_length", -1),
            ("grpc.so_reuseport", 0),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
            # a stream's receive window grows to the size of a message being read, not on
            # link estimates: with BDP probing, streams whose request is never read (refused
            # calls) were each let send megabytes, which the server held (docs/server.md, Limits)
            ("grpc.http2.bdp_probe", 1 if cfg.http2_bdp_probe else 0),
        ]
        # hostile or dead peers: a socket that never completes the HTTP/2 preface is closed
        # after the preface deadline, a connection with no call for the idle timeout gets
        # GOAWAY (clients redial when they next call; the official clients keep a Telemetry
        # stream open, so theirs stay)
        if cfg.preface_deadline_ms:
            options.append(("grpc.server_handshake_timeout_ms", cfg.preface_deadline_ms))
        if cfg.idle_timeout_ms:
            options.append(("grpc.max_connection_idle_ms", cfg.idle_timeout_ms))
        # credentials are checked, and unary requests awaited under the frame timeout, from
        # the call's headers before its message is read (:mod:`.admission`)
        interceptors = []
        timeout_s = cfg.handshake_timeout_ms / 1000
        if self.authenticator is not None or timeout_s:
            interceptors.append(Admission(self.authenticator, timeout_s, self._refused))
        server = grpc.aio.server(options=options, interceptors=interceptors,
                                 maximum_concurrent_rpcs=cfg.max_concurrent_calls or None)
        svc_grpc.add_MessagingServiceServicer_to_server(MessagingService(self), server)
        address = f"[{cfg.host}]:{cfg.port}" if ":" in cfg.host else f"{cfg.host}:{cfg.port}"
        if cfg.tls_cert:
            with open(cfg.tls_key, "rb") as f:
                key = f.read()
            with open(cfg.tls_cert, "rb") as f:
                cert = f.read()
            self.port = server.add_secure_port(address, grpc.ssl_server_credentials([(key, cert)]))
        else:
            self.port = server.add_insecure_port(address)
        if not self.port:
            raise OSError(f"cannot listen on {address}")
        await server.start()
        self._server = server
        self.transactions.start()
        self._tasks.append(asyncio.ensure_future(self._housekeeping()))
        self._tasks.append(asyncio.ensure_future(self.renewer.run()))
        return self.port

    def _refused(self, method: str, response) -> None:
        """A call refused by admission (no credentials...): counted as the handlers count
        theirs."""
        self.stats.calls += 1
        self.stats.errors += 1
        if self.rpc_observer is not None:
            observe_call(self, method.rsplit("/", 1)[-1], response, time.perf_counter())

    async def _housekeeping(self) -> None:
        while not self.stopping:
            await asyncio.sleep(HOUSEKEEPING_S)
            for info in self.clients.scan_expired():
                log.info("client %s (%s) expired", info.client_id, info.client_type)

    def _client_gone(self, info) -> None:
        """A client left the broker's table (goodbye, expiry, closed connection): stop
        renewing its messages, forget its lite subscriptions (as RocketMQ does) and end
        its Telemetry stream."""
        self.renewer.drop_client(info.client_id)
        self.broker.lite_subscriptions.remove_complete(info.client_id)
        if isinstance(info.channel, TelemetryChannel):
            info.channel.close()

    async def stop(self, grace: Optional[float] = None) -> None:
        """Stop accepting calls, let in-flight ones finish (``grace`` seconds at most), end
        the Telemetry streams.

        grpcio's own graceful stop also waits, for the whole grace, on connections that
        hold no call (idle clients, sockets that never spoke HTTP/2). So the in-flight calls
        are counted here: once none is left (and a moment for the last responses to be
        written), what remains is cancelled and every connection closed."""
        if self._server is None or self.stopping:
            return
        self.stopping = True
        for t in self._tasks:
            t.cancel()
        self.transactions.stop()
        for info in self.clients.clients():
            if isinstance(info.channel, TelemetryChannel):
                info.channel.close()
        grace = self.config.grace_s if grace is None else grace
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        graceful = asyncio.ensure_future(self._server.stop(grace))
        while not graceful.done() and self.stats.in_flight > 0 and loop.time() < deadline:
            await asyncio.wait((graceful,), timeout=STOP_POLL_S)
        if not graceful.done():
            await asyncio.wait((graceful,), timeout=max(0.0, min(STOP_DRAIN_S, deadline - loop.time())))
        if not graceful.done():
            await self._server.stop(0)      # no call left: close idle and silent connections now
        await graceful
        self.executor.shutdown(wait=True, cancel_futures=True)

    async def wait_for_termination(self) -> None:
        await self._server.wait_for_termination()

    def status_line(self) -> str:
        """One line: uptime, clients by type, calls, messages sent / received / acked."""
        s = self.stats
        clients = " ".join(f"{k.lower()}={v}" for k, v in sorted(self.clients.counts().items())) or "none"
        return (f"up {time.monotonic() - self.started_at:.0f}s clients[{clients}] calls={s.calls} "
                f"in_flight={s.in_flight} errors={s.errors} sent={s.sent} received={s.received} acked={s.acked}")
