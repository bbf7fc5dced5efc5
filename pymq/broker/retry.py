"""SendMessageBackService: a consumed message handed back for a retry, or dead-lettered.

RocketMQ 4.x's ``consumerSendMsgBack`` (BROKER_SPEC §1), for a consumer group ``g``:

* the stored message is found by its commit-log offset;
* if its ``reconsume_times`` has reached the limit (the group's ``retryMaxTimes``, 16, or
  the limit the consumer sends) or the delay level asked for is negative, it goes to the
  dead-letter topic ``%DLQ%g`` (one queue, readable and writable as 4.9.7 makes it), with
  no delay (``DELAY`` is written ``0``);
* otherwise to the retry topic ``%RETRY%g`` (``retryQueueNums`` queues), delayed by the
  level asked for, or by level ``3 + reconsume_times`` when 0 was asked (10 s, 30 s, 1 min,
  ... with RocketMQ's levels);
* the new record keeps body, flag, system flag, born time and host and the properties
  (``REAL_TOPIC`` and ``REAL_QID`` of an earlier delay too, which a delayed put rewrites),
  with ``reconsume_times + 1`` and ``WAIT=false``; it gets ``RETRY_TOPIC`` (the original
  topic) and ``ORIGIN_MESSAGE_ID`` (the original's offset message id) unless they are set
  already, so a chain of retries points back at the first delivery.

A consumer of ``g`` reads ``%RETRY%g`` beside its topic (``pymq.Consumer`` does), and
hands a retry message over with its original topic restored from ``RETRY_TOPIC``.
"""

from __future__ import annotations

import random
from typing import Optional, Union

from pymq._core.message import Message
from pymq.errors import CorruptRecordError, PymqError

from .topic_config import PERM_READ, PERM_WRITE, dlq_topic, retry_topic

PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
DLQ_NUMS_PER_GROUP = 1
# properties that would make the new record a timer message or a pop receipt again (5.x);
# DELAY, REAL_TOPIC and REAL_QID are carried, as RocketMQ 4.9.7 does: DELAY is then set
# for the new record, and a delayed put rewrites REAL_TOPIC and REAL_QID
_NOT_CARRIED = frozenset({"POP_CK", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "TIMER_OUT_MS",
                          "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS"})


class SendBackError(PymqError):
    """The message cannot be sent back (unknown group, no record at the offset)."""


def _stored(broker, msg: Union[int, object]):
    offset = msg if isinstance(msg, int) else getattr(msg, "commitlog_offset", None)
    if not isinstance(offset, int):
        raise TypeError("send_message_back takes a consumed MessageExt or its commit-log offset")
    try:
        stored = broker.look_message_by_offset(offset)
    except CorruptRecordError:
        stored = None
    if stored is None:
        raise SendBackError(f"no message at commit-log offset {offset} (cleaned, or not a record start)")
    return stored


def rebuild(stored, topic: str, queue_id: int, reconsume_times: int, delay_level: int = 0) -> Message:
    """The record that carries ``stored`` on into ``topic``: same body, flags, born time and
    host and properties; RETRY_TOPIC and ORIGIN_MESSAGE_ID set if missing, WAIT=false and
    DELAY the level (``0``: none)."""
    props = {k: v for k, v in stored.properties.items() if k not in _NOT_CARRIED}
    props.setdefault(PROPERTY_RETRY_TOPIC, stored.topic)
    props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, stored.msg_id)
    props["WAIT"] = "false"
    props["DELAY"] = str(delay_level)
    return Message(topic, stored.body, properties=props, queue_id=queue_id, flag=stored.flag,
                   delay_level=delay_level, born_timestamp=stored.born_timestamp, born_host=stored.born_host,
                   sys_flag=stored.sys_flag, reconsume_times=reconsume_times)


