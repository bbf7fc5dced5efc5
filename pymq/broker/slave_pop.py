"""Pop on a slave: receive, ack and change of invisible time with the state in memory only.

A slave's commit log is its master's, byte for byte, so a slave cannot append revive-log
records (:mod:`.revive_log`) of its own. RocketMQ 5 serves pops on a slave all the same
(the proxy reads from a slave of the broker name when the master is gone) and keeps the
checkpoints it cannot write in memory (``PopBufferMergeService``). pymq does the same with
:class:`SlaveReviveLog`, which stands in for the revive log of a slave's
:class:`~pymq.broker.pop_service.PopMessageService`:

* until the slave's first own change (a pop, ack or change of invisible time) the state is
  not built; at that change it is taken over from the master: the replicated revive log
  is replayed (the master's in-flight messages, acks and FIFO holds as far as they were
  replicated), then every queue's state is moved up to the group's consumer offset (what
  the slave synced from its master, or committed itself before a restart): everything
  below a consumer offset is done;
* from then on every change is applied to the state in memory and written nowhere. The
  revive service commits each group's progress as its consumer offset locally (as a slave
  keeps 4.x clients' offset commits).

What is weaker than on a master: a restart of the slave loses the state (messages popped
and not acked on the slave come again at once, those acked after the last local offset
commit come again: at least once); a message that used up its retries cannot be put to
``%DLQ%{group}`` (a slave puts nothing): it is *parked*, held back from delivery and kept
below the group's consumer offset, so it is never lost (a master delivers it again).
"""

from __future__ import annotations

import logging

from .pop_state import PopEntry, PopState, QueuePopState
from .revive_log import REVIVE_QUEUE_ID, ReviveLog

log = logging.getLogger("pymq")

#: the deadline of a parked message: never visible again on this slave
PARKED_DEADLINE = 1 << 62


class SlaveReviveLog:
    """The revive log of a slave: reads the master's replicated records once, at the
    take-over, and keeps the slave's own changes in memory (``append`` writes nothing)."""

    def __init__(self, replicated: ReviveLog) -> None:
        self.replicated = replicated
        self.next_offset = 0
        #: whether the state was taken over (the slave changed it since)
        self.taken_over = False
        #: (group, topic, queue id, offset) of the messages parked (retries used up)
        self.parked: set = set()

    def append(self, kind: str, doc: dict) -> None:
        """Nothing is written on a slave; returns None (no put to wait for)."""
        return None

    def wait_durable(self, result) -> None:
        """Nothing to wait for: the slave's pop state is in memory only."""
        return None

    def take_over(self, service) -> None:
        """Build ``service.state`` from the replicated revive log and the consumer offsets,
        once, before the slave's first own change. Call with the service's lock held."""
        if self.taken_over:
            return
        broker = service.broker
        state = PopState()
        topic = self.replicated.topic
        if broker.get_min_offset_in_queue(topic, REVIVE_QUEUE_ID) == 0:
            self.next_offset = self.replicated.replay(state, 0)
        else:
            # the head of the log is cleaned: a queue's in-flight entries of the lost records
            # would look done, so start from the consumer offsets alone (at least once)
            log.warning("pop on slave: the replicated revive log %s is cleaned at its head; "
                        "starting from the consumer offsets", topic)
        for (group, t, qid), s in state.queues.items():
            low = max(broker.get_min_offset_in_queue(t, qid), broker.query_offset(group, t, qid))
            s.clamp(low, broker.get_max_offset_in_queue(t, qid))
        service.state = state
        service._next_id = max(service._next_id, state.max_pop_id + 1)
        self.taken_over = True
        log.info("pop on slave: state taken over (%d queues from the replicated revive log); "
                 "changes are kept in memory only", len(state.queues))

    def park(self, service, key: tuple, s: QueuePopState, offset: int, e: PopEntry) -> None:
        """A message that used up its retries: a slave cannot put it to the DLQ, so it is
        held back (never visible again here, its handle no longer current) and stays below
        the group's consumer offset."""
        s.change(offset, e.pop_id, service._new_id(), PARKED_DEADLINE)
        parked = key + (offset,)
        if parked not in self.parked:
            self.parked.add(parked)
            log.warning("pop on slave: %s queue %d offset %d for %s used up its retries; a slave cannot "
                        "put it to %%DLQ%%%s, so it is held back (not acked: its master delivers it again)",
                        key[1], key[2], offset, key[0], key[0])
