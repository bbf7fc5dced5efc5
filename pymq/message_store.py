"""MessageStore: the facade that opens a store directory and wires its components.

It mirrors RocketMQ's ``DefaultMessageStore`` surface (``put_message``, ``get_message``,
``look_message_by_offset``, ...) but holds no algorithms: appending lives in ``CommitLog``
and its compiled appender, pulls and per-queue queries in ``MessageReader``, dispatching
in ``ReputMessageService``, flushing in ``flush_service``, consumer progress in
``ConsumerOffsetManager``. This module decides what is built, in which order it is
recovered, and what runs when.
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import Future
from typing import Callable, Iterable, Optional

from pymq._core.dispatch import CqRouter
from pymq._core.message import Message
from pymq._core.put_bodies import put_bodies as _put_bodies
from pymq._core.record import decode_message_id
from pymq.config import StoreConfig
from pymq.store_sizes import check_sizes, config_for_store, recorded_sizes, save_sizes
from pymq.errors import CorruptRecordError, DiskFullError, StoreStateError
from pymq.results import GetMessageResult
from pymq.status import BoundaryType, PutMessageStatus
from pymq.store.allocate_service import AllocateMappedFileService
from pymq.store.checkpoint import StoreCheckpoint
from pymq.store.clean_commit_log_service import CleanCommitLogService
from pymq.store.clean_consume_queue_service import CleanConsumeQueueService
from pymq.store.clean_service import CleanResourceService
from pymq.store.commit_log import CommitLog
from pymq.store.consume_queue_store import ConsumeQueueStore
from pymq.store.consumer_offsets import ConsumerOffsetManager, ConsumerOffsetPersistService
from pymq.store.disk_guard import DiskGuard
from pymq.store.index_service import IndexService
from pymq.store.flush_service import (FlushConsumeQueueService, FlushRealTimeService, GroupCommitRequest,
                                      GroupCommitService, flushed_future)
from pymq.store import fork_guard
from pymq.store.arguments import check_queue_id, wait_timeout
from pymq.store.fence import fence
from pymq.store.ha import SLAVE_MODE, build_ha
from pymq.store.ha.sync_master import replicated_future, wait_replicated
from pymq.store.long_polling import MessageArrivingNotifier, arrival_condition, queue_ready
from pymq.store.put_gate import PutGate
from pymq.store.recovery import dispatch_start, recover, recover_topic_queue_table
from pymq.store.message_reader import MessageReader
from pymq.store.refresh_service import RefreshService
from pymq.store.config_manager import ConfigPersistService
from pymq.store.reput_service import ReputMessageService
from pymq.store.schedule_service import ScheduleMessageService
from pymq.store.timer_service import TimerMessageService
from pymq.store.topic_deletions import TopicDeletions, delete_topic
from pymq.store.store_lock import StoreLock
from pymq.store.store_stats import TimerBacklog, store_stats
from pymq.store.store_stats_service import StoreStatsService, counters_of

log = logging.getLogger("pymq")


class MessageStore:
    """An embedded RocketMQ broker store in the directory ``path``.

    Opening creates the directory layout if needed, or loads the existing files, finds the
    end of the log, cuts consume-queue entries past it and dispatches whatever the queues
    miss. ``start()`` launches the background services (dispatch, flush, offset
    persistence) and makes the store writeable; ``shutdown()`` lets the dispatcher catch
    up, flushes, stops them and removes the ``abort`` marker. It is also a context manager
    that does both. One ``MessageStore`` is meant to be shared by all threads of an
    application; a second writer on the same directory gets :class:`pymq.StoreLockedError`.

    Layout (RocketMQ's): ``commitlog/``, ``consumequeue/{topic}/{queueId}/``, ``index/``,
    ``config/``, ``checkpoint``, ``abort``, ``lock``.
    """

    def __init__(self, path: str | os.PathLike, config: Optional[StoreConfig] = None,
                 read_only: bool = False) -> None:
        if config is not None and not isinstance(config, StoreConfig):
            raise TypeError(f"config must be a pymq.StoreConfig, not {type(config).__name__}")
        self.store_path = os.path.abspath(os.fspath(path))
        #: what opening found damaged and what it rebuilt or reset (``pymq check`` shows it)
        self.open_report: list[str] = []
        if os.path.exists(self.store_path) and not os.path.isdir(self.store_path):
            raise StoreStateError(f"{self.store_path} is not a directory")
        # without a config, the file sizes the store was written with (config/storeSizes.json)
        self.config = config if config is not None else config_for_store(self.store_path)
        self.config.validate()
        self._note(recorded_sizes(self.store_path)[1])
        self.read_only = read_only
        self._running = False
        self._closed = False
        self._lock = StoreLock(self.store_path)
        fork_guard.track(self)      # fenced in a forked child: every call raises, nothing is written
        if read_only:
            # a store has its commit log, or at least the lock file of a writer that just began
            if not (os.path.isdir(os.path.join(self.store_path, "commitlog"))
                    or os.path.isfile(os.path.join(self.store_path, "lock"))):
                raise StoreStateError(f"{self.store_path} holds no store (no commitlog/ directory)")
            self._open_read_only()
            return
        # Sizes that contradict the store's would make opening grow, drop or rebuild its
        # files for them (a last segment grown, queue and index files deleted): refuse
        # before anything is touched. storeSizes.json is written only once the open worked.
        check_sizes(self.store_path, self.config, config_given=config is not None)
        os.makedirs(self.store_path, exist_ok=True)
        self._lock.acquire()
        try:
            self._open()
        except BaseException:
            self._lock.release()
            raise
        try:
            save_sizes(self.store_path, self.config)
        except OSError as e:      # a full disk: the files still tell their sizes
            log.error("cannot record the store's file sizes (%s): readers without a config read "
                      "them off the files", e)
            self._note(f"config/storeSizes.json not written: {e}")

    # -- opening -----------------------------------------------------------------------------

    def _open(self) -> None:
        cfg = self.config
        root = self.store_path
        self.last_exit_ok = not os.path.exists(self._abort_path)
        self.allocate_service = AllocateMappedFileService(warm=cfg.warm_mapped_file_enable)
        self.commit_log = CommitLog(root, cfg, self.allocate_service)
        self.commit_log.appender.set_writeable(False)
        self.commit_log.appender.max_delay_level = len(cfg.delay_levels_ms())
        self.commit_log.appender.timer_max_delay_ms = cfg.timer_max_delay_sec * 1000
        self.consume_queues = ConsumeQueueStore(root, cfg, self.commit_log)
        self.reader = MessageReader(self.commit_log, self.consume_queues, cfg)
        self.consumer_offsets = ConsumerOffsetManager(root)
        self.index_service = IndexService(root, cfg, self.commit_log)
        self.topic_deletions = self._load_topic_deletions(root)
        self.consume_queues.topic_deletions = self.topic_deletions
        self.disk_guard = DiskGuard(root, cfg.disk_space_warning_level_ratio, self.commit_log.appender.set_writeable,
                                    2 * cfg.commitlog_file_size, lambda: self.put_gate.ready(),
                                    promised=lambda: (self.commit_log.unreserved_bytes()
                                                      + self.index_service.unreserved_bytes()))
        self.commit_log.disk_guard = self.disk_guard
        self.index_service.disk_guard = self.disk_guard

        self.checkpoint = StoreCheckpoint(root)
        self._note(self.checkpoint.load_problem)
        self.index_service.checkpoint = self.checkpoint
        self.commit_log.load()
        queues_whole = self.consume_queues.load()
        self.index_service.load()
        replay_from = recover(cfg, self.last_exit_ok, self.commit_log, self.consume_queues, self.index_service,
                              self.checkpoint)
        self.consume_queues.apply_floors()
        self.index_service.mark_boundary()       # a replay indexes no record twice
        for line in self.commit_log.damage.report_lines():
            self._note(line)
        self._load_table(self.consumer_offsets)

        put = self.commit_log.appender.put
        self.schedule_service = ScheduleMessageService(root, cfg.delay_levels_ms(), self.consume_queues,
                                                       self.commit_log, put)
        self.delay_offset_persist_service = ConfigPersistService(self.schedule_service.offsets,
                                                                 cfg.flush_delay_offset_interval)
        self.timer_service = TimerMessageService(root, cfg, self.consume_queues, self.commit_log, put)
        self.timer_service.disk_guard = self.disk_guard
        self.timer_service.gate_puts(self.commit_log.appender)     # no timer put without the wheel
        self.schedule_service.stale = self.timer_service.stale = self.topic_deletions.is_stale
        self.notifier = MessageArrivingNotifier()
        self.router = CqRouter(self.consume_queues.appender_for, cfg.delay_levels_ms())
        self.consume_queues.map_cache.evictor = self.router.evict     # never a file being written
        if cfg.message_index_enable:
            self.router.index_builder = self.index_service.builder
        self.reput_service = ReputMessageService(self.commit_log, self.router, self._on_arrived)
        self.reput_service.consume_queues = self.consume_queues
        self.reader.enable_repair(self.reput_service)
        self.index_service.enable_repair(self.reput_service)
        self.put_gate = PutGate(self.commit_log.appender, self.disk_guard, self.reput_service,
                                lambda: recover_topic_queue_table(self.commit_log, self.consume_queues),
                                lambda: self._running and not self._closed)
        self._slave = cfg.broker_role == "SLAVE"
        self._sync_master = cfg.broker_role == "SYNC_MASTER"
        if self._slave:
            self.put_gate.refusal = SLAVE_MODE      # every put: SERVICE_NOT_AVAILABLE
        #: replication (docs/replication.md): an HAService on a master with an HA port, an
        #: HAClient on a slave, else None
        self.ha = build_ha(self.commit_log, cfg, self.reput_service.wakeup)
        self.reput_service.reput_from_offset = dispatch_start(cfg, queues_whole, replay_from, self.commit_log,
                                                              self.consume_queues, self.index_service)
        try:
            self.reput_service.do_reput()        # queues whole before the queue table is set
        except DiskFullError as e:
            # a full disk cannot take the queue files the replay needs: open for reading;
            # the dispatcher retries in the background and puts wait until it is through
            log.error("store opened on a full disk: dispatch incomplete (%s); puts are refused until "
                      "space returns and the queues catch up", e)
            self.put_gate.dispatch_incomplete = True
        if self.consume_queues.forget_empty():   # opened by the replay for nothing
            self.router.forget()
        recover_topic_queue_table(self.commit_log, self.consume_queues)
        self.schedule_service.offsets.strict = cfg.strict_open
        self.schedule_service.load()
        self._note(self.schedule_service.offsets.load_problem)
        self.timer_service.checkpoint.strict = cfg.strict_open
        self.timer_service.load()
        self._note(self.timer_service.checkpoint.load_problem)
        self._note(self.timer_service.load_problem)

        self.refresh_service = None
        mfq = self.commit_log.mapped_file_queue
        self._sync_flush = cfg.sync_flush
        if self._sync_flush:
            self.flush_service = GroupCommitService(mfq, self.checkpoint)
        else:
            self.flush_service = FlushRealTimeService(
                mfq, cfg.flush_interval_commitlog, cfg.flush_commitlog_least_pages,
                cfg.flush_commitlog_thorough_interval, self.checkpoint)
            # The hot path: with nothing to wait for after the append, put_message is the
            # compiled appender's method itself (it type-checks its argument), sparing a
            # Python frame per message.
            if not self._sync_master:
                self.put_message = self.commit_log.appender.put
        self._bind_reads()
        self.flush_cq_service = FlushConsumeQueueService(
            self.consume_queues, cfg.flush_interval_consume_queue, cfg.flush_consume_queue_least_pages,
            cfg.flush_consume_queue_thorough_interval, self.checkpoint,
            lambda: self.router.last_store_timestamp)
        self.offset_persist_service = ConsumerOffsetPersistService(
            self.consumer_offsets, cfg.flush_consumer_offset_interval)
        self.clean_service = self._build_clean_service()
        self._build_stats_service()

    def _build_stats_service(self) -> None:
        self.stats_service = StoreStatsService(counters_of(self))
        self._timer_backlog = TimerBacklog()

    def _load_topic_deletions(self, root: str) -> TopicDeletions:
        deletions = TopicDeletions(root)
        self._load_table(deletions)
        return deletions

    def _load_table(self, table) -> None:
        """Load a side table under the store's opening rules (``strict_open``; a read-only
        store never moves a file) and note what had to be given up."""
        table.strict = self.config.strict_open
        table.read_only = self.read_only
        table.load()
        self._note(table.load_problem)

    def _note(self, problem) -> None:
        if problem:
            self.open_report.append(problem)

    def _build_clean_service(self) -> CleanResourceService:
        cfg = self.config
        clean = CleanResourceService(self.disk_guard, None, None, self.index_service, self.reput_service.rewind,
                                     cfg.clean_resource_interval, after_pass=self.put_gate.update)
        clean.clean_commit_log = CleanCommitLogService(self.commit_log, cfg, clean.pause)
        clean.clean_consume_queue = CleanConsumeQueueService(
            self.commit_log, self.consume_queues, self.index_service, clean.pause,
            cfg.delete_consume_queue_files_interval, self.timer_service, self.topic_deletions)
        return clean

    def _on_arrived(self, arrived: dict) -> None:
        """The dispatcher extended these queues: wake readers, the delivery services and
        the HA connections' writers."""
        self.notifier.notify(arrived)
        if self.ha is not None and not self._slave:
            self.ha.wakeup_writers()
        self.schedule_service.on_arrived(arrived)
        self.timer_service.on_arrived(arrived)

    def _bind_reads(self) -> None:
        # Reads, like ASYNC puts: one compiled call per pull or lookup (same signatures).
        self.get_message = self.reader.get_message
        self.get_message_raw = self.reader.queue_reader.get_message_raw
        self.read_batch = self.reader.queue_reader.read_batch
        self.get_offset_in_queue_by_time = self.reader.get_offset_in_queue_by_time
        self.query_message = self.index_service.querier.query_message
        if getattr(self, "topic_deletions", None):
            self.query_message = self._query_message_masked

    def _open_read_only(self) -> None:
        """Map everything read-only and find how far it is written; no lock, no recovery,
        no background writers. ``start()`` runs a RefreshService that follows the writer."""
        cfg = self.config
        root = self.store_path
        self.last_exit_ok = True
        self.allocate_service = None
        self.commit_log = CommitLog(root, cfg, None, read_only=True)
        self.commit_log.appender.set_writeable(False)
        self.consume_queues = ConsumeQueueStore(root, cfg, self.commit_log, read_only=True)
        self.reader = MessageReader(self.commit_log, self.consume_queues, cfg)
        self.consumer_offsets = ConsumerOffsetManager(root)
        self.index_service = IndexService(root, cfg, self.commit_log, read_only=True)
        self.topic_deletions = self._load_topic_deletions(root)
        self.commit_log.load_read_only()
        self.consume_queues.load_read_only()
        min_phy = self.commit_log.get_min_offset()
        for cq in self.consume_queues.queues():      # entries of deleted segments are gone
            cq.correct_min_offset(min_phy)
        self.index_service.load()
        self._load_table(self.consumer_offsets)
        self.notifier = MessageArrivingNotifier()
        self.reput_service = None
        self.ha = None
        self._slave = self._sync_master = False
        self.refresh_service = RefreshService(self.commit_log, self.consume_queues, self.index_service,
                                              self.notifier, on_dropped=self.reader.forget)
        self._sync_flush = False
        self._bind_reads()
        self._build_stats_service()

    def refresh(self) -> None:
        """Read-only stores: catch up now with what the writer appended since the last
        look, new queues included (a started store also does this every few ms)."""
        if self.refresh_service is not None:
            self.refresh_service.refresh(discover=True)

    @property
    def _abort_path(self) -> str:
        return os.path.join(self.store_path, "abort")

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> "MessageStore":
        """Start the background services and accept puts. Returns the store."""
        if self._closed:
            raise StoreStateError("the store was shut down; open a new MessageStore")
        if self._running:
            return self
        self.stats_service.start()
        if self.read_only:
            self.refresh_service.start()
            self._running = True
            return self
        if self.commit_log.prefault_service is not None:
            self.commit_log.prefault_service.start()   # the window ahead of the writes
        self.reput_service.start()
        self.flush_service.start()
        self.flush_cq_service.start()
        self.offset_persist_service.start()
        with open(self._abort_path, "wb"):
            pass
        self._running = True
        appender = self.commit_log.appender
        self.disk_guard.check()
        self.put_gate.update()
        self.clean_service.start()
        if not self._slave:
            # deliveries write through the appender: start them once it accepts puts (a
            # slave writes only what its master sends: RocketMQ runs them on masters only)
            self.schedule_service.start()
            self.delay_offset_persist_service.start()
            self.timer_service.start()
        if self.ha is not None:
            self.ha.start()
        if appender.current is not None and self.config.warm_mapped_file_enable:
            self.allocate_service.warm_async(appender.current)
        return self

    def shutdown(self) -> None:
        """Stop accepting puts, dispatch and flush everything, stop the services and
        release the lock. The ``abort`` marker is removed only when nothing was left
        undispatched (RocketMQ's rule).

        First every waiter (``wait_message``, ``wait_messages``, ``Consumer.poll``,
        :mod:`pymq.aio`'s waits, a broker's pop) wakes and raises ``StoreStateError``.
        Afterwards every call on the store raises ``StoreStateError``; ``shutdown`` and
        ``close`` again do nothing. In a process forked from the one that opened the
        store, they do nothing at all (:mod:`pymq.store.fork_guard`): the parent's files
        and lock are left as they are."""
        if self._closed:
            return
        self._closed = True
        self.notifier.close()
        self.stats_service.shutdown()
        if self.ha is not None:
            self.ha.shutdown()          # no slave bytes appended, no frame read, past here
        if not self.read_only and self._running:
            self.clean_service.shutdown()
            # deliveries write through the appender: stop them before it closes
            self.timer_service.shutdown()
            self.schedule_service.shutdown()
            self.delay_offset_persist_service.shutdown()
        self.commit_log.stop_writes()       # the appender, and the write window's thread
        self.reader.close()
        if self.read_only:
            if self.refresh_service is not None:
                self.refresh_service.shutdown()
            self.notifier.notify_all()
            self.index_service.shutdown()
            self.consume_queues.shutdown()
            self.commit_log.mapped_file_queue.shutdown()
            self._running = False
            self._fence("the store is shut down; open a new MessageStore")
            return
        try:
            self.reput_service.shutdown()
            self.reput_service.do_reput()
            self.notifier.notify_all()
            if self._running:
                self.flush_service.shutdown()
                self.flush_cq_service.shutdown()
                self.offset_persist_service.shutdown()
            else:
                self.commit_log.mapped_file_queue.flush_all()
                for save in (self.consumer_offsets.persist, self.schedule_service.offsets.persist,
                             self.timer_service.persist):
                    try:
                        save()
                    except OSError as e:     # a full disk: the previous files stay; go on closing
                        log.error("shutdown: %s", e)
            self.timer_service.close()
            self.allocate_service.shutdown()
            clean = self.reput_service.behind() == 0
            self.index_service.flush()
            if clean:
                self.checkpoint.stamp_clean_exit(self.router.last_store_timestamp
                                                 or self.checkpoint.physic_msg_timestamp)
            self.checkpoint.flush()
            self.checkpoint.close()
            self.index_service.shutdown()
            self.consume_queues.shutdown()
            self.commit_log.shutdown()
            if self._running and clean and os.path.exists(self._abort_path):
                os.remove(self._abort_path)
        finally:
            self._running = False
            self._lock.release()
            self._fence("the store is shut down; open a new MessageStore")

    def _fence(self, message: str) -> None:
        """After shutdown: every public call raises (the hot paths are rebound, not checked)."""
        fork_guard.forget(self)
        fence(self, message, keep=("shutdown", "close"))

    close = shutdown

    def __enter__(self) -> "MessageStore":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.shutdown()

    @property
    def running(self) -> bool:
        return self._running

    def _check_open(self) -> None:
        if self._closed:
            raise StoreStateError("the store is shut down")

    # -- writing -----------------------------------------------------------------------------

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
        if self._sync_master:
            wait_replicated(self.ha, result, self.config.sync_flush_timeout / 1000.0)
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
        if self._sync_master:
            wait_replicated(self.ha, result, self.config.sync_flush_timeout / 1000.0)
        return result

    def put_bodies(self, topic: str, bodies, *, queue_id: Optional[int] = None, keys=None, tags=None,
                   properties=None):
        """Append raw ``bodies`` to one topic and queue as one batch, without a
        ``Message`` per body: the records ``put_messages`` writes for
        ``Message(topic, body, tags=, keys=, properties=, queue_id=)`` of the same values
        (born and store times, the generated ``UNIQ_KEY`` and the CRCs are the put's own),
        encoded in C straight into the mapped segment. Same durability (SYNC_FLUSH waits
        for the disk), statuses and limits as ``put_messages``.

        ``bodies``: a sequence of bytes-like objects, a NumPy array (the rows of a 2-D
        uint8 array, the items of an ``S`` or object array) or a pyarrow binary / string
        array (read in place). ``queue_id``: None means 0. ``keys``: None, or one entry per
        body (a str of space-separated keys, a list of keys, or None). ``tags``: None, one
        str for every body, or one str-or-None per body. ``properties``: None, one dict
        for every body (encoded once), or one dict-or-None per body.

        Returns one :class:`PutMessageResult`: the first ``commitlog_offset`` and
        ``queue_offset``, ``msg_num``; ``commitlog_offsets``, ``msg_ids`` and (when the
        store generated them all) ``uniq_keys`` are computed when asked for. Arguments of
        the wrong type or length raise ``TypeError`` / ``ValueError``; an empty batch, an
        invalid topic, a queue id below 0, a delay or an oversized body get
        ``MESSAGE_ILLEGAL`` (oversized properties ``PROPERTIES_SIZE_EXCEEDED``); nothing is
        written then.
        """
        result = _put_bodies(self.commit_log.appender, topic, bodies, queue_id, keys, tags, properties)
        if self._sync_flush and result.status is PutMessageStatus.PUT_OK:
            self._wait_flushed(result)
        if self._sync_master:
            wait_replicated(self.ha, result, self.config.sync_flush_timeout / 1000.0)
        return result

    def async_put_message(self, msg: Message) -> "Future":
        """RocketMQ's ``asyncPutMessage``: append ``msg`` now and return a
        :class:`concurrent.futures.Future` of its :class:`PutMessageResult`, done at once
        under ``ASYNC_FLUSH`` and, under ``SYNC_FLUSH``, when the group commit has the
        record on disk (``FLUSH_DISK_TIMEOUT`` when that flush failed). No thread waits
        meanwhile; :mod:`pymq.aio` awaits it from an asyncio loop. A caller that needs a
        bound on the wait (a disk that hangs) waits at most ``sync_flush_timeout`` ms and
        then treats the put as ``FLUSH_DISK_TIMEOUT``, as ``put_message`` does (the
        future's ``put_result`` attribute is the result it will be done with)."""
        if not isinstance(msg, Message):
            raise TypeError(f"put_message takes a pymq.Message, not {type(msg).__name__}")
        return self._flushed_future(self.commit_log.appender.put(msg))

    def async_put_messages(self, msgs) -> "Future":
        """``put_messages`` as :meth:`async_put_message` does ``put_message``."""
        if not isinstance(msgs, list):
            msgs = list(msgs)
        return self._flushed_future(self.commit_log.appender.put_batch(msgs))

    def async_put_bodies(self, topic: str, bodies, *, queue_id: Optional[int] = None, keys=None, tags=None,
                         properties=None) -> "Future":
        """``put_bodies`` as :meth:`async_put_message` does ``put_message``."""
        return self._flushed_future(_put_bodies(self.commit_log.appender, topic, bodies, queue_id, keys, tags,
                                                properties))

    def _flushed_future(self, result) -> "Future":
        fut = flushed_future(self.flush_service if self._sync_flush else None, result)
        if self._sync_master:
            fut = replicated_future(self.ha, fut, self.config.sync_flush_timeout / 1000.0)
        return fut

    def _wait_flushed(self, result) -> None:
        req = GroupCommitRequest(result.commitlog_offset + result.wrote_bytes)
        self.flush_service.put_request(req)
        if not req.wait(self.config.sync_flush_timeout / 1000.0):
            result.set_status(PutMessageStatus.FLUSH_DISK_TIMEOUT)

    def flush(self) -> int:
        """Flush the whole commit log now; returns the flushed offset."""
        return self.commit_log.mapped_file_queue.flush_all()

    # -- reading by queue --------------------------------------------------------------------

    def get_message(self, group: str, topic: str, queue_id: int, offset: int, max_msgs: int = 32,
                    tags: Optional[str] = None) -> GetMessageResult:
        """Pull up to ``max_msgs`` messages of (topic, queue_id) from queue offset ``offset``.

        ``tags`` is a tag expression (``"TagA || TagB"``; None or ``"*"`` for all). The
        result's status and ``next_begin_offset`` follow RocketMQ 4.9.4+; a page also
        stops at 32 messages or 256 KiB (``max_transfer_*`` in the config). ``group`` names
        the consumer group, as in RocketMQ; it does not change what is read.
        """
        self._check_open()
        return self.reader.get_message(topic, queue_id, offset, max_msgs, tags)

    def get_message_raw(self, group: str, topic: str, queue_id: int, offset: int, max_msgs: int = 32,
                        tags: Optional[str] = None) -> GetMessageResult:
        """``get_message`` without decoding, for servers: the same statuses, offsets and
        page limits, but ``result.buffers`` holds the records exactly as they lie in the
        commit log (memoryviews of the mapped segments, adjacent records in one view) and
        ``result.message_count`` says how many. The views keep their segments mapped
        (a cleaning pass that deletes one waits for them): write them out and drop them.
        """
        self._check_open()
        return self.reader.queue_reader.get_message_raw(group, topic, queue_id, offset, max_msgs, tags)

    def read_batch(self, topic: str, queue_id: int, offset: int, max_msgs: int = 32,
                   tags: Optional[str] = None):
        """``get_message`` without objects: a :class:`pymq.ReadBatch` whose ``bodies`` are
        read-only memoryviews of the mapped commit log (no copy), with the pull's
        ``status``, ``next_begin_offset``, ``min_offset`` and ``max_offset`` (exactly
        ``get_message``'s, CRC check on read included), columns of queue offsets,
        commit-log offsets, store times, tag codes and sizes, keys and properties decoded
        on demand, and ``to_arrow()``. Release it (``with`` or ``release()``) when done:
        until then its segments stay mapped, also when cleaning deletes them.
        """
        self._check_open()
        return self.reader.queue_reader.read_batch(topic, queue_id, offset, max_msgs, tags)

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """First queue offset still readable (0 for an unknown queue)."""
        return self.reader.get_min_offset_in_queue(topic, queue_id)

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """Queue offset the next message will get (0 for an unknown queue)."""
        return self.reader.get_max_offset_in_queue(topic, queue_id)

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, cq_offset: int) -> int:
        """Commit-log offset of the message at queue offset ``cq_offset`` (0 if none)."""
        return self.reader.get_commit_log_offset_in_queue(topic, queue_id, cq_offset)

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int,
                                    boundary: BoundaryType = BoundaryType.LOWER) -> int:
        """Queue offset by store time (RocketMQ 5.x): LOWER, the first offset whose store
        time is >= ``timestamp_ms`` (the max offset when all are older); UPPER, the last
        offset whose store time is <= ``timestamp_ms``."""
        return self.reader.get_offset_in_queue_by_time(topic, queue_id, timestamp_ms, boundary)

    def get_message_store_timestamp(self, topic: str, queue_id: int, cq_offset: int) -> int:
        """Store time of the message at ``cq_offset``, -1 if there is none."""
        return self.reader.get_message_store_timestamp(topic, queue_id, cq_offset)

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        """Store time of the queue's first readable message, -1 if there is none."""
        return self.reader.get_earliest_message_time(topic, queue_id)

    def wait_message(self, topic: str, queue_id: int, offset: int, timeout_s: float) -> bool:
        """Long poll: True as soon as queue offset ``offset`` is readable (``offset`` <
        the queue's max offset), False after ``timeout_s`` seconds (``math.inf``: no
        limit; NaN or negative: ``ValueError``). Woken by the dispatcher, not by a
        timer. Raises ``StoreStateError`` when the store shuts down meanwhile."""
        timeout = wait_timeout(timeout_s)
        self._check_open()
        return self.notifier.wait((topic, queue_id), queue_ready(self.consume_queues, topic, queue_id, offset),
                                  timeout)

    def wait_messages(self, topic, offsets: dict, timeout_s: float) -> bool:
        """Long poll over several queues of ``topic``: True as soon as any queue id in
        ``offsets`` has a message at or after its offset (``{queue_id: offset}``), False
        after ``timeout_s`` seconds. New queues of the topic also end the wait. Several
        topics at once: ``topic`` a tuple of names and ``offsets`` ``{topic: {queue_id:
        offset}}``. ``timeout_s`` and shutdown as :meth:`wait_message`."""
        timeout = wait_timeout(timeout_s)
        self._check_open()
        topics, ready = self.arrival_condition(topic, offsets)
        return self.notifier.wait_any(topics, ready, timeout)

    def arrival_condition(self, topic, offsets: dict) -> tuple:
        """``(topics, ready)`` for a wait as :meth:`wait_messages` describes it:
        ``ready()`` is true once one of the queues has a message at or after its offset,
        or a new queue of the topics appeared. With :meth:`add_arrival_listener` this is
        how code that cannot block a thread waits (:mod:`pymq.aio`)."""
        return arrival_condition(self.consume_queues, topic, offsets)

    def add_arrival_listener(self, listener: Callable[[Optional[dict]], None],
                             topics: Optional[Iterable[str]] = None) -> Callable[[], None]:
        """Call ``listener(arrived)`` each time the dispatcher extends a queue of one of
        ``topics`` (of any topic when None; ``arrived`` maps ``(topic, queue_id)`` to the
        queue's new max offset; None at shutdown means "anything may have changed"). It runs on the
        dispatcher's thread (a read-only store's refresh thread) right after the
        blocking waiters were woken, so it must return at once: hand the news to a loop
        with ``loop.call_soon_threadsafe`` or write an eventfd. Returns the function that
        removes the listener. This is the hook :mod:`pymq.aio` wakes its waiters with."""
        return self.notifier.add_listener(listener, topics)

    def has_queue(self, topic: str, queue_id: int) -> bool:
        """Whether (topic, queue_id) has a consume queue (unlike the other queries, which
        act as if an unknown queue were empty, as RocketMQ does)."""
        return self.consume_queues.find_consume_queue(topic, check_queue_id(queue_id), create=False) is not None

    def read_columns(self, topic: str, queue_id: int, start: int, end: int, max_rows: int = 65536,
                     max_bytes: int = 64 << 20):
        """Columnar read for data pipelines (the Spark source uses it): the messages of
        queue offsets ``[start, end)`` decoded in C into column buffers laid out as Arrow
        arrays, at most ``max_rows`` rows and (after the first) ``max_bytes`` of records.

        Returns ``(count, status, columns)`` as ``pymq._core.columns.read_range`` does;
        ``count`` is 0 and ``columns`` None for an unknown queue.
        """
        from pymq._core import columns
        cq = self.consume_queues.find_consume_queue(topic, check_queue_id(queue_id), create=False)
        if cq is None:
            return 0, columns.READ_CQ_END, None
        cl = self.commit_log
        return columns.read_range(cq.appender, cl.mapped_file_queue.mapped_files, cl.file_size, topic,
                                  queue_id, start, end, max_rows, max_bytes, self.config.check_crc_on_read)

    def get_topics(self) -> dict:
        """``{topic: [queue ids]}`` of every consume queue."""
        return self.consume_queues.topics()

    # -- reading by offset or id -------------------------------------------------------------

    def look_message_by_offset(self, commitlog_offset: int):
        """The message whose record starts at ``commitlog_offset``, or None."""
        return self.commit_log.look_message_by_offset(commitlog_offset)

    def select_one_message_by_offset(self, commitlog_offset: int) -> Optional[bytes]:
        """The whole record at ``commitlog_offset`` exactly as stored (RocketMQ's
        ``selectOneMessageByOffset``), or None when no record starts there."""
        if not isinstance(commitlog_offset, int) or commitlog_offset < 0:
            return None
        try:
            return self.commit_log.get_message_bytes(commitlog_offset)
        except CorruptRecordError:
            return None

    def query_message(self, topic: str, key: str, max_num: int = 32, begin: int = 0,
                      end: Optional[int] = None) -> list:
        """Messages of ``topic`` whose key (a word of KEYS) or unique key (UNIQ_KEY) is
        ``key``, stored between ``begin`` and ``end`` (ms, inclusive; ``end`` None means
        no limit), newest first, at most ``min(max_num, max_msgs_num_batch)`` (64, as in
        RocketMQ). Only real matches are returned: a key whose hash collides with another
        never brings the other's messages."""
        return self.index_service.querier.query_message(topic, key, max_num, begin, end)

    def view_message_by_id(self, msg_id: str):
        """The message with offset message id ``msg_id`` (store host + offset), or None
        when no record starts at that offset. Raises ValueError for a malformed id."""
        _host, offset = decode_message_id(msg_id)
        return self.look_message_by_offset(offset)

    def get_max_phy_offset(self) -> int:
        """Offset just past the last record in the commit log."""
        return self.commit_log.get_max_offset()

    def get_min_phy_offset(self) -> int:
        """Offset of the first stored byte of the commit log (-1 when empty)."""
        return self.commit_log.get_min_offset()

    def dispatch_behind_bytes(self) -> int:
        """Bytes appended but not yet dispatched to the consume queues (0 when read-only)."""
        return self.reput_service.behind() if self.reput_service is not None else 0

    def get_queue_offset_table(self) -> dict:
        """``{(topic, queue_id): next queue offset}`` (RocketMQ's topicQueueTable)."""
        return self.commit_log.appender.queue_offset_table()

    # -- retention ---------------------------------------------------------------------------

    def delete_topic(self, topic: str) -> bool:
        """Delete ``topic``: its consume queues, every group's offsets of it, its queue
        offsets (a topic of the same name created later starts at offset 0) and its
        pending delayed and timer messages; records stay in the commit log until cleaning
        deletes their segments, and are never read through the topic again. Returns False
        when the store has no queue of ``topic`` (mqadmin's deleteTopic)."""
        self._check_open()
        if self.read_only:
            raise StoreStateError("a read-only store cannot delete topics")
        if not isinstance(topic, str) or not topic:
            raise TypeError("topic must be a non-empty str")
        deleted = delete_topic(topic, self.topic_deletions, self.reput_service, self.commit_log,
                               self.consume_queues, self.router, self.reader, self.consumer_offsets,
                               self.notifier)
        if deleted:
            self.query_message = self._query_message_masked
        return deleted

    def delete_expired_files(self) -> dict:
        """Run a cleaning pass now (mqadmin's deleteExpiredCommitLog): delete commit-log
        segments older than ``file_reserved_time`` whatever the hour (and, past the
        forced-clean ratio, whatever their age), then the queue, index and timer-log files
        they leave behind. Returns ``{"commitlog": n, "consume_queue": n, "index": n,
        "timer_log": n, "disk_ratio": r}``."""
        self._check_open()
        if self.read_only:
            raise StoreStateError("a read-only store cannot delete files")
        return self.clean_service.run_pass(manual=True)

    def stats(self) -> dict:
        """What the store is doing, as a plain JSON-serialisable dict (RocketMQ's store
        stats and broker runtime info): put and get totals and rates over 10 s / 1 min /
        10 min, the commit log's extent, flush and dispatch lag, offsets per topic and
        queue, lag per consumer group, the disk and cleaning thresholds, pending delayed
        and timer messages, background services' health. A :class:`pymq.Broker` adds
        pop in-flight counts. Keys: ``docs/operations.md``."""
        return store_stats(self, self.stats_service, self._timer_backlog)

    def disk_usage(self):
        """The disk of the store: a :class:`~pymq.store.disk_guard.DiskUsage` (``ratio``,
        ``total``, ``free``) and whether puts are refused (``store.disk_guard.full``)."""
        return self.disk_guard.usage() if not self.read_only else None

    def _query_message_masked(self, topic: str, key: str, max_num: int = 32, begin: int = 0,
                              end: Optional[int] = None) -> list:
        """``query_message`` once a topic was deleted: records older than the deletion of
        their topic are left out."""
        found = self.index_service.querier.query_message(topic, key, max_num, begin, end)
        floor = self.topic_deletions.floor(topic)
        return [m for m in found if m.commitlog_offset >= floor] if floor >= 0 else found

    # -- consumer progress -------------------------------------------------------------------

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int, durable: bool = False) -> None:
        """Record that ``group`` consumed (topic, queue_id) up to ``offset`` (exclusive).

        By default in memory only (microseconds): ``config/consumerOffset.json`` gets it
        within ``flush_consumer_offset_interval`` (5 s) and at shutdown, so a crash may
        forget the last seconds of commits. ``durable=True`` returns once the file holds
        it, as :meth:`flush_offsets`."""
        if self.read_only:
            raise StoreStateError("a read-only store cannot commit consumer offsets")
        self.consumer_offsets.commit_offset(group, topic, queue_id, offset)
        if durable:
            self.flush_offsets()

    def flush_offsets(self) -> None:
        """Write the committed offsets to ``config/consumerOffset.json`` now; returns once
        every offset committed before the call is on disk (atomic file: tmp file, fsync,
        rename, fsync of the directory). Concurrent calls share one write (group commit).
        Raises ``OSError`` when the file cannot be written (a full disk)."""
        if self.read_only:
            raise StoreStateError("a read-only store cannot commit consumer offsets")
        self._check_open()
        self.consumer_offsets.flush()

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The offset ``group`` committed for (topic, queue_id), -1 when it never did."""
        return self.consumer_offsets.query_offset(group, topic, queue_id)

    def __repr__(self) -> str:
        return f"MessageStore({self.store_path!r}, running={self._running})"
