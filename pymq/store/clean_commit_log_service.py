"""CleanCommitLogService: when and how many old commit-log segments are deleted.

RocketMQ's rule (STORE_SPEC §8.5), applied on every cleaning pass:

* a segment is *expired* when its last write (the file's mtime) is more than
  ``file_reserved_time`` hours ago;
* expired segments are deleted when the local hour is in ``delete_when`` ("04;10"), or
  the disk is fuller than ``disk_max_used_space_ratio`` percent, or a manual deletion was
  requested (it stays requested for 20 passes, as mqadmin's deleteExpiredCommitLog);
* past ``disk_space_clean_forcibly_ratio`` (0.85) the age is ignored
  (``clean_file_forcibly_enable``): the oldest segments go whatever their age;
* never the segment being written; at most ``delete_files_batch_max`` per pass,
  ``delete_commitlog_files_interval`` ms apart, oldest first, stopping at the first one
  too young.

Deleting a segment is an unlink, never a truncate: a reader in another process keeps
its mapping, and readers in this one see the segment closed and the queues' new minimum
(OFFSET_TOO_SMALL). The consume queues, index and timer log follow in
``CleanConsumeQueueService``.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Optional

from pymq.config import StoreConfig, parse_delete_when

from .disk_guard import DiskUsage

log = logging.getLogger("pymq")

MAX_MANUAL_DELETE_FILE_TIMES = 20


class CleanCommitLogService:
    """Decides whether this pass deletes, and deletes (``commit_log.delete_expired_files``)."""

    def __init__(self, commit_log, config: StoreConfig, pause: Callable[[float], bool],
                 clock: Callable[[], float] = time.time) -> None:
        self.commit_log = commit_log
        self.config = config
        self.pause = pause                   # pause(seconds) -> True when the store stops
        self.clock = clock                   # seconds since the epoch
        self.delete_hours = parse_delete_when(config.delete_when)
        self.manual_delete_file_several_times = 0
        self.clean_immediately = False
        self.deleted_total = 0

    def execute_delete_files_manually(self) -> None:
        """Ask for deletion of expired segments on the next passes, whatever the hour."""
        self.manual_delete_file_several_times = MAX_MANUAL_DELETE_FILE_TIMES
        log.info("manual deletion of expired commit-log files requested")

    def is_time_to_delete(self) -> bool:
        return time.localtime(self.clock()).tm_hour in self.delete_hours

    def is_space_to_delete(self, usage: Optional[DiskUsage]) -> bool:
        """Past ``disk_max_used_space_ratio``; also sets ``clean_immediately`` past the
        forced-clean ratio."""
        if usage is None:
            self.clean_immediately = False
            return False
        cfg = self.config
        self.clean_immediately = usage.ratio > cfg.disk_space_clean_forcibly_ratio
        return usage.ratio > cfg.disk_max_used_space_ratio / 100.0

    def run(self, usage: Optional[DiskUsage], manual_now: bool = False) -> list[str]:
        """One pass; returns the paths of the segments it deleted."""
        cfg = self.config
        time_up = self.is_time_to_delete()
        space_full = self.is_space_to_delete(usage)
        manual = manual_now or self.manual_delete_file_several_times > 0
        if not (time_up or space_full or manual):
            return []
        if manual and not manual_now:
            self.manual_delete_file_several_times -= 1
        clean_at_once = cfg.clean_file_forcibly_enable and self.clean_immediately
        interval_s = cfg.delete_commitlog_files_interval / 1000.0
        deleted = self.commit_log.delete_expired_files(
            cfg.file_reserved_time * 3_600_000.0, clean_at_once, cfg.delete_files_batch_max,
            lambda: self.pause(interval_s), self.clock() * 1000.0)
        if deleted:
            self.deleted_total += len(deleted)
            log.info("deleted %d commit-log file(s) (%s%s), first kept offset %d", len(deleted),
                     "forced: disk " + f"{usage.ratio:.0%}" if clean_at_once and usage else "expired",
                     ", manual" if manual else "", self.commit_log.get_min_offset())
        return deleted
