"""DiskGuard: how full the store's disk is, and whether puts may go on.

RocketMQ measures the used share of the commit log's partition
(``UtilAll.getDiskPartitionSpaceUsedPercent``: 1 - free / total) on every cleaning pass
and, past ``diskSpaceWarningLevelRatio`` (0.90), sets the DISK_FULL running flag, which
refuses puts with SERVICE_NOT_AVAILABLE while the consume queues go on being built.

pymq does the same, and also looks before it leaps: a new commit-log segment (and a new
index file) is allocated only if the disk keeps below the warning ratio, and with room
for the segment, afterwards. So a full disk is met with a clear status at a segment
boundary, never with ENOSPC inside a write. Segments and index files are sparse
(``posix_fallocate`` reserves their blocks a chunk ahead of the writes), so the free space
the guard reasons with is the disk's free space less what the files being written will
still take to be full (``promised``): the same room a whole allocation used to hold,
without holding it on disk. The refusal names the disk, its usage and the rule
that refused (the ratio past the warning level, or no room below it for the next two
segments), is logged once per episode, and lifts by itself when space returns (a cleaning pass or a
user deleting files).
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from typing import Callable, Optional

from .episode_log import EpisodeLog

log = logging.getLogger("pymq")


@dataclass(frozen=True)
class DiskUsage:
    """One look at a partition: bytes in all, bytes free and the used ratio."""

    path: str
    total: int
    free: int
    promised: int = 0       # of the disk's free space, what the open files will still take

    @property
    def ratio(self) -> float:
        """Used share, 0..1 (RocketMQ's getDiskPartitionSpaceUsedPercent); 1.0 when the
        partition cannot be measured."""
        return 1.0 - self.free / self.total if self.total > 0 else 1.0

    def describe(self) -> str:
        promised = f", {_mib(self.promised)} more kept for the files being written" if self.promised else ""
        return (f"disk of {self.path} is {self.ratio:.1%} full ({self.free / 1048576:.1f} MiB free "
                f"of {self.total / 1048576:.1f} MiB{promised})")


def _mib(nbytes: int) -> str:
    return f"{nbytes / 1048576:.1f} MiB"


def disk_usage(path: str) -> DiskUsage:
    """Usage of the partition holding ``path`` (``statvfs``). Free space is what this
    process may allocate (root may use the reserved blocks)."""
    st = os.statvfs(path)
    free_blocks = st.f_bfree if os.geteuid() == 0 else st.f_bavail
    return DiskUsage(path, st.f_blocks * st.f_frsize, free_blocks * st.f_frsize)


class DiskGuard:
    """Keeps puts off a disk that is (about to be) full.

    ``check()`` measures the disk and refuses or resumes puts through
    ``set_writeable(flag, reason)``; ``room_for(nbytes)`` tells whether ``nbytes`` more
    can be allocated without passing the warning ratio. ``usage_fn`` can be replaced
    (tests), and ``accepting`` says whether the store wants puts at all (between
    ``start()`` and ``shutdown()``), so the guard never reopens a closed store.
    """

    def __init__(self, path: str, warning_ratio: float, set_writeable: Callable[..., None],
                 reserve_bytes: int, accepting: Callable[[], bool] = lambda: True,
                 usage_fn: Callable[[str], DiskUsage] = disk_usage,
                 promised: Callable[[], int] = lambda: 0,
                 reserve_what: str = "two more commit-log segments (the next one and the one allocated ahead)") -> None:
        self.path = path
        self.warning_ratio = warning_ratio
        # room kept below the warning ratio: the store passes two commit-log segments (the
        # next roll's need, as ``CommitLog._roll`` checks it); ``reserve_what`` names it
        self.reserve_bytes = reserve_bytes
        # bytes the sparse files being written (the commit-log segment, the index file)
        # will still take to be full: counted as used, as whole allocation did
        self.promised = promised
        self.reserve_what = reserve_what
        self.set_writeable = set_writeable
        self.accepting = accepting
        self.usage_fn = usage_fn
        self.full = False
        self.episodes = 0
        self.last: Optional[DiskUsage] = None
        self.measure_errors = EpisodeLog(log, f"measuring the disk of {path}")
        self._lock = threading.Lock()

    def usage(self) -> Optional[DiskUsage]:
        try:
            u = self.usage_fn(self.path)
        except OSError as e:         # the directory vanished or the disk is gone
            self.measure_errors.failed(e)
            return None
        self.measure_errors.succeeded()
        promised = self.promised()
        if promised > 0:
            u = DiskUsage(u.path, u.total, max(0, u.free - promised), promised)
        self.last = u
        return u

    def room_for(self, nbytes: int, usage: Optional[DiskUsage] = None) -> bool:
        """Whether ``nbytes`` can be allocated and the disk stay at or below the warning
        ratio."""
        u = usage if usage is not None else self.usage()
        if u is None:
            return True
        free_after = u.free - nbytes
        return free_after >= 0 and (u.total - free_after) <= self.warning_ratio * u.total

    def fits(self, nbytes: int) -> bool:
        """Whether ``nbytes`` can be allocated and 1 % of the disk stay free: the test for
        files that serve messages already accepted (index files), which may use the room
        above the warning ratio that puts may not."""
        u = self.usage()
        return u is None or u.free - nbytes >= u.total // 100

    def check(self) -> Optional[DiskUsage]:
        """Measure the disk; refuse puts when it is past the warning ratio or has no room
        below it for the reserve (the next two segments), resume them when it has.
        Returns the usage measured."""
        u = self.usage()
        if u is None:
            return None
        over = u.ratio > self.warning_ratio or not self.room_for(self.reserve_bytes, u)
        with self._lock:
            if over:
                self._refuse(u)
            elif self.full:
                self.full = False
                log.warning("puts resume: %s", u.describe())
                if self.accepting():
                    self.set_writeable(True)
        return u

    def refuse(self, usage: Optional[DiskUsage] = None) -> None:
        """Refuse puts now (a segment could not be allocated)."""
        u = usage or self.last or self.usage()
        with self._lock:
            self._refuse(u)

    def refusal(self, u: Optional[DiskUsage]) -> str:
        """Why puts are refused on a disk measured as ``u``: the disk and its usage, and
        the rule that refused: the used ratio past the warning level, or too little room
        below that level (or free) for the reserve (two more commit-log segments)."""
        line = f"{self.warning_ratio:.0%}"
        if u is None:
            return f"disk of {self.path} cannot be measured: puts are refused until space returns"
        what = u.describe()
        if u.ratio > self.warning_ratio:
            return f"{what}: puts are refused above {line} until space returns"
        # below the line: the room left under it (and in free space) is short of the reserve
        room = max(0, min(u.free, int(self.warning_ratio * u.total) - (u.total - u.free)))
        if not self.room_for(self.reserve_bytes, u):
            return (f"{what}: puts are refused until space returns: {self.reserve_what} need "
                    f"{_mib(self.reserve_bytes)}, and the disk has "
                    + (f"{_mib(room)} left below the {line} line" if room < u.free else f"only {_mib(room)} free"))
        return f"{what}: puts are refused until space returns: a commit-log segment could not be allocated"

    def _refuse(self, u: Optional[DiskUsage]) -> None:
        reason = self.refusal(u)
        if not self.full:
            self.full = True
            self.episodes += 1
            log.error("%s", reason)
        self.set_writeable(False, reason)