class SendMessageBackService:
    """``send_message_back`` for a :class:`pymq.Broker`."""

    def __init__(self, broker, broker_config) -> None:
        self.broker = broker
        self.broker_config = broker_config
        self.retried = 0
        self.dead_lettered = 0

    def _group(self, group: str):
        if not isinstance(group, str) or not group:
            raise TypeError("group must be a non-empty str")
        cfg = self.broker.subscription_group_manager.find_subscription_group_config(group)
        if cfg is None:
            raise SendBackError(f"subscription group {group!r} does not exist")
        return cfg

    def send_message_back(self, group: str, msg, delay_level: int = 0,
                          max_reconsume_times: Optional[int] = None):
        """Re-put the consumed ``msg`` (a ``MessageExt`` or its commit-log offset) for a
        retry by ``group``, or to the group's dead-letter topic; returns the put result."""
        cfg = self._group(group)
        stored = _stored(self.broker, msg)
        limit = cfg.retry_max_times if max_reconsume_times is None else max_reconsume_times
        if stored.reconsume_times >= limit or delay_level < 0:
            return self.dead_letter(group, stored)
        topics = self.broker.topic_config_manager
        topic = retry_topic(group)
        tc = topics.create_topic_of_group(topic, cfg.retry_queue_nums, PERM_READ | PERM_WRITE)
        level = delay_level or 3 + stored.reconsume_times
        r = self.broker.put_message(rebuild(stored, topic, random.randrange(max(tc.write_queue_nums, 1)),
                                            stored.reconsume_times + 1, level))
        if r.is_ok():
            self.retried += 1
        return r

    def dead_letter(self, group: str, msg):
        """Put ``msg`` (stored, a ``MessageExt`` or an offset) into ``%DLQ%{group}`` with
        ``reconsume_times + 1`` and no delay; returns the put result."""
        stored = msg if hasattr(msg, "store_timestamp") else _stored(self.broker, msg)
        topic = dlq_topic(group)
        self.broker.topic_config_manager.create_topic_of_group(topic, DLQ_NUMS_PER_GROUP, PERM_READ | PERM_WRITE)
        r = self.broker.put_message(rebuild(stored, topic, 0, stored.reconsume_times + 1))
        if r.is_ok():
            self.dead_lettered += 1
        return r

    def resend_dead_letters(self, group: str, msg_id: Optional[str] = None) -> list:
        """Give dead-lettered messages of ``group`` another round: each goes to the
        group's retry topic with ``reconsume_times`` 0 and no delay (only this group sees
        it again; RocketMQ's dashboard resends through consumeMessageDirectly). With
        ``msg_id`` (an offset message id in ``%DLQ%{group}``) that one message, else every
        message the group has not resent yet (progress: the group's offset on its DLQ
        topic). Returns ``[(dlq msg_id, put result)]``."""
        cfg = self._group(group)
        b = self.broker
        dlq = dlq_topic(group)
        if msg_id is not None:
            m = b.view_message_by_id(msg_id)
            if m is None or m.topic != dlq:
                raise SendBackError(f"{msg_id} is not a message of {dlq}")
            batch = [m]
            end = None
        else:
            start = max(b.query_offset(group, dlq, 0), b.get_min_offset_in_queue(dlq, 0))
            end = b.get_max_offset_in_queue(dlq, 0)
            batch = []
            while start < end:
                g = b.get_message(group, dlq, 0, start, 32)
                batch.extend(g.messages)
                if g.next_begin_offset <= start:
                    break
                start = g.next_begin_offset
        topic = retry_topic(group)
        tc = b.topic_config_manager.create_topic_of_group(topic, cfg.retry_queue_nums, PERM_READ | PERM_WRITE)
        out = []
        for m in batch:
            r = b.put_message(rebuild(m, topic, random.randrange(max(tc.write_queue_nums, 1)), 0))
            out.append((m.msg_id, r))
        if end is not None and all(r.is_ok() for _id, r in out):
            b.commit_offset(group, dlq, 0, end)
        return out

