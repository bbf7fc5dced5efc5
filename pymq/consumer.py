"""Consumer: reads every queue of a topic for a consumer group, from its committed offsets.

An embedded stand-in for RocketMQ's pull consumer: it keeps a position per queue, pulls
pages with ``get_message`` (tag filtering in the store), long-polls when every queue is
caught up, and ``commit()`` stores the positions as the group's consumer offsets. Queues
where the group has no committed offset start as ``consume_from`` says: ``"earliest"``,
``"latest"`` or a timestamp in ms (the first message stored at or after it).

Delivery is at least once across crashes: positions advance when ``poll`` returns
messages and become durable when ``commit()`` returns (it waits for the offsets file).

``poll_batches`` is the batch mode: the same pulls through ``read_batch``, one
:class:`pymq.ReadBatch` per queue, bodies as views of the log and no message objects.
"""

from __future__ import annotations

import time
from typing import Iterator, Optional, Union

from pymq.filter import parse_tag_expression
from pymq.status import BoundaryType, GetMessageStatus
from pymq.store.arguments import check_queue_id, wait_timeout

_RESET = (GetMessageStatus.OFFSET_TOO_SMALL, GetMessageStatus.OFFSET_OVERFLOW_BADLY,
          GetMessageStatus.OFFSET_FOUND_NULL, GetMessageStatus.NO_MATCHED_MESSAGE,
          GetMessageStatus.MESSAGE_WAS_REMOVING)


RETRY_PREFIX = "%RETRY%"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"


