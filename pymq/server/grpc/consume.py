"""ReceiveMessage, AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue.

ReceiveMessage pops from every queue of the topic for the consumer group (the broker's pop:
each message hidden from the group for the invisible duration) and long-polls when there is
nothing: up to the request's ``long_polling_timeout`` (clamped as the proxy does, and cut to
the call's deadline), parked on the event loop and woken by the store's arrival
notifications, not a timer, so a thousand waiting consumers hold no thread. The answer is
the stream RocketMQ 5 clients read: a ``status``, the messages, then a ``delivery_timestamp``.
A push consumer asks for ``auto_renew`` and no invisible duration: its messages are hidden
for ``auto_renew_invisible_ms`` and renewed while it holds them (:mod:`.renewal`). A lite
consumer receives from the lite topics it subscribed to (:mod:`.lite`); its acks and
changes name the lite topic whose queue the receipt handle is of.
"""

from __future__ import annotations

import asyncio

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc
from google.protobuf import timestamp_pb2

from pymq.aio import AsyncStore
from pymq.broker.receipt_handle import InvalidReceiptHandleError, decode_receipt_handle

from ..traffic import observe
from . import names
from .convert import now_ms, to_pb_message
from .lite import LITE_CLIENT_TYPES, lite_queue
from .status import Code, RequestError, ok, status, status_of
from .topics import find_topic


POLL_SLICE_S = 1.0          # a parked receive re-checks for shutdown this often (woken at once by arrivals)
NACK_INVISIBLE_MS = 1_000   # messages that could not be written to the client come back after this


def _duration_ms(d) -> int:
    return d.seconds * 1000 + d.nanos // 1_000_000


def _filter(req) -> str | None:
    fe = req.filter_expression
    if not req.HasField("filter_expression") or fe.type in (pb.FilterType.TAG, pb.FilterType.FILTER_TYPE_UNSPECIFIED):
        expr = fe.expression.strip() if req.HasField("filter_expression") else ""
        return None if expr in ("", "*") else expr
    raise RequestError(Code.ILLEGAL_FILTER_EXPRESSION, "only TAG filter expressions are supported")


def _timestamp_now() -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromMilliseconds(now_ms())
    return ts


