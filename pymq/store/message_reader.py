"""Reads by queue: RocketMQ's ``DefaultMessageStore.getMessage`` and the per-queue queries.

Pulls and time lookups run in C (``pymq._core.reader.QueueReader``: status rules, the scan
of consume-queue entries, tag filtering, decoding); this class builds it with the store's
limits and answers the smaller per-queue questions.
"""

from __future__ import annotations

import os

from pymq._core.cq_unit import store_timestamp_at
from pymq._core.reader import QueueReader
from pymq.config import StoreConfig
from pymq.filter import parse_tag_expression
from pymq.store.header_witness import header_altered, record_destroyed
from pymq.store.queue_repair import mark_lost_at, rebuild_from
from pymq.store.arguments import check_queue_id


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
        self.queue_reader = QueueReader(
            commit_log.mapped_file_queue, commit_log.file_size, consume_queues.appender_for,
            parse_tag_expression, self.memory_window,
            config.max_transfer_count_on_message_in_memory, config.max_transfer_bytes_on_message_in_memory,
            config.max_transfer_count_on_message_in_disk, config.max_transfer_bytes_on_message_in_disk)
        qr = self.queue_reader
        qr.check_crc = config.check_crc_on_read
        qr.follower = consume_queues.read_only      # entries past the scanned log are "not yet"
        qr.damage = commit_log.damage
        self.get_message = qr.get_message
        self.get_offset_in_queue_by_time = qr.get_offset_in_queue_by_time

    def enable_repair(self, reput_service) -> None:
        """Writers: a pull that meets a queue entry not describing its record has the queue
        rebuilt from there (``queue_repair.rebuild_from``) and reads on, instead of
        skipping the message; unless the record's header is the damaged side
        (``header_witness``): then the entry is kept and the pull skips it as damage."""
        witnessed: set = set()             # entries whose record's header was altered

        def repair(topic: str, queue_id: int, index: int) -> bool:
            cq = self.consume_queues.find_consume_queue(topic, queue_id, create=False)
            if cq is None or (topic, queue_id, index) in witnessed:
                return False
            unit = cq.get_unit(index)
            if unit is not None and record_destroyed(self.commit_log, unit[0], unit[1]):
                with cq._lock:                   # its record is lost: keep its offset
                    mark_lost_at(cq, index)
                return False
            if unit is not None and header_altered(self.consume_queues, self.commit_log, topic, queue_id, index,
                                                   unit[0], reput_service.reput_from_offset):
                witnessed.add((topic, queue_id, index))
                return False
            return rebuild_from(cq, index, reput_service, self.commit_log.get_min_offset())
        self.queue_reader.repair = repair

    def forget(self) -> None:
        """Drop cached queue handles (queues were deleted or dropped)."""
        self.queue_reader.forget()

    def close(self) -> None:
        self.queue_reader.closed = True

    # -- per-queue queries --------------------------------------------------------------------

    def _queue(self, topic: str, queue_id: int):
        return self.consume_queues.find_consume_queue(topic, check_queue_id(queue_id))

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self._queue(topic, queue_id).get_max_offset_in_queue()

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self._queue(topic, queue_id).get_min_offset_in_queue()

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, cq_offset: int) -> int:
        unit = self._queue(topic, queue_id).get_unit(cq_offset)
        return unit[0] if unit is not None else 0

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
