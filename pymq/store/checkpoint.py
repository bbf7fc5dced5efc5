"""StoreCheckpoint: the ``checkpoint`` file (RocketMQ's ``StoreCheckpoint``).

A 4096-byte file, big-endian::

    0   physicMsgTimestamp  i64   store time of the newest record known flushed (commit log)
    8   logicsMsgTimestamp  i64   store time of the newest record whose consume-queue entry
                                  is known flushed
    16  indexMsgTimestamp   i64   end time of the newest full index file flushed

After a crash, recovery starts at the newest commit-log segment whose first record is no
newer than ``min(physic, logics) - 3 s`` (``min_timestamp``): everything before it is known
to be on disk in the log and in the queues.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from typing import Optional

from pymq._core.mapped_file import MappedFile

from .config_manager import set_aside

log = logging.getLogger("pymq")

CHECKPOINT_SIZE = 4096
_YEAR_MS = 365 * 86_400_000


def _plausible(ms: int) -> bool:
    """0 (unknown), or a time between 2000 and a year from now."""
    return ms == 0 or 946_684_800_000 <= ms <= time.time() * 1000 + _YEAR_MS


class StoreCheckpoint:
    """The three timestamps of ``{root}/checkpoint``, kept in a mapped file.

    A damaged file (a length other than 4096 bytes, or impossible times) is noted in
    ``load_problem`` and, unless ``read_only``, kept as ``checkpoint.corrupt-<ms>`` as
    other damaged side files are (docs/recovery.md): one of the wrong length is moved
    there and replaced by a new checkpoint of unknown times; one with impossible times is
    copied there, and its impossible times are read as unknown (0) and written as 0 by the
    next :meth:`flush`, unless a newer time was set before."""

    def __init__(self, root: str, read_only: bool = False) -> None:
        self.path = os.path.join(root, "checkpoint")
        self.load_problem: Optional[str] = None
        #: the file has the wrong length (a read-only checkpoint then maps nothing)
        self.wrong_length = False
        self._impossible = False        # impossible times in the file, written as 0 at the next flush
        exists = os.path.exists(self.path)
        if read_only and not exists:
            self._mf = None
        elif exists and os.path.getsize(self.path) != CHECKPOINT_SIZE:
            # damaged: RocketMQ maps 4096 bytes whatever the length; start afresh (0 = unknown)
            self.wrong_length = True
            self.load_problem = (f"{self.path} is {os.path.getsize(self.path)} bytes, not {CHECKPOINT_SIZE}: "
                                 "a crash recovery, if one is needed, starts at the first segment")
            if read_only:
                self._mf = None
            else:
                self._keep_damaged(set_aside(self.path))
                self._mf = MappedFile(self.path, CHECKPOINT_SIZE, create=True)
        else:
            self._mf = MappedFile(self.path, CHECKPOINT_SIZE, create=not read_only, writable=not read_only)
        if self._mf is not None:
            self._mf.set_positions(CHECKPOINT_SIZE)
        self._lock = threading.Lock()
        times = self.times()
        if times is not None and not self.load_problem and not all(map(_plausible, times)):
            self.load_problem = (f"{self.path} holds impossible times {times}: taken as unknown, so a "
                                 "crash recovery, if one is needed, starts at the first segment")
            if not read_only:           # the next flush writes over them: keep a copy
                aside = f"{self.path}.corrupt-{int(time.time() * 1000)}"
                shutil.copyfile(self.path, aside)
                self._keep_damaged(aside)
                self._impossible = True

    def _keep_damaged(self, aside: Optional[str]) -> None:
        if aside:
            self.load_problem = f"{self.load_problem} (damaged file kept as {aside})"
            log.error("%s", self.load_problem)

    def times(self) -> Optional[tuple[int, int, int]]:
        """The three times as the file holds them (physic, logics, index), impossible ones
        included; None when nothing is mapped (no file, or one of the wrong length, read-only)."""
        mf = self._mf
        return None if mf is None else (mf.get_long(0), mf.get_long(8), mf.get_long(16))

    def _get(self, pos: int) -> int:
        """A timestamp; 0 (unknown) for a value no clock could have written (garbage)."""
        value = self._mf.get_long(pos) if self._mf is not None else 0
        return value if _plausible(value) else 0

    def _set(self, pos: int, value: int) -> None:
        with self._lock:
            self._mf.write_at(pos, value.to_bytes(8, "big", signed=True))

    physic_msg_timestamp = property(lambda self: self._get(0), lambda self, v: self._set(0, v))
    logics_msg_timestamp = property(lambda self: self._get(8), lambda self, v: self._set(8, v))
    index_msg_timestamp = property(lambda self: self._get(16), lambda self, v: self._set(16, v))

    def min_timestamp(self) -> int:
        """``getMinTimestamp``: min(physic, logics) - 3 s, floored at 0."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000)

    def min_timestamp_index(self) -> int:
        """``getMinTimestampIndex``: also no newer than the index's timestamp."""
        return min(self.min_timestamp(), self.index_msg_timestamp)

    def stamp_clean_exit(self, last_store_timestamp: int) -> None:
        """At a shutdown that left nothing undispatched: queues and index hold everything
        up to the newest record's store time ``last_store_timestamp`` (0: no record
        dispatched in this run), so a crash recovery never needs to start before it."""
        if last_store_timestamp:
            self.physic_msg_timestamp = max(self.physic_msg_timestamp, last_store_timestamp)
            self.logics_msg_timestamp = last_store_timestamp
            self.index_msg_timestamp = last_store_timestamp

    def flush(self) -> None:
        if self._mf is not None and self._mf.writable:
            if self._impossible:
                with self._lock:
                    self._impossible = False
                    for pos in (0, 8, 16):
                        if not _plausible(self._mf.get_long(pos)):
                            self._mf.write_at(pos, bytes(8))
            self._mf.flushed_position = 0
            self._mf.flush(0)

    def close(self) -> None:
        if self._mf is not None:
            self._mf.close()
