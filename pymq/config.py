"""``StoreConfig``: RocketMQ's ``MessageStoreConfig`` defaults, with snake_case names.

Intervals and timeouts are in milliseconds, as in RocketMQ. Where pymq deviates on
purpose the field's comment says so.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from .errors import PymqError
from .status import FlushDiskType

_MiB = 1024 * 1024


@dataclasses.dataclass
class StoreConfig:
    """Configuration of a :class:`pymq.MessageStore`.

    Every default is RocketMQ 4.9.7's (``MessageStoreConfig``) unless its comment says
    otherwise. Tests use small ``commitlog_file_size`` / ``consume_queue_entries`` /
    index sizes; the large defaults belong in production and benchmarks.

    ``max_mapped_queue_files`` (pymq's own, default 16,384; 0: no cap) bounds how many
    consume-queue files are mapped at once: idle ones are unmapped and mapped again on
    their next use, so a store of 50,000 queues stays far below ``vm.max_map_count``
    (docs/operations.md, "Many queues: mappings under a cap").
    """

    # -- files ------------------------------------------------------------------------
    commitlog_file_size: int = 1 << 30            # mappedFileSizeCommitLog
    # Commit-log segments keep their size but are sparse: disk blocks are reserved this many
    # bytes at a time ahead of the writes (posix_fallocate; a full disk fails the put with a
    # status, never a mapped write), so a segment takes what it holds, not 1 GiB. Index and
    # timer files are sparse the same way. 0 allocates whole segments (RocketMQ's way).
    commitlog_reserve_bytes: int = 4 * _MiB
    consume_queue_entries: int = 300_000          # mappedFileSizeConsumeQueue / 20
    # Consume-queue files keep RocketMQ's size but are sparse: disk blocks are reserved this
    # many bytes ahead of the entries (a full disk fails the reservation, never a mapped
    # write), so an idle queue takes 64 KiB, not 6 MB. 0 allocates whole files.
    consume_queue_reserve_bytes: int = 65_520             # 3,276 entries
    # At most this many consume-queue files are mapped at once (pymq's; RocketMQ maps them
    # all): past it the least recently used are unmapped and mapped again on their next
    # use, so 50,000 queues stay far below vm.max_map_count (65,530), with room for two
    # more stores in the process. 0: no cap. See docs/operations.md, "Many queues".
    max_mapped_queue_files: int = 16_384
    index_hash_slots: int = 5_000_000             # maxHashSlotNum
    index_max_entries: int = 20_000_000           # maxIndexNum
    # pymq's: key lookups keep the newest index file's key hashes in memory, this many at
    # most (16 bytes each: 64 MiB at most; mapped at the first lookup, 1 MiB at first and
    # grown as the file fills, filled by the lookups themselves from the file's entries),
    # so a lookup of a recent key reads one cache line and the record instead of the slot,
    # the entry and the record. 0: no table.
    index_recent_keys: int = 1 << 22
    # The next commit-log segment is always created and allocated (posix_fallocate) in the
    # background. This also pre-faults its pages there (MADV_POPULATE_READ), as
    # warmMapedFileEnable does; off by default like RocketMQ's: on a 2-core machine under
    # load it cost more than the page faults it saves (see docs/performance.md).
    warm_mapped_file_enable: bool = False
    # pymq's: a thread keeps this many bytes ahead of the commit log's write position
    # populated for writing (MADV_POPULATE_WRITE, Linux 5.14+), so the writer's first store
    # into a page does not fault: the fault work moves to another CPU. Bounded by the
    # segment's end; sparse segments reserve their blocks this far ahead (best effort).
    # Writes no byte, but the pages it populates are dirty: at most this many bytes of
    # zeros ahead of the data are written back. The thread sleeps while nothing is
    # appended. Not on a SLAVE (replication writes its log through the file). 0: off (the
    # writer faults its pages in). See pymq.store.prefault_service
    # and docs/performance.md ("Batches without message objects").
    commitlog_prefault_window: int = 8 * _MiB

    # -- flushing ---------------------------------------------------------------------
    flush_disk_type: str = "ASYNC_FLUSH"          # or "SYNC_FLUSH"
    flush_interval_commitlog: int = 500           # ms
    flush_commitlog_least_pages: int = 4
    flush_commitlog_thorough_interval: int = 10_000  # ms
    sync_flush_timeout: int = 5_000               # ms; FLUSH_DISK_TIMEOUT after this
    flush_interval_consume_queue: int = 1_000     # ms
    flush_consume_queue_least_pages: int = 2
    flush_consume_queue_thorough_interval: int = 60_000  # ms

    # -- messages ---------------------------------------------------------------------
    max_message_size: int = 4 * _MiB              # body limit (4.9.4+ semantics)
    store_host: str = "127.0.0.1:10911"           # "ip:port" or "[ipv6]:port"
    # "strict": RocketMQ's TopicValidator charset ^[%|a-zA-Z0-9_-]+$, at most 127 chars.
    # "utf8": pymq extension for non-ASCII names; any printable characters except path
    # separators and NUL, not "." or "..", at most 127 UTF-8 bytes (v1's length byte).
    topic_validation: str = "strict"
    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    timer_max_delay_sec: int = 259_200            # timerMaxDelaySec (3 days); beyond: WHEEL_TIMER_MSG_ILLEGAL
    timer_wheel_days: int = 7                     # the wheel covers twice this many days of 1 s slots,
                                                  # and always the max delay plus a day
    timer_log_file_size: int = 32 * _MiB          # mappedFileSizeTimerLog (RocketMQ: 100 MiB)

    # -- index, recovery, cleaning ------------------------------------------------------
    message_index_enable: bool = True
    message_index_safe: bool = False
    check_crc_on_recover: bool = True
    # Reads that decode (get_message, Consumer, pop, query_message, look/view by id) check
    # each record's CRC; one that fails is never returned (docs/recovery.md).
    check_crc_on_read: bool = True
    # Each record ends with its own CRC over every field (the ``__CRC32#`` property of
    # RocketMQ 5's enabledAppendPropCRC, 20 bytes): damage to its queue id, queue offset,
    # topic or properties is then caught like damage to its body. Decoded messages do not
    # show it; raw pulls (RocketMQ 4 clients) see it as a property.
    enabled_append_prop_crc: bool = True
    max_msgs_num_batch: int = 64
    # Cleaning (RocketMQ's CleanCommitLogService and friends, see docs/retention.md).
    # A commit-log segment whose last write is older than file_reserved_time hours (a
    # float: 1/3600 is one second) is deleted when the local hour is in delete_when
    # ("04", "04;10"), when the disk is fuller than disk_max_used_space_ratio percent, or on
    # a manual request; past disk_space_clean_forcibly_ratio age is ignored (with
    # clean_file_forcibly_enable). Past disk_space_warning_level_ratio puts are refused
    # with SERVICE_NOT_AVAILABLE until space returns.
    file_reserved_time: float = 72                # hours
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75           # percent
    disk_space_warning_level_ratio: float = 0.90  # rocketmq.broker.diskSpaceWarningLevelRatio
    disk_space_clean_forcibly_ratio: float = 0.85  # rocketmq.broker.diskSpaceCleanForciblyRatio
    clean_file_forcibly_enable: bool = True
    clean_resource_interval: int = 10_000         # ms between cleaning passes
    delete_commitlog_files_interval: int = 100    # ms between two deleted segments
    delete_consume_queue_files_interval: int = 100  # ms between two queues' deletions
    delete_files_batch_max: int = 10              # segments one pass deletes at most
    # A damaged side file (consumer offsets, delay offsets, timer checkpoint or wheel,
    # checkpoint, store sizes) with no good .bak: by default the store opens anyway with the
    # file's documented safe default and a logged error (see docs/recovery.md); with
    # strict_open it refuses to open (CorruptStoreError / SegmentSizeError).
    strict_open: bool = False

    # -- pulling ----------------------------------------------------------------------
    max_transfer_count_on_message_in_memory: int = 32
    max_transfer_bytes_on_message_in_memory: int = 262_144
    max_transfer_count_on_message_in_disk: int = 8
    max_transfer_bytes_on_message_in_disk: int = 65_536
    access_message_in_memory_max_ratio: int = 40  # percent of RAM

    # -- replication (RocketMQ 4.x master/slave HA, docs/replication.md) ---------------
    # brokerRole: ASYNC_MASTER, SYNC_MASTER (a put is acknowledged once a slave has its
    # bytes: FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE otherwise) or SLAVE (puts refused with
    # SERVICE_NOT_AVAILABLE; the commit log is the master's, replicated byte for byte).
    broker_role: str = "ASYNC_MASTER"
    # A master serves its HA port here (RocketMQ: haListenPort, listenPort + 1 = 10912).
    # pymq's: None (the default for an embedded store) opens no port; ``pymq serve`` sets
    # it to its listen port + 1. The host is loopback unless told otherwise.
    ha_listen_port: Optional[int] = None
    ha_listen_host: str = "127.0.0.1"
    # A slave replicates from this master HA address ("host:port"; haMasterAddress). None:
    # until one is given (pymq serve learns it from the name server's registration answer).
    ha_master_address: Optional[str] = None
    ha_send_heartbeat_interval: int = 5_000       # ms (haSendHeartbeatInterval)
    ha_housekeeping_interval: int = 20_000        # ms (haHousekeepingInterval)
    # bytes per frame (haTransferBatchSize; RocketMQ's 32 KiB): 1 MiB lets a catch-up move a
    # GiB in a thousand frames. At most 4 MiB - 12: a RocketMQ 4.9.7 slave reads a frame
    # (12-byte header and body) into its 4 MiB buffer and waits forever for a larger one.
    ha_transfer_batch_size: int = _MiB
    ha_max_gap_not_in_sync: int = 256 * _MiB      # haMaxGapNotInSync

    # -- persisted tables ---------------------------------------------------------------
    flush_delay_offset_interval: int = 10_000     # ms
    flush_consumer_offset_interval: int = 5_000   # ms

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise :class:`PymqError` when a value cannot work."""
        if self.commitlog_file_size < 4096 or self.commitlog_file_size > (1 << 31) - 1:
            raise PymqError("commitlog_file_size must be in [4096, 2**31-1] bytes")
        if self.consume_queue_entries < 1:
            raise PymqError("consume_queue_entries must be >= 1")
        if self.consume_queue_reserve_bytes < 0 or self.consume_queue_reserve_bytes % 20:
            raise PymqError("consume_queue_reserve_bytes must be >= 0 and a multiple of 20 (whole entries)")
        if self.commitlog_reserve_bytes < 0:
            raise PymqError("commitlog_reserve_bytes must be >= 0")
        if self.commitlog_prefault_window < 0:
            raise PymqError("commitlog_prefault_window must be >= 0 bytes (0: off)")
        if self.max_mapped_queue_files < 0:
            raise PymqError("max_mapped_queue_files must be >= 0 (0: no cap)")
        if self.index_hash_slots < 1 or self.index_max_entries < 2:
            raise PymqError("index_hash_slots must be >= 1 and index_max_entries >= 2")
        if self.index_recent_keys < 0 or self.index_recent_keys > 1 << 28:
            raise PymqError("index_recent_keys must be in [0, 2**28] (0: no table)")
        if self.flush_disk_type not in (FlushDiskType.ASYNC_FLUSH.value, FlushDiskType.SYNC_FLUSH.value):
            raise PymqError(f"flush_disk_type must be ASYNC_FLUSH or SYNC_FLUSH, not {self.flush_disk_type!r}")
        if self.topic_validation not in ("strict", "utf8"):
            raise PymqError("topic_validation must be 'strict' or 'utf8'")
        if self.max_message_size < 1:
            raise PymqError("max_message_size must be >= 1")
        if self.sync_flush_timeout < 0 or self.flush_interval_commitlog < 1:
            raise PymqError("flush intervals and timeouts must be positive")
        parse_delay_levels(self.message_delay_level)
        if self.timer_wheel_days < 1 or self.timer_max_delay_sec < 1:
            raise PymqError("timer_wheel_days and timer_max_delay_sec must be positive")
        if not self.file_reserved_time > 0:
            raise PymqError("file_reserved_time must be a positive number of hours")
        parse_delete_when(self.delete_when)
        if not 0 < self.disk_max_used_space_ratio <= 95:
            raise PymqError("disk_max_used_space_ratio must be in (0, 95] percent")
        if not 0 < self.disk_space_clean_forcibly_ratio <= self.disk_space_warning_level_ratio < 1:
            raise PymqError("disk ratios need 0 < disk_space_clean_forcibly_ratio <= "
                            "disk_space_warning_level_ratio < 1")
        if self.broker_role not in ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE"):
            raise PymqError(f"broker_role must be ASYNC_MASTER, SYNC_MASTER or SLAVE, not {self.broker_role!r}")
        if self.ha_listen_port is not None and not 0 <= self.ha_listen_port <= 65535:
            raise PymqError("ha_listen_port must be None (no HA port) or in [0, 65535] (0: any free port)")
        if self.ha_send_heartbeat_interval < 1 or self.ha_housekeeping_interval < 1 \
                or self.ha_transfer_batch_size < 1 or self.ha_max_gap_not_in_sync < 1:
            raise PymqError("HA intervals, the transfer batch size and the gap must be positive")
        if self.ha_transfer_batch_size > 4 * _MiB - 12:
            raise PymqError(f"ha_transfer_batch_size must be at most {4 * _MiB - 12} bytes: a RocketMQ slave "
                            f"reads a frame into a 4 MiB buffer and never completes a larger one")
        if self.clean_resource_interval < 1 or self.delete_commitlog_files_interval < 0 \
                or self.delete_consume_queue_files_interval < 0 or self.delete_files_batch_max < 1:
            raise PymqError("cleaning intervals must be >= 0 (the pass interval >= 1) and the batch >= 1")

    def delay_levels_ms(self) -> list[int]:
        """``message_delay_level`` parsed as RocketMQ does: level i+1 -> delay in ms."""
        return parse_delay_levels(self.message_delay_level)

    @property
    def consume_queue_file_size(self) -> int:
        """Bytes per consume-queue file (entries x 20)."""
        return self.consume_queue_entries * 20

    @property
    def sync_flush(self) -> bool:
        return self.flush_disk_type == FlushDiskType.SYNC_FLUSH.value


_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(spec: str) -> list[int]:
    """``"1s 5s 10s 30s 1m ..."`` -> delays in ms, level 1 first (ScheduleMessageService:
    split on single spaces; the last character is the unit s, m, h or d)."""
    if not isinstance(spec, str):
        raise PymqError("message_delay_level must be a str")
    out = []
    for item in spec.split(" "):
        unit = _UNITS.get(item[-1:]) if item else None
        try:
            value = int(item[:-1]) if unit is not None else -1
        except ValueError:
            value = -1
        if unit is None or value < 0:
            raise PymqError(f"bad delay level {item!r} in message_delay_level {spec!r}")
        out.append(value * unit)
    return out


def parse_delete_when(spec: str) -> frozenset[int]:
    """``delete_when`` ("04", "04;10") -> the hours of the day cleaning by age may run."""
    if not isinstance(spec, str):
        raise PymqError("delete_when must be a str such as '04' or '04;10'")
    hours = set()
    for item in spec.split(";"):
        item = item.strip()
        if not item.isdigit() or not 0 <= int(item) <= 23:
            raise PymqError(f"bad hour {item!r} in delete_when {spec!r} (hours 00-23, ';'-separated)")
        hours.add(int(item))
    return frozenset(hours)
