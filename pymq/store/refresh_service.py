"""RefreshService: lets a read-only store follow the writer in another process.

A read-only ``MessageStore`` holds no lock and runs no recovery; it maps every file
read-only and finds how far each is written by scanning (whole records in the commit log,
whole entries in the consume queues). This thread repeats that every few milliseconds,
maps new segments, queues and index files, lets go of the ones the writer deleted, and
wakes readers long-polling on queues that grew. Only whole records and entries count, so a reader never sees half a message.
"""

from __future__ import annotations

import time

from .service_thread import ServiceThread

DISCOVER_INTERVAL_S = 0.05


class RefreshService(ServiceThread):
    """Follows another process's appends for a read-only store."""

    name = "RefreshService"

    def __init__(self, commit_log, consume_queues, index_service, notifier, interval_s: float = 0.002,
                 on_dropped=None) -> None:
        super().__init__(interval_s)
        self.commit_log = commit_log
        self.consume_queues = consume_queues
        self.index_service = index_service
        self.notifier = notifier
        self.on_dropped = on_dropped       # called after files or queues were dropped
        self._last_discover = 0.0

    def refresh(self, discover: bool = False) -> dict:
        """One pass; returns ``{(topic, queue_id): new max offset}`` of queues that grew.
        New queue directories are looked for every 50 ms, or now with ``discover``."""
        self.commit_log.follow()
        grown = self.consume_queues.follow()
        now = time.monotonic()
        if discover or now - self._last_discover >= DISCOVER_INTERVAL_S:
            self._last_discover = now
            self.drop_deleted()
            for cq in self.consume_queues.discover():
                grown[(cq.topic, cq.queue_id)] = cq.get_max_offset_in_queue()
        self.index_service.follow()           # one listdir: a new file shows at once
        if grown:
            self.notifier.notify(grown)
        return grown

    def drop_deleted(self) -> bool:
        """Let go of what the writer's cleaning or ``delete_topic`` deleted: segments,
        queue files, whole queues and index files (their mappings stay valid until then,
        since deletion unlinks and never truncates). True if anything was dropped."""
        cl_dropped = self.commit_log.mapped_file_queue.drop_deleted()
        cq_dropped = self.consume_queues.drop_deleted()
        ix_dropped = self.index_service.drop_deleted()
        if cl_dropped:
            min_phy = self.commit_log.get_min_offset()
            for cq in self.consume_queues.queues():
                cq.correct_min_offset(min_phy)
        if (cl_dropped or cq_dropped or ix_dropped) and self.on_dropped is not None:
            self.on_dropped()
        return bool(cl_dropped or cq_dropped or ix_dropped)

    def run_once(self) -> None:
        self.refresh()