class ConsumeActivity:
    """Answers the consumer calls for a :class:`~pymq.server.grpc.GrpcServer`."""

    def __init__(self, server) -> None:
        self.server = server

    # -- receive -------------------------------------------------------------------------

    def _check_receive(self, ctx, req):
        cfg = self.server.config
        group = names.check_group(req.group.name)
        topic = names.check_topic(req.message_queue.topic.name)
        find_topic(self.server.broker, topic)
        self.server.groups.ensure(group)
        tags = _filter(req)
        if req.auto_renew and not req.HasField("invisible_duration"):
            invisible = cfg.auto_renew_invisible_ms
        else:
            invisible = _duration_ms(req.invisible_duration)
            if invisible < cfg.min_invisible_ms:
                raise RequestError(Code.ILLEGAL_INVISIBLE_TIME,
                                   f"invisible duration must be at least {cfg.min_invisible_ms} ms")
        batch = req.batch_size or cfg.receive_batch_size
        if not 1 <= batch <= cfg.max_receive_batch:
            raise RequestError(Code.BAD_REQUEST, f"batch size must be in 1..{cfg.max_receive_batch}")
        polling = _duration_ms(req.long_polling_timeout) if req.HasField("long_polling_timeout") else cfg.max_long_polling_ms
        polling = min(max(polling, cfg.min_long_polling_ms), cfg.max_long_polling_ms)
        remaining = ctx.time_remaining()
        if remaining is not None:
            # leave the answer time to travel back before the client's deadline
            budget = int(remaining * 1000) - 500
            if budget < 0:
                raise RequestError(Code.ILLEGAL_POLLING_TIME, "the deadline leaves no time for polling")
            polling = min(polling, budget)
        renew = req.auto_renew and not req.HasField("invisible_duration")
        return group, topic, tags, invisible, batch, polling, renew

    async def _pop(self, group, topic, tags, invisible, batch, polling_ms):
        """Pop, and when nothing came, wait on the loop (no thread held) for what can
        change that: an arrival in the topic, an ack that frees a FIFO group, the next
        in-flight deadline (``PopService.wait_condition``); then pop again."""
        server = self.server
        pop = server.broker.pop_service
        loop = asyncio.get_running_loop()
        deadline = loop.time() + polling_ms / 1000.0
        waiters = AsyncStore(server.broker).waiters()
        while True:
            version = pop.wake_version(topic)
            result = await self._pop_once(pop, group, topic, batch, invisible, tags)
            left = deadline - loop.time()
            if result.messages or left <= 0 or server.stopping:
                return result
            ready, wait_s = pop.wait_condition(group, topic, version, left)
            await waiters.wait((topic,), ready, min(wait_s, POLL_SLICE_S))

    async def _pop_once(self, pop, group, topic, batch, invisible, tags):
        if self.server._inline:
            return pop.pop_message(group, topic, batch, invisible, tags)
        # SYNC_FLUSH: the pop waits for its checkpoint on disk, on the thread pool
        fut = asyncio.get_running_loop().run_in_executor(self.server.executor, pop.pop_message, group, topic,
                                                         batch, invisible, tags)
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            # the client gave up (deadline, cancel): what the pop still takes goes back soon
            fut.add_done_callback(self._nack_when_done)
            raise

    def _nack_when_done(self, fut) -> None:
        if fut.cancelled() or fut.exception() is not None or not fut.result().messages:
            return
        asyncio.ensure_future(self._nack(fut.result().messages))

    async def receive_message(self, ctx, req: svc.ReceiveMessageRequest):
        """Async generator of ReceiveMessageResponse items."""
        try:
            group, topic, tags, invisible, batch, polling, renew = self._check_receive(ctx, req)
            ctx.require_client_id()
            info = self.server.clients.register(ctx.client_id)
            if getattr(info, "client_type", None) in LITE_CLIENT_TYPES:
                result = await self.server.lite.pop(ctx, group, topic, batch, invisible, polling)
            else:
                result = await self._pop(group, topic, tags, invisible, batch, polling)
        except Exception as exc:
            if not isinstance(exc, RequestError):
                self.server.note_error("ReceiveMessage", f"ReceiveMessage failed: {exc!r}", exc)
            yield svc.ReceiveMessageResponse(status=status_of(exc))
            yield svc.ReceiveMessageResponse(delivery_timestamp=_timestamp_now())
            return
        msgs = result.messages
        if not msgs:
            yield svc.ReceiveMessageResponse(status=status(Code.MESSAGE_NOT_FOUND, "no new message"))
            yield svc.ReceiveMessageResponse(delivery_timestamp=_timestamp_now())
            return
        sent = 0
        try:
            yield svc.ReceiveMessageResponse(status=ok())
            for m in msgs:
                yield svc.ReceiveMessageResponse(message=to_pb_message(m, invisible_ms=invisible))
                sent += 1
                if renew:
                    self.server.renewer.hold(ctx.client_id, m.receipt_handle, invisible)
            self.server.stats.received += sent
            yield svc.ReceiveMessageResponse(delivery_timestamp=_timestamp_now())
        finally:
            if sent and self.server.out_observer is not None:
                observe(self.server, self.server.out_observer, topic, group, sent,
                        sum(m.store_size for m in msgs[:sent]))
            if sent < len(msgs):      # the client went away: hand the rest back soon
                await self._nack(msgs[sent:])

    async def _nack(self, msgs) -> None:
        pop = self.server.broker.pop_service
        for m in msgs:
            try:
                await self.server.call(pop.change_invisible_time, m.receipt_handle, NACK_INVISIBLE_MS)
            except Exception:
                pass

    # -- ack and change ------------------------------------------------------------------

    @staticmethod
    def _handle_topic(topic: str, entry) -> str:
        """The queue topic of a receipt handle: the lite topic's LMQ when the request
        names one (a lite consumer's), else ``topic``."""
        if entry.HasField("lite_topic") and entry.lite_topic:
            return lite_queue(topic, entry.lite_topic)
        return topic

    @staticmethod
    def _check_handle(handle: str, group: str, topic: str) -> None:
        try:
            h = decode_receipt_handle(handle)
        except InvalidReceiptHandleError as e:
            raise RequestError(Code.INVALID_RECEIPT_HANDLE, str(e)) from None
        if h.group != group or h.topic != topic:
            raise RequestError(Code.INVALID_RECEIPT_HANDLE,
                               f"receipt handle is of group {h.group!r} topic {h.topic!r}")

    async def ack_message(self, ctx, req: svc.AckMessageRequest) -> svc.AckMessageResponse:
        group = names.check_group(req.group.name)
        topic = names.check_topic(req.topic.name)
        if not req.entries:
            raise RequestError(Code.BAD_REQUEST, "no entry to ack")
        resp = svc.AckMessageResponse()
        handles, slots = [], []
        for entry in req.entries:
            e = resp.entries.add(message_id=entry.message_id, receipt_handle=entry.receipt_handle)
            try:
                self._check_handle(entry.receipt_handle, group, self._handle_topic(topic, entry))
            except RequestError as exc:
                e.status.CopyFrom(status_of(exc))
                continue
            handles.append(self.server.renewer.release(entry.receipt_handle))
            slots.append(e)
        if handles:
            outcomes = await self.server.call(self.server.broker.pop_service.ack_messages, handles)
            for e, outcome in zip(slots, outcomes):
                if outcome is None:
                    e.status.CopyFrom(ok())
                else:
                    e.status.CopyFrom(status(Code.INVALID_RECEIPT_HANDLE, str(outcome)))
        codes = {e.status.code for e in resp.entries}
        if codes == {Code.OK}:
            resp.status.CopyFrom(ok())
        elif len(resp.entries) == 1:
            resp.status.CopyFrom(resp.entries[0].status)
        else:
            resp.status.CopyFrom(status(Code.MULTIPLE_RESULTS, "entries have different results"))
        self.server.stats.acked += sum(1 for e in resp.entries if e.status.code == Code.OK)
        return resp

    async def change_invisible_duration(self, ctx, req: svc.ChangeInvisibleDurationRequest
                                        ) -> svc.ChangeInvisibleDurationResponse:
        group = names.check_group(req.group.name)
        topic = names.check_topic(req.topic.name)
        self._check_handle(req.receipt_handle, group, self._handle_topic(topic, req))
        ms = _duration_ms(req.invisible_duration)
        if ms < 0:
            raise RequestError(Code.ILLEGAL_INVISIBLE_TIME, "invisible duration must not be negative")
        current = self.server.renewer.release(req.receipt_handle)
        try:
            handle = await self.server.call(self.server.broker.change_invisible_time, current, ms)
        except InvalidReceiptHandleError as e:
            raise RequestError(Code.INVALID_RECEIPT_HANDLE, str(e)) from None
        return svc.ChangeInvisibleDurationResponse(status=ok(), receipt_handle=handle)

    # -- dead letter ---------------------------------------------------------------------

    async def forward_to_dlq(self, ctx, req: svc.ForwardMessageToDeadLetterQueueRequest
                             ) -> svc.ForwardMessageToDeadLetterQueueResponse:
        group = names.check_group(req.group.name)
        topic = names.check_topic(req.topic.name)
        self._check_handle(req.receipt_handle, group, self._handle_topic(topic, req))
        try:
            await self.server.call(self.server.dead_letter, group, self.server.renewer.release(req.receipt_handle))
        except InvalidReceiptHandleError as e:
            raise RequestError(Code.INVALID_RECEIPT_HANDLE, str(e)) from None
        return svc.ForwardMessageToDeadLetterQueueResponse(status=ok())
