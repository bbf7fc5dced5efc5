"""Broker: a MessageStore with what RocketMQ's broker module adds to its store.

RocketMQ splits a broker into the store (``DefaultMessageStore``) and the broker module
around it (``BrokerController``): topic and subscription-group configuration, the
consumers' retry and dead-letter queues (``sendMessageBack``), pop with an invisibility
time (5.x), and transactional messages. pymq does the same: ``pymq.MessageStore`` is the
store, and ``Broker`` is a ``MessageStore`` that also owns those services, usable
embedded in one process and served to other processes by ``pymq serve``.

This class wires and delegates; the algorithms live in the modules beside it.
"""

from __future__ import annotations

import dataclasses
import os
import time
from concurrent.futures import Future
from typing import Any, Callable, Optional

from pymq.config import StoreConfig
from pymq.errors import StoreStateError
from pymq.message_store import MessageStore
from pymq.status import PutMessageStatus

from .broker_config import BrokerConfig
from .broker_role import SLAVE, check_writable, refused_put
from .broker_stats import broker_stats
from .client_manager import ClientManager
from .lite_lifecycle import LiteLifecycleManager, LiteTtlCheckService
from .lite_offset import restart_pop_state
from .lite_subscriptions import LiteSubscriptionRegistry
from .lite_topic import lite_queues_of
from .lite_writer import LiteWriter
from .pop_service import PopMessageService
from .recall import RecallTooLateError, decode_recall_handle, delete_mark, encode_recall_handle
from .rebalance_lock import RebalanceLockManager
from .retry import SendMessageBackService
from .subscription_group import SubscriptionGroupConfig, SubscriptionGroupManager
from .topic_config import PERM_READ, PERM_WRITE, TopicConfigManager, retry_topic
from .transaction import TransactionalMessageService
from .validators import group_problem, is_system_group


