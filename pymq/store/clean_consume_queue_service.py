"""CleanConsumeQueueService: the files that follow the commit log out.

When the commit log's minimum offset has moved (RocketMQ's CleanConsumeQueueService and
CorrectLogicOffsetService):

* every consume queue moves its minimum logical offset past entries whose records are
  gone, then deletes its files whose last entry points below the new minimum (never a
  queue's last file), ``delete_consume_queue_files_interval`` ms between queues that
  deleted something;
* index files whose records all lie below it are deleted (never the last);
* topic-deletion marks older than every remaining record are dropped.

On every pass, moved or not, the timer log drops the files no pending timer needs.
"""

from __future__ import annotations

import logging
from typing import Callable

log = logging.getLogger("pymq")


class CleanConsumeQueueService:
    """Deletes what points below the commit log's minimum offset."""

    def __init__(self, commit_log, consume_queues, index_service, pause: Callable[[float], bool],
                 interval_ms: int, timer_service=None, topic_deletions=None) -> None:
        self.commit_log = commit_log
        self.consume_queues = consume_queues
        self.index_service = index_service
        self.timer_service = timer_service
        self.topic_deletions = topic_deletions
        self.pause = pause
        self.interval_s = interval_ms / 1000.0
        self.last_phy_min = -1
        self.deleted_queue_files = 0
        self.deleted_index_files = 0
        self.deleted_timer_files = 0

    def run(self) -> dict:
        """One pass; returns ``{"consume_queue": n, "index": n, "timer_log": n}`` deleted."""
        out = {"consume_queue": 0, "index": 0, "timer_log": 0}
        min_phy = self.commit_log.get_min_offset()
        if min_phy > self.last_phy_min:
            for cq in self.consume_queues.queues():
                n = cq.delete_expired_files(min_phy)
                out["consume_queue"] += n
                if n and self.pause(self.interval_s):
                    return out                     # stopping: the next pass goes on
            out["index"] = self.index_service.delete_expired_files(min_phy)
            if self.topic_deletions is not None:
                self.topic_deletions.prune(min_phy)
            self.last_phy_min = min_phy
        if self.timer_service is not None:
            out["timer_log"] = self.timer_service.delete_unneeded_files()
        self.deleted_queue_files += out["consume_queue"]
        self.deleted_index_files += out["index"]
        self.deleted_timer_files += out["timer_log"]
        if out["consume_queue"] or out["index"] or out["timer_log"]:
            log.info("deleted %d consume-queue, %d index and %d timer-log file(s) below commit-log "
                     "offset %d", out["consume_queue"], out["index"], out["timer_log"], min_phy)
        return out
