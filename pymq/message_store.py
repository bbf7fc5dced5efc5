"""MessageStore: the facade that opens a store directory and wires its components.

It mirrors RocketMQ's ``DefaultMessageStore`` surface (``put_message``,
``look_message_by_offset``, ...) but holds no algorithms: appending lives in
``CommitLog`` and its compiled appender, flushing in ``store.flush_service``, segment
allocation in ``store.allocate_service``. This module decides what runs when.
"""

from __future__ import annotations

import os
from typing import Optional

from pymq._core.message import Message
from pymq.config import StoreConfig
from pymq.errors import StoreStateError
from pymq.status import PutMessageStatus
from pymq.store.allocate_service import AllocateMappedFileService
from pymq.store.commit_log import CommitLog
from pymq.store.flush_service import FlushRealTimeService, GroupCommitRequest, GroupCommitService
from pymq.store.store_lock import StoreLock


class MessageStore:
    """An embedded RocketMQ broker store in the directory ``path``.

    Opening creates the directory layout if needed, or loads the existing segments and
    finds the end of the log. ``start()`` launches the background services and makes the
    store writeable; ``shutdown()`` flushes, stops them and removes the ``abort`` marker.
    It is also a context manager that does both. One ``MessageStore`` is meant to be
    shared by all threads of an application; a second writer on the same directory gets
    :class:`pymq.StoreLockedError`.

    Layout (RocketMQ's): ``commitlog/``, ``consumequeue/``, ``index/``, ``config/``,
    ``checkpoint``, ``abort``, ``lock``.
    """

    def __init__(self, path: str | os.PathLike, config: Optional[StoreConfig] = None,
                 read_only: bool = False) -> None:
        if read_only:
            raise StoreStateError("read_only opening is not available yet (see the recovery issue)")
        if config is not None and not isinstance(config, StoreConfig):
            raise TypeError(f"config must be a pymq.StoreConfig, not {type(config).__name__}")
        self.config = config if config is not None else StoreConfig()
        self.config.validate()
        self.store_path = os.path.abspath(os.fspath(path))
        os.makedirs(self.store_path, exist_ok=True)
        self._lock = StoreLock(self.store_path)
        self._lock.acquire()
        self._running = False
        self._closed = False
        try:
            self._open()
        except BaseException:
            self._lock.release()
            raise

    def _open(self) -> None:
        cfg = self.config
        self.last_exit_ok = not os.path.exists(self._abort_path)
        self.allocate_service = AllocateMappedFileService(warm=cfg.warm_mapped_file_enable)
        self.commit_log = CommitLog(self.store_path, cfg, self.allocate_service)
        self.commit_log.appender.set_writeable(False)
        self.commit_log.load()
        self.commit_log.recover_normally(check_crc=cfg.check_crc_on_recover and not self.last_exit_ok)
        self.commit_log.rebuild_queue_offsets()
        mfq = self.commit_log.mapped_file_queue
        self._sync_flush = cfg.sync_flush
        if self._sync_flush:
            self.flush_service = GroupCommitService(mfq)
        else:
            self.flush_service = FlushRealTimeService(
                mfq, cfg.flush_interval_commitlog, cfg.flush_commitlog_least_pages,
                cfg.flush_commitlog_thorough_interval)
            # The hot path: with nothing to wait for after the append, put_message is the
            # compiled appender's method itself (it type-checks its argument), sparing a
            # Python frame per message.
            self.put_message = self.commit_log.appender.put

    @property
    def _abort_path(self) -> str:
        return os.path.join(self.store_path, "abort")

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> "MessageStore":
        """Start the background services and accept puts. Returns the store."""
        if self._closed:
            raise StoreStateError("the store was shut down; open a new MessageStore")
        if self._running:
            return self
        self.flush_service.start()
        with open(self._abort_path, "wb"):
            pass
        self._running = True
        appender = self.commit_log.appender
        appender.set_writeable(True)
        if appender.current is not None and self.config.warm_mapped_file_enable:
            self.allocate_service.warm_async(appender.current)
        return self

    def shutdown(self) -> None:
        """Stop accepting puts, flush everything, stop the services and release the lock."""
        if self._closed:
            return
        self._closed = True
        self.commit_log.appender.close()
        try:
            if self._running:
                self.flush_service.shutdown()
            else:
                self.commit_log.mapped_file_queue.flush_all()
            self.allocate_service.shutdown()
            self.commit_log.shutdown()
            if self._running and os.path.exists(self._abort_path):
                os.remove(self._abort_path)
        finally:
            self._running = False
            self._lock.release()

    close = shutdown

    def __enter__(self) -> "MessageStore":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.shutdown()

    @property
    def running(self) -> bool:
        return self._running

    # -- writing ---------------------------------------------------------------------------

    def put_message(self, msg: Message):
        """Append one message; returns a :class:`PutMessageResult`.

        Like a RocketMQ producer plus broker, it sets ``UNIQ_KEY``, the born time and
        host when the message has none. Bad messages come back with a non-OK status
        (``MESSAGE_ILLEGAL``, ``PROPERTIES_SIZE_EXCEEDED``); wrong argument types raise
        ``TypeError``. With ``SYNC_FLUSH`` it returns once the record is on disk, or with
        ``FLUSH_DISK_TIMEOUT`` after ``sync_flush_timeout`` ms.
        """
        if not isinstance(msg, Message):
            raise TypeError(f"put_message takes a pymq.Message, not {type(msg).__name__}")
        result = self.commit_log.appender.put(msg)
        if self._sync_flush and result.status is PutMessageStatus.PUT_OK:
            self._wait_flushed(result)
        return result

    def put_messages(self, msgs):
        """Append a batch of messages of one topic and queue as one block (RocketMQ's
        ``putMessages``). The result's ``msg_num``, ``queue_offset`` (the first) and
        ``msg_id`` (comma-joined) describe the whole batch."""
        if not isinstance(msgs, list):
            msgs = list(msgs)
        result = self.commit_log.appender.put_batch(msgs)
        if self._sync_flush and result.status is PutMessageStatus.PUT_OK:
            self._wait_flushed(result)
        return result

    def _wait_flushed(self, result) -> None:
        req = GroupCommitRequest(result.commitlog_offset + result.wrote_bytes)
        self.flush_service.put_request(req)
        if not req.wait(self.config.sync_flush_timeout / 1000.0):
            result.set_status(PutMessageStatus.FLUSH_DISK_TIMEOUT)

    def flush(self) -> int:
        """Flush the whole commit log now; returns the flushed offset."""
        return self.commit_log.mapped_file_queue.flush_all()

    # -- reading ---------------------------------------------------------------------------

    def look_message_by_offset(self, commitlog_offset: int):
        """The message whose record starts at ``commitlog_offset``, or None."""
        return self.commit_log.look_message_by_offset(commitlog_offset)

    def get_max_phy_offset(self) -> int:
        """Offset just past the last record in the commit log."""
        return self.commit_log.get_max_offset()

    def get_min_phy_offset(self) -> int:
        """Offset of the first stored byte of the commit log (-1 when empty)."""
        return self.commit_log.get_min_offset()

    def get_queue_offset_table(self) -> dict:
        """``{(topic, queue_id): next queue offset}`` (RocketMQ's topicQueueTable)."""
        return self.commit_log.appender.queue_offset_table()

    def __repr__(self) -> str:
        return f"MessageStore({self.store_path!r}, running={self._running})"
