"""The consumer-group facts the protocol needs, from the broker's ``SubscriptionGroupManager``:
whether a group exists (or is created on first use), its FIFO flag, retry limit and
backoff."""

from __future__ import annotations

from typing import NamedTuple, Optional

from .status import Code, RequestError

# RocketMQ's delay levels 3..18 (1s 5s 10s 30s 1m ... 2h): the retry backoff of a group
# whose retry policy is the default (CustomizedRetryPolicy)
DEFAULT_RETRY_DELAYS_MS = (1_000, 5_000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000,
                           360_000, 420_000, 480_000, 540_000, 600_000, 1_200_000, 1_800_000, 3_600_000,
                           7_200_000)


class GroupSettings(NamedTuple):
    """What a consumer of a group is told in its settings: FIFO flag, retry limit, and the
    backoff: ``retry_delays_ms`` (customized) or ``exponential`` = (initial ms, max ms,
    multiplier) when the group's retry policy is EXPONENTIAL."""

    fifo: bool
    retry_max_times: int
    retry_delays_ms: tuple
    exponential: Optional[tuple] = None


def _policy(doc) -> tuple[tuple, Optional[tuple]]:
    """(customized delays, exponential) of a 5.x ``groupRetryPolicy`` document."""
    delays, exponential = DEFAULT_RETRY_DELAYS_MS, None
    if not isinstance(doc, dict):
        return delays, exponential
    try:
        if str(doc.get("type", "")).upper() == "EXPONENTIAL":
            e = doc.get("exponentialRetryPolicy") or {}
            exponential = (int(e.get("initial", 5_000)), int(e.get("max", 7_200_000)),
                           float(e.get("multiplier", 2)))
        else:
            nxt = (doc.get("customizedRetryPolicy") or {}).get("next")
            if nxt:
                delays = tuple(int(x) for x in nxt)
    except (TypeError, ValueError, AttributeError):
        pass
    return delays, exponential


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
        delays, exponential = _policy(getattr(cfg, "group_retry_policy", None))
        return GroupSettings(bool(cfg.consume_message_orderly), int(cfg.retry_max_times), delays, exponential)
