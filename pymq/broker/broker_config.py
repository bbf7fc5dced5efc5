"""``BrokerConfig``: what RocketMQ's ``BrokerConfig`` holds for the features pymq's broker
layer adds on top of the store (topic auto-creation, retry, pop, transactions).

Intervals and timeouts are in milliseconds, as in RocketMQ; every default is RocketMQ's
unless its comment says otherwise. Tests set the intervals small.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from pymq.errors import PymqError


@dataclasses.dataclass
class BrokerConfig:
    """Configuration of a :class:`pymq.Broker` (the store's own settings stay in
    :class:`pymq.StoreConfig`)."""

    broker_name: str = "broker-a"
    cluster_name: str = "DefaultCluster"
    broker_id: int = 0                           # brokerId: 0 the master, 1.. its slaves

    # -- name servers (pymq/server/remoting/broker_registration.py) ---------------------
    namesrv_addr: Optional[str] = None           # namesrvAddr: "host:port;host:port" to register with
    register_name_server_period: int = 30_000    # registerNameServerPeriod (used within 10 s..60 s)
    register_broker_timeout_mills: int = 6_000   # registerBrokerTimeoutMills
    compressed_register: bool = False            # compressedRegister: the deflated body form

    # -- topics and groups ------------------------------------------------------------
    auto_create_topic_enable: bool = True        # autoCreateTopicEnable
    default_topic_queue_nums: int = 4            # defaultTopicQueueNums (a 4.x producer's)
    # pymq: sends (and routes) create no more topics once the broker holds this many of
    # its clients' topics (system, retry and dead-letter topics do not count; an admin's
    # updateTopic is not limited); each topic takes files and a topics.json entry. 0: none
    max_topics: int = 4096
    # pymq: a topic's read and write queue numbers (updateTopic, gRPC and remoting admin
    # calls) are at most this: each queue takes files, and a route lists every queue
    max_queues_per_topic: int = 1024
    auto_create_subscription_group: bool = True  # autoCreateSubscriptionGroup

    # -- retry and dead letter --------------------------------------------------------
    max_reconsume_times: int = 16                # retryMaxTimes of a new subscription group
    retry_queue_nums: int = 1                    # retryQueueNums of a new subscription group

    # -- pop (receive / ack) ----------------------------------------------------------
    pop_revive_interval: int = 100               # ms between looks for expired invisibility
                                                 # (pymq: RocketMQ polls its revive topic)
    priority_order_asc: bool = True              # priorityOrderAsc: queue 0 is the lowest priority

    # -- lite topics (5.x) ------------------------------------------------------------
    max_lmq_consume_queue_num: int = 20_000      # maxLmqConsumeQueueNum: LMQs (lite topics) at most
    max_lite_subscription_count: int = 100_000   # maxLiteSubscriptionCount: (client, lite topic) pairs at most
    lite_ttl_check_interval: int = 120_000       # liteTtlCheckInterval: ms between looks for expired lite topics
    min_lite_ttl: int = 15 * 60 * 1000           # minLiteTTl: no expiry before the broker is up this long, nor
                                                 # of a lite topic whose last message is younger
    # pymq: ms in one unit of the lite.topic.expiration attribute (RocketMQ: a minute,
    # fixed); tests set it small
    lite_topic_expiration_unit_ms: int = 60_000

    # -- replication (master / slave) --------------------------------------------------
    # slaveReadEnable: pulls may be steered to a slave (the group's brokerId, or
    # whichBrokerWhenConsumeSlowly when far behind); off, every pull answer suggests the master
    slave_read_enable: bool = False
    # pymq: seconds between a slave's metadata syncs from its master (RocketMQ: 10 s, fixed;
    # tests set it small)
    slave_sync_interval_s: float = 10.0

    # -- transactions -----------------------------------------------------------------
    transaction_timeout: int = 6_000             # transactionTimeOut: a half this old is checked
    transaction_check_max: int = 15              # transactionCheckMax: then it is discarded
    transaction_check_interval: int = 60_000     # transactionCheckInterval

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise :class:`PymqError` when a value cannot work."""
        if not 0 <= self.broker_id < 1 << 63:
            raise PymqError("broker_id must be >= 0 (0: master)")
        if self.register_name_server_period < 1 or self.register_broker_timeout_mills < 1:
            raise PymqError("register_name_server_period and register_broker_timeout_mills must be positive")
        if self.default_topic_queue_nums < 1 or self.retry_queue_nums < 1:
            raise PymqError("queue numbers must be >= 1")
        if not 1 <= max(self.default_topic_queue_nums, self.retry_queue_nums) <= self.max_queues_per_topic:
            raise PymqError("max_queues_per_topic must be at least the default and retry queue numbers")
        if self.max_reconsume_times < 0 or self.transaction_check_max < 0:
            raise PymqError("max_reconsume_times and transaction_check_max must be >= 0")
        if min(self.pop_revive_interval, self.transaction_timeout, self.transaction_check_interval) < 1:
            raise PymqError("intervals and timeouts must be positive")
        if min(self.lite_ttl_check_interval, self.lite_topic_expiration_unit_ms) < 1 or self.min_lite_ttl < 0:
            raise PymqError("lite_ttl_check_interval and lite_topic_expiration_unit_ms must be positive, "
                            "min_lite_ttl >= 0")
        if not self.slave_sync_interval_s > 0:
            raise PymqError("slave_sync_interval_s must be positive")
