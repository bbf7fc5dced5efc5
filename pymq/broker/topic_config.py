"""TopicConfigManager: ``config/topics.json``, the broker's table of topics.

RocketMQ's shape (fastjson, written atomically with a ``.bak``)::

    {"topicConfigTable": {"T": {"topicName": "T", "readQueueNums": 4, "writeQueueNums": 4,
                                "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0,
                                "order": false}},
     "dataVersion": {"timestamp": 1700000000000, "counter": 3}}

RocketMQ 5 adds ``"attributes"`` (e.g. ``{"message.type": "PRIORITY"}``, set by mqadmin's
``updateTopic -a +message.type=PRIORITY``); it is written only when a topic has some, so
a 4.x broker reads the file as before. ``perm`` bits: READ 4, WRITE 2, INHERIT 1. A topic
unknown to the table is created on its first send when ``auto_create_topic_enable`` is on
(``createTopicInSendMessageMethod``), with ``default_topic_queue_nums`` queues (a 4.x
send: the producer's, at most ``TBW102``'s); retry topics (``%RETRY%group``, read-write) and
dead-letter topics (``%DLQ%group``, read-write as in 4.9.7, 1 queue) are created on first use.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from pymq._core.appender import validate_topic

from .data_version_table import DataVersionTable
from .validators import is_system_topic

PERM_INHERIT = 1
PERM_WRITE = 2
PERM_READ = 4
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
#: the topic whose route a 4.x producer borrows for a topic that does not exist yet
#: (``TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC``); the broker keeps it while auto-creation
#: is on, with ``DEFAULT_TOPIC_QUEUE_NUMS`` queues and INHERIT | READ | WRITE
DEFAULT_TOPIC = "TBW102"
DEFAULT_TOPIC_QUEUE_NUMS = 8
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
    attributes: dict = dataclasses.field(default_factory=dict)     # 5.x: name -> value

    def to_json(self) -> dict:
        doc = {"topicName": self.topic_name, "readQueueNums": self.read_queue_nums,
               "writeQueueNums": self.write_queue_nums, "perm": self.perm,
               "topicFilterType": self.topic_filter_type, "topicSysFlag": self.topic_sys_flag,
               "order": self.order}
        if self.attributes:
            doc["attributes"] = dict(self.attributes)
        return doc

    @classmethod
    def from_json(cls, name: str, doc: dict) -> "TopicConfig":
        if not isinstance(doc, dict):
            raise ValueError(f"topic {name!r}: not an object")
        tc = cls(str(doc.get("topicName", name)), int(doc.get("readQueueNums", 4)),
                 int(doc.get("writeQueueNums", 4)), int(doc.get("perm", PERM_READ | PERM_WRITE)),
                 str(doc.get("topicFilterType", "SINGLE_TAG")), int(doc.get("topicSysFlag", 0)),
                 bool(doc.get("order", False)), read_attributes(name, doc))
        if tc.read_queue_nums < 0 or tc.write_queue_nums < 0 or not 0 <= tc.perm <= 7:
            raise ValueError(f"topic {name!r}: bad queue numbers or perm")
        return tc

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writeable(self) -> bool:
        return bool(self.perm & PERM_WRITE)


class TopicConfigManager(DataVersionTable):
    """The topics of a broker, persisted in ``{root}/config/topics.json``."""

    reset_meaning = "an empty topic table: topics are created again on first use"
    file_name = "topics.json"
    table_key = "topicConfigTable"

    def entry_from_json(self, name: str, doc: dict) -> TopicConfig:
        return TopicConfig.from_json(name, doc)

    @staticmethod
    def entry_name(entry: TopicConfig) -> str:
        return entry.topic_name

    def select_topic_config(self, topic: str) -> Optional[TopicConfig]:
        """The topic's config, or None when the broker does not know it."""
        return self.get(topic)

    def select_or_default_topic_config(self, topic: str) -> Optional[TopicConfig]:
        """The topic's config; for a topic not known yet, the config its first send would
        create (not stored) while ``auto_create_topic_enable`` is on and the name is
        valid; else None. Routes describe such topics so a client can send the first
        message."""
        tc = self.get(topic)
        if tc is not None:
            return tc
        if validate_topic(topic, "utf8") is not None or is_system_topic(topic) or self.why_not_created(topic):
            return None
        n = self.broker_config.default_topic_queue_nums
        return TopicConfig(topic, n, n)

    def ensure_default_topic(self) -> None:
        """Add ``TBW102`` while ``auto_create_topic_enable`` is on, as RocketMQ's broker does
        at start: a 4.x producer finds no route for a new topic (the name server answers
        TOPIC_NOT_EXIST), sends along this topic's route instead, and the broker creates
        the topic on that send."""
        if not self.broker_config.auto_create_topic_enable:
            return
        n = DEFAULT_TOPIC_QUEUE_NUMS
        with self._lock:
            # added at every start, so not a change to write now: it is written with the next
            # (a write now would hold back the next change's by the write interval)
            self._table.setdefault(DEFAULT_TOPIC,
                                   TopicConfig(DEFAULT_TOPIC, n, n, PERM_INHERIT | PERM_READ | PERM_WRITE))

    def why_not_created(self, topic: str) -> Optional[str]:
        """Why a send to the unknown ``topic`` does not create it (auto-creation off, or
        the broker holds ``max_topics`` topics of its clients already), or None."""
        if not self.broker_config.auto_create_topic_enable:
            return "auto-creation of topics is off"
        cap = self.broker_config.max_topics
        if cap and sum(1 for name in self.entries() if not is_system_topic(name)) >= cap:
            return f"the broker holds {cap} topics, the most sends may create (max_topics)"
        return None

    def topics(self) -> dict[str, TopicConfig]:
        return self.entries()

    def update_topic_config(self, tc: TopicConfig) -> TopicConfig:
        """Create or replace a topic (mqadmin's updateTopic); the name is validated."""
        why = validate_topic(tc.topic_name, "utf8")
        if why is not None:
            raise ValueError(why)
        cap = self.broker_config.max_queues_per_topic
        if not (1 <= tc.read_queue_nums <= cap and 1 <= tc.write_queue_nums <= cap) or not 0 <= tc.perm <= 7:
            raise ValueError(f"queue numbers must be in 1..{cap} (max_queues_per_topic) and perm in 0..7")
        return self.put(tc)

    def delete_topic_config(self, topic: str) -> bool:
        return self.remove(topic)

    def create_topic_in_send_message_method(self, topic: str, queue_nums: Optional[int] = None,
                                            perm: int = PERM_READ | PERM_WRITE) -> Optional[TopicConfig]:
        """The topic's config, created with ``queue_nums`` (the broker's default) when it
        is new and may be created (``why_not_created``); None when it may not, or when
        ``topic`` is not a valid name (a protocol adapter checks names first; this is the
        last guard before ``config/topics.json``)."""
        tc = self.get(topic)
        if tc is not None:
            return tc
        if validate_topic(topic, "utf8") is not None or self.why_not_created(topic):
            return None
        n = queue_nums or self.broker_config.default_topic_queue_nums
        return self.put_if_absent(TopicConfig(topic, n, n, perm))

    def create_topic_of_group(self, topic: str, queue_nums: int, perm: int) -> TopicConfig:
        """A group's retry or dead-letter topic, created on first use whatever the
        auto-creation switch (``createTopicInSendMessageBackMethod``)."""
        tc = self.get(topic)
        return tc if tc is not None else self.put_if_absent(TopicConfig(topic, queue_nums, queue_nums, perm))


def read_attributes(name: str, doc: dict) -> dict:
    """The ``attributes`` object of a topic or group entry (names and values are strings;
    an absent or null one is empty)."""
    attrs = doc.get("attributes")
    if attrs is None:
        return {}
    if not isinstance(attrs, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in attrs.items()):
        raise ValueError(f"{name!r}: attributes must map strings to strings")
    return dict(attrs)


def retry_topic(group: str) -> str:
    """``%RETRY%{group}`` (``MixAll.getRetryTopic``)."""
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    """``%DLQ%{group}`` (``MixAll.getDLQTopic``)."""
    return DLQ_GROUP_TOPIC_PREFIX + group
