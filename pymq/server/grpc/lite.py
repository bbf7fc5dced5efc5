"""Lite topics over gRPC: ``SyncLiteSubscription`` and the lite push consumer's receive.

A lite push consumer (client type ``LITE_PUSH_CONSUMER``) names one parent topic, of type
LITE, and a consumer group bound to it (group attribute ``lite.bind.topic``; RocketMQ
refuses a group bound elsewhere with ``ILLEGAL_TOPIC``, and pymq binds a group that names
no topic yet to the first parent a lite consumer brings, as it creates groups on first
use). Its settings tell it ``lite_subscription_quota`` (the group's
``lite.sub.client.quota``, 2000 by default) and ``max_lite_topic_size`` (64). It then
syncs the lite topics it wants (:mod:`pymq.broker.lite_subscriptions`; a set of more than
quota + 300 is ``LITE_SUBSCRIPTION_QUOTA_EXCEEDED``) and receives with ReceiveMessage on
the parent's assignment: the server pops the LMQs of its lite topics, FIFO per lite topic
(:mod:`pymq.broker.lite_pop`, at most 32 messages a call), long-polling on arrivals in any
of them. Its acks, invisible-time changes and dead-letter requests name the lite topic
(``lite_topic``), whose LMQ the receipt handle belongs to.

A PARTIAL_ADD's ``offset_option`` moves the group's offset of each lite topic named
(:mod:`pymq.broker.lite_offset`); in an exclusive group (``lite.sub.model=Exclusive``) it
takes those lite topics from the group's other clients, each of which gets a
``NotifyUnsubscribeLiteCommand`` on its Telemetry stream, as RocketMQ's broker notifies
them.
"""

from __future__ import annotations

import asyncio

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc

from pymq.aio import AsyncStore
from pymq.broker.lite_offset import apply_offset_option, reset_lite_offset
from pymq.broker.lite_pop import lite_wait_condition, pop_lite
from pymq.broker.lite_subscriptions import LiteSubscriptionQuotaError
from pymq.broker.lite_topic import (LITE_BIND_TOPIC_ATTRIBUTE, LITE_QUOTA_BUFFER, MAX_LITE_TOPIC_SIZE,
                                    IllegalLiteTopicError, check_lite_topic, is_sub_lite_exclusive,
                                    lite_bind_topic, lite_sub_client_quota, parent_and_lite,
                                    reset_offset_in_exclusive_mode, reset_offset_on_unsubscribe, to_lmq_name)
from pymq.broker.pop_service import PopResult, PopStatus
from pymq.broker.topic_message_type import LITE, declared_message_type

from . import names
from .status import Code, RequestError, ok

LITE_CLIENT_TYPES = frozenset({"LITE_PUSH_CONSUMER", "LITE_SIMPLE_CONSUMER"})
MAX_LITE_POP = 32           # PopLiteMessageProcessor: a pop of lite topics takes at most 32
POLL_SLICE_S = 1.0          # a parked receive looks again this often (subscriptions change)

_Action = pb.LiteSubscriptionAction


def lite_queue(topic: str, lite_topic: str) -> str:
    """The LMQ a receipt handle of ``lite_topic`` under ``topic`` belongs to."""
    return to_lmq_name(topic, lite_topic)


