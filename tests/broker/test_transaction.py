"""Transactional messages (issue 12, part 4): halves invisible until committed, rollback,
the check of halves left open (commit / rollback / unknown, discard past the max), exactly
once across restarts; a Hypothesis state machine against an oracle."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest
from hypothesis import currently_in_test_context, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, initialize, invariant, precondition, rule,
                                 run_state_machine_as_test)
from pop_testlib import T0, FakeClock, crash_copy, small_config, wait_dispatched

import pymq
from pymq import TransactionResolution as R
from pymq.broker import Broker, BrokerConfig
from pymq.broker.transaction import CHECK_MAX_TIME_TOPIC, HALF_TOPIC, TransactionError


def open_broker(path, clock=None, **cfg):
    cfg.setdefault("transaction_check_interval", 3_600_000)     # the tests run the check
    b = Broker(path, small_config(), BrokerConfig(**cfg))
    if clock is not None:
        b.transaction_service.clock = clock
    return b.start()


def bodies(b, topic="T", queue=0):
    """Every body in the queue (a pull returns at most max_transfer_count messages)."""
    wait_dispatched(b)
    out, offset = [], 0
    while True:
        g = b.get_message("g", topic, queue, offset, 64)
        if not g.messages:
            return out
        out.extend(m.body for m in g.messages)
        offset = g.next_begin_offset


def test_a_half_is_invisible_until_committed_and_commit_is_once(tmp_path):
    with open_broker(tmp_path / "b") as b:
        r = b.put_half_message(pymq.Message("T", b"tx", keys=["order-1"], queue_id=1), "pg")
        assert r.is_ok()
        half = b.look_message_by_offset(r.commitlog_offset)
        assert half.topic == HALF_TOPIC and half.properties["REAL_TOPIC"] == "T"
        assert half.properties["REAL_QID"] == "1" and half.properties["PGROUP"] == "pg"
        assert bodies(b, "T", 1) == []
        assert b.end_transaction(r.msg_id, commit=True) is True
        assert b.end_transaction(r, commit=True) is False          # resolved already
        assert b.end_transaction(r.commitlog_offset, commit=False) is False
        got = b.get_message("g", "T", 1, 0).messages if wait_dispatched(b) is None else []
        assert [m.body for m in got] == [b"tx"]
        m = got[0]
        assert m.transaction_type == 8 and m.prepared_transaction_offset == r.commitlog_offset
        assert m.keys == ["order-1"]
        # every property of the half stays, as on RocketMQ 4.9.7 (tests/parity/test_client_matrix.py)
        assert {k: m.properties[k] for k in ("REAL_TOPIC", "REAL_QID", "TRAN_MSG", "PGROUP")} == \
            {"REAL_TOPIC": "T", "REAL_QID": "1", "TRAN_MSG": "true", "PGROUP": "pg"}
        assert [x.body for x in b.query_message("T", "order-1")] == [b"tx"]


def test_rollback_leaves_nothing_visible(tmp_path):
    with open_broker(tmp_path / "b") as b:
        r = b.put_half_message(pymq.Message("T", b"no"))
        assert b.end_transaction(r.msg_id, commit=False) is True
        assert b.end_transaction(r.msg_id, commit=True) is False
        assert bodies(b) == []


def test_bad_handles_and_messages(tmp_path):
    with open_broker(tmp_path / "b") as b:
        r = b.put_message(pymq.Message("T", b"plain"))
        with pytest.raises(TransactionError):
            b.end_transaction(r.commitlog_offset)
        with pytest.raises(TypeError):
            b.end_transaction(object())
        with pytest.raises(ValueError):
            b.put_half_message(pymq.Message("T", b"x", delay_level=2))
        with pytest.raises(TypeError):
            b.put_half_message(b"raw")


def test_the_check_asks_the_checker_and_applies_its_answer(tmp_path):
    clock = FakeClock()
    with open_broker(tmp_path / "b", clock, transaction_timeout=6_000) as b:
        asked = []
        answers = {b"c": R.COMMIT, b"r": R.ROLLBACK, b"u": R.UNKNOWN}
        b.set_transaction_checker(lambda m: asked.append(m.body) or answers[m.body])
        for body in (b"c", b"r", b"u"):
            b.put_half_message(pymq.Message("T", body))
        wait_dispatched(b)
        clock.now = int(__import__("time").time() * 1000) + 1_000      # younger than the timeout
        assert b.transaction_service.check() == 0 and asked == []
        clock.advance(10_000)
        assert b.transaction_service.check() == 3
        assert sorted(asked) == [b"c", b"r", b"u"]
        assert bodies(b) == [b"c"]
        # "unknown" is asked again, with the check count carried on
        wait_dispatched(b)
        clock.advance(10_000)
        asked.clear()
        assert b.transaction_service.check() == 1 and asked == [b"u"]
        assert bodies(b) == [b"c"]


def test_a_half_checked_too_often_is_discarded(tmp_path):
    clock = FakeClock()
    with open_broker(tmp_path / "b", clock, transaction_check_max=2) as b:
        b.set_transaction_checker(lambda m: R.UNKNOWN)
        b.put_half_message(pymq.Message("T", b"x"))
        for _ in range(4):
            wait_dispatched(b)
            clock.now = int(__import__("time").time() * 1000) + 100_000
            b.transaction_service.check()
        wait_dispatched(b)
        assert b.transaction_service.discarded == 1
        assert [m.body for m in b.get_message("g", CHECK_MAX_TIME_TOPIC, 0, 0).messages] == [b"x"]
        assert bodies(b) == []


def test_a_late_commit_of_the_original_and_the_checkers_answer_resolve_once(tmp_path):
    clock = FakeClock()
    with open_broker(tmp_path / "b", clock) as b:
        b.set_transaction_checker(lambda m: R.UNKNOWN)
        r = b.put_half_message(pymq.Message("T", b"once"))
        wait_dispatched(b)
        clock.now = int(__import__("time").time() * 1000) + 100_000
        b.transaction_service.check()                 # re-put as a copy, checker unsure
        assert b.end_transaction(r.msg_id, True) is True          # the producer answers late
        b.set_transaction_checker(lambda m: R.COMMIT)
        wait_dispatched(b)
        clock.advance(100_000)
        b.transaction_service.check()                 # the copy: already resolved
        assert bodies(b) == [b"once"]


def test_restart_resolves_every_half_exactly_once(tmp_path):
    path = tmp_path / "b"
    clock = FakeClock()
    with open_broker(path, clock) as b:
        r1 = b.put_half_message(pymq.Message("T", b"committed"))
        b.end_transaction(r1.msg_id, True)
        r2 = b.put_half_message(pymq.Message("T", b"open"))
        wait_dispatched(b)
    with open_broker(path, clock) as b:
        assert b.end_transaction(r1.msg_id, True) is False
        b.set_transaction_checker(lambda m: R.COMMIT)
        clock.now = int(__import__("time").time() * 1000) + 100_000
        b.transaction_service.check()
        assert sorted(bodies(b)) == [b"committed", b"open"]
        assert b.end_transaction(r2.msg_id, True) is False
    with open_broker(path, clock) as b:
        clock.advance(100_000)
        assert b.transaction_service.check() == 0
        assert sorted(bodies(b)) == [b"committed", b"open"]


def test_a_commit_whose_op_record_was_lost_is_not_committed_again(tmp_path):
    """The crash window between the commit record and its op record."""
    clock = FakeClock()
    with open_broker(tmp_path / "b", clock) as b:
        r = b.put_half_message(pymq.Message("T", b"x"))
        ts = b.transaction_service
        half = b.look_message_by_offset(r.commitlog_offset)
        assert b.put_message(ts._committed(half)).is_ok()     # the commit, then "a crash"
        b.set_transaction_checker(lambda m: R.COMMIT)
        wait_dispatched(b)
        clock.now = int(__import__("time").time() * 1000) + 100_000
        ts.check()
        assert bodies(b) == [b"x"]
        assert b.end_transaction(r.msg_id, True) is False


CHECK_MAX = 2      # transaction_check_max of the machine: discards within a few checks


class TransactionMachine(RuleBasedStateMachine):
    """Oracle: each transaction is open (with the number of times the checker was asked
    about it), committed, rolled back or discarded; the real topic holds exactly the
    committed ones, once each, and TRANS_CHECK_MAX_TIME_TOPIC exactly the discarded ones,
    whatever the order of commits, rollbacks, checks, checker answers, clean restarts
    and crashes (the store directory as a SIGKILL leaves it)."""

    discards = 0                        # over all runs: proves the discard path is explored

    def __init__(self):
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="pymq-tx-")
        self.generation = 0
        self.dir = os.path.join(self.root, "b0")
        self.clock = FakeClock()
        self.answer = (R.UNKNOWN, 1)    # the checker's answer, for t<n> with n % stride == stride - 1
        self.b = self._open()
        # body -> [handle, state, checks, crashed]: crashed when a crash found it open and
        # checked (its check progress may be lost: see _on_check)
        self.tx = {}
        self.n = 0

    def _open(self):
        # The check service makes a pass when it starts: with the clock in the past it finds
        # nothing due; stopping the service waits for that pass. Only the rule checks.
        self.clock.now = T0
        b = open_broker(self.dir, self.clock, transaction_check_max=CHECK_MAX)
        b.transaction_service.shutdown()
        b.set_transaction_checker(lambda m: self._answer(m.body))
        return b

    def _answer(self, body: bytes):
        """The checker: the rule's answer for every stride-th transaction, UNKNOWN for the
        others (so some stay open while others are resolved)."""
        answer, stride = self.answer
        return answer if int(body[1:]) % stride == stride - 1 else R.UNKNOWN

    def _on_check(self, dropped) -> int:
        """What a check pass does to the oracle: every open transaction (all are older
        than the timeout) that was asked about CHECK_MAX times already is discarded;
        the checker is asked about every other one, and COMMIT / ROLLBACK resolve it.
        Returns the number discarded.

        After a crash the check's progress (a consumer offset) may be older than the
        halves it had checked: the next pass checks them again and puts a second copy
        of the transaction, with a lower check count, before the newest one. The copy
        with the highest count still reaches the limit on time, but the checker is asked
        about the lower copy first in that pass: so a crashed transaction due for its
        discard may instead be resolved by the answer (``dropped``, the bodies in
        TRANS_CHECK_MAX_TIME_TOPIC, tells which happened). Nothing else changes."""
        discarded = 0
        for body, t in self.tx.items():
            if t[1] != "open":
                continue
            if t[2] >= CHECK_MAX:
                answer = self._answer(body)
                if t[3] and answer is not R.UNKNOWN and body not in dropped:
                    t[1] = "committed" if answer is R.COMMIT else "rolled back"
                    if currently_in_test_context():
                        event("a crashed transaction due for discard resolved by a re-check")
                    continue
                t[1] = "discarded"
                discarded += 1
                continue
            t[2] += 1
            answer = self._answer(body)
            if answer is not R.UNKNOWN:
                t[1] = "committed" if answer is R.COMMIT else "rolled back"
        return discarded

    @initialize(k=st.integers(1, 3), passes=st.integers(0, CHECK_MAX + 1))
    def first_halves(self, k, passes):
        """Every run starts with open halves, checked ``passes`` times already (Hypothesis
        may disable ``half`` or ``check`` in a run; the discard must still be explored)."""
        self.half(k)
        if passes:
            self.check(R.UNKNOWN, 1, passes)

    @rule(k=st.integers(1, 3))
    def half(self, k=1):
        for _ in range(k):
            body = b"t%d" % self.n
            self.n += 1
            r = self.b.put_half_message(pymq.Message("T", body))
            assert r.is_ok()
            self.tx[body] = [r.msg_id, "open", 0, False]

    @precondition(lambda self: self.tx)
    @rule(i=st.integers(min_value=0), commit=st.booleans())
    def end(self, i, commit):
        body = sorted(self.tx)[i % len(self.tx)]
        t = self.tx[body]
        done = self.b.end_transaction(t[0], commit)
        assert done == (t[1] == "open")
        if done:
            t[1] = "committed" if commit else "rolled back"

    # UNKNOWN as often as the others together, and up to CHECK_MAX + 1 passes in a row
    # (check intervals going by): transactions stay open through CHECK_MAX checks, and
    # the discard is explored
    @precondition(lambda self: any(t[1] == "open" for t in self.tx.values()))
    @rule(answer=st.sampled_from([R.UNKNOWN, R.COMMIT, R.UNKNOWN, R.ROLLBACK]), stride=st.integers(1, 3),
          passes=st.integers(1, CHECK_MAX + 1))
    def check(self, answer, stride=1, passes=1):
        self.answer = (answer, stride)
        for _ in range(passes):
            wait_dispatched(self.b)
            self.clock.now = int(__import__("time").time() * 1000) + 100_000
            before = self.b.transaction_service.discarded
            try:
                self.b.transaction_service.check()
            finally:
                self.clock.now = T0
            discarded = self._on_check(set(bodies(self.b, CHECK_MAX_TIME_TOPIC)))
            assert self.b.transaction_service.discarded - before == discarded
            if discarded:
                TransactionMachine.discards += discarded
                if currently_in_test_context():
                    event("transaction discarded after transaction_check_max checks")

    @rule(crash=st.booleans())
    def restart(self, crash=False):
        """Shut down and reopen, or (crash) reopen what a SIGKILL leaves now: no shutdown,
        offsets as last persisted."""
        if not crash:
            self.b.shutdown()
            self.b = self._open()
            return
        self.generation += 1
        crashed = os.path.join(self.root, "b%d" % self.generation)
        crash_copy(self.b, crashed)
        for t in self.tx.values():
            t[3] = t[3] or (t[1] == "open" and t[2] > 0)
        self.b.shutdown()
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = crashed
        self.b = self._open()

    @invariant()
    def visible_exactly_once_when_committed(self):
        wait_dispatched(self.b)
        assert sorted(bodies(self.b)) == sorted(b for b, t in self.tx.items() if t[1] == "committed")
        dropped = bodies(self.b, CHECK_MAX_TIME_TOPIC)
        assert sorted(dropped) == sorted(b for b, t in self.tx.items() if t[1] == "discarded")

    def teardown(self):
        self.b.shutdown()
        shutil.rmtree(self.root, ignore_errors=True)


def test_transaction_machine():
    """The machine, and proof that its runs reach the discard past transaction_check_max."""
    TransactionMachine.discards = 0
    run_state_machine_as_test(TransactionMachine,
                              settings=settings(max_examples=20, stateful_step_count=20, deadline=None))
    assert TransactionMachine.discards > 0, "no run reached a discard: the oracle's discard is untested"


def test_the_machine_models_the_discard():
    """The audit's case: checks answering UNKNOWN until the half is discarded, then a
    COMMIT answer: nothing is visible, the transaction is over."""
    m = TransactionMachine()
    try:
        m.half()
        for _ in range(CHECK_MAX):
            m.check(R.UNKNOWN)
            m.visible_exactly_once_when_committed()
        assert m.tx[b"t0"][1:3] == ["open", CHECK_MAX]
        m.check(R.COMMIT)
        assert m.tx[b"t0"][1] == "discarded"
        m.visible_exactly_once_when_committed()
        m.restart(crash=True)
        m.check(R.COMMIT)
        m.end(0, True)
        m.visible_exactly_once_when_committed()
        assert bodies(m.b) == []
    finally:
        m.teardown()


def test_the_first_check_waits_an_interval_for_the_checker(tmp_path):
    """A checker set right after start() (as the docs show) is there for the first check:
    the check waits one interval as RocketMQ's does, instead of counting a check of every
    old open half with no one to ask at each start."""
    import time

    path = tmp_path / "b"
    with open_broker(path, transaction_timeout=1) as b:
        r = b.put_half_message(pymq.Message("T", b"open"), "pg")
        assert r.is_ok()
    time.sleep(0.01)                                   # older than the timeout
    asked = []

    def checker(msg):
        asked.append(msg.properties.get("TRANSACTION_CHECK_TIMES"))
        return R.COMMIT

    b = open_broker(path, transaction_timeout=1, transaction_check_interval=300)
    try:
        b.set_transaction_checker(checker)
        deadline = time.monotonic() + 10
        while not asked and time.monotonic() < deadline:
            time.sleep(0.01)
        assert asked == ["1"], asked                   # the first check to count asked the checker
        assert bodies(b) == [b"open"]
    finally:
        b.shutdown()
