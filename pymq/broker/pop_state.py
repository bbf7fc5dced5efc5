"""The pop state of consumer groups: which messages of each queue are in flight, until
when, how often they were delivered, and (FIFO) which message groups are blocked.

One :class:`QueuePopState` per (consumer group, topic, queue id). A queue's offsets fall
in four sets:

* below ``next_offset`` and in none of the tables below: done for the group (acked,
  dead-lettered, or not matching its tag filter);
* ``inflight``: delivered and not acked; each entry has the id of its current delivery
  (``pop_id``), the time it becomes visible again (``deadline``, ms), how many times it
  was delivered (``attempts``) and its message group (FIFO);
* ``waiting`` (FIFO only): read, but held back because an earlier message of the same
  message group is in flight;
* from ``next_offset`` on: never read by the group.

The state changes only through :meth:`PopState.apply`, with the records the pop service
appends to its revive log (``ck``: a pop, ``ack``: an ack or a dead-lettering, ``chg``:
a change of invisible time, ``rst``: the queue's topic was deleted). The broker applies a record right after appending it, and
recovery applies the same records in log order, so the state after a restart is the
state after the last record that reached the disk.
"""

from __future__ import annotations

import heapq
from typing import Iterable, Optional

QueueKey = tuple  # (group, topic, queue_id)


class PopEntry:
    """One in-flight message: its current delivery and its deadline."""

    __slots__ = ("pop_id", "deadline", "attempts", "message_group", "base")

    def __init__(self, pop_id: int, deadline: int, attempts: int, message_group: Optional[str],
                 base: int = 0) -> None:
        self.pop_id = pop_id
        self.deadline = deadline
        self.attempts = attempts            # deliveries so far, the current one included
        self.message_group = message_group
        self.base = base                    # the record's own reconsume_times

    @property
    def reconsume_times(self) -> int:
        """``reconsume_times`` of the current delivery."""
        return self.base + self.attempts - 1

    def __repr__(self) -> str:
        return (f"PopEntry(pop_id={self.pop_id}, deadline={self.deadline}, attempts={self.attempts}, "
                f"message_group={self.message_group!r}, base={self.base})")


class QueuePopState:
    """The pop state of one consumer group in one queue (see the module docstring)."""

    __slots__ = ("next_offset", "inflight", "waiting", "blocked", "waiting_groups", "ready", "_heap")

    def __init__(self, next_offset: int) -> None:
        self.next_offset = next_offset
        self.inflight: dict[int, PopEntry] = {}
        self.waiting: dict[int, str] = {}           # offset -> message group (FIFO)
        self.blocked: dict[str, int] = {}           # message group -> its in-flight offset
        self.waiting_groups: dict[str, int] = {}    # message group -> how many are waiting
        self.ready: list[tuple[int, int]] = []      # (offset, pop_id) expired, to redeliver
        self._heap: list[tuple[int, int, int]] = []  # (deadline, offset, pop_id), lazily pruned

    # -- changes (called by PopState.apply) ----------------------------------------------

    def deliver(self, offset: int, pop_id: int, deadline: int, message_group: Optional[str],
                base: int = 0) -> None:
        entry = self.inflight.get(offset)
        if entry is None:
            self.inflight[offset] = PopEntry(pop_id, deadline, 1, message_group, base)
        else:
            entry.pop_id, entry.deadline = pop_id, deadline
            entry.attempts += 1
        self.unhold(offset)
        if message_group is not None:
            self.blocked[message_group] = offset
        heapq.heappush(self._heap, (deadline, offset, pop_id))

    def hold(self, offset: int, message_group: str) -> None:
        if offset not in self.waiting:
            self.waiting[offset] = message_group
            self.waiting_groups[message_group] = self.waiting_groups.get(message_group, 0) + 1

    def unhold(self, offset: int) -> None:
        mg = self.waiting.pop(offset, None)
        if mg is not None:
            n = self.waiting_groups[mg] - 1
            if n:
                self.waiting_groups[mg] = n
            else:
                del self.waiting_groups[mg]

    def remove(self, offset: int, pop_id: int) -> bool:
        entry = self.inflight.get(offset)
        if entry is None or entry.pop_id != pop_id:
            return False
        del self.inflight[offset]
        mg = entry.message_group
        if mg is not None and self.blocked.get(mg) == offset:
            del self.blocked[mg]
        return True

    def change(self, offset: int, pop_id: int, new_id: int, deadline: int) -> bool:
        entry = self.inflight.get(offset)
        if entry is None or entry.pop_id != pop_id:
            return False
        entry.pop_id, entry.deadline = new_id, deadline
        heapq.heappush(self._heap, (deadline, offset, new_id))
        return True

    # -- queries -------------------------------------------------------------------------

    def current(self, offset: int, pop_id: int) -> Optional[PopEntry]:
        """The in-flight entry at ``offset`` if ``pop_id`` is its current delivery."""
        entry = self.inflight.get(offset)
        return entry if entry is not None and entry.pop_id == pop_id else None

    def take_expired(self, now: int) -> list[int]:
        """Offsets of in-flight entries whose deadline is ``<= now`` (those moved to
        ``ready`` earlier included), in offset order. They leave the deadline heap and
        ``ready``: the caller redelivers them, dead-letters them or gives them back with
        :meth:`set_ready`."""
        heap = self._heap
        inflight = self.inflight
        out = []
        for offset, pop_id in self.ready:
            entry = inflight.get(offset)
            if entry is not None and entry.pop_id == pop_id and entry.deadline <= now:
                out.append(offset)
        self.ready = []
        while heap and heap[0][0] <= now:
            deadline, offset, pop_id = heapq.heappop(heap)
            entry = inflight.get(offset)
            if entry is not None and entry.pop_id == pop_id and entry.deadline == deadline:
                out.append(offset)
        return sorted(set(out))

    def set_ready(self, offsets: Iterable[int]) -> None:
        """Keep expired offsets taken by :meth:`take_expired` for a later pop."""
        inflight = self.inflight
        self.ready.extend((o, inflight[o].pop_id) for o in offsets if o in inflight)

    def next_deadline(self) -> Optional[int]:
        """The earliest deadline of an in-flight entry (maybe a stale one; 0 when expired
        entries wait in ``ready``), or None."""
        if self.ready:
            return 0
        return self._heap[0][0] if self._heap else None

    def has_expired(self, now: int) -> bool:
        """Whether an expired entry waits in ``ready`` or one on the deadline heap (maybe a
        stale one) is due by ``now``."""
        return bool(self.ready) or (bool(self._heap) and self._heap[0][0] <= now)

    def is_blocked(self, message_group: str) -> bool:
        """FIFO: whether a message of ``message_group`` must wait (one of the group is in
        flight, or an earlier one is waiting)."""
        return message_group in self.blocked or message_group in self.waiting_groups

    def low_water(self) -> int:
        """The first offset not done for the group (its consumer offset)."""
        low = self.next_offset
        if self.inflight:
            low = min(low, min(self.inflight))
        if self.waiting:
            low = min(low, min(self.waiting))
        return low

    def clamp(self, min_offset: int, max_offset: int) -> None:
        """Forget what lies outside the queue's readable range (after a crash lost the
        tail of the log, or cleaning deleted its head)."""
        self.next_offset = min(max(self.next_offset, min_offset), max_offset)
        for offset in [o for o in self.inflight if not min_offset <= o < max_offset]:
            self.remove(offset, self.inflight[offset].pop_id)
        for offset in [o for o in self.waiting if not min_offset <= o < max_offset]:
            self.unhold(offset)

    # -- snapshot ------------------------------------------------------------------------

    def to_json(self) -> list:
        return [self.next_offset,
                [[o, e.pop_id, e.deadline, e.attempts, e.message_group, e.base]
                 for o, e in sorted(self.inflight.items())],
                sorted([o, mg] for o, mg in self.waiting.items())]

    @classmethod
    def from_json(cls, doc: list) -> "QueuePopState":
        next_offset, inflight, waiting = doc
        s = cls(int(next_offset))
        for o, mg in waiting:
            s.hold(int(o), str(mg))
        for o, pop_id, deadline, attempts, mg, base in inflight:
            if mg is not None and not isinstance(mg, str):
                raise ValueError("bad message group in pop state")
            s.deliver(int(o), int(pop_id), int(deadline), mg, int(base))
            s.inflight[int(o)].attempts = int(attempts)
        return s


