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

import os
import threading
import time
from typing import Optional

from pymq._core.mapped_file import MappedFile

CHECKPOINT_SIZE = 4096
_YEAR_MS = 365 * 86_400_000


def _plausible(ms: int) -> bool:
    """0 (unknown), or a time between 2000 and a year from now."""
    return ms == 0 or 946_684_800_000 <= ms <= time.time() * 1000 + _YEAR_MS


class StoreCheckpoint:
    """The three timestamps of ``{root}/checkpoint``, kept in a mapped file."""

    def __init__(self, root: str, read_only: bool = False) -> None:
        self.path = os.path.join(root, "checkpoint")
        self.load_problem: Optional[str] = None
        exists = os.path.exists(self.path)
        if read_only and not exists:
            self._mf = None
        elif exists and os.path.getsize(self.path) != CHECKPOINT_SIZE:
            # damaged: RocketMQ maps 4096 bytes whatever the length; start afresh (0 = unknown)
            self.load_problem = (f"{self.path} is {os.path.getsize(self.path)} bytes, not {CHECKPOINT_SIZE}: "
                                 "a crash recovery, if one is needed, starts at the first segment")
            if read_only:
                self._mf = None
            else:
                os.remove(self.path)
                self._mf = MappedFile(self.path, CHECKPOINT_SIZE, create=True)
        else:
            self._mf = MappedFile(self.path, CHECKPOINT_SIZE, create=not read_only, writable=not read_only)
        if self._mf is not None:
            self._mf.set_positions(CHECKPOINT_SIZE)
        self._lock = threading.Lock()
        if self._mf is not None and not self.load_problem and not all(map(_plausible, self._raw())):
            self.load_problem = (f"{self.path} holds impossible times {self._raw()}: taken as unknown, so a "
                                 "crash recovery, if one is needed, starts at the first segment")

    def _raw(self) -> tuple[int, int, int]:
        return tuple(self._mf.get_long(pos) for pos in (0, 8, 16))

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

    def flush(self) -> None:
        if self._mf is not None and self._mf.writable:
            self._mf.flushed_position = 0
            self._mf.flush(0)

    def close(self) -> None:
        if self._mf is not None:
            self._mf.close()
