"""AllocateMappedFileService: creates the next commit-log segment before it is needed.

RocketMQ pre-creates the next file (and the one after) on a background thread and, with
``warmMapedFileEnable``, touches every page so the first writes do not pay page faults.
pymq does the same for one segment ahead: ``posix_fallocate`` then ``MADV_POPULATE_READ``
(see ``MappedFile.warm``), off the put path. Unlike RocketMQ's zero-writing warm-up it
dirties nothing, so no gigabyte of zeros is written back to disk. A sparse segment
(``reserve_chunk``) is created at its full length with only its first chunk allocated,
and warmed only as far as it is allocated.
"""

from __future__ import annotations

import logging
import threading

from pymq._core.mapped_file import MappedFile

log = logging.getLogger("pymq")

WARM_CHUNK = 64 * 1024 * 1024


class AllocateMappedFileService:
    """Prepares segments in a background thread; ``take`` hands one out (or makes it now)."""

    def __init__(self, warm: bool = True) -> None:
        self.warm = warm
        self._lock = threading.Lock()
        self._pending: dict[str, threading.Thread] = {}
        self._ready: dict[str, MappedFile] = {}
        self._errors: dict[str, BaseException] = {}
        self._closed = False

    def prepare(self, path: str, file_size: int, reserve_chunk: int = 0, readahead: bool = False) -> None:
        """Start creating ``path`` in the background, unless it is under way or ready."""
        with self._lock:
            if self._closed or path in self._pending or path in self._ready:
                return
            t = threading.Thread(target=self._create, args=(path, file_size, reserve_chunk, readahead),
                                 name="pymq-AllocateMappedFileService", daemon=True)
            self._pending[path] = t
        t.start()

    def _create(self, path: str, file_size: int, reserve_chunk: int, readahead: bool) -> None:
        try:
            mf = MappedFile(path, file_size, create=True, reserve_chunk=reserve_chunk, readahead=readahead)
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

    def take(self, path: str, file_size: int, reserve_chunk: int = 0, readahead: bool = False) -> MappedFile:
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
        return MappedFile(path, file_size, create=True, reserve_chunk=reserve_chunk, readahead=readahead)

    def warm_async(self, mf: MappedFile) -> None:
        """Fault in the pages of a segment already in use, in the background.

        Safe while appends go on: populating only faults pages in, it writes nothing.
        """
        if not self.warm or not mf.writable or mf.is_full():
            return

        def run() -> None:
            # in chunks from the write position on, so the pages just ahead come first
            pos = mf.wrote_position
            try:
                while pos < mf.file_size and not mf.closed:
                    mf.warm(pos, pos + WARM_CHUNK)
                    pos += WARM_CHUNK
            except Exception as e:  # a closed segment or an old kernel: warming is best effort
                log.debug("warming %s skipped: %s", mf.file_name, e)

        threading.Thread(target=run, name="pymq-WarmMappedFile", daemon=True).start()

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
