"""SubscriptionGroupManager: ``config/subscriptionGroup.json``, the broker's consumer groups.

RocketMQ's shape (fastjson, written atomically with a ``.bak``)::

    {"subscriptionGroupTable": {"g": {"groupName": "g", "consumeEnable": true,
        "consumeFromMinEnable": true, "consumeBroadcastEnable": true, "retryQueueNums": 1,
        "retryMaxTimes": 16, "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1,
        "notifyConsumerIdsChangedEnable": true, "consumeMessageOrderly": false}},
     "dataVersion": {"timestamp": 1700000000000, "counter": 1}}

RocketMQ 5's ``"attributes"`` (``priority.factor``, ``lite.bind.topic``,
``lite.sub.client.quota``: :mod:`.priority`, :mod:`.lite_topic`) are kept as read and
written only when a group has some. ``consumeMessageOrderly`` is RocketMQ 5's FIFO flag: a FIFO group receives the messages of
one message group in order, one at a time. ``groupRetryPolicy`` (5.x) is kept as read.
A group unknown to the table is created on first use when
``auto_create_subscription_group`` is on and its name is legal (``findSubscriptionGroupConfig``:
``[%|a-zA-Z0-9_-]+``, at most 255 characters, see :mod:`.validators`); a group created
explicitly (:meth:`SubscriptionGroupManager.update_subscription_group_config`) must have a
legal name too. Groups already in the table (read from the file) are found whatever their
names.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from .data_version_table import DataVersionTable
from .topic_config import read_attributes
from .validators import group_problem

_KEYS = (("group_name", "groupName"), ("consume_enable", "consumeEnable"),
         ("consume_from_min_enable", "consumeFromMinEnable"),
         ("consume_broadcast_enable", "consumeBroadcastEnable"), ("retry_queue_nums", "retryQueueNums"),
         ("retry_max_times", "retryMaxTimes"), ("broker_id", "brokerId"),
         ("which_broker_when_consume_slowly", "whichBrokerWhenConsumeSlowly"),
         ("notify_consumer_ids_changed_enable", "notifyConsumerIdsChangedEnable"),
         ("consume_message_orderly", "consumeMessageOrderly"))


@dataclasses.dataclass
class SubscriptionGroupConfig:
    """One consumer group's settings (RocketMQ's ``SubscriptionGroupConfig``)."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    consume_message_orderly: bool = False
    group_retry_policy: Optional[dict] = None      # 5.x, kept as read
    attributes: dict = dataclasses.field(default_factory=dict)     # 5.x: name -> value

    def to_json(self) -> dict:
        doc: dict[str, Any] = {js: getattr(self, py) for py, js in _KEYS}
        if self.group_retry_policy is not None:
            doc["groupRetryPolicy"] = self.group_retry_policy
        if self.attributes:
            doc["attributes"] = dict(self.attributes)
        return doc

    @classmethod
    def from_json(cls, name: str, doc: dict) -> "SubscriptionGroupConfig":
        if not isinstance(doc, dict):
            raise ValueError(f"group {name!r}: not an object")
        defaults = cls(name)
        values = {}
        for py, js in _KEYS:
            v = doc.get(js, getattr(defaults, py))
            values[py] = type(getattr(defaults, py))(v)
        values["group_name"] = str(doc.get("groupName", name))
        policy = doc.get("groupRetryPolicy")
        values["group_retry_policy"] = policy if isinstance(policy, dict) else None
        values["attributes"] = read_attributes(name, doc)
        cfg = cls(**values)
        if cfg.retry_max_times < -1 or cfg.retry_queue_nums < 1:
            raise ValueError(f"group {name!r}: bad retryMaxTimes or retryQueueNums")
        return cfg


class SubscriptionGroupManager(DataVersionTable):
    """The consumer groups of a broker, persisted in ``{root}/config/subscriptionGroup.json``."""

    reset_meaning = "an empty group table: groups are created again with defaults on first use"
    file_name = "subscriptionGroup.json"
    table_key = "subscriptionGroupTable"

    def entry_from_json(self, name: str, doc: dict) -> SubscriptionGroupConfig:
        return SubscriptionGroupConfig.from_json(name, doc)

    @staticmethod
    def entry_name(entry: SubscriptionGroupConfig) -> str:
        return entry.group_name

    def find_subscription_group_config(self, group: str) -> Optional[SubscriptionGroupConfig]:
        """The group's config; created with the broker's defaults when it is new, its name
        is legal and ``auto_create_subscription_group`` is on, else None."""
        cfg = self.get(group)
        if cfg is not None or not self.broker_config.auto_create_subscription_group:
            return cfg
        if group_problem(group) is not None:
            return None
        bc = self.broker_config
        return self.put_if_absent(SubscriptionGroupConfig(group, retry_max_times=bc.max_reconsume_times,
                                                          retry_queue_nums=bc.retry_queue_nums))

    def update_subscription_group_config(self, cfg: SubscriptionGroupConfig) -> SubscriptionGroupConfig:
        """Create or replace a group (mqadmin's updateSubGroup), e.g. to flag it FIFO. A new
        group's name must be legal (ValueError); one already in the table may be changed."""
        if not isinstance(cfg.group_name, str) or not cfg.group_name:
            raise ValueError("group_name must be a non-empty str")
        why = group_problem(cfg.group_name)
        if why is not None and self.get(cfg.group_name) is None:
            raise ValueError(why)
        return self.put(cfg)

    def delete_subscription_group_config(self, group: str) -> bool:
        return self.remove(group)

    def groups(self) -> dict[str, SubscriptionGroupConfig]:
        return self.entries()
