"""TopicConfigManager: ``config/topics.json``, the broker's table of topics.

RocketMQ's shape (fastjson, written atomically with a ``.bak``)::

    {"topicConfigTable": {"T": {"topicName": "T", "readQueueNums": 4, "writeQueueNums": 4,
                                "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0,
                                "order": false}},
     "dataVersion": {"timestamp": 1700000000000, "counter": 3}}

``perm`` bits: READ 4, WRITE 2, INHERIT 1. A topic unknown to the table is created on its
first send when ``auto_create_topic_enable`` is on (``createTopicInSendMessageMethod``),
with ``default_topic_queue_nums`` queues; retry topics (``%RETRY%group``, read-write) and
dead-letter topics (``%DLQ%group``, write-only, 1 queue) are created on first use.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Optional

from pymq._core.appender import validate_topic
from pymq.store.config_manager import ConfigManager, dumps_fastjson, loads_fastjson

PERM_INHERIT = 1
PERM_WRITE = 2
PERM_READ = 4
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"


@dataclasses.dataclass
class TopicConfig:
    """One topic's settings (RocketMQ's ``TopicConfig``)."""

    topic_name: str
    read_queue_nums: int = 4
    write_queue_nums: int = 4
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False

    def to_json(self) -> dict:
        return {"topicName": self.topic_name, "readQueueNums": self.read_queue_nums,
                "writeQueueNums": self.write_queue_nums, "perm": self.perm,
                "topicFilterType": self.topic_filter_type, "topicSysFlag": self.topic_sys_flag,
                "order": self.order}

    @classmethod
    def from_json(cls, name: str, doc: dict) -> "TopicConfig":
        if not isinstance(doc, dict):
            raise ValueError(f"topic {name!r}: not an object")
        tc = cls(str(doc.get("topicName", name)), int(doc.get("readQueueNums", 4)),
                 int(doc.get("writeQueueNums", 4)), int(doc.get("perm", PERM_READ | PERM_WRITE)),
                 str(doc.get("topicFilterType", "SINGLE_TAG")), int(doc.get("topicSysFlag", 0)),
                 bool(doc.get("order", False)))
        if tc.read_queue_nums < 0 or tc.write_queue_nums < 0 or not 0 <= tc.perm <= 7:
            raise ValueError(f"topic {name!r}: bad queue numbers or perm")
        return tc

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writeable(self) -> bool:
        return bool(self.perm & PERM_WRITE)


def _parse(text: str) -> tuple[dict[str, TopicConfig], dict]:
    doc = loads_fastjson(text)
    if not isinstance(doc, dict) or not isinstance(doc.get("topicConfigTable", {}), dict):
        raise ValueError("not a topic config table")
    table = {name: TopicConfig.from_json(name, tc) for name, tc in doc.get("topicConfigTable", {}).items()}
    version = doc.get("dataVersion") if isinstance(doc.get("dataVersion"), dict) else {}
    return table, version


class TopicConfigManager(ConfigManager):
    """The topics of a broker, persisted in ``{root}/config/topics.json``."""

    reset_meaning = "an empty topic table: topics are created again on first use"

    def __init__(self, root_dir: str, broker_config) -> None:
        super().__init__()
        self.root_dir = os.fspath(root_dir)
        self.broker_config = broker_config
        self._table: dict[str, TopicConfig] = {}
        self._version = {"timestamp": int(time.time() * 1000), "counter": 0}

    # -- ConfigManager -------------------------------------------------------------------

    def config_file_path(self) -> str:
        return os.path.join(self.root_dir, "config", "topics.json")

    def encode(self, pretty: bool = True) -> str:
        with self._lock:
            return dumps_fastjson({"topicConfigTable": {n: tc.to_json() for n, tc in sorted(self._table.items())},
                                   "dataVersion": dict(self._version)}, pretty)

    def decode(self, text: str) -> None:
        table, version = _parse(text)
        with self._lock:
            self._table = table
            if version:
                self._version = {"timestamp": int(version.get("timestamp", 0)),
                                 "counter": int(version.get("counter", 0))}
            self._mark_changed()

    def validate(self, text: str) -> None:
        _parse(text)

    def _changed(self) -> None:
        """Bump the data version and write the table (call without the lock)."""
        with self._lock:
            self._version = {"timestamp": int(time.time() * 1000), "counter": self._version["counter"] + 1}
            self._mark_changed()
        self.persist()

    # -- queries -------------------------------------------------------------------------

    def select_topic_config(self, topic: str) -> Optional[TopicConfig]:
        """The topic's config, or None when the broker does not know it."""
        with self._lock:
            return self._table.get(topic)

    def topics(self) -> dict[str, TopicConfig]:
        with self._lock:
            return dict(self._table)

    # -- changes -------------------------------------------------------------------------

    def update_topic_config(self, tc: TopicConfig) -> TopicConfig:
        """Create or replace a topic (mqadmin's updateTopic); the name is validated."""
        why = validate_topic(tc.topic_name, "utf8")
        if why is not None:
            raise ValueError(why)
        if tc.read_queue_nums < 1 or tc.write_queue_nums < 1 or not 0 <= tc.perm <= 7:
            raise ValueError("queue numbers must be >= 1 and perm in 0..7")
        with self._lock:
            self._table[tc.topic_name] = tc
        self._changed()
        return tc

    def delete_topic_config(self, topic: str) -> bool:
        with self._lock:
            gone = self._table.pop(topic, None) is not None
        if gone:
            self._changed()
        return gone

    def create_topic_in_send_message_method(self, topic: str, queue_nums: Optional[int] = None,
                                            perm: int = PERM_READ | PERM_WRITE) -> Optional[TopicConfig]:
        """The topic's config, created with ``queue_nums`` (the broker's default) when it
        is new and ``auto_create_topic_enable`` is on; None when it may not be created."""
        tc = self.select_topic_config(topic)
        if tc is not None:
            return tc
        if not self.broker_config.auto_create_topic_enable:
            return None
        n = queue_nums or self.broker_config.default_topic_queue_nums
        return self._create(TopicConfig(topic, n, n, perm))

    def create_topic_of_group(self, topic: str, queue_nums: int, perm: int) -> TopicConfig:
        """A group's retry or dead-letter topic, created on first use whatever the
        auto-creation switch (``createTopicInSendMessageBackMethod``)."""
        tc = self.select_topic_config(topic)
        return tc if tc is not None else self._create(TopicConfig(topic, queue_nums, queue_nums, perm))

    def _create(self, tc: TopicConfig) -> TopicConfig:
        with self._lock:
            existing = self._table.get(tc.topic_name)
            if existing is not None:
                return existing
            self._table[tc.topic_name] = tc
        self._changed()
        return tc


def retry_topic(group: str) -> str:
    """``%RETRY%{group}`` (``MixAll.getRetryTopic``)."""
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    """``%DLQ%{group}`` (``MixAll.getDLQTopic``)."""
    return DLQ_GROUP_TOPIC_PREFIX + group
