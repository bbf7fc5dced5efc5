"""``ServerConfig``: what ``pymq serve`` listens on and how it treats clients.

Defaults follow the RocketMQ 5 proxy (``ProxyConfig``) where one applies; times are in
milliseconds as there.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from pymq.errors import PymqError

from ..addresses import route_host

#: room for what a SendMessage carries besides its bodies (topic, ids, tags, keys, user
#: properties, protobuf framing of a batch), on top of max_body_size
INBOUND_ROOM = 1024 * 1024


@dataclasses.dataclass
class ServerConfig:
    """Listening address, credentials, TLS files and client-facing limits of a
    :class:`~pymq.server.grpc.GrpcServer`."""

    host: str = "127.0.0.1"             # bind address; 127.0.0.1 unless asked otherwise
    port: int = 8081                    # the proxy's gRPC port
    advertised_host: Optional[str] = None  # the address routes name; default: host, or
                                        # 127.0.0.1 when bound to every interface
    access_key: Optional[str] = None    # with secret_key: every call must be signed
    secret_key: Optional[str] = None
    tls_cert: Optional[str] = None      # PEM files: serve TLS instead of plaintext
    tls_key: Optional[str] = None

    max_body_size: int = 4 * 1024 * 1024         # maxMessageSize
    min_long_polling_ms: int = 5_000             # grpcClientConsumerMinLongPollingTimeoutMillis
    max_long_polling_ms: int = 20_000            # grpcClientConsumerMaxLongPollingTimeoutMillis
    receive_batch_size: int = 32                 # grpcClientConsumerLongPollingBatchSize
    min_invisible_ms: int = 1_000                # below this a receive is refused
    auto_renew_invisible_ms: int = 60_000        # renewSliceTimeMillis: a push consumer's message is
                                                 # hidden this long, renewed while its client holds it
    auto_renew_max_ms: int = 3 * 3600_000        # renewed at most this long after the receive
    max_receive_batch: int = 1024
    client_expire_ms: int = 120_000              # a client silent this long is dropped
    producer_max_attempts: int = 3               # producers' backoff policy
    producer_backoff_initial_ms: int = 10
    producer_backoff_max_ms: int = 1_000
    producer_backoff_multiplier: float = 2.0
    grace_s: float = 10.0                        # SIGTERM: how long in-flight calls may finish
    idle_timeout_ms: int = 120_000               # grpcClientIdleTimeMills: a connection with no call this
                                                 # long is closed (GOAWAY); 0: never
    handshake_timeout_ms: int = 10_000           # a connection must complete its TLS handshake and HTTP/2
                                                 # preface + SETTINGS within this (the lesser of it and the
                                                 # idle timeout); 0: gRPC's default (120 s)
    max_workers: int = 64                        # threads for broker calls that wait for the disk (SYNC_FLUSH)
    max_inbound_bytes: Optional[int] = None      # largest gRPC message received; None: max_body_size + 1 MiB
                                                 # (see inbound_limit)
    max_concurrent_calls: int = 4096             # calls in progress at once, long polls and Telemetry streams
                                                 # included; beyond, RESOURCE_EXHAUSTED (see validate); 0: no cap
    http2_bdp_probe: bool = False                # grow HTTP/2 windows on bandwidth-delay estimates (gRPC's
                                                 # default); off: bounded memory for streams never read
    max_clock_skew_s: float = 900                # a signed call's x-mq-date-time must be this near the server's
                                                 # clock (auth.py); 0: not checked
    clock_zones: str = "server"                  # the compact date-time read as UTC or the server's zone
                                                 # ("server"), or in any zone ("any": clients elsewhere)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise :class:`PymqError` when a value cannot work."""
        if not 0 <= self.port <= 65535:
            raise PymqError(f"port must be in 0..65535, not {self.port}")
        if bool(self.access_key) != bool(self.secret_key):
            raise PymqError("access_key and secret_key go together")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise PymqError("tls_cert and tls_key go together")
        if self.idle_timeout_ms < 0 or self.handshake_timeout_ms < 0:
            raise PymqError("idle_timeout_ms and handshake_timeout_ms must be >= 0")
        if self.min_long_polling_ms > self.max_long_polling_ms:
            raise PymqError("min_long_polling_ms must not exceed max_long_polling_ms")
        if self.max_inbound_bytes is not None and not 1024 <= self.max_inbound_bytes < 2 ** 31:
            raise PymqError(f"max_inbound_bytes must be in 1024..2**31-1, not {self.max_inbound_bytes}")
        if self.clock_zones not in ("server", "any"):
            raise PymqError(f"clock_zones must be 'server' or 'any', not {self.clock_zones!r}")
        if self.max_concurrent_calls < 0 or self.max_clock_skew_s < 0:
            raise PymqError("max_concurrent_calls and max_clock_skew_s must be >= 0")

    @property
    def inbound_limit(self) -> int:
        """The largest gRPC message received (``grpc.max_receive_message_length``); a larger
        one is refused by gRPC with ``RESOURCE_EXHAUSTED``.

        RocketMQ 5's proxy allows 130 MiB (``ProxyConfig.grpcMaxInboundMessageSize``) while
        its broker stores at most 4 MiB (``maxMessageSize``, which for a batch counts the
        encoded batch: bodies, properties and per-message framing). pymq takes
        ``max_body_size`` plus 1 MiB (5 MiB by default): a single message at the body
        limit with its 16 KiB of properties fits, and so does a batch of 4 MiB of bodies
        with up to 1 MiB of per-message fields (about 5000 messages of a few hundred bytes
        of topic, id, tag, keys and properties each). A batch of more, smaller messages
        needs a larger ``max_inbound_bytes``; RocketMQ's broker would count those fields
        against its 4 MiB too."""
        return self.max_inbound_bytes if self.max_inbound_bytes is not None else self.max_body_size + INBOUND_ROOM

    @property
    def preface_deadline_ms(self) -> int:
        """How long a new connection may take to speak HTTP/2 (``grpc.server_handshake_timeout_ms``):
        the handshake timeout, cut to the idle timeout (a connection silent from its start is
        idle); 0 leaves gRPC's default."""
        limits = [x for x in (self.handshake_timeout_ms, self.idle_timeout_ms) if x > 0]
        return min(limits) if limits else 0

    @property
    def route_host(self) -> str:
        """The host that routes send clients back to."""
        return route_host(self.host, self.advertised_host)
