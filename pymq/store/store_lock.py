"""The store's ``lock`` file: one writer per store directory.

RocketMQ takes a ``FileChannel.tryLock`` on ``{root}/lock`` and writes ``lock`` into it.
pymq takes an exclusive ``flock``, which conflicts across processes and also between two
stores opened on the same directory in one process.

A ``flock`` belongs to the open file description, which a forked child shares with its
parent: an unlock in the child would drop the parent's lock. ``release`` therefore does
nothing in any process but the one that acquired the lock.
"""

from __future__ import annotations

import fcntl
import os

from pymq.errors import StoreLockedError


class StoreLock:
    """An exclusive, non-blocking lock on ``{root}/lock``."""

    def __init__(self, store_path: str) -> None:
        self.path = os.path.join(store_path, "lock")
        self._fd: int | None = None
        self._pid = 0

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreLockedError(f"{os.path.dirname(self.path)} is in use by another writer "
                                   f"(the lock file {self.path} is held)") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, b"lock", 0)
        self._fd = fd
        self._pid = os.getpid()

    def release(self) -> None:
        """Unlock and close, in the process that acquired the lock (elsewhere: nothing)."""
        if self._fd is not None and self._pid == os.getpid():
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None