class PopState:
    """All queues' pop state, changed only by :meth:`apply` with revive-log records."""

    def __init__(self) -> None:
        self.queues: dict[QueueKey, QueuePopState] = {}
        self.max_pop_id = 0

    def get(self, key: QueueKey) -> Optional[QueuePopState]:
        return self.queues.get(key)

    def apply(self, kind: str, d: dict) -> bool:
        """Apply one record; returns False when it no longer matches the state (an ack of
        a delivery that is not current), which leaves the state unchanged."""
        key = (d["g"], d["t"], d["q"])
        s = self.queues.get(key)
        if kind == "ck":
            pop_id = d["id"]
            if s is None:
                s = self.queues[key] = QueuePopState(d["c1"])
            for o, mg in d.get("w", ()):
                s.hold(o, mg)
            deadline = d["dl"]
            groups = d.get("m")
            bases = d.get("r")
            for i, o in enumerate(d["o"]):
                s.deliver(o, pop_id, deadline, groups[i] if groups else None, bases[i] if bases else 0)
            s.next_offset = d["c1"]
            if pop_id > self.max_pop_id:
                self.max_pop_id = pop_id
            return True
        if kind == "rst":
            self.queues[key] = QueuePopState(d["c1"])
            return True
        if s is None:
            return False
        if kind == "ack":
            return s.remove(d["o"], d["id"])
        if kind == "chg":
            if d["nid"] > self.max_pop_id:
                self.max_pop_id = d["nid"]
            return s.change(d["o"], d["id"], d["nid"], d["dl"])
        raise ValueError(f"unknown pop record kind {kind!r}")

    def to_json(self) -> dict:
        return {"maxPopId": self.max_pop_id,
                "queues": [[g, t, q, s.to_json()] for (g, t, q), s in self.queues.items()]}

    @classmethod
    def from_json(cls, doc: dict) -> "PopState":
        state = cls()
        state.max_pop_id = int(doc["maxPopId"])
        for g, t, q, s in doc["queues"]:
            if not isinstance(g, str) or not isinstance(t, str):
                raise ValueError("bad queue key in pop state")
            state.queues[(g, t, int(q))] = QueuePopState.from_json(s)
        return state
