"""Transactional messages (issue 12, part 4): halves invisible until committed, rollback,
the check of halves left open (commit / rollback / unknown, discard past the max), exactly
once across restarts; a Hypothesis state machine against an oracle."""

from __future__ import annotations

import shutil
import tempfile

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from pop_testlib import FakeClock, small_config, wait_dispatched

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
    wait_dispatched(b)
    return [m.body for m in b.get_message("g", topic, queue, 0, 64).messages]


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
        assert "REAL_TOPIC" not in m.properties and m.keys == ["order-1"]
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


class TransactionMachine(RuleBasedStateMachine):
    """Oracle: each transaction is open, committed or rolled back; the real topic holds
    exactly the committed ones, once each, whatever the order of commits, rollbacks,
    checks, checker answers and restarts."""

    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="pymq-tx-")
        self.clock = FakeClock()
        self.answer = R.UNKNOWN
        self.b = self._open()
        self.tx = {}                    # body -> [handle, state]
        self.n = 0

    def _open(self):
        b = open_broker(self.dir, self.clock)
        b.set_transaction_checker(lambda m: self.answer)
        return b

    def _on_check(self, answer):
        """What the checker's answer does to the oracle: every open transaction older than
        the timeout is asked."""
        for t in self.tx.values():
            if t[1] == "open" and answer is not R.UNKNOWN:
                t[1] = "committed" if answer is R.COMMIT else "rolled back"

    @rule()
    def half(self):
        body = b"t%d" % self.n
        self.n += 1
        r = self.b.put_half_message(pymq.Message("T", body))
        assert r.is_ok()
        self.tx[body] = [r.msg_id, "open"]

    @precondition(lambda self: self.tx)
    @rule(i=st.integers(min_value=0), commit=st.booleans())
    def end(self, i, commit):
        body = sorted(self.tx)[i % len(self.tx)]
        t = self.tx[body]
        done = self.b.end_transaction(t[0], commit)
        assert done == (t[1] == "open")
        if done:
            t[1] = "committed" if commit else "rolled back"

    @rule(answer=st.sampled_from([R.COMMIT, R.ROLLBACK, R.UNKNOWN]))
    def check(self, answer):
        wait_dispatched(self.b)
        self.answer = answer
        self.clock.now = int(__import__("time").time() * 1000) + 100_000
        self.b.transaction_service.check()
        self._on_check(answer)

    @rule()
    def restart(self):
        self.b.shutdown()
        self.b = self._open()

    @invariant()
    def visible_exactly_once_when_committed(self):
        wait_dispatched(self.b)
        got = sorted(bodies(self.b) + [m.body for m in self.b.get_message("g", "T", 0, 64, 64).messages])
        assert got == sorted(b for b, t in self.tx.items() if t[1] == "committed")

    def teardown(self):
        self.b.shutdown()
        shutil.rmtree(self.dir, ignore_errors=True)


TestTransactionMachine = TransactionMachine.TestCase
TestTransactionMachine.settings = settings(max_examples=15, stateful_step_count=20, deadline=None)
