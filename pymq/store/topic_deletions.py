"""TopicDeletions: ``config/topicDeletions.json``, where each deleted topic ended.

``delete_topic`` removes a topic's queues and offsets, but its records stay in the commit
log until cleaning deletes their segments, and its delayed and timer messages wait in
the store's system queues. Without a mark, a recovery that replays the log, or a delivery
that comes due, would bring the old topic back into a topic of the same name created
later. So pymq (RocketMQ keeps no such mark) records the commit-log offset at which the
topic was deleted: records of the topic below it are never dispatched to its queues again
(the recreated queues start with that offset as their physical floor), never delivered
by the delay and timer services, and never returned by key lookups. A mark is dropped
once cleaning has deleted every segment below it::

    {"deletedTopics": {"TopicA": 1048576}}
"""

from __future__ import annotations

import os

from .config_manager import ConfigManager
from .fastjson import dumps_fastjson, loads_fastjson


def _parse(text: str) -> dict[str, int]:
    doc = loads_fastjson(text)
    if not isinstance(doc, dict) or not isinstance(doc.get("deletedTopics", {}), dict):
        raise ValueError("not a topic deletion table")
    out = {}
    for topic, offset in doc.get("deletedTopics", {}).items():
        if not isinstance(topic, str) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"bad topic deletion entry {topic!r}: {offset!r}")
        out[topic] = offset
    return out


class TopicDeletions(ConfigManager):
    """``{topic: commit-log offset at its deletion}``."""

    reset_meaning = "no deletion marks: a replay may bring old records of a deleted topic back"

    def __init__(self, root_dir: str) -> None:
        super().__init__()
        self.root_dir = os.fspath(root_dir)
        self._table: dict[str, int] = {}

    def config_file_path(self) -> str:
        return os.path.join(self.root_dir, "config", "topicDeletions.json")

    def encode(self, pretty: bool = True) -> str:
        with self._lock:
            return dumps_fastjson({"deletedTopics": dict(sorted(self._table.items()))}, pretty)

    def decode(self, text: str) -> None:
        table = _parse(text)
        with self._lock:
            self._table = table
            self._mark_changed()

    def validate(self, text: str) -> None:
        _parse(text)

    def floor(self, topic: str) -> int:
        """Commit-log offset below which records of ``topic`` belong to a deleted
        incarnation of it (-1 when it was never deleted)."""
        return self._table.get(topic, -1)

    def is_stale(self, topic: str, commitlog_offset: int) -> bool:
        """Whether the record at ``commitlog_offset`` of ``topic`` predates its deletion."""
        return commitlog_offset < self._table.get(topic, -1)

    def __bool__(self) -> bool:
        return bool(self._table)

    def mark(self, topic: str, offset: int) -> None:
        """Record that ``topic`` was deleted when the log ended at ``offset``, durably."""
        with self._lock:
            self._table[topic] = max(offset, self._table.get(topic, -1))
            self._mark_changed()
        self.persist()

    def prune(self, min_phy_offset: int) -> int:
        """Drop the marks that no remaining record is below; returns how many."""
        with self._lock:
            gone = [t for t, off in self._table.items() if off <= min_phy_offset]
            for t in gone:
                del self._table[t]
            if gone:
                self._mark_changed()
        if gone:
            self.persist()
        return len(gone)

    def table(self) -> dict[str, int]:
        with self._lock:
            return dict(self._table)


def delete_topic(topic: str, deletions: TopicDeletions, reput_service, commit_log, consume_queues,
                 router, reader, consumer_offsets, notifier) -> bool:
    """Delete ``topic`` from a writeable store (mqadmin's deleteTopic on one broker).

    With the dispatcher held still: dispatch what is pending, mark the deletion (durably)
    at the end of the log, destroy the topic's queues and directories, forget its queue
    offsets (a new put starts at 0) and every group's consumer offsets of it, and drop
    the cached queue handles. Waiting readers are woken. The records stay in the commit
    log until cleaning; the mark keeps them out of a recreated topic. A put racing with
    the deletion lands in the old topic or the new one, never half in each.
    Returns False when the topic had no queue.
    """
    with reput_service._lock:
        reput_service.do_reput_locked()
        if topic not in consume_queues.topics():
            return False
        deletions.mark(topic, commit_log.get_max_offset())
        consume_queues.delete_topic(topic)
        commit_log.appender.remove_topic(topic)
        router.forget()
        reader.forget()
    consumer_offsets.clean_offset_by_topic(topic)
    notifier.notify_all()
    return True
