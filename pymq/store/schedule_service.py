"""ScheduleMessageService: delivers delay-level messages when they are due.

A message put with ``delay_level`` L is stored in ``SCHEDULE_TOPIC_XXXX`` queue L-1 with
its real topic and queue in ``REAL_TOPIC`` / ``REAL_QID``; its consume-queue tagsCode is
the time it is due (store time + the level's delay). Each level's queue is in due-time
order, so only its head needs looking at. When the head is due, the message is written
to its real topic and queue (RocketMQ 4.9.3+: the level's offset in
``config/delayOffset.json`` advances only after that put succeeded).

Differences from RocketMQ: one thread serves all levels and sleeps until the earliest
head is due, or until the dispatcher reports a new delayed message, instead of polling
every 100 ms; so a message is delivered within milliseconds of its time.

Exactly once in the normal case: the offsets are persisted every
``flush_delay_offset_interval`` ms and at shutdown. After a crash, messages delivered
since the last persist are delivered again (at least once).
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Optional

from pymq._core.message import Message
from pymq.store.delay_offsets import DelayOffsetManager

from .episode_log import EpisodeLog
from .service_thread import ServiceThread

log = logging.getLogger("pymq")

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
RETRY_AFTER_FAILURE_S = 0.1          # DELAY_FOR_A_WHILE
IDLE_WAIT_S = 1.0


def message_timeup(msg) -> Message:
    """The message to write to the real topic (``messageTimeup``): body, flag, born time
    and host, reconsume times, transaction bits and properties are kept (REAL_* and DELAY
    too, as 4.9.7 writes them: it clears the delay level before the put, but the record's
    properties text was built first); topic and queue are REAL_TOPIC and REAL_QID. The
    put carries ``delay_level=-1``, so its DELAY does not delay it again."""
    props = dict(msg.properties)
    return Message(props["REAL_TOPIC"], msg.body, properties=props, queue_id=int(props["REAL_QID"]),
                   flag=msg.flag, born_timestamp=msg.born_timestamp, born_host=msg.born_host,
                   sys_flag=msg.sys_flag & 0xC, reconsume_times=msg.reconsume_times, delay_level=-1)


class ScheduleMessageService(ServiceThread):
    """Delivers the messages of every delay level when they are due."""

    name = "ScheduleMessageService"

    def __init__(self, store_root: str, delay_levels_ms: list[int], consume_queues, commit_log,
                 put: Callable[[Message], object]) -> None:
        super().__init__(IDLE_WAIT_S)
        self.delay_levels_ms = delay_levels_ms
        self.consume_queues = consume_queues
        self.commit_log = commit_log
        self.put = put
        self.offsets = DelayOffsetManager(store_root)
        self.delivered = 0
        # (real topic, commit-log offset) -> True when the topic was deleted after the put
        self.stale: Callable[[str, int], bool] = lambda topic, offset: False
        self._next_wait_s = IDLE_WAIT_S
        self.delivery_errors = EpisodeLog(log, "ScheduleMessageService delivery")

    @property
    def max_delay_level(self) -> int:
        return len(self.delay_levels_ms)

    def load(self) -> None:
        """Load delayOffset.json and clamp each offset into its queue's bounds
        (``correctDelayOffset``)."""
        self.offsets.load()
        for level in range(1, self.max_delay_level + 1):
            cq = self.consume_queues.find_consume_queue(SCHEDULE_TOPIC, level - 1, create=False)
            low = cq.get_min_offset_in_queue() if cq is not None else 0
            high = cq.get_max_offset_in_queue() if cq is not None else 0
            offset = self.offsets.get(level)
            if offset < low or offset > high:
                self.offsets.set(level, low if offset < low else high)

    def deliver_timestamp(self, level: int, store_timestamp: int) -> int:
        """``computeDeliverTimestamp``: store time + the level's delay (1 s if unknown)."""
        if 1 <= level <= self.max_delay_level:
            return store_timestamp + self.delay_levels_ms[level - 1]
        return store_timestamp + 1000

    def _correct(self, now: int, deliver: int, level: int) -> int:
        """``correctDeliverTimestamp``: a due time further away than the level's delay
        (clock change, changed levels) is taken as now."""
        if deliver > now + self.delay_levels_ms[level - 1]:
            return now
        return deliver

    def deliver_due(self) -> Optional[int]:
        """Deliver every due message; return the ms time the next one is due (or None)."""
        next_due = None
        for level in range(1, self.max_delay_level + 1):
            cq = self.consume_queues.find_consume_queue(SCHEDULE_TOPIC, level - 1, create=False)
            if cq is None:
                continue
            offset = max(self.offsets.get(level), cq.get_min_offset_in_queue())
            high = cq.get_max_offset_in_queue()
            while offset < high and not self.stopped:
                unit = cq.get_unit(offset)
                if unit is None:
                    break
                phy, size, tags_code = unit
                now = int(time.time() * 1000)
                due = self._correct(now, tags_code, level)
                if due > now:
                    next_due = due if next_due is None else min(next_due, due)
                    break
                msg = self.commit_log.look_message_by_offset(phy)
                if msg is None or "REAL_TOPIC" not in msg.properties:
                    log.warning("delay level %d: no message at %d (offset %d); skipped", level, phy, offset)
                elif msg.properties["REAL_TOPIC"] == "RMQ_SYS_TRANS_HALF_TOPIC":
                    log.warning("delay level %d: dropping a half-transaction message", level)
                elif self.stale(msg.properties["REAL_TOPIC"], phy):
                    pass                    # its topic was deleted after it was put: dropped
                else:
                    r = self.put(message_timeup(msg))
                    if not r.is_ok():
                        self.delivery_errors.failed(f"delay level {level}: delivery put refused ({r.status.name})")
                        retry = now + int(RETRY_AFTER_FAILURE_S * 1000)
                        next_due = retry if next_due is None else min(next_due, retry)
                        break
                    self.delivered += 1
                    self.delivery_errors.succeeded()
                offset += 1
                self.offsets.set(level, offset)
        return next_due

    def run_once(self) -> None:
        next_due = self.deliver_due()
        if next_due is None:
            self._next_wait_s = IDLE_WAIT_S
        else:
            self._next_wait_s = max(0.0, (next_due - time.time() * 1000) / 1000.0)

    def wait_for_running(self, timeout_s: float) -> None:
        super().wait_for_running(min(timeout_s, self._next_wait_s))

    def on_arrived(self, arrived: dict) -> None:
        """Dispatcher callback: wake up when a delayed message was stored."""
        for topic, _qid in arrived:
            if topic == SCHEDULE_TOPIC:
                self.wakeup()
                return

    def on_shutdown(self) -> None:
        if self.offsets.dirty:
            self.offsets.persist()
