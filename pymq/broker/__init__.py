"""What RocketMQ's broker module adds to its store: topic and subscription-group
configuration, retry and dead-letter queues, pop with an invisibility time, FIFO groups and
transactional messages. Usable embedded (``pymq.Broker``); ``pymq serve`` puts protocol
adapters in front of it. Nothing in ``pymq.store`` or ``pymq._core`` imports this package.
"""

from .broker import Broker
from .broker_config import BrokerConfig
from .subscription_group import SubscriptionGroupConfig

__all__ = ["Broker", "BrokerConfig", "SubscriptionGroupConfig"]
