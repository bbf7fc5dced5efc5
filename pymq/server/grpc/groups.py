"""The consumer-group facts the protocol needs, from the broker's ``SubscriptionGroupManager``:
whether a group exists (or is created on first use), its FIFO flag, retry limit and
backoff."""

from __future__ import annotations

from typing import NamedTuple

from .status import Code, RequestError

# RocketMQ's delay levels 3..18 (1s 5s 10s 30s 1m ... 2h): the retry backoff of a group
# whose retry policy is the default (CustomizedRetryPolicy)
DEFAULT_RETRY_DELAYS_MS = (1_000, 5_000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000,
                           360_000, 420_000, 480_000, 540_000, 600_000, 1_200_000, 1_800_000, 3_600_000,
                           7_200_000)


class GroupSettings(NamedTuple):
    """What a consumer of a group is told in its settings."""

    fifo: bool
    retry_max_times: int
    retry_delays_ms: tuple


class GroupView:
    """Reads (and on first use creates) subscription groups of ``broker``."""

    def __init__(self, broker) -> None:
        self.broker = broker

    def _config(self, group: str):
        return self.broker.subscription_group_manager.find_subscription_group_config(group)

    def ensure(self, group: str):
        """The group's config; CONSUMER_GROUP_NOT_FOUND when it does not exist and
        auto-creation is off."""
        cfg = self._config(group)
        if cfg is None:
            raise RequestError(Code.CONSUMER_GROUP_NOT_FOUND, f"consumer group {group!r} does not exist")
        return cfg

    def settings_of(self, group: str) -> GroupSettings:
        """FIFO flag, retry limit and retry delays of ``group`` (defaults when unknown)."""
        try:
            cfg = self._config(group)
        except Exception:
            cfg = None
        bc = self.broker.broker_config
        if cfg is None:
            return GroupSettings(False, bc.max_reconsume_times, DEFAULT_RETRY_DELAYS_MS)
        delays = DEFAULT_RETRY_DELAYS_MS
        policy = getattr(cfg, "group_retry_policy", None)
        custom = getattr(policy, "next", None) if policy is not None else None
        if custom:
            delays = tuple(int(x) for x in custom)
        return GroupSettings(bool(getattr(cfg, "consume_message_orderly", False)),
                             int(getattr(cfg, "retry_max_times", bc.max_reconsume_times)), delays)