class Consumer:
    """Consume ``topic`` as ``group``, optionally only messages whose tag matches ``tags``.

    ``poll(timeout_s)`` returns the next messages of all queues (possibly none after
    ``timeout_s``); iterating the consumer yields messages forever. ``commit()`` records the
    positions reached so far; ``positions`` shows them.

    On a :class:`pymq.Broker` the consumer also reads its group's retry topic
    (``%RETRY%{group}``, RocketMQ's clustering consumers subscribe it with ``*``): a
    message handed back with ``reconsume_later(msg)`` comes round again after its delay,
    with its original topic restored and ``reconsume_times`` one higher, until the
    group's retry limit sends it to the dead-letter topic ``%DLQ%{group}``.
    """

    def __init__(self, store, group: str, topic: str, tags: Optional[str] = None,
                 consume_from: Union[str, int] = "earliest", pull_batch_size: int = 32) -> None:
        if not isinstance(group, str) or not group or not isinstance(topic, str) or not topic:
            raise ValueError("group and topic must be non-empty strings")
        if not (consume_from in ("earliest", "latest") or (isinstance(consume_from, int)
                                                           and not isinstance(consume_from, bool))):
            raise ValueError("consume_from is 'earliest', 'latest' or a timestamp in ms")
        parse_tag_expression(tags)            # validate early
        self.store = store
        self.group = group
        self.topic = topic
        self.tags = tags
        self.consume_from = consume_from
        self.pull_batch_size = pull_batch_size
        # (topic, tags, consume_from) read: the topic, and on a broker the retry topic
        self._subscriptions = [(topic, tags, consume_from)]
        if callable(getattr(store, "send_message_back", None)) and not topic.startswith(RETRY_PREFIX):
            self._subscriptions.append((RETRY_PREFIX + group, None, "earliest"))
        self._positions: dict[tuple[str, int], int] = {}
        self._next_queue = 0

    @property
    def positions(self) -> dict[int, int]:
        """Next queue offset to read, per queue id of the topic."""
        return {q: off for (t, q), off in self._positions.items() if t == self.topic}

    @property
    def retry_topic(self) -> Optional[str]:
        """The retry topic read beside the topic (None on a plain store)."""
        return self._subscriptions[1][0] if len(self._subscriptions) > 1 else None

    def _queues(self) -> list[tuple[str, int, Optional[str]]]:
        topics = self.store.get_topics()
        out = []
        for topic, tags, start in self._subscriptions:
            for q in topics.get(topic, []):
                if (topic, q) not in self._positions:
                    self._positions[(topic, q)] = self._start_offset(topic, q, start)
                out.append((topic, q, tags))
        return out

    def _start_offset(self, topic: str, queue_id: int, consume_from) -> int:
        store = self.store
        committed = store.query_offset(self.group, topic, queue_id)
        if committed >= 0:
            return committed
        if consume_from == "earliest":
            return store.get_min_offset_in_queue(topic, queue_id)
        if consume_from == "latest":
            return store.get_max_offset_in_queue(topic, queue_id)
        return store.get_offset_in_queue_by_time(topic, queue_id, consume_from, BoundaryType.LOWER)

    def seek(self, queue_id: int, offset: int) -> None:
        """Read ``queue_id`` of the topic from ``offset`` next."""
        self._positions[(self.topic, check_queue_id(queue_id))] = offset

    def _rotated_queues(self) -> list:
        """The queues to read, ``[(topic, queue id, tags)]``, each pass starting one further
        (round robin, so one busy queue cannot starve the others)."""
        queues = self._queues()
        if not queues:
            return []
        start = self._next_queue % len(queues)
        self._next_queue += 1
        return queues[start:] + queues[:start]

    def _pull_once(self) -> list:
        return [m for _topic, _qid, msgs in self._pull_batches() for m in msgs]

    def _pull_batches(self) -> list:
        """One pass over the queues: ``[(topic read, queue id, messages)]``, positions
        advanced past what is returned (:mod:`pymq.aio` keeps the source of each)."""
        out: list = []
        for topic, qid, tags in self._rotated_queues():
            offset = self._positions[(topic, qid)]
            r = self.store.get_message(self.group, topic, qid, offset, self.pull_batch_size, tags)
            if r.status is GetMessageStatus.FOUND:
                if topic != self.topic:
                    for m in r.messages:        # a retry: hand it over under its own topic
                        m.topic = m.properties.get(PROPERTY_RETRY_TOPIC, self.topic)
                out.append((topic, qid, r.messages))
                self._positions[(topic, qid)] = r.next_begin_offset
            elif r.status in _RESET:
                self._positions[(topic, qid)] = r.next_begin_offset
        return out

    def _pull_read_batches(self) -> list:
        """One pass over the queues with ``read_batch``: the batches that hold messages,
        positions advanced past them."""
        out: list = []
        for topic, qid, tags in self._rotated_queues():
            offset = self._positions[(topic, qid)]
            b = self.store.read_batch(topic, qid, offset, self.pull_batch_size, tags)
            if b.status is GetMessageStatus.FOUND:
                out.append(b)
                self._positions[(topic, qid)] = b.next_begin_offset
            elif b.status in _RESET:
                self._positions[(topic, qid)] = b.next_begin_offset
        return out

    def poll(self, timeout_s: float = 1.0) -> list:
        """The next messages from all queues; waits up to ``timeout_s`` for some to arrive
        (``math.inf``: until some do; NaN or negative: ``ValueError``). Raises
        ``StoreStateError`` when the store shuts down meanwhile, or was shut down."""
        return self._poll(self._pull_once, timeout_s)

    def poll_batches(self, timeout_s: float = 1.0) -> list:
        """``poll`` in batch mode: the next messages as a list of :class:`pymq.ReadBatch`,
        one per queue that had some (``batch.topic``, ``batch.queue_id``; bodies are
        memoryviews of the log, keys and properties decoded on demand). Positions advance
        past them as with ``poll``; release each batch (``with`` or ``release()``) once
        handled. A retried message (on a :class:`pymq.Broker`) comes in a batch of the
        retry topic, its own topic in ``batch.properties(i)["RETRY_TOPIC"]``."""
        return self._poll(self._pull_read_batches, timeout_s)

    def _poll(self, pull_once, timeout_s: float) -> list:
        wait_timeout(timeout_s)
        deadline = time.monotonic() + timeout_s
        while True:
            got = pull_once()
            if got:
                return got
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return got
            if not self.store.wait_messages(*self._wait_offsets(), remaining):
                # timed out, or only filtered-out messages arrived: one more pass then return
                if time.monotonic() >= deadline:
                    return pull_once()

    def _wait_offsets(self) -> tuple:
        """``(topics, {topic: {queue_id: position}})``: what ``wait_messages`` waits on."""
        topics = tuple(t for t, _tags, _start in self._subscriptions)
        return topics, {t: {q: off for (tt, q), off in self._positions.items() if tt == t} for t in topics}

    def __iter__(self) -> Iterator:
        while True:
            yield from self.poll(1.0)

    def reconsume_later(self, msg, delay_level: int = 0):
        """Hand ``msg`` back to the broker for a later retry (RocketMQ's
        ``RECONSUME_LATER``): it comes round again through the retry topic, or goes to the
        dead-letter topic past the group's retry limit. Needs a :class:`pymq.Broker`."""
        send_back = getattr(self.store, "send_message_back", None)
        if not callable(send_back):
            raise TypeError("reconsume_later needs a pymq.Broker (a MessageStore has no retry topics)")
        return send_back(self.group, msg, delay_level)

    def commit(self) -> None:
        """Store the positions reached as the group's consumer offsets, durably: returns
        once ``config/consumerOffset.json`` holds them (``store.flush_offsets()``, one
        write for all queues, shared with other threads committing at the same time), so
        a crash right after never hands the committed messages out again. Raises
        ``OSError`` when the file cannot be written (a full disk); the positions are then
        committed in memory and saved by the store's next successful write."""
        for (topic, qid), offset in self._positions.items():
            self.store.commit_offset(self.group, topic, qid, offset)
        self.store.flush_offsets()
