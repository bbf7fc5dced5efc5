"""ConsumerOffsetManager: committed consumer offsets in ``{root}/config/consumerOffset.json``.

Mirrors the broker's ``org.apache.rocketmq.broker.offset.ConsumerOffsetManager`` (4.9.7):
one table ``offsetTable`` mapping ``"topic@group"`` to ``{queueId: offset}``, where the
offset is the next one the group will consume. The file has RocketMQ's shape and format,
so either side can read what the other wrote::

    {
    \t"offsetTable":{
    \t\t"TopicTest@group":{0:6,1:3,2:3,3:2
    \t\t}
    \t}
    }

How it differs from RocketMQ:

* Group and topic names containing ``@`` (the key separator), empty names, negative queue
  ids and negative offsets are rejected with ``ValueError`` instead of silently creating
  keys that ``which_topic_by_consumer`` / ``which_group_by_topic`` would split wrongly.
* ``query_min_offset_in_all_group`` does not delete the excluded groups from the table
  (RocketMQ 4.9.7 removes them through ``offsetTable.keySet().iterator().remove()``).
* Top-level fields this class does not manage (5.x's ``dataVersion``) are kept and
  written back unchanged.
* The store's min offset check of ``queryMinOffsetInAllGroup`` is an optional callback,
  and ``scanUnsubscribedTopic`` (which needs the broker's subscription tables) is left out.
* Persisting is atomic and durable and only happens when the table changed (see
  :mod:`pymq.store.config_manager`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from typing import Any, Optional, Union

from .config_manager import ConfigManager, ConfigPersistService
from .fastjson import dumps_fastjson, loads_fastjson

log = logging.getLogger("pymq")

__all__ = ["ConsumerOffsetManager", "ConsumerOffsetPersistService", "TOPIC_GROUP_SEPARATOR"]

TOPIC_GROUP_SEPARATOR = "@"
_MAX_QUEUE_ID = (1 << 31) - 1          # queue ids are Java ints
_MAX_OFFSET = (1 << 63) - 1            # offsets are Java longs


def _check_name(kind: str, name: object) -> str:
    if not isinstance(name, str):
        raise TypeError(f"{kind} must be a str, not {type(name).__name__}")
    if not name:
        raise ValueError(f"{kind} must not be empty")
    if TOPIC_GROUP_SEPARATOR in name:
        raise ValueError(f"{kind} {name!r} contains {TOPIC_GROUP_SEPARATOR!r}, "
                         "the separator of consumerOffset.json keys")
    return name


def _check_int(kind: str, value: object, upper: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{kind} must be an int, not {type(value).__name__}")
    if not 0 <= value <= upper:
        raise ValueError(f"{kind} must be in [0, {upper}], not {value}")
    return value


def _key(topic: str, group: str) -> str:
    return f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"


def _split_key(key: str) -> tuple[str, str]:
    topic, _, group = key.partition(TOPIC_GROUP_SEPARATOR)
    return topic, group


def _parse(text: str) -> tuple[dict[str, dict[int, int]], dict[Any, Any]]:
    """The offset table and the other top-level fields of a consumerOffset.json text."""
    doc = loads_fastjson(text)
    if not isinstance(doc, dict):
        raise ValueError(f"top level is a {type(doc).__name__}, not an object")
    raw_table = doc.get("offsetTable")
    if raw_table is None:
        raw_table = {}
    if not isinstance(raw_table, dict):
        raise ValueError("offsetTable is not an object")
    table: dict[str, dict[int, int]] = {}
    for key, queues in raw_table.items():
        if not isinstance(key, str) or key.count(TOPIC_GROUP_SEPARATOR) != 1 \
                or "" in _split_key(key):
            raise ValueError(f"offsetTable key {key!r} is not 'topic@group'")
        if not isinstance(queues, dict):
            raise ValueError(f"offsets of {key!r} are not an object")
        offsets: dict[int, int] = {}
        for qid, offset in queues.items():
            if isinstance(qid, str) and qid.isascii() and qid.isdigit():
                qid = int(qid)
            if not isinstance(qid, int) or not 0 <= qid <= _MAX_QUEUE_ID:
                raise ValueError(f"{key!r}: queue id {qid!r} is not a queue id")
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise ValueError(f"{key!r}: offset {offset!r} of queue {qid} is not an integer")
            offsets[qid] = offset
        table[key] = offsets
    extra = {name: value for name, value in doc.items() if name != "offsetTable"}
    return table, extra


class ConsumerOffsetManager(ConfigManager):
    """Committed offsets per (topic, group, queue id), persisted as ``consumerOffset.json``.

    Every method is thread-safe. Call :meth:`load` once before use; run a
    :class:`ConsumerOffsetPersistService` (or call :meth:`persist`) to write changes.
    """

    reset_meaning = ("no committed offsets: every group starts where its consume-from policy says, "
                     "as a new group does")

    def __init__(self, root_dir: Union[str, "os.PathLike[str]"]) -> None:
        """``root_dir`` is the store root; the file is ``{root_dir}/config/consumerOffset.json``."""
        super().__init__()
        self.root_dir = os.fspath(root_dir)
        self._offset_table: dict[str, dict[int, int]] = {}
        self._extra_fields: dict[Any, Any] = {}     # e.g. 5.x "dataVersion", written back as read

    # -- ConfigManager -----------------------------------------------------------------

    def config_file_path(self) -> str:
        """``{root}/config/consumerOffset.json`` (``BrokerPathConfigHelper.getConsumerOffsetPath``)."""
        return os.path.join(self.root_dir, "config", "consumerOffset.json")

    def encode(self, pretty: bool = True) -> str:
        """The table in RocketMQ's format: keys sorted, queue ids as unquoted integers."""
        with self._lock:
            table = {key: dict(sorted(queues.items()))
                     for key, queues in sorted(self._offset_table.items())}
            doc: dict[Any, Any] = {"offsetTable": table}
            for name, value in self._extra_fields.items():
                doc.setdefault(name, value)
        return dumps_fastjson(doc, pretty)

    def decode(self, text: str) -> None:
        """Replace the table with the one in ``text`` (RocketMQ's file or this class's output).

        Queue ids written as quoted decimal strings (by a standard-JSON writer) are
        accepted. Raises ``ValueError`` when the text is not a consumer-offset table; the
        current table is then left unchanged.
        """
        table, extra = _parse(text)
        with self._lock:
            self._offset_table = table
            self._extra_fields = extra
            self._mark_changed()

    def validate(self, text: str) -> None:
        """Raise ``ValueError`` unless :meth:`decode` would accept ``text``."""
        _parse(text)

    def put_all(self, text: str) -> int:
        """Take every ``topic@group`` entry of the table in ``text`` (a broker's
        ``GET_ALL_CONSUMER_OFFSET`` answer), each replacing the entry of that key; entries
        it does not name stay (RocketMQ's slave sync: ``offsetTable.putAll``). Returns the
        number of entries taken; raises ``ValueError`` for a text that is no table."""
        table, _ = _parse(text)
        with self._lock:
            self._offset_table.update(table)
            self._mark_changed()
        return len(table)

    # -- offsets -----------------------------------------------------------------------

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Store ``offset`` as the group's next offset in the queue (RocketMQ ``commitOffset``).

        The put is unconditional: a smaller offset than the stored one (a reset) replaces
        it, as in RocketMQ, which only logs it. Raises ``ValueError`` for names containing
        ``@`` or empty names and for negative queue ids or offsets, ``TypeError`` for
        values of the wrong type.
        """
        key = _key(_check_name("topic", topic), _check_name("group", group))
        _check_int("queue_id", queue_id, _MAX_QUEUE_ID)
        _check_int("offset", offset, _MAX_OFFSET)
        with self._lock:
            queues = self._offset_table.get(key)
            if queues is None:
                queues = self._offset_table[key] = {}
            previous = queues.get(queue_id)
            if previous != offset:
                queues[queue_id] = offset
                self._mark_changed()
        if previous is not None and offset < previous:
            log.debug("offset of %s queue %d moved back from %d to %d", key, queue_id, previous, offset)

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset of the group in the queue, or -1 if none was committed."""
        key = _key(_check_name("topic", topic), _check_name("group", group))
        _check_int("queue_id", queue_id, _MAX_QUEUE_ID)
        with self._lock:
            queues = self._offset_table.get(key)
            if queues is None:
                return -1
            return queues.get(queue_id, -1)

    def query_offsets(self, group: str, topic: str) -> dict[int, int]:
        """A copy of ``{queue_id: offset}`` for the group and topic; empty if none."""
        key = _key(_check_name("topic", topic), _check_name("group", group))
        with self._lock:
            return dict(self._offset_table.get(key, {}))

    def remove_offset(self, group: str) -> int:
        """Drop every offset of ``group`` (all topics); return how many topics it had."""
        _check_name("group", group)
        with self._lock:
            doomed = [key for key in self._offset_table if _split_key(key)[1] == group]
            for key in doomed:
                del self._offset_table[key]
            if doomed:
                self._mark_changed()
        return len(doomed)

    def clean_offset_by_topic(self, topic: str) -> int:
        """Drop every group's offsets of ``topic`` (a deleted topic); return how many
        groups had some."""
        _check_name("topic", topic)
        with self._lock:
            doomed = [key for key in self._offset_table if _split_key(key)[0] == topic]
            for key in doomed:
                del self._offset_table[key]
            if doomed:
                self._mark_changed()
        return len(doomed)

    def which_topic_by_consumer(self, group: str) -> set[str]:
        """Topics for which ``group`` has committed offsets."""
        _check_name("group", group)
        with self._lock:
            return {topic for topic, g in map(_split_key, self._offset_table) if g == group}

    def which_group_by_topic(self, topic: str) -> set[str]:
        """Groups that have committed offsets for ``topic``."""
        _check_name("topic", topic)
        with self._lock:
            return {g for t, g in map(_split_key, self._offset_table) if t == topic}

    def clone_offset(self, src_group: str, dst_group: str, topic: str) -> bool:
        """Copy ``src_group``'s offsets of ``topic`` to ``dst_group``, replacing its own.

        Returns False (and changes nothing) when ``src_group`` has no offsets for ``topic``.
        """
        src = _key(_check_name("topic", topic), _check_name("src_group", src_group))
        dst = _key(topic, _check_name("dst_group", dst_group))
        with self._lock:
            offsets = self._offset_table.get(src)
            if offsets is None:
                return False
            if self._offset_table.get(dst) != offsets:
                self._offset_table[dst] = dict(offsets)
                self._mark_changed()
            return True

    def query_min_offset_in_all_group(
            self, topic: str, exclude_groups: Union[str, Iterable[str]] = (), *,
            min_offset_in_queue: Optional[Callable[[str, int], int]] = None) -> dict[int, int]:
        """The smallest committed offset of ``topic`` per queue id over all groups.

        ``exclude_groups`` is an iterable of group names or, as in RocketMQ, one
        comma-separated string. With ``min_offset_in_queue(topic, queue_id)`` (the store's
        min offset), offsets below it are ignored as in RocketMQ. Queues without any
        counted offset are absent from the result.
        """
        _check_name("topic", topic)
        if isinstance(exclude_groups, str):
            exclude_groups = exclude_groups.split(",")
        excluded = {g.strip() for g in exclude_groups}
        with self._lock:
            rows = [(g, dict(queues)) for (t, g), queues in
                    ((_split_key(key), queues) for key, queues in self._offset_table.items())
                    if t == topic]
        result: dict[int, int] = {}
        for group, queues in rows:
            if group in excluded:
                continue
            for queue_id, offset in queues.items():
                if min_offset_in_queue is not None and offset < min_offset_in_queue(topic, queue_id):
                    continue
                current = result.get(queue_id)
                if current is None or offset < current:
                    result[queue_id] = offset
        return result

    def offset_table(self) -> dict[str, dict[int, int]]:
        """A deep copy of the whole table, ``{"topic@group": {queue_id: offset}}``."""
        with self._lock:
            return {key: dict(queues) for key, queues in self._offset_table.items()}


class ConsumerOffsetPersistService(ConfigPersistService):
    """Persists a :class:`ConsumerOffsetManager` every ``interval_ms`` when it changed, and at shutdown.

    The interval defaults to ``StoreConfig.flush_consumer_offset_interval`` (5000 ms), the
    broker's ``flushConsumerOffsetInterval``. RocketMQ waits 10 s before the first write;
    this service checks at once and then every interval.
    """

    name = "ConsumerOffsetPersistService"

    def __init__(self, manager: ConsumerOffsetManager, interval_ms: int = 5000) -> None:
        super().__init__(manager, interval_ms)
