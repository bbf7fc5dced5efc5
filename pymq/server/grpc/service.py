"""``MessagingService``: the gRPC servicer; each call (its credentials checked from its
headers by :mod:`.admission`, before its message was read) is handed to the activity that
translates it. Errors become the protocol's status in the
response, never a broken call: the clients read ``status.code``.
"""

from __future__ import annotations

import time

from rocketmq.grpc_protocol import service_pb2 as svc
from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc

from . import names
from .context import make_context
from .status import Code, RequestError, ok, status, status_of

#: what a slave answers the calls that would write (send, transaction end, recall,
#: dead-letter forward): its commit log is its master's. Receive, ack and invisibility
#: changes are served, their state kept in memory (:mod:`pymq.broker.slave_pop`)
SLAVE_REFUSAL = ("this broker is a slave (brokerRole SLAVE): it puts no messages (sends, transaction ends, "
                 "recalls, dead-letter forwards); call its master")

class MessagingService(svc_grpc.MessagingServiceServicer):
    """``apache.rocketmq.v2.MessagingService`` over a :class:`~pymq.server.grpc.GrpcServer`."""

    def __init__(self, server) -> None:
        self.server = server

    async def _unary(self, request, context, response_type, handler):
        server = self.server
        server.stats.calls += 1
        server.stats.in_flight += 1
        started = time.perf_counter()
        resp = None
        try:
            ctx = make_context(context)
            resp = await handler(ctx, request)
            return resp
        except Exception as exc:
            if isinstance(exc, RequestError):
                server.stats.errors += 1
            else:
                name = response_type.DESCRIPTOR.name[:-len("Response")]
                server.note_error(name, f"{name} failed: {exc!r}", exc)
            resp = response_type(status=status_of(exc))
            return resp
        finally:
            server.stats.in_flight -= 1
            if server.rpc_observer is not None:
                observe_call(server, response_type.DESCRIPTOR.name[:-len("Response")], resp, started)

    def _writing(self, handler):
        """``handler``, refused with FORBIDDEN on a slave before the request is looked at."""
        async def call(ctx, req):
            if self.server.broker.is_slave:
                raise RequestError(Code.FORBIDDEN, SLAVE_REFUSAL)
            return await handler(ctx, req)
        return call

    # -- routes and clients --------------------------------------------------------------

    async def QueryRoute(self, request, context):
        return await self._unary(request, context, svc.QueryRouteResponse, self.server.route.query_route)

    async def QueryAssignment(self, request, context):
        return await self._unary(request, context, svc.QueryAssignmentResponse, self.server.route.query_assignment)

    async def Heartbeat(self, request, context):
        return await self._unary(request, context, svc.HeartbeatResponse, self._heartbeat)

    async def _heartbeat(self, ctx, req):
        ctx.require_client_id()
        group = req.group.name if req.HasField("group") and req.group.name else None
        if group:
            self.server.groups.ensure(names.check_group(group))
        from .telemetry import CLIENT_TYPE_NAMES
        self.server.clients.register(ctx.client_id, CLIENT_TYPE_NAMES.get(req.client_type, ""), group)
        return svc.HeartbeatResponse(status=ok())

    async def NotifyClientTermination(self, request, context):
        return await self._unary(request, context, svc.NotifyClientTerminationResponse, self._terminate)

    async def _terminate(self, ctx, req):
        ctx.require_client_id()
        self.server.clients.unregister(ctx.client_id)      # the server's listener ends renewals, stream
        return svc.NotifyClientTerminationResponse(status=ok())

    async def Telemetry(self, request_iterator, context):
        self.server.stats.calls += 1
        try:
            ctx = make_context(context)
        except RequestError as exc:
            yield svc.TelemetryCommand(status=status_of(exc))
            return
        async for cmd in self.server.telemetry.telemetry(ctx, request_iterator):
            yield cmd

    # -- producing -----------------------------------------------------------------------

    async def SendMessage(self, request, context):
        return await self._unary(request, context, svc.SendMessageResponse,
                                 self._writing(self.server.send.send_message))

    async def EndTransaction(self, request, context):
        return await self._unary(request, context, svc.EndTransactionResponse,
                                 self._writing(self.server.transactions.end_transaction))

    async def RecallMessage(self, request, context):
        return await self._unary(request, context, svc.RecallMessageResponse,
                                 self._writing(self.server.send.recall_message))

    # -- consuming -----------------------------------------------------------------------

    async def ReceiveMessage(self, request, context):
        server = self.server
        server.stats.calls += 1
        server.stats.in_flight += 1
        started = time.perf_counter()
        first = None
        try:
            try:
                ctx = make_context(context)
            except RequestError as exc:
                yield svc.ReceiveMessageResponse(status=status_of(exc))
                return
            async for item in server.consume.receive_message(ctx, request):
                if first is None and item.HasField("status"):
                    first = item
                yield item
        finally:
            server.stats.in_flight -= 1
            if server.rpc_observer is not None:
                observe_call(server, "ReceiveMessage", first, started)

    async def AckMessage(self, request, context):
        return await self._unary(request, context, svc.AckMessageResponse, self.server.consume.ack_message)

    async def ChangeInvisibleDuration(self, request, context):
        return await self._unary(request, context, svc.ChangeInvisibleDurationResponse,
                                 self.server.consume.change_invisible_duration)

    async def ForwardMessageToDeadLetterQueue(self, request, context):
        return await self._unary(request, context, svc.ForwardMessageToDeadLetterQueueResponse,
                                 self._writing(self.server.consume.forward_to_dlq))

    # -- pull-style calls: not used by the official clients' Producer/SimpleConsumer/PushConsumer

    async def PullMessage(self, request, context):
        yield svc.PullMessageResponse(status=status(Code.UNSUPPORTED, "PullMessage is not supported by pymq"))

    async def UpdateOffset(self, request, context):
        return svc.UpdateOffsetResponse(status=status(Code.UNSUPPORTED, "UpdateOffset is not supported by pymq"))

    async def GetOffset(self, request, context):
        return svc.GetOffsetResponse(status=status(Code.UNSUPPORTED, "GetOffset is not supported by pymq"))

    async def QueryOffset(self, request, context):
        return svc.QueryOffsetResponse(status=status(Code.UNSUPPORTED, "QueryOffset is not supported by pymq"))

    async def SyncLiteSubscription(self, request, context):
        return await self._unary(request, context, svc.SyncLiteSubscriptionResponse,
                                 self.server.lite.sync_lite_subscription)


def observe_call(server, method: str, resp, started: float) -> None:
    """Report a finished call to the server's ``rpc_observer`` (latency metrics)."""
    code = Code.Name(resp.status.code) if resp is not None and resp.HasField("status") else "UNKNOWN"
    try:
        server.rpc_observer(method, code, time.perf_counter() - started)
    except Exception as e:      # metrics must never break a call
        server.note_error("metrics", "rpc observer failed", e)
