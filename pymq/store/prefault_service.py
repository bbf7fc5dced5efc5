"""PrefaultService: the pages just ahead of the commit log's writes, populated beforehand.

The first store into each page of a fresh mapped segment faults: the kernel allocates a
page-cache page, zeroes it and runs the file system's ``page_mkwrite``, about 1.5 µs a
4 KiB page on a VM, so ~70 ns of every 190-byte record the writer copies. This service
moves that work to another CPU: a thread keeps a bounded window (``StoreConfig.
commitlog_prefault_window``, 8 MiB by default) ahead of the write position populated for
writing (``MADV_POPULATE_WRITE``, Linux 5.14+; ``MappedFile.populate_ahead``), so the
writer's stores find their pages present, writable and dirty.

RocketMQ has no such service (its ``warmMapedFileEnable`` writes a zero into every page
of the next segment when it is created, a gigabyte of zeros written back; pymq's
``warm_mapped_file_enable`` reads them in instead). This one:

- follows the write position across segment rolls (``segment_created``, called by the
  commit log's queue when it makes the next segment, wakes it), and never populates
  past the segment's end nor, in a sparse segment, past its reserved blocks (the blocks
  are reserved as before, ``commitlog_reserve_bytes`` at a time by the writer, which
  wakes the thread when it reserved more: so the window is also at most what is
  reserved ahead of the writes, 4 MiB at most by default);
- writes no byte: a populated page holds what the file held (zeros), and is dirty, so at
  most a window of zeros ahead of the data is written back;
- costs nothing while the store is idle: the thread sleeps on an eventfd that the
  writer's reservation (``MappedFile.reserve``, called before every append) signals
  once the writes come within half a window of the populated end, and wakes once a
  second to look for a new segment;
- runs without the GIL while it populates and waits (the loop is compiled), so it does
  not queue behind the writer for it;
- stops on ``shutdown`` (the stop value written to its eventfd) and is not running in a
  child forked from the process (threads do not survive ``fork``; the child's copy is
  marked stopped and forgets its segment);
- falls back quietly where the kernel has no ``MADV_POPULATE_WRITE`` (``EINVAL``): it
  logs once and stops; the writer then faults its pages in itself, as without it.

Measured in docs/performance.md ("Batches without message objects").
"""

from __future__ import annotations

import errno
import logging
import os
import select
import threading
import weakref
from typing import Optional

from pymq._core.mapped_file import MappedFile

log = logging.getLogger("pymq")

STOP_VALUE = 1 << 40            # added to the eventfd to stop the thread (writers add 1s)
IDLE_MS = 1000                  # an idle thread looks for a new segment this often

_unsupported_logged = False
_SERVICES: "weakref.WeakSet[PrefaultService]" = weakref.WeakSet()


class PrefaultService:
    """Keeps ``window`` bytes ahead of the write position of the last segment of
    ``queue`` (a ``MappedFileQueue``) populated for writing, from a background thread."""

    name = "PrefaultService"

    def __init__(self, queue, window: int, idle_ms: int = IDLE_MS) -> None:
        if window <= 0:
            raise ValueError("the window must be positive")
        self.queue = queue
        self.window = window
        self.idle_ms = idle_ms
        self.segment: Optional[MappedFile] = None    # the one armed (tests, monitoring)
        self.segments_followed = 0
        self.passes = 0                                 # populate_ahead calls (wake-ups to Python)
        self.last_error: Optional[OSError] = None
        self.supported = True
        self._fd = -1
        self._thread: Optional[threading.Thread] = None
        self._stopping = False
        self._forked = False
        _SERVICES.add(self)

    @property
    def running(self) -> bool:
        """Whether the thread runs (in this process)."""
        t = self._thread
        return t is not None and t.is_alive() and not self._forked

    def start(self) -> None:
        """Start the thread (once; not after ``shutdown``, nor where eventfd is missing)."""
        if self._thread is not None or self._stopping or self._forked or not hasattr(os, "eventfd"):
            return
        self._fd = os.eventfd(0, os.EFD_CLOEXEC)
        self._thread = threading.Thread(target=self._run, name=f"pymq-{self.name}", daemon=True)
        self._thread.start()

    def segment_created(self, mf: MappedFile) -> None:
        """The queue made ``mf``, the next segment to write: the thread moves to it now
        (called by the writer's roll)."""
        if not self._stopping and not self._forked:
            self._signal(1)

    def _signal(self, value: int) -> None:
        if self._fd >= 0:
            try:
                os.eventfd_write(self._fd, value)
            except OSError:
                pass

    def _wait(self) -> bool:
        """Sleep until signalled or ``idle_ms``; False when told to stop."""
        p = select.poll()
        p.register(self._fd, select.POLLIN)
        if p.poll(self.idle_ms):
            if os.eventfd_read(self._fd) >= STOP_VALUE:
                return False
        return not self._stopping

    def _run(self) -> None:
        mf: Optional[MappedFile] = None
        try:
            while not self._stopping:
                cur = self.queue.get_last_mapped_file()
                if cur is not mf:
                    if mf is not None:
                        mf.disarm()
                    mf = cur
                    self.segment = mf
                    if mf is not None and mf.writable:
                        self.segments_followed += 1
                if mf is None or mf.closed or mf.is_full() or not mf.writable:
                    if not self._wait():
                        break
                    continue
                self.passes += 1
                rc = mf.populate_ahead(self._fd, self.window, self.idle_ms)
                if rc == 2:
                    break
                if rc < 0:
                    if not self._failed(-rc, mf):
                        break
                    # another failure: leave this segment alone, wait for the next one
                    mf.disarm()
                    while not self._stopping and self.queue.get_last_mapped_file() is mf:
                        if not self._wait():
                            return
        finally:
            if mf is not None:
                mf.disarm()
            self.segment = None

    def _failed(self, err: int, mf: MappedFile) -> bool:
        """A failed madvise: False to stop for good (no MADV_POPULATE_WRITE here)."""
        global _unsupported_logged
        self.last_error = OSError(err, f"MADV_POPULATE_WRITE on {mf.file_name}: {os.strerror(err)}")
        if err in (errno.EINVAL, errno.ENOSYS):
            self.supported = False
            if not _unsupported_logged:
                _unsupported_logged = True
                log.info("this kernel has no MADV_POPULATE_WRITE (Linux 5.14+): the commit log's "
                         "pages are faulted in by the writer (commitlog_prefault_window unused)")
            return False
        log.warning("populating %s ahead of the writes failed (%s); going on at the next segment",
                    mf.file_name, self.last_error)
        return True

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Stop the thread and wait for it; the segment is disarmed, the eventfd closed.
        Does nothing in a forked child (the thread is the parent's)."""
        if self._forked:
            return
        self._stopping = True
        t, self._thread = self._thread, None
        if t is not None:
            self._signal(STOP_VALUE)
            t.join(timeout_s)
        mf = self.segment
        if mf is not None:
            mf.disarm()
        if self._fd >= 0 and (t is None or not t.is_alive()):
            os.close(self._fd)
            self._fd = -1


def _after_fork_in_child() -> None:
    """In a forked child: no thread runs; the copies are marked stopped and let go of
    their segment and of the eventfd they share with the parent. Takes no lock."""
    for service in list(_SERVICES):
        service._forked = True
        service._thread = None
        mf = service.segment
        if mf is not None:
            try:
                mf.disarm()
            except Exception:
                pass
        if service._fd >= 0:
            try:
                os.close(service._fd)
            except OSError:
                pass
            service._fd = -1


os.register_at_fork(after_in_child=_after_fork_in_child)