class Broker(MessageStore):
    """A writeable store in ``path`` plus the broker's consumption services.

    Everything a :class:`pymq.MessageStore` does, and: ``send_message_back`` (retry and
    dead-letter queues), ``pop_message`` / ``ack_message`` / ``change_invisible_time``
    (receive with an invisibility time, FIFO groups), ``put_half_message`` /
    ``end_transaction`` / ``set_transaction_checker`` (transactional messages). Topic and
    group settings are kept in ``config/topics.json`` and ``config/subscriptionGroup.json``.
    """

    def __init__(self, path: str | os.PathLike, config: Optional[StoreConfig] = None,
                 broker_config: Optional[BrokerConfig] = None) -> None:
        if broker_config is not None and not isinstance(broker_config, BrokerConfig):
            raise TypeError(f"broker_config must be a pymq.BrokerConfig, not {type(broker_config).__name__}")
        super().__init__(path, config)
        try:
            bc = self.broker_config = broker_config if broker_config is not None else BrokerConfig()
            self.topic_config_manager = TopicConfigManager(self.store_path, bc)
            self._load_table(self.topic_config_manager)
            if not self.read_only:
                self.topic_config_manager.ensure_default_topic()
            self.subscription_group_manager = SubscriptionGroupManager(self.store_path, bc)
            self._load_table(self.subscription_group_manager)
            self.send_back_service = SendMessageBackService(self, bc)
            self.pop_service = PopMessageService(self, bc)
            #: LITE messages into their lite topics' LMQs (:mod:`.lite_writer`)
            self.lite_writer = LiteWriter(self, bc)
            #: which lite topics each lite consumer wants (:mod:`.lite_subscriptions`)
            self.lite_subscriptions = LiteSubscriptionRegistry(bc)
            #: lite-topic expiry (:mod:`.lite_lifecycle`), run by ``_lite_ttl_service``
            self.lite_lifecycle = LiteLifecycleManager(self, bc)
            self._lite_ttl_service = LiteTtlCheckService(self.lite_lifecycle, bc.lite_ttl_check_interval)
            self.transaction_service = TransactionalMessageService(self, bc)
            #: the producers and consumers of every protocol served (``pymq serve``)
            self.client_manager = ClientManager()
            #: queue locks of 4.x orderly consumers
            self.rebalance_lock_manager = RebalanceLockManager()
            #: what the process serving this broker warns about (``pymq serve``: a public bind
            #: without access keys, plaintext listeners), ``{"kind", "message"}`` each; shown in
            #: ``stats()["server"]["warnings"]`` and the metrics
            self.server_warnings: list[dict] = []
            self._registered_groups: set[str] = set()     # groups whose retry topic exists
            if self.is_slave:
                self._refuse_puts()
        except BaseException:
            super().shutdown()
            raise

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> "Broker":
        """Start the store, then the broker's services (revive, transaction check, lite-topic
        expiry); on a slave no transaction check or lite-topic expiry, nor delay-level and
        timer delivery, and the revive service of its in-memory pop state
        (:mod:`.broker_role`, :mod:`.slave_pop`)."""
        if self._running:
            return self
        if self.is_slave:
            self._hold_master_services()
        super().start()
        self.pop_service.start()
        if not self.is_slave:
            self.transaction_service.start()
            self.lite_lifecycle.started = time.monotonic()
            self._lite_ttl_service.start()
        return self

    # -- role (brokerRole) ---------------------------------------------------------------------

    @property
    def broker_role(self) -> str:
        """``ASYNC_MASTER``, ``SYNC_MASTER`` or ``SLAVE`` (the store's ``broker_role``)."""
        return self.config.broker_role

    @property
    def is_slave(self) -> bool:
        """True on a slave: no writes of its own, its tables synced from the master."""
        return self.config.broker_role == SLAVE

    def _refuse_puts(self) -> None:
        """A slave's puts return ``SERVICE_NOT_AVAILABLE`` and write nothing, as 4.9.7's
        store answers them (``checkStoreStatus``). Bound on the instance, so a master's put
        path stays as it is."""
        def refuse(*args, **kwargs):
            self._check_open()
            return refused_put()

        def refuse_async(*args, **kwargs):
            done: Future = Future()
            done.set_result(refuse())
            return done
        self.put_message = self.put_messages = self.put_bodies = refuse
        self.async_put_message = self.async_put_messages = self.async_put_bodies = refuse_async

    def _hold_master_services(self) -> None:
        """Delay-level and timer delivery write records: on a slave they do not start
        (4.9.7's ``handleScheduleMessageService`` runs the schedule service on a master
        only). Their offsets stay as the store has them (the slave sync writes the delay
        offsets, :mod:`pymq.server.remoting.slave_sync`)."""
        def held() -> None:
            return None
        self.schedule_service.start = held
        self.delay_offset_persist_service.start = held
        self.timer_service.start = held

    def shutdown(self) -> None:
        """Stop the broker's services, persist its tables, then shut the store down."""
        if self._closed:
            return
        if self._running:
            if not self.is_slave:
                self._lite_ttl_service.shutdown()
                self.transaction_service.shutdown()
            self.pop_service.shutdown()
        self.topic_config_manager.close()
        self.subscription_group_manager.close()
        super().shutdown()

    close = shutdown

    def __enter__(self) -> "Broker":
        return self.start()

    def stats(self) -> dict:
        """The store's :meth:`~pymq.MessageStore.stats` plus ``pop``: per consumer group
        and topic, messages in flight (received, not acked), waiting (FIFO) and unread;
        ``transactions``, ``services`` and ``server`` (``{"warnings": [...]}``, the serving
        process's, see :attr:`server_warnings`)."""
        return broker_stats(self, super().stats())

    # -- consumer groups ---------------------------------------------------------------------

    def update_subscription_group(self, group: str, **settings: Any) -> SubscriptionGroupConfig:
        """Create or change consumer group ``group`` (mqadmin's ``updateSubGroup``) and
        persist it in ``config/subscriptionGroup.json``; ``settings`` are fields of
        :class:`~pymq.broker.subscription_group.SubscriptionGroupConfig`, e.g.
        ``consume_message_orderly=True`` (a FIFO group: the messages of one message group
        are received one at a time, in order) or ``retry_max_times=3``. Fields not given
        keep their current (or default) values. Returns the group's new settings."""
        if not isinstance(group, str) or not group:
            raise TypeError("group must be a non-empty str")
        current = self.subscription_group_manager.find_subscription_group_config(group)
        base = current if current is not None else SubscriptionGroupConfig(group)
        fields = {f.name for f in dataclasses.fields(SubscriptionGroupConfig)} - {"group_name"}
        unknown = set(settings) - fields
        if unknown:
            raise TypeError(f"unknown subscription group settings: {', '.join(sorted(unknown))}")
        return self.subscription_group_manager.update_subscription_group_config(
            dataclasses.replace(base, **settings))

    def register_consumer_group(self, group: str) -> Optional[SubscriptionGroupConfig]:
        """What a RocketMQ broker does for a consumer group it hears of (a heartbeat): the
        group's subscription entry (created when groups are created automatically) and its
        retry topic ``%RETRY%{group}``. Returns the group's settings, or None when the group
        is unknown and may not be created."""
        cfg = self.subscription_group_manager.find_subscription_group_config(group)
        if cfg is not None:
            self.topic_config_manager.create_topic_of_group(retry_topic(group), cfg.retry_queue_nums,
                                                            PERM_READ | PERM_WRITE)
        return cfg

    def put_lite_message(self, msg, lite_topic: str):
        """Append ``msg`` (its topic the parent, its queue chosen) as a message of
        ``lite_topic`` (:class:`.lite_writer.LiteWriter`)."""
        return self.lite_writer.put(msg, msg.topic, lite_topic)

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int, durable: bool = False) -> None:
        """:meth:`pymq.MessageStore.commit_offset`; the first time a client's group commits,
        it is registered as a heartbeat would (:meth:`register_consumer_group`), so
        RocketMQ's tools (``consumerProgress``) find the group's routes in this store too."""
        if group not in self._registered_groups and self._client_group(group):
            if self.register_consumer_group(group) is not None:
                self._registered_groups.add(group)
        super().commit_offset(group, topic, queue_id, offset, durable)

    @staticmethod
    def _client_group(group) -> bool:
        """A valid name of a client's group (not the broker's own ``CID_RMQ_SYS_...``)."""
        return isinstance(group, str) and group_problem(group) is None and not is_system_group(group)

    # -- retry and dead letter ---------------------------------------------------------------

    def send_message_back(self, group: str, msg, delay_level: int = 0,
                          max_reconsume_times: Optional[int] = None):
        """Hand a consumed message back for a later retry (4.x ``consumerSendMsgBack``);
        see :class:`~pymq.broker.retry.SendMessageBackService`."""
        self._check_open()
        return self.send_back_service.send_message_back(group, msg, delay_level, max_reconsume_times)

    # -- pop: receive with an invisibility time ----------------------------------------------

    def pop_message(self, group: str, topic: str, max_nums: int = 32, invisible_time_ms: int = 60_000,
                    tags: Optional[str] = None, timeout_s: float = 0.0):
        """Receive up to ``max_nums`` messages of ``topic`` for ``group``, hidden from the
        group for ``invisible_time_ms``, waiting up to ``timeout_s`` when there are none;
        see :class:`~pymq.broker.pop_service.PopMessageService` (on a slave the pop state
        is kept in memory only, :mod:`.slave_pop`)."""
        self._check_open()
        return self.pop_service.pop_message(group, topic, max_nums, invisible_time_ms, tags, timeout_s)

    def ack_message(self, receipt_handle: str):
        """Remove a popped message for good."""
        self._check_open()
        return self.pop_service.ack_message(receipt_handle)

    def forward_to_dead_letter(self, receipt_handle: str) -> None:
        """Move a popped message to ``%DLQ%{group}`` now and ack it (5.x
        ``ForwardMessageToDeadLetterQueue``); a stale handle moves nothing."""
        self._check_open()
        check_writable(self.broker_role, "forwarding to the dead-letter queue")
        self.pop_service.forward_to_dead_letter(receipt_handle)

    def change_invisible_time(self, receipt_handle: str, invisible_time_ms: int) -> str:
        """Hide a popped message for ``invisible_time_ms`` from now; returns its new handle."""
        self._check_open()
        return self.pop_service.change_invisible_time(receipt_handle, invisible_time_ms)

    def delete_topic(self, topic: str) -> bool:
        """The store's ``delete_topic``, plus the broker's: every group's pop state of the
        topic, its lite topics' queues and its entry in ``config/topics.json``."""
        deleted = super().delete_topic(topic)
        self.pop_service.forget_topic(topic)
        for lmq in lite_queues_of(self.get_topics(), topic):      # its lite topics go with it
            super().delete_topic(lmq)
            self.pop_service.forget_topic(lmq)
            self.lite_writer.forget(lmq)
        deleted = self.topic_config_manager.delete_topic_config(topic) or deleted
        return deleted

    def delete_lite_topic(self, lmq: str) -> bool:
        """Delete a lite topic's LMQ (it expired, :mod:`.lite_lifecycle`; call it with no
        message of it being put): the store deletes its queue and every group's offset of
        it, then every group's pop state of it starts over at offset 0, where its next
        message will be (a pop in between finds no queue)."""
        deleted = super().delete_topic(lmq)
        svc = self.pop_service
        with svc._lock:
            groups = sorted({key[0] for key in svc.state.queues if key[1] == lmq})
            puts = [restart_pop_state(svc, group, lmq, 0) for group in groups]
        if puts:
            svc.revive_log.wait_durable(puts[-1])
        return deleted

    # -- recall ------------------------------------------------------------------------------

    def recall_handle(self, msg, result) -> Optional[str]:
        """The recall handle of ``msg`` stored with ``result``: for a message put with a
        ``deliver_time_ms`` still to come, else None (see :mod:`pymq.broker.recall`)."""
        deliver = msg.deliver_time_ms
        if deliver is None or not result.is_ok() or deliver <= int(time.time() * 1000):
            return None
        return encode_recall_handle(msg.topic, self.broker_config.broker_name, deliver, result.uniq_key)

    def recall_message(self, topic: str, recall_handle: str) -> str:
        """Cancel the delayed message of ``recall_handle`` (RocketMQ 5.3's RecallMessage)
        before its delivery time; returns its message id. Raises
        :class:`~pymq.broker.recall.InvalidRecallHandleError`,
        :class:`~pymq.broker.recall.RecallTooLateError`, or
        :class:`~pymq.errors.StoreStateError` when the store refuses the delete mark."""
        self._check_open()
        check_writable(self.broker_role, "recall")
        mark = delete_mark(topic, recall_handle)
        r = self.put_message(mark)
        if r.status is PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL:
            raise RecallTooLateError(f"the delivery time of the recalled message passed: {r.status.name}")
        if not r.is_ok():
            raise StoreStateError(f"cannot write the recall: {r.status.name}")
        return decode_recall_handle(recall_handle).message_id

    # -- transactions ------------------------------------------------------------------------

    def put_half_message(self, msg, producer_group: str = "DEFAULT_PRODUCER"):
        """Store a prepared (half) message, invisible until ``end_transaction`` commits it."""
        self._check_open()
        if self.is_slave:
            return refused_put()
        return self.transaction_service.put_half_message(msg, producer_group)

    def end_transaction(self, handle, commit: bool = True):
        """Commit (make visible in its topic and queue) or roll back a half message."""
        self._check_open()
        check_writable(self.broker_role, "ending a transaction")
        return self.transaction_service.end_transaction(handle, commit)

    def set_transaction_checker(self, checker: Optional[Callable]) -> None:
        """Register ``checker(msg) -> TransactionResolution`` for halves left open past
        ``transaction_timeout``."""
        self.transaction_service.set_transaction_checker(checker)

    def __repr__(self) -> str:
        return f"Broker({self.store_path!r}, running={self._running})"
