"""How a LITE message is stored: once in its parent topic, filed in its lite topic's LMQ.

The writer gives the message the properties RocketMQ's broker gives it: ``__LITE_TOPIC``,
``INNER_MULTI_DISPATCH`` = ``%LMQ%$parent$lite`` and ``INNER_MULTI_QUEUE_OFFSET`` = the
LMQ's next queue offset, then appends it; the store's dispatcher files it in the LMQ at
that offset (:mod:`pymq.store.lmq`). Offsets are handed out under one lock, in the order
the records enter the log, so each LMQ's entries are dense and ordered. An LMQ's first
offset in this process is its consume queue's length, read once the dispatcher has filed
everything the log held when the broker opened. A new LMQ past ``max_lmq_consume_queue_num``
is refused (RocketMQ's ``LMQ_CONSUME_QUEUE_NUM_EXCEEDED``; the protocol's
``LITE_TOPIC_QUOTA_EXCEEDED``).

Reads of an LMQ give each message its place in the LMQ (``queue_offset``, ``queue_id``
0; the store's reader does so), so a pop of a lite topic hands out and tracks LMQ offsets
like any queue's.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time

from pymq.status import PutMessageStatus
from pymq.store.lmq import LMQ_QUEUE_ID, PROPERTY_INNER_MULTI_DISPATCH, PROPERTY_INNER_MULTI_QUEUE_OFFSET, is_lmq

from .lite_topic import PROPERTY_LITE_TOPIC, to_lmq_name

CATCH_UP_WAIT_S = 30.0      # at most this long for the dispatcher to file what the log held at open


class LiteTopicQuotaError(Exception):
    """No new lite topic may be made: the broker holds ``max_lmq_consume_queue_num`` LMQs."""


class LiteWriter:
    """Appends LITE messages for a :class:`pymq.Broker`."""

    def __init__(self, store, broker_config) -> None:
        self.store = store
        self.broker_config = broker_config
        self._lock = threading.Lock()
        self._next: dict[str, int] = {}
        self._lmq_count = -1
        self._open_end = store.get_max_phy_offset()     # what recovery must have filed first

    def _catch_up(self) -> None:
        """Wait until the dispatcher filed the records the log held at open."""
        store = self.store
        deadline = time.monotonic() + CATCH_UP_WAIT_S
        while (store.get_max_phy_offset() - store.dispatch_behind_bytes() < self._open_end
               and time.monotonic() < deadline):
            time.sleep(0.005)

    def _first_offset(self, lmq: str) -> int:
        self._catch_up()
        if self._lmq_count < 0:
            self._lmq_count = sum(1 for t in self.store.get_topics() if is_lmq(t))
        if not self.store.has_queue(lmq, LMQ_QUEUE_ID):
            if self._lmq_count >= self.broker_config.max_lmq_consume_queue_num:
                raise LiteTopicQuotaError(f"the broker holds {self._lmq_count} lite topics, "
                                          f"the most it may (max_lmq_consume_queue_num)")
            self._lmq_count += 1
            return 0
        return max(self.store.get_max_offset_in_queue(lmq, LMQ_QUEUE_ID), 0)

    def put(self, msg, parent_topic: str, lite_topic: str):
        """Append ``msg`` (of topic ``parent_topic``, its queue chosen) as a message of
        ``lite_topic``; returns the store's put result. Raises
        :class:`LiteTopicQuotaError` for a new lite topic past the quota."""
        lmq = to_lmq_name(parent_topic, lite_topic)
        props = msg.properties
        props[PROPERTY_LITE_TOPIC] = lite_topic
        props[PROPERTY_INNER_MULTI_DISPATCH] = lmq
        with self._lock:
            offset = self._next.get(lmq)
            if offset is None:
                offset = self._first_offset(lmq)
            props[PROPERTY_INNER_MULTI_QUEUE_OFFSET] = str(offset)
            fut = self.store.async_put_message(msg)
            if fut.put_result.status is PutMessageStatus.PUT_OK:
                self._next[lmq] = offset + 1
        try:
            return fut.result(timeout=self.store.config.sync_flush_timeout / 1000.0)
        except concurrent.futures.TimeoutError:
            result = fut.put_result
            result.set_status(PutMessageStatus.FLUSH_DISK_TIMEOUT)
            return result

    def forget(self, lmq: str) -> None:
        """Drop what is known of an LMQ (it was deleted)."""
        with self._lock:
            self._next.pop(lmq, None)
            self._lmq_count = -1

    def delete_lmq(self, lmq: str, still_wanted, delete) -> bool:
        """Delete an LMQ with no put of it under way: under the writer's lock, once the
        dispatcher filed what was put, call ``delete(lmq)`` if ``still_wanted()``; the
        next message of it starts at offset 0. Returns whether it was deleted."""
        with self._lock:
            deadline = time.monotonic() + CATCH_UP_WAIT_S
            while self.store.dispatch_behind_bytes() > 0 and time.monotonic() < deadline:
                time.sleep(0.005)
            if not still_wanted():
                return False
            delete(lmq)
            self._next.pop(lmq, None)
            self._lmq_count = -1
        return True