class LiteActivity:
    """Lite subscriptions and lite receives for a :class:`~pymq.server.grpc.GrpcServer`."""

    def __init__(self, server) -> None:
        self.server = server

    @property
    def registry(self):
        return self.server.broker.lite_subscriptions

    # -- checks ------------------------------------------------------------------------

    def check_parent(self, topic: str) -> None:
        """``topic`` exists and is a LITE topic."""
        tc = self.server.broker.topic_config_manager.select_topic_config(topic)
        if tc is None:
            raise RequestError(Code.TOPIC_NOT_FOUND, f"topic {topic!r} does not exist")
        if declared_message_type(tc) != LITE:
            raise RequestError(Code.BAD_REQUEST, f"the topic [{topic}] message type not match")

    def check_bind(self, group: str, topic: str):
        """The group's config, bound to ``topic`` (bound now when it names no topic)."""
        cfg = self.server.groups.ensure(group)
        bound = lite_bind_topic(cfg)
        if bound is None:
            sgm = self.server.broker.subscription_group_manager
            cfg.attributes = dict(cfg.attributes, **{LITE_BIND_TOPIC_ATTRIBUTE: topic})
            sgm.update_subscription_group_config(cfg)
        elif bound != topic:
            raise RequestError(Code.ILLEGAL_TOPIC, f"lite group {group} is expected to bind topic {bound}, "
                                                   f"but actual is {topic}")
        return cfg

    def check_client(self, group: str, topics) -> None:
        """What RocketMQ checks when a lite consumer registers: its one topic is its
        group's bound parent."""
        for topic in topics:
            self.check_parent(names.check_topic(topic))
            self.check_bind(group, topic)

    def settings(self, group: str, sub: pb.Subscription) -> None:
        """A lite consumer's part of its settings."""
        cfg = self.server.broker.subscription_group_manager.get(group)
        sub.lite_subscription_quota = lite_sub_client_quota(cfg)
        sub.max_lite_topic_size = MAX_LITE_TOPIC_SIZE

    # -- SyncLiteSubscription ------------------------------------------------------------

    async def sync_lite_subscription(self, ctx, req: svc.SyncLiteSubscriptionRequest
                                     ) -> svc.SyncLiteSubscriptionResponse:
        ctx.require_client_id()
        topic = names.check_topic(req.topic.name)
        group = names.check_group(req.group.name)
        self.check_parent(topic)
        cfg = self.check_bind(group, topic)
        lites = []
        for lite in req.lite_topic_set:
            try:
                lites.append(check_lite_topic(lite))
            except IllegalLiteTopicError as e:
                raise RequestError(Code.ILLEGAL_LITE_TOPIC, str(e)) from None
        quota = lite_sub_client_quota(cfg)
        if len(lites) > quota + LITE_QUOTA_BUFFER:
            raise RequestError(Code.LITE_SUBSCRIPTION_QUOTA_EXCEEDED, f"lite subscription quota exceeded: {quota}")
        lmqs = [to_lmq_name(topic, lite) for lite in lites]
        client = ctx.client_id
        self.server.clients.register(client)
        try:
            if req.action == _Action.PARTIAL_ADD:
                evicted = self.registry.add_partial(client, group, topic, lmqs, is_sub_lite_exclusive(cfg))
                await self.server.call(self._after_add, group, cfg, lmqs, evicted, req)
            elif req.action == _Action.PARTIAL_REMOVE:
                self.registry.remove_partial(client, group, topic, lmqs)
                if reset_offset_on_unsubscribe(cfg):
                    for lmq in lmqs:
                        await self.server.call(reset_lite_offset, self.server.broker.pop_service, group, lmq, 0)
            elif req.action == _Action.COMPLETE_ADD:
                self.registry.add_complete(client, group, topic, lmqs)
            elif req.action == _Action.COMPLETE_REMOVE:
                self.registry.remove_complete(client)
            else:
                raise RequestError(Code.BAD_REQUEST, f"unknown lite subscription action {req.action}")
        except LiteSubscriptionQuotaError as e:
            raise RequestError(Code.LITE_SUBSCRIPTION_QUOTA_EXCEEDED, str(e)) from None
        return svc.SyncLiteSubscriptionResponse(status=ok())

    def _after_add(self, group: str, cfg, lmqs, evicted, req) -> None:
        """After a PARTIAL_ADD: tell the clients that lost lite topics (their group's
        offset back to 0 with ``lite.sub.reset.offset.exclusive``), then apply the
        request's offset option to each of its lite topics."""
        svc_ = self.server.broker.pop_service
        reset = reset_offset_in_exclusive_mode(cfg)
        for other, lmq in evicted:
            self.notify_unsubscribe(other, lmq)
            if reset:
                reset_lite_offset(svc_, group, lmq, 0)
        if req.HasField("offset_option"):
            opt = req.offset_option
            kind = opt.WhichOneof("offset_type")
            value = getattr(opt, kind) if kind else None
            if kind == "policy":
                value = pb.OffsetOption.Policy.Name(value)
            if kind is not None:
                for lmq in lmqs:
                    apply_offset_option(svc_, group, lmq, kind, value)

    def notify_unsubscribe(self, client_id: str, lmq: str) -> bool:
        """Send ``NotifyUnsubscribeLiteCommand`` for ``lmq`` to the client's Telemetry
        stream; False when it has none."""
        info = self.server.clients.get(client_id)
        push = getattr(getattr(info, "channel", None), "push", None)
        names_ = parent_and_lite(lmq)
        if push is None or names_ is None:
            return False
        cmd = svc.TelemetryCommand()
        cmd.notify_unsubscribe_lite_command.lite_topic = names_[1]
        return push(cmd)

    # -- receive -------------------------------------------------------------------------

    def _lmqs(self, client_id: str, topic: str) -> tuple:
        sub = self.registry.subscription(client_id)
        return tuple(sorted(sub.lmqs)) if sub is not None and sub.topic == topic else ()

    async def pop(self, ctx, group: str, topic: str, batch: int, invisible: int, polling_ms: int) -> PopResult:
        """A lite consumer's pop: its lite topics' messages, or, after ``polling_ms`` of
        waiting for some, none."""
        self.check_parent(topic)
        self.check_bind(group, topic)
        server = self.server
        svc_ = server.broker.pop_service
        batch = min(batch, MAX_LITE_POP)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + polling_ms / 1000.0
        waiters = AsyncStore(server.broker).waiters()
        while True:
            lmqs = self._lmqs(ctx.client_id, topic)
            if lmqs:
                if server._inline:
                    result = pop_lite(svc_, group, lmqs, batch, invisible)
                else:
                    result = await loop.run_in_executor(server.executor, pop_lite, svc_, group, lmqs, batch,
                                                        invisible)
            else:
                result = PopResult(PopStatus.NO_NEW_MSG, [], svc_.clock(), invisible)
            left = deadline - loop.time()
            if result.messages or left <= 0 or server.stopping:
                return result
            if lmqs:
                ready, wait_s = lite_wait_condition(svc_, group, lmqs, left)
                await waiters.wait(lmqs, ready, min(wait_s, POLL_SLICE_S))
            else:
                await asyncio.sleep(min(left, POLL_SLICE_S))
