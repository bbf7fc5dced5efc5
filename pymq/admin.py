"""What the ``pymq`` admin commands report, as data (RocketMQ's mqadmin, for one store).

Each function takes an open :class:`pymq.MessageStore` (the CLI opens it read-only, so
it works on a live store without taking the writer's lock) and returns plain rows;
``pymq.cli`` only formats them. Times are ms since the epoch.
"""

from __future__ import annotations

import dataclasses
import re
import time
from typing import Iterator, Optional

from pymq.status import BoundaryType, GetMessageStatus


@dataclasses.dataclass
class QueueStatus:
    """One row of ``topic-status`` (mqadmin topicStatus)."""

    topic: str
    queue_id: int
    min_offset: int
    max_offset: int
    last_updated: int          # store time of the newest message, 0 when empty


@dataclasses.dataclass
class QueueProgress:
    """One row of ``consumer-progress`` (mqadmin consumerProgress)."""

    topic: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    diff: int


def topic_list(store) -> list[str]:
    """Every topic with a consume queue, sorted."""
    return sorted(store.get_topics())


def topic_kind(topic: str) -> str:
    """What a topic is for: a consumer group's retry or dead-letter topic, one of the
    store's system topics, or "" for an application's topic."""
    if topic.startswith("%RETRY%"):
        return f"retry topic of group {topic[7:]}"
    if topic.startswith("%DLQ%"):
        return f"dead-letter topic of group {topic[5:]}"
    if topic.startswith(("rmq_sys_", "RMQ_SYS_")) or topic in ("SCHEDULE_TOPIC_XXXX", "TRANS_CHECK_MAX_TIME_TOPIC"):
        return "system"
    return ""


def topic_status(store, topic: str) -> list[QueueStatus]:
    """Min/max offset and last update time of every queue of ``topic``."""
    rows = []
    for qid in sorted(store.get_topics().get(topic, [])):
        low = store.get_min_offset_in_queue(topic, qid)
        high = store.get_max_offset_in_queue(topic, qid)
        last = store.get_message_store_timestamp(topic, qid, high - 1) if high > low else 0
        rows.append(QueueStatus(topic, qid, low, high, max(last, 0)))
    return rows


def consumer_progress(store, group: str, topic: Optional[str] = None) -> list[QueueProgress]:
    """Per queue the group consumed (or every queue of ``topic``): broker (max) offset,
    the group's committed offset (-1: never committed) and the lag."""
    topics = store.get_topics()
    names = [topic] if topic is not None else sorted(
        t for t in topics if any(store.query_offset(group, t, q) >= 0 for q in topics[t]))
    rows = []
    for t in names:
        for qid in sorted(topics.get(t, [])):
            broker = store.get_max_offset_in_queue(t, qid)
            consumer = store.query_offset(group, t, qid)
            rows.append(QueueProgress(t, qid, broker, consumer, broker - max(consumer, 0)))
    return rows


def iter_messages(store, topic: str, queue_ids: Optional[list[int]] = None, begin: Optional[int] = None,
                  end: Optional[int] = None, progress=None) -> Iterator:
    """Messages of ``topic`` (some queues, or all), queue by queue, optionally only those
    stored in [begin, end] (found with the time lookup, then filtered exactly)."""
    topics = store.get_topics()
    qids = sorted(topics.get(topic, [])) if queue_ids is None else queue_ids
    for qid in qids:
        low = store.get_min_offset_in_queue(topic, qid)
        high = store.get_max_offset_in_queue(topic, qid)
        start = low if begin is None else max(low, store.get_offset_in_queue_by_time(topic, qid, begin, BoundaryType.LOWER))
        stop = high if end is None else min(high, store.get_offset_in_queue_by_time(topic, qid, end, BoundaryType.UPPER) + 1)
        offset = start
        while offset < stop:
            r = store.get_message("pymq-admin", topic, qid, offset, 32)
            if r.status is not GetMessageStatus.FOUND and r.next_begin_offset <= offset:
                break
            for m in r.messages:
                if m.queue_offset >= stop:
                    break
                if (begin is None or m.store_timestamp >= begin) and (end is None or m.store_timestamp <= end):
                    yield m
            offset = r.next_begin_offset
            if progress is not None:
                progress(qid, offset - start, stop - start)


def message_dict(m, body: str = "repr") -> dict:
    """A message as a JSON-able dict (mqadmin queryMsgById's fields)."""
    out = {
        "msg_id": m.msg_id, "topic": m.topic, "tags": m.tags, "keys": m.keys, "queue_id": m.queue_id,
        "queue_offset": m.queue_offset, "commitlog_offset": m.commitlog_offset,
        "reconsume_times": m.reconsume_times, "born_timestamp": m.born_timestamp,
        "store_timestamp": m.store_timestamp, "born_host": m.born_host, "store_host": m.store_host,
        "sys_flag": m.sys_flag, "store_size": m.store_size, "body_crc": m.body_crc,
        "properties": m.properties,
    }
    if body == "hex":
        out["body"] = m.body.hex()
    elif body == "text":
        out["body"] = m.body.decode("utf-8", "replace")
    else:
        out["body"] = repr(m.body)
    return out


_TIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})[#T ](\d{2}):(\d{2}):(\d{2})(?:[:.,](\d{1,3}))?")


def parse_time(text: str) -> int:
    """ms since the epoch from an integer, or mqadmin's ``yyyy-MM-dd#HH:mm:ss:SSS``
    (also with ``T`` or a space), local time."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    m = _TIME.fullmatch(text)
    if not m:
        raise ValueError(f"not a time: {text!r} (ms since the epoch, or yyyy-MM-dd#HH:mm:ss:SSS)")
    y, mo, d, h, mi, s, ms = m.groups()
    t = time.mktime((int(y), int(mo), int(d), int(h), int(mi), int(s), 0, 0, -1))
    return int(t) * 1000 + int((ms or "0").ljust(3, "0"))


def format_time(ms: int) -> str:
    """mqadmin's ``yyyy-MM-dd HH:mm:ss,SSS`` in local time ("" for 0)."""
    if ms <= 0:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms // 1000)) + f",{ms % 1000:03d}"
