"""Telemetry: the bidirectional stream each client keeps open.

The client sends its ``Settings`` (type, publishing topics or subscription); the server
registers the client and answers with the settings it must use: for producers the backoff
policy and the body size limit; for consumers the group's FIFO flag, the receive batch
size, the long-polling timeout and the group's retry policy (RocketMQ 5's proxy merges the
same from its config and the subscription group), and for lite consumers their lite
subscription quota and the longest lite topic name (:mod:`.lite`). The stream is also the server's way to
reach a client: a producer gets ``RecoverOrphanedTransactionCommand`` on it when a half
message of its topic is left unresolved, and answers with EndTransaction.
"""

from __future__ import annotations

import asyncio
import logging

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc

from . import names
from .lite import LITE_CLIENT_TYPES
from .status import Code, ok, status, status_of
from .transactions import recover_orphaned_transaction_command

log = logging.getLogger("pymq.server")

CLIENT_TYPE_NAMES = {v.number: v.name for v in pb.ClientType.DESCRIPTOR.values}


class TelemetryChannel:
    """The server's end of one client's Telemetry stream: commands pushed from any thread
    are written to the stream in order."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: asyncio.Queue = asyncio.Queue()
        self.closed = False

    def push(self, command: svc.TelemetryCommand) -> bool:
        """Queue ``command`` for the client; False when the stream is gone."""
        if self.closed:
            return False
        self.loop.call_soon_threadsafe(self.queue.put_nowait, command)
        return True

    def check_transaction(self, msg) -> bool:
        """Ask this producer about the half message ``msg`` (it answers with
        EndTransaction); called by the broker's transaction check."""
        return self.push(recover_orphaned_transaction_command(msg))

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.loop.call_soon_threadsafe(self.queue.put_nowait, None)


class TelemetryActivity:
    """Runs Telemetry streams for a :class:`~pymq.server.grpc.GrpcServer`."""

    def __init__(self, server) -> None:
        self.server = server

    def answer_settings(self, settings: pb.Settings) -> pb.Settings:
        """The settings the client gets back."""
        cfg = self.server.config
        out = pb.Settings()
        out.CopyFrom(settings)
        out.metric.on = False
        if settings.HasField("publishing"):
            bp = out.backoff_policy
            bp.Clear()
            bp.max_attempts = cfg.producer_max_attempts
            bp.exponential_backoff.initial.FromMilliseconds(cfg.producer_backoff_initial_ms)
            bp.exponential_backoff.max.FromMilliseconds(cfg.producer_backoff_max_ms)
            bp.exponential_backoff.multiplier = cfg.producer_backoff_multiplier
            out.publishing.max_body_size = cfg.max_body_size
            out.publishing.validate_message_type = True
        elif settings.HasField("subscription"):
            group = settings.subscription.group.name
            g = self.server.groups.settings_of(group)
            sub = out.subscription
            sub.fifo = g.fifo
            sub.receive_batch_size = cfg.receive_batch_size
            sub.long_polling_timeout.FromMilliseconds(cfg.max_long_polling_ms)
            bp = out.backoff_policy
            bp.Clear()
            bp.max_attempts = g.retry_max_times + 1
            if g.exponential is not None:
                bp.exponential_backoff.initial.FromMilliseconds(g.exponential[0])
                bp.exponential_backoff.max.FromMilliseconds(g.exponential[1])
                bp.exponential_backoff.multiplier = g.exponential[2]
            else:
                for ms in g.retry_delays_ms:
                    bp.customized_backoff.next.add().FromMilliseconds(ms)
            if CLIENT_TYPE_NAMES.get(settings.client_type) in LITE_CLIENT_TYPES:
                self.server.lite.settings(group, sub)
        return out

    def _register(self, ctx, settings: pb.Settings, channel: TelemetryChannel) -> None:
        client_type = CLIENT_TYPE_NAMES.get(settings.client_type, "")
        group = None
        topics = []
        if settings.HasField("publishing"):
            topics = [t.name for t in settings.publishing.topics]
        if settings.HasField("subscription"):
            group = settings.subscription.group.name or None
            topics = [s.topic.name for s in settings.subscription.subscriptions]
            if group:
                self.server.groups.ensure(names.check_group(group))
                if client_type in LITE_CLIENT_TYPES:
                    self.server.lite.check_client(group, topics)
        self.server.clients.register(ctx.client_id, client_type, group, topics, channel, settings)

    async def telemetry(self, ctx, request_iterator):
        """Async generator of TelemetryCommand items for one client's stream."""
        if not ctx.client_id:
            yield svc.TelemetryCommand(status=status(Code.CLIENT_ID_REQUIRED, "x-mq-client-id header is required"))
            return
        channel = TelemetryChannel(asyncio.get_running_loop())

        async def read() -> None:
            try:
                async for cmd in request_iterator:
                    if cmd.HasField("settings"):
                        try:
                            self._register(ctx, cmd.settings, channel)
                            reply = svc.TelemetryCommand(status=ok(), settings=self.answer_settings(cmd.settings))
                        except Exception as exc:
                            reply = svc.TelemetryCommand(status=status_of(exc))
                        channel.queue.put_nowait(reply)
                    elif cmd.HasField("thread_stack_trace") or cmd.HasField("verify_message_result"):
                        pass    # answers to commands pymq does not send
                    else:
                        self.server.clients.register(ctx.client_id)
            except asyncio.CancelledError:
                raise
            except Exception as exc:   # the client's side broke off
                log.debug("telemetry stream of %s ended: %s", ctx.client_id, exc)
            finally:
                channel.close()

        reader = asyncio.ensure_future(read())
        try:
            while True:
                cmd = await channel.queue.get()
                if cmd is None or self.server.stopping:
                    break
                yield cmd
        finally:
            reader.cancel()
            channel.closed = True
            self.server.clients.unregister(ctx.client_id, channel)
