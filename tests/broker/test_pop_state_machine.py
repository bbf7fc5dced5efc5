"""Pop against an in-memory oracle (Hypothesis state machine): random interleavings of
put, pop, ack, change of invisible time (current and stale handles), expiry (the
injected clock moves), revive and restart (with and without the state snapshot), for
a plain and a FIFO consumer group on one topic.

Checked at every pop: no message is delivered while invisible to the group, nor after
it was acked or dead-lettered; ``reconsume_times`` counts the earlier deliveries; a FIFO
group gets a message only when every earlier message of its message group in the queue
is done. After a drain (pop until empty) nothing deliverable is left behind; after a
revive every message that used up its retries is in the DLQ, exactly once.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from pymq.broker.receipt_handle import InvalidReceiptHandleError

try:
    from . import pop_testlib as lib
except ImportError:
    import pop_testlib as lib

MAX_RT = 2
GROUPS = ("g", "f")          # f is FIFO
QUEUES = 3


class Delivery:
    def __init__(self, handle: str, deadline: int) -> None:
        self.handle = handle
        self.deadline = deadline


class PopMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="pymq-pop-sm-")
        self.clock = lib.FakeClock()
        self.broker = self._open()
        self.msgs: dict[bytes, tuple[int, int, object]] = {}    # body -> (queue, offset, mg)
        self.n = 0
        # per group: body -> status ("inflight"/"acked"/"dlq"), deliveries
        self.status = {g: {} for g in GROUPS}
        self.deliveries = {g: {} for g in GROUPS}
        self.handles = []        # (group, body, handle) ever issued

    def _open(self):
        b = lib.open_broker(self.dir, self.clock, max_reconsume_times=MAX_RT)
        lib.set_group(b, "f", fifo=True, retry_max_times=MAX_RT)
        return b

    def teardown(self) -> None:
        self.broker.shutdown()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- oracle helpers ----------------------------------------------------------------

    def attempts(self, g, body) -> int:
        return len(self.deliveries[g].get(body, ()))

    def expired(self, g, body) -> bool:
        d = self.deliveries[g].get(body)
        return self.status[g].get(body) == "inflight" and d[-1].deadline <= self.clock.now

    def exhausted(self, g, body) -> bool:
        return self.expired(g, body) and self.attempts(g, body) > MAX_RT

    def done(self, g, body) -> bool:
        return self.status[g].get(body) in ("acked", "dlq") or self.exhausted(g, body)

    def available(self, g, body) -> bool:
        s = self.status[g].get(body)
        return s is None or (self.expired(g, body) and not self.exhausted(g, body))

    def earlier_same_group(self, body):
        q, off, mg = self.msgs[body]
        return [b for b, (q2, o2, mg2) in self.msgs.items() if q2 == q and mg2 == mg and o2 < off]

    # -- rules -------------------------------------------------------------------------

    @rule(queue=st.integers(0, QUEUES - 1), mg=st.sampled_from([None, "a", "b", "c"]), k=st.integers(1, 4))
    def put(self, queue, mg, k):
        for _ in range(k):
            body = b"m%d" % self.n
            self.n += 1
            r = lib.put(self.broker, "T", body, queue_id=queue, message_group=mg)
            self.msgs[body] = (queue, r.queue_offset, mg)
        lib.wait_dispatched(self.broker)

    def _pop(self, g, max_nums, invisible):
        now = self.clock.now
        r = self.broker.pop_message(g, "T", max_nums, invisible)
        got = [m.body for m in r.messages]
        assert len(got) == len(set(got)), got
        assert len(got) <= max_nums
        seen_mg = set()
        for m in r.messages:
            b = m.body
            assert b in self.msgs
            assert self.available(g, b), (g, b, self.status[g].get(b))
            assert m.reconsume_times == self.attempts(g, b), (b, m.reconsume_times, self.attempts(g, b))
            q, off, mg = self.msgs[b]
            assert (m.queue_id, m.queue_offset) == (q, off)
            if g == "f" and mg is not None:
                assert (q, mg) not in seen_mg
                seen_mg.add((q, mg))
                for e in self.earlier_same_group(b):
                    assert self.done(g, e), (b, e, self.status[g].get(e))
                    if self.exhausted(g, e):
                        self.status[g][e] = "dlq"
            self.deliveries[g].setdefault(b, []).append(Delivery(m.receipt_handle, now + invisible))
            self.status[g][b] = "inflight"
            self.handles.append((g, b, m.receipt_handle))
        return got

    @rule(g=st.sampled_from(GROUPS), max_nums=st.integers(1, 8), invisible=st.sampled_from([500, 1000, 2000]))
    def pop(self, g, max_nums, invisible):
        self._pop(g, max_nums, invisible)

    def _act(self, pick, change_ms):
        g, b, h = self.handles[pick % len(self.handles)]
        current = self.status[g].get(b) == "inflight" and self.deliveries[g][b][-1].handle == h
        try:
            if change_ms is None:
                self.broker.ack_message(h)
            else:
                new = self.broker.change_invisible_time(h, change_ms)
        except InvalidReceiptHandleError:
            assert not current or self.exhausted(g, b), (g, b, h)
            if current:                       # dead-lettered lazily by a pop
                self.status[g][b] = "dlq"
            return
        assert current, (g, b, h, self.status[g].get(b))
        if change_ms is None:
            self.status[g][b] = "acked"
        else:
            self.deliveries[g][b][-1] = Delivery(new, self.clock.now + change_ms)
            self.handles.append((g, b, new))

    @precondition(lambda self: self.handles)
    @rule(pick=st.integers(0, 10_000))
    def ack(self, pick):
        self._act(pick, None)

    @precondition(lambda self: self.handles)
    @rule(pick=st.integers(0, 10_000), ms=st.sampled_from([0, 700, 3000]))
    def change_invisible(self, pick, ms):
        self._act(pick, ms)

    @rule(ms=st.sampled_from([0, 400, 1000, 2500]))
    def advance_clock(self, ms):
        self.clock.advance(ms)

    @rule()
    def revive(self):
        self.broker.pop_service.revive()
        for g in GROUPS:
            for b in list(self.status[g]):
                if self.exhausted(g, b):
                    self.status[g][b] = "dlq"
            dlq = lib.dlq_bodies(self.broker, g)
            assert len(dlq) == len(set(dlq)), dlq
            assert set(dlq) == {b for b, s in self.status[g].items() if s == "dlq"}

    @rule(g=st.sampled_from(GROUPS))
    def drain(self, g):
        while self._pop(g, 64, 1000):
            pass
        for b, (q, off, mg) in self.msgs.items():
            if self.done(g, b):
                continue
            if g == "f" and mg is not None and any(not self.done(g, e) for e in self.earlier_same_group(b)):
                continue                      # waits for an earlier message of its group
            assert not self.available(g, b), (g, b, self.status[g].get(b))

    @rule(drop_snapshot=st.booleans())
    def restart(self, drop_snapshot):
        self.broker.shutdown()
        if drop_snapshot:
            path = os.path.join(self.dir, "config", "popState.json")
            for p in (path, path + ".bak"):
                if os.path.exists(p):
                    os.remove(p)
        self.broker = self._open()


PopMachine.TestCase.settings = settings(max_examples=int(os.environ.get("POP_SM_EXAMPLES", 25)),
                                        stateful_step_count=40, deadline=None,
                                        suppress_health_check=list(HealthCheck))
TestPopStateMachine = PopMachine.TestCase
