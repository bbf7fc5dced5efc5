"""PopMessageService: receive with an invisibility time (RocketMQ 5's pop), FIFO groups.

A pop hands out up to N messages of a topic to a consumer group and hides each from the
group until its deadline (pop time + invisible time). ``ack_message`` removes a message
for good; ``change_invisible_time`` sets a new deadline and returns a new receipt handle;
a message whose deadline passes without an ack is delivered again, with
``reconsume_times`` one higher, and after the group's ``retry_max_times`` more it goes to
``%DLQ%{group}``. Many workers may share one group: the state lives here, in the broker,
and every change is made under one lock.

Unlike RocketMQ, which re-puts an expired message into a retry topic, pymq redelivers it
from where it is: the queue offset stays, the delivery count rises. For a consumer group
flagged FIFO (``consume_message_orderly``), messages of one message group (``__SHARDINGKEY``)
in a queue go out one at a time and in order; other message groups of the same queue go
on in parallel. State, records and crash windows: see ``docs/pop.md``,
:mod:`pymq.broker.pop_state` and :mod:`pymq.broker.revive_log`.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import threading
import time
from typing import Callable, Optional

from pymq.errors import CorruptStoreError
from pymq.filter import parse_tag_expression
from pymq.store.arguments import wait_timeout
from pymq.store.episode_log import EpisodeLog
from pymq.store.service_thread import ServiceThread

from .pop_queue import PopBatch, pop_queue
from .pop_state import PopState
from .priority import priority_factor, scan_order, use_priority_mode
from .receipt_handle import InvalidReceiptHandleError, decode_receipt_handle, encode_receipt_handle
from .revive_log import PopStateSnapshot, ReviveLog, rebuild_pop_state, revive_topic
from .slave_pop import SlaveReviveLog
from .topic_message_type import PRIORITY, declared_message_type

log = logging.getLogger("pymq")

MAX_POP_NUMS = 1024            # most messages one pop returns
SNAPSHOT_RECORDS = 100_000     # revive-log records between two snapshots


def wall_clock_ms() -> int:
    """Milliseconds since the epoch (the default :attr:`PopMessageService.clock`)."""
    return time.time_ns() // 1_000_000


class PopStatus(enum.Enum):
    """Outcome of a pop (RocketMQ's ``PopStatus``)."""

    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"


@dataclasses.dataclass
class PopResult:
    """What ``pop_message`` returns: ``status``, the messages (each with its receipt
    handle in property ``POP_CK``), when they were popped and for how long they are
    invisible (ms)."""

    status: PopStatus
    messages: list
    pop_time: int
    invisible_time: int

    @property
    def msg_found_list(self) -> list:
        """RocketMQ's name for :attr:`messages`."""
        return self.messages


class PopMessageService:
    """Pop, ack and change-invisible-time for a :class:`pymq.Broker`, with the revive
    service that dead-letters expired messages past their retries and snapshots the state.

    ``clock`` (a callable returning ms) decides deadlines and expiry; tests replace it to
    expire messages without sleeping.
    """

    def __init__(self, broker, broker_config) -> None:
        self.broker = broker
        self.broker_config = broker_config
        self.clock: Callable[[], int] = wall_clock_ms
        self._lock = threading.RLock()
        self._rr: dict[tuple[str, str], int] = {}
        self._wake: dict[str, int] = {}             # topic -> bumped when pops may find more
        self._committed: dict[tuple, int] = {}
        self.revive_log = ReviveLog(broker, revive_topic(broker_config.cluster_name))
        self.snapshot = PopStateSnapshot(broker.store_path)
        #: on a slave: the state in memory only, taken over at the first change (:mod:`.slave_pop`)
        self.slave = broker.is_slave
        if self.slave:
            self.revive_log = SlaveReviveLog(self.revive_log)
            self.state = PopState()
        else:
            self.state = self._recover()
        # ids of deliveries: above anything recovered, and above anything handed out before
        # a crash that lost its record (ids start at the wall clock in µs-like units)
        self._next_id = max(self.state.max_pop_id + 1, wall_clock_ms() * 1000)
        self._records = 0
        self.revive_service = PopReviveService(self, broker_config.pop_revive_interval)
        self.dead_letter_errors = EpisodeLog(log, "pop: dead-lettering")

    # -- lifecycle ---------------------------------------------------------------------

    def _recover(self) -> PopState:
        try:
            self.snapshot.load()
        except CorruptStoreError as e:        # the revive log still holds every change
            log.error("pop state: %s; replaying the whole revive log instead", e)
            self.snapshot.state_doc = None
        return rebuild_pop_state(self.snapshot, self.revive_log, self.broker)

    def start(self) -> None:
        """Start the revive service."""
        self.revive_service.start()

    def shutdown(self) -> None:
        """Stop the revive service and snapshot the state (not on a slave: its state is
        in memory only)."""
        self.revive_service.shutdown()
        if self.slave:
            return
        try:
            self.persist_snapshot()
        except Exception:
            log.exception("pop state: snapshot at shutdown failed; the next open replays the revive log")

    def persist_snapshot(self) -> None:
        """Write ``config/popState.json``: the state as of the last record, once the
        commit log holding the records is flushed. Not on a slave (its records are its
        master's)."""
        if self.slave:
            return
        with self._lock:
            doc = self.state.to_json()
            offset = self.revive_log.next_offset
            self._records = 0
        self.broker.flush()
        self.snapshot.set(offset, doc)
        self.snapshot.persist()

    # -- group settings ----------------------------------------------------------------

    def group_settings(self, group: str) -> tuple[bool, int]:
        """(FIFO?, retry max times) of a consumer group, from the subscription group
        config when there is one, else (False, ``BrokerConfig.max_reconsume_times``)."""
        sgm = getattr(self.broker, "subscription_group_manager", None)
        cfg = None
        if sgm is not None:
            find = getattr(sgm, "find_subscription_group_config", None)
            if find is not None:
                try:
                    cfg = find(group)
                except Exception:  # an unknown group: the defaults
                    cfg = None
        if cfg is None:
            return False, self.broker_config.max_reconsume_times
        return (bool(getattr(cfg, "consume_message_orderly", False)),
                int(getattr(cfg, "retry_max_times", self.broker_config.max_reconsume_times)))

    # -- pop ---------------------------------------------------------------------------

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def pop_message(self, group: str, topic: str, max_nums: int = 32, invisible_time_ms: int = 60_000,
                    tags: Optional[str] = None, timeout_s: float = 0.0) -> PopResult:
        """Take up to ``max_nums`` messages of ``topic`` for ``group`` from all its queues
        (the first queue looked at rotates; a PRIORITY topic's are looked at highest
        priority first, :mod:`.priority`), hidden from the group for
        ``invisible_time_ms``. Expired deliveries come first, then (FIFO) messages that
        waited for their message group, then new ones. With ``timeout_s`` > 0 it waits
        that long for messages when there are none (woken by arrivals, acks, expiry)."""
        if not isinstance(group, str) or not group or not isinstance(topic, str) or not topic:
            raise ValueError("group and topic must be non-empty strings")
        if not isinstance(max_nums, int) or not 1 <= max_nums <= MAX_POP_NUMS:
            raise ValueError(f"max_nums must be an int in 1..{MAX_POP_NUMS}")
        if not isinstance(invisible_time_ms, int) or invisible_time_ms <= 0:
            raise ValueError("invisible_time_ms must be a positive int (ms)")
        parse_tag_expression(tags)
        wait_timeout(timeout_s)             # NaN or negative: ValueError; math.inf: no limit
        deadline = time.monotonic() + timeout_s
        while True:
            version = self.wake_version(topic)
            result = self._pop_once(group, topic, max_nums, invisible_time_ms, tags)
            remaining = deadline - time.monotonic()
            if result.messages or remaining <= 0:
                return result
            ready, wait_s = self.wait_condition(group, topic, version, remaining)
            self.broker.notifier.wait((topic, None), ready, wait_s)

    def _pop_once(self, group, topic, max_nums, invisible_time_ms, tags) -> PopResult:
        broker = self.broker
        qids = sorted(broker.get_topics().get(topic, ()))
        fifo, max_rt = self.group_settings(group)
        msgs: list = []
        last_put = None
        with self._lock:
            if self.slave:
                self.revive_log.take_over(self)
            now = self.clock()
            if qids:
                start = self._rr.get((group, topic), 0)
                self._rr[(group, topic)] = start + 1
                for qid in scan_order(qids, start, not fifo and self._priority_scan(group, topic, start),
                                      self.broker_config.priority_order_asc):
                    need = max_nums - len(msgs)
                    if need <= 0:
                        break
                    batch = PopBatch(self, group, topic, qid, now, now + invisible_time_ms,
                                     fifo, max_rt, tags)
                    put = pop_queue(batch, need)
                    if put is not None:
                        last_put = put
                    msgs.extend(batch.messages)
        self.revive_log.wait_durable(last_put)
        return PopResult(PopStatus.FOUND if msgs else PopStatus.NO_NEW_MSG, msgs, now, invisible_time_ms)

    def _priority_scan(self, group: str, topic: str, request_count: int) -> bool:
        """Whether this pop of a PRIORITY topic scans its queues highest priority first
        (:mod:`.priority`)."""
        tcm = getattr(self.broker, "topic_config_manager", None)
        if tcm is None or declared_message_type(tcm.select_topic_config(topic)) != PRIORITY:
            return False
        sgm = getattr(self.broker, "subscription_group_manager", None)
        cfg = sgm.get(group) if sgm is not None else None
        return use_priority_mode(request_count, priority_factor(cfg))

    def wake_version(self, topic: str) -> int:
        """A number that changes when pops of ``topic`` may find more without a new
        message (an ack unblocked a FIFO message group, a deadline passed); read it
        before a pop that found nothing and pass it to :meth:`wait_condition`."""
        return self._wake.get(topic, 0)

    def wait_condition(self, group: str, topic: str, version: int, timeout_s: float) -> tuple:
        """``(ready, timeout_s)`` for waiting after a pop of ``group`` found nothing:
        ``ready()`` turns true when a message arrives in ``topic`` or a pop may find more
        (``version`` from :meth:`wake_version` moved on); the timeout is cut to the next
        deadline of the group's in-flight messages, when one of them reappears. The
        arrival notifier (or a listener on it, :mod:`pymq.aio`) says when to look again."""
        broker = self.broker
        cursors = {}
        next_deadline = None
        with self._lock:
            for (g, t, q), s in self.state.queues.items():
                if g == group and t == topic:
                    cursors[q] = s.next_offset
                    d = s.next_deadline()
                    if d is not None and (next_deadline is None or d < next_deadline):
                        next_deadline = d
        if next_deadline is not None:
            timeout_s = min(timeout_s, max(next_deadline - self.clock(), 1) / 1000.0)
        known = set(broker.get_topics().get(topic, ()))

        def ready() -> bool:
            if self._wake.get(topic, 0) != version:
                return True
            qids = broker.get_topics().get(topic, ())
            if set(qids) != known:
                return True
            return any(cursors.get(q, 0) < broker.get_max_offset_in_queue(topic, q) for q in qids)

        return ready, timeout_s

    def wake(self, topic: str, queue_id: int) -> None:
        """Pops of ``topic`` may find more now: wake long-polling pops."""
        self._wake[topic] = self._wake.get(topic, 0) + 1
        self.broker.notifier.notify({(topic, queue_id): 0})

    # -- ack and change ----------------------------------------------------------------

    def _current(self, receipt_handle: str):
        h = decode_receipt_handle(receipt_handle)
        s = self.state.get((h.group, h.topic, h.queue_id))
        entry = s.current(h.offset, h.pop_id) if s is not None else None
        if entry is None:
            raise InvalidReceiptHandleError(
                f"receipt handle of {h.topic} queue {h.queue_id} offset {h.offset} for group {h.group} "
                "is not current: the message was acked, redelivered, or its invisible time changed")
        return h, s, entry

    def ack_message(self, receipt_handle: str) -> None:
        """Remove a popped message for good. Raises :class:`InvalidReceiptHandleError`
        when the handle is not the message's current delivery (already acked,
        redelivered after its deadline, or replaced by ``change_invisible_time``); a
        handle whose deadline passed is still current until the message is popped again."""
        error = self.ack_messages((receipt_handle,))[0]
        if error is not None:
            raise error

    def ack_messages(self, receipt_handles) -> list:
        """Ack several messages with one wait for the disk (5.x ``AckMessage`` carries
        many entries). Returns one entry per handle: None when acked, else the
        :class:`InvalidReceiptHandleError` that refused it."""
        out: list = []
        put = None
        with self._lock:
            if self.slave:
                self.revive_log.take_over(self)
            for handle in receipt_handles:
                try:
                    h, s, entry = self._current(handle)
                except InvalidReceiptHandleError as e:
                    out.append(e)
                    continue
                doc = {"g": h.group, "t": h.topic, "q": h.queue_id, "o": h.offset, "id": h.pop_id}
                put = self.revive_log.append("ack", doc)
                self.state.apply("ack", doc)
                self._records += 1
                if entry.message_group is not None and s.waiting:
                    self.wake(h.topic, h.queue_id)
                out.append(None)
        self.revive_log.wait_durable(put)
        return out

    def change_invisible_time(self, receipt_handle: str, invisible_time_ms: int) -> str:
        """Hide the message for ``invisible_time_ms`` from now; returns its new receipt
        handle (the old one is no longer current)."""
        if not isinstance(invisible_time_ms, int) or invisible_time_ms < 0:
            raise ValueError("invisible_time_ms must be an int >= 0 (ms)")
        with self._lock:
            if self.slave:
                self.revive_log.take_over(self)
            h, s, entry = self._current(receipt_handle)
            new_id = self._new_id()
            doc = {"g": h.group, "t": h.topic, "q": h.queue_id, "o": h.offset, "id": h.pop_id,
                   "nid": new_id, "dl": self.clock() + invisible_time_ms}
            put = self.revive_log.append("chg", doc)
            self.state.apply("chg", doc)
            self._records += 1
            if invisible_time_ms == 0:
                self.wake(h.topic, h.queue_id)
        self.revive_log.wait_durable(put)
        return encode_receipt_handle(h.group, h.topic, h.queue_id, h.offset, new_id)

    def forward_to_dead_letter(self, receipt_handle: str) -> None:
        """Move a popped message to ``%DLQ%{group}`` now and ack it (5.x
        ``ForwardMessageToDeadLetterQueue``), with the ``reconsume_times`` of its current
        delivery. Raises :class:`InvalidReceiptHandleError` when the delivery is not
        current (nothing is dead-lettered then)."""
        from .pop_queue import dead_letter, read_one
        with self._lock:
            h, s, entry = self._current(receipt_handle)
            m = read_one(self.broker, h.topic, h.queue_id, h.offset)
            if m is None:
                raise InvalidReceiptHandleError(f"no message at {h.topic} queue {h.queue_id} offset {h.offset}")
            put = dead_letter(self, (h.group, h.topic, h.queue_id), s, h.offset, entry, m, retry=False)
            if entry.message_group is not None and s.waiting:
                self.wake(h.topic, h.queue_id)
        self.revive_log.wait_durable(put)

    def forget_topic(self, topic: str) -> None:
        """Drop every group's pop state of ``topic`` (call after the topic was deleted:
        a topic created again under its name starts at offset 0)."""
        from .pop_queue import reset_queue
        put = None
        with self._lock:
            for key in [k for k in self.state.queues if k[1] == topic]:
                put = reset_queue(self, key, start=0)
        self.revive_log.wait_durable(put)

    # -- revive ------------------------------------------------------------------------

    def revive(self) -> int:
        """One pass of the revive service: dead-letter the expired messages that used up
        their retries, keep the other expired ones for the next pop (and wake pollers),
        record the groups' progress as consumer offsets. Returns how many were
        dead-lettered."""
        from .pop_queue import dead_letter_expired
        broker = self.broker
        dead = 0
        last_put = None
        with self._lock:
            now = self.clock()
            for key, s in list(self.state.queues.items()):
                if s.has_expired(now):
                    group, topic, qid = key
                    _fifo, max_rt = self.group_settings(group)
                    n, put = dead_letter_expired(self, key, s, now, max_rt)
                    dead += n
                    last_put = put or last_put
                    if s.ready or n:
                        self.wake(topic, qid)
            progress = [(key, s.low_water()) for key, s in self.state.queues.items()]
        self.revive_log.wait_durable(last_put)
        for key, low in progress:
            if self._committed.get(key) != low:
                broker.commit_offset(key[0], key[1], key[2], low)
                self._committed[key] = low
        if self._records >= SNAPSHOT_RECORDS:
            self.persist_snapshot()
        return dead


class PopReviveService(ServiceThread):
    """Runs :meth:`PopMessageService.revive` every ``pop_revive_interval`` ms."""

    name = "PopReviveService"

    def __init__(self, pop_service: PopMessageService, interval_ms: int) -> None:
        super().__init__(interval_ms / 1000.0)
        self.pop_service = pop_service

    def run_once(self) -> None:
        self.pop_service.revive()
