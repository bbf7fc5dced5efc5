"""AllocateMappedFileService: creates the next commit-log segment before it is needed.

RocketMQ pre-creates the next file (and the one after) on a background thread and, with
``warmMapedFileEnable``, touches every page so the first writes do not pay page faults.
pymq does the same for one segment ahead: ``posix_fallocate`` then ``MADV_POPULATE_WRITE``
(see ``MappedFile.warm``), off the put path.
"""

from __future__ import annotations

import logging
import threading

from pymq._core.mapped_file import MappedFile

log = logging.getLogger("pymq")


class AllocateMappedFileService:
    """Prepares segments in a background thread; ``take`` hands one out (or makes it now)."""

    def __init__(self, warm: bool = True) -> None:
        self.warm = warm
        self._lock = threading.Lock()
        self._pending: dict[str, threading.Thread] = {}
        self._ready: dict[str, MappedFile] = {}
        self._errors: dict[str, BaseException] = {}
        self._closed = False

    def prepare(self, path: str, file_size: int) -> None:
        """Start creating ``path`` in the background, unless it is under way or ready."""
        with self._lock:
            if self._closed or path in self._pending or path in self._ready:
                return
            t = threading.Thread(target=self._create, args=(path, file_size),
                                 name="pymq-AllocateMappedFileService", daemon=True)
            self._pending[path] = t
        t.start()

    def _create(self, path: str, file_size: int) -> None:
        try:
            mf = MappedFile(path, file_size, create=True)
            if self.warm:
                mf.warm()
        except BaseException as e:
            with self._lock:
                self._pending.pop(path, None)
                self._errors[path] = e
            return
        with self._lock:
            self._pending.pop(path, None)
            if self._closed:
                mf.destroy()
                return
            self._ready[path] = mf

    def take(self, path: str, file_size: int) -> MappedFile:
        """The segment at ``path``: the prepared one, or a new one created now."""
        with self._lock:
            t = self._pending.get(path)
        if t is not None:
            t.join()
        with self._lock:
            mf = self._ready.pop(path, None)
            err = self._errors.pop(path, None)
        if mf is not None:
            return mf
        if err is not None:
            log.warning("background allocation of %s failed (%s); retrying now", path, err)
        mf = MappedFile(path, file_size, create=True)
        return mf

    def shutdown(self) -> None:
        """Wait for allocations under way; delete prepared segments nobody took."""
        with self._lock:
            self._closed = True
            pending = list(self._pending.values())
        for t in pending:
            t.join()
        with self._lock:
            for mf in self._ready.values():
                mf.destroy()
            self._ready.clear()
