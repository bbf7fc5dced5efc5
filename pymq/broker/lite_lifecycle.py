"""Lite-topic expiry (RocketMQ 5.5's ``LiteLifecycleManager``).

A LITE parent topic may say how long its lite topics live without new messages: topic
attribute ``lite.topic.expiration``, in minutes (-1, the default: for ever). Every
``lite_ttl_check_interval`` ms (120 s), once the broker has been up ``min_lite_ttl`` ms
(15 min; RocketMQ's protection after a restart), the check deletes each lite topic whose
last message was stored longer ago than both its parent's expiration and ``min_lite_ttl``
(whether its groups consumed it is not asked, as in RocketMQ):

* its LMQ (``%LMQ%$parent$lite`` queue 0) and every group's offset of it;
* the groups' pop state of it (RocketMQ's order info): nothing of it stays in flight;
* every client's subscription of it, without telling the clients (as RocketMQ).

The deletion runs under the lite writer's lock once the dispatcher filed what was put
(:meth:`.lite_writer.LiteWriter.delete_lmq`), the lite topic looked at again there: a
message put meanwhile keeps it. A message sent to it afterwards starts it afresh, at LMQ
offset 0; a client that still wants it subscribes it again (the 5.x clients sync their
whole set every 30 s). pymq counts a "minute" of the attribute as
``lite_topic_expiration_unit_ms`` (60 000; tests make it short).
"""

from __future__ import annotations

import collections
import time
from typing import Optional

from pymq.store.lmq import LMQ_QUEUE_ID
from pymq.store.service_thread import ServiceThread

from .lite_topic import parent_and_lite
from .topic_message_type import LITE, declared_message_type

LITE_TOPIC_EXPIRATION_ATTRIBUTE = "lite.topic.expiration"


def topic_expiration(topic_config) -> int:
    """A topic's ``lite.topic.expiration`` (minutes; <= 0 or unreadable: never)."""
    attrs = getattr(topic_config, "attributes", None) or {}
    try:
        return int(attrs.get(LITE_TOPIC_EXPIRATION_ATTRIBUTE, -1))
    except (TypeError, ValueError):
        return -1


class LiteLifecycleManager:
    """Finds and deletes the expired lite topics of a :class:`pymq.Broker`."""

    def __init__(self, broker, broker_config) -> None:
        self.broker = broker
        self.broker_config = broker_config
        #: when the broker started (monotonic s): no check runs before ``min_lite_ttl``
        self.started = time.monotonic()
        #: LMQ names of the last lite topics deleted (at most 1000), oldest first
        self.deleted: collections.deque = collections.deque(maxlen=1000)

    def expirations(self) -> dict:
        """``{LITE parent topic: lite.topic.expiration}``."""
        return {name: topic_expiration(tc) for name, tc in self.broker.topic_config_manager.topics().items()
                if declared_message_type(tc) == LITE}

    def is_expired(self, lmq: str, minutes: int, now_ms: Optional[int] = None) -> bool:
        """Whether ``lmq``, of a parent whose expiration is ``minutes``, is to go: its
        last message is older than ``min_lite_ttl`` and than ``minutes`` units."""
        if minutes is None or minutes <= 0:
            return False
        broker = self.broker
        if not broker.has_queue(lmq, LMQ_QUEUE_ID):
            return False
        max_offset = broker.get_max_offset_in_queue(lmq, LMQ_QUEUE_ID)
        if max_offset <= 0:
            return False
        last = broker.get_message_store_timestamp(lmq, LMQ_QUEUE_ID, max_offset - 1)
        if last <= 0:
            return False
        idle = (int(time.time() * 1000) if now_ms is None else now_ms) - last
        if idle < self.broker_config.min_lite_ttl:
            return False
        return idle > minutes * self.broker_config.lite_topic_expiration_unit_ms

    def clean_expired(self) -> list:
        """One check: delete the expired lite topics; returns their LMQ names."""
        ttl = self.expirations()
        gone = []
        for lmq in self.broker.get_topics():
            names = parent_and_lite(lmq)
            if names is None:
                continue
            minutes = ttl.get(names[0], -1)
            if self.is_expired(lmq, minutes) and self.delete_lmq(lmq, minutes):
                gone.append(lmq)
        return gone

    def delete_lmq(self, lmq: str, minutes: int) -> bool:
        """Delete an expired lite topic: its queue, offsets and pop state
        (``Broker.delete_lite_topic``), then its subscriptions. Returns False when a message
        came meanwhile (it is looked at again under the writer's lock)."""
        broker = self.broker
        if not broker.lite_writer.delete_lmq(lmq, lambda: self.is_expired(lmq, minutes),
                                             broker.delete_lite_topic):
            return False
        broker.lite_subscriptions.clean_subscription(lmq)
        self.deleted.append(lmq)
        return True

    def may_run(self) -> bool:
        """Whether the broker has been up ``min_lite_ttl`` ms."""
        return (time.monotonic() - self.started) * 1000 >= self.broker_config.min_lite_ttl


class LiteTtlCheckService(ServiceThread):
    """Runs :meth:`LiteLifecycleManager.clean_expired` every ``lite_ttl_check_interval``
    ms, once the broker has been up ``min_lite_ttl`` ms."""

    name = "LiteLifecycleManager"

    def __init__(self, manager: LiteLifecycleManager, interval_ms: int) -> None:
        super().__init__(interval_ms / 1000.0)
        self.manager = manager

    def run_once(self) -> None:
        if self.manager.may_run():
            self.manager.clean_expired()
