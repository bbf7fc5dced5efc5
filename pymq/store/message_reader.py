"""Reads by queue: RocketMQ's ``DefaultMessageStore.getMessage`` and the per-queue queries.

The status and next-offset rules of a pull (4.9.4+)::

    max == 0           NO_MESSAGE_IN_QUEUE      next 0
    offset < min       OFFSET_TOO_SMALL         next min
    offset == max      OFFSET_OVERFLOW_ONE      next offset
    offset > max       OFFSET_OVERFLOW_BADLY    next max
    no entry there     OFFSET_FOUND_NULL        next = first index of the next CQ file
    otherwise          FOUND / NO_MATCHED_MESSAGE / MESSAGE_WAS_REMOVING,
                       next = offset + entries scanned

The scan itself is compiled (``pymq._core.reader.collect``).
"""

from __future__ import annotations

import os
from typing import Optional

from pymq._core import reader
from pymq._core.cq_unit import store_timestamp_at
from pymq.config import StoreConfig
from pymq.filter import parse_tag_expression
from pymq.results import GetMessageResult
from pymq.status import BoundaryType, GetMessageStatus

_OUTCOME = {
    reader.FOUND: GetMessageStatus.FOUND,
    reader.NO_MATCHED_MESSAGE: GetMessageStatus.NO_MATCHED_MESSAGE,
    reader.MESSAGE_WAS_REMOVING: GetMessageStatus.MESSAGE_WAS_REMOVING,
}


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 24 << 30            # RocketMQ's fallback


class MessageReader:
    """Pulls and per-queue queries over a commit log and its consume queues."""

    def __init__(self, commit_log, consume_queues, config: StoreConfig) -> None:
        self.commit_log = commit_log
        self.consume_queues = consume_queues
        self.config = config
        self.memory_window = _physical_memory() * config.access_message_in_memory_max_ratio // 100

    def get_message(self, topic: str, queue_id: int, offset: int, max_msgs: int = 32,
                    tags: Optional[str] = None) -> GetMessageResult:
        if not isinstance(topic, str):
            raise TypeError("topic must be a str")
        if max_msgs < 1:
            raise ValueError("max_msgs must be >= 1")
        tag_filter = parse_tag_expression(tags)
        cq = self.consume_queues.find_consume_queue(topic, queue_id)
        min_offset = cq.get_min_offset_in_queue()
        max_offset = cq.get_max_offset_in_queue()
        result = GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, [], 0, min_offset, max_offset)
        if max_offset == 0:
            return result
        if offset < min_offset:
            result.status, result.next_begin_offset = GetMessageStatus.OFFSET_TOO_SMALL, min_offset
            return result
        if offset == max_offset:
            result.status, result.next_begin_offset = GetMessageStatus.OFFSET_OVERFLOW_ONE, offset
            return result
        if offset > max_offset:
            result.status, result.next_begin_offset = GetMessageStatus.OFFSET_OVERFLOW_BADLY, max_offset
            return result
        found = cq.get_index_file(offset)
        if found is None:
            result.status = GetMessageStatus.OFFSET_FOUND_NULL
            result.next_begin_offset = cq.roll_next_file(offset)
            return result
        mf, pos = found
        cfg = self.config
        cl = self.commit_log
        msgs, scanned, outcome, total = reader.collect(
            mf, pos, cl.mapped_file_queue.mapped_files, cl.file_size, topic, max_msgs,
            tag_filter.codes if tag_filter else (), tag_filter.names_utf8 if tag_filter else (),
            cl.get_max_offset(), self.memory_window,
            cfg.max_transfer_count_on_message_in_memory, cfg.max_transfer_bytes_on_message_in_memory,
            cfg.max_transfer_count_on_message_in_disk, cfg.max_transfer_bytes_on_message_in_disk)
        result.status = _OUTCOME[outcome]
        result.messages = msgs
        result.next_begin_offset = offset + scanned
        result.buffer_total_size = total
        if msgs:
            last = msgs[-1].commitlog_offset
            result.suggest_pulling_from_slave = cl.get_max_offset() - last > self.memory_window
        return result

    # -- per-queue queries --------------------------------------------------------------------

    def _queue(self, topic: str, queue_id: int):
        return self.consume_queues.find_consume_queue(topic, queue_id)

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self._queue(topic, queue_id).get_max_offset_in_queue()

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self._queue(topic, queue_id).get_min_offset_in_queue()

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, cq_offset: int) -> int:
        unit = self._queue(topic, queue_id).get_unit(cq_offset)
        return unit[0] if unit is not None else 0

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int,
                                    boundary: BoundaryType = BoundaryType.LOWER) -> int:
        if not isinstance(boundary, BoundaryType):
            raise TypeError("boundary must be a pymq.BoundaryType")
        return self._queue(topic, queue_id).get_offset_in_queue_by_time(timestamp, boundary)

    def pickup_store_timestamp(self, offset: int, size: int = 0) -> int:
        cl = self.commit_log
        if offset < 0 or offset < cl.get_min_offset():
            return -1
        return store_timestamp_at(cl.mapped_file_queue.mapped_files, cl.file_size, offset, size)

    def get_message_store_timestamp(self, topic: str, queue_id: int, cq_offset: int) -> int:
        if cq_offset < 0:
            return -1
        unit = self._queue(topic, queue_id).get_unit(cq_offset)
        if unit is None or unit[1] == 0x7FFFFFFF:
            return -1
        return self.pickup_store_timestamp(unit[0], unit[1])

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        cq = self._queue(topic, queue_id)
        return self.get_message_store_timestamp(topic, queue_id, cq.get_min_offset_in_queue())
