"""Consumer: reads every queue of a topic for a consumer group, from its committed offsets.

An embedded stand-in for RocketMQ's pull consumer: it keeps a position per queue, pulls
pages with ``get_message`` (tag filtering in the store), long-polls when every queue is
caught up, and ``commit()`` stores the positions as the group's consumer offsets. Queues
where the group has no committed offset start as ``consume_from`` says: ``"earliest"``,
``"latest"`` or a timestamp in ms (the first message stored at or after it).

Delivery is at least once across crashes: positions advance when ``poll`` returns
messages and become durable with ``commit()`` (and the store's offset persistence).
"""

from __future__ import annotations

import time
from typing import Iterator, Optional, Union

from pymq.filter import parse_tag_expression
from pymq.status import BoundaryType, GetMessageStatus

_RESET = (GetMessageStatus.OFFSET_TOO_SMALL, GetMessageStatus.OFFSET_OVERFLOW_BADLY,
          GetMessageStatus.OFFSET_FOUND_NULL, GetMessageStatus.NO_MATCHED_MESSAGE,
          GetMessageStatus.MESSAGE_WAS_REMOVING)


class Consumer:
    """Consume ``topic`` as ``group``, optionally only messages whose tag matches ``tags``.

    ``poll(timeout_s)`` returns the next messages of all queues (possibly none after
    ``timeout_s``); iterating the consumer yields messages forever. ``commit()`` records the
    positions reached so far; ``positions`` shows them.
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
        self._positions: dict[int, int] = {}
        self._next_queue = 0

    @property
    def positions(self) -> dict[int, int]:
        """Next queue offset to read, per queue id."""
        return dict(self._positions)

    def _queue_ids(self) -> list[int]:
        qids = self.store.get_topics().get(self.topic, [])
        for q in qids:
            if q not in self._positions:
                self._positions[q] = self._start_offset(q)
        return sorted(self._positions)

    def _start_offset(self, queue_id: int) -> int:
        store = self.store
        committed = store.query_offset(self.group, self.topic, queue_id)
        if committed >= 0:
            return committed
        if self.consume_from == "earliest":
            return store.get_min_offset_in_queue(self.topic, queue_id)
        if self.consume_from == "latest":
            return store.get_max_offset_in_queue(self.topic, queue_id)
        return store.get_offset_in_queue_by_time(self.topic, queue_id, self.consume_from, BoundaryType.LOWER)

    def seek(self, queue_id: int, offset: int) -> None:
        """Read ``queue_id`` from ``offset`` next."""
        self._positions[queue_id] = offset

    def _pull_once(self) -> list:
        out: list = []
        qids = self._queue_ids()
        if not qids:
            return out
        # round-robin start so one busy queue cannot starve the others
        start = self._next_queue % len(qids)
        self._next_queue += 1
        for qid in qids[start:] + qids[:start]:
            offset = self._positions[qid]
            r = self.store.get_message(self.group, self.topic, qid, offset, self.pull_batch_size, self.tags)
            if r.status is GetMessageStatus.FOUND:
                out.extend(r.messages)
                self._positions[qid] = r.next_begin_offset
            elif r.status in _RESET:
                self._positions[qid] = r.next_begin_offset
        return out

    def poll(self, timeout_s: float = 1.0) -> list:
        """The next messages from all queues; waits up to ``timeout_s`` for some to arrive."""
        deadline = time.monotonic() + timeout_s
        while True:
            msgs = self._pull_once()
            if msgs:
                return msgs
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return msgs
            if not self.store.wait_messages(self.topic, dict(self._positions), remaining):
                # timed out, or only filtered-out messages arrived: one more pass then return
                if time.monotonic() >= deadline:
                    return self._pull_once()

    def __iter__(self) -> Iterator:
        while True:
            yield from self.poll(1.0)

    def commit(self) -> None:
        """Store the positions reached as the group's consumer offsets."""
        for qid, offset in self._positions.items():
            self.store.commit_offset(self.group, self.topic, qid, offset)
