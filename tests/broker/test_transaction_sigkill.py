"""SIGKILL in the middle of transactions (issue 12): 30 kills under SYNC_FLUSH.

A child process puts halves and commits or rolls them back (body ``<round>-<n>``: commit when
n is even, roll back when odd), printing each outcome once ``end_transaction`` returned. It is
killed at random moments. After every kill the parent reopens the broker, lets the check
resolve the halves the child left open (its checker gives the same answer by the same
rule), and checks: every transaction the child reported committed is visible exactly
once, none reported rolled back is visible, every half it reported left open is resolved
by the check (visible when even, not when odd), and no committed transaction appears
twice or is missing once the check has run.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pymq
from pymq import TransactionResolution as R
from pymq.broker import Broker, BrokerConfig

ROUNDS = 30
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = dict(commitlog_file_size=64 * 1024, consume_queue_entries=256, index_hash_slots=64,
              index_max_entries=512, flush_disk_type="SYNC_FLUSH", warm_mapped_file_enable=False)

# A process that imports pymq once and forks a child per round (importing pymq takes most
# of a fresh interpreter's start): the child opens the broker in its directory, prints its
# pid, then puts halves and resolves them, printing each outcome once it returned; the
# test SIGKILLs it, the zygote reaps it and says so.
ZYGOTE = """
import os
import sys
import pymq
from pymq.broker import Broker, BrokerConfig


def say(*words):                        # one write: a kill never leaves half a line
    os.write(1, (" ".join(map(str, words)) + "\\n").encode())


def child(path, round_no):
    say("pid", os.getpid())
    b = Broker(path, pymq.StoreConfig(**{config!r}),
               BrokerConfig(transaction_check_interval=3_600_000)).start()
    n = 0
    while True:
        r = b.put_half_message(pymq.Message("T", b"%s-%d" % (round_no.encode(), n)))
        if n % 3:                       # a third of the halves are left open
            b.end_transaction(r.msg_id, commit=n % 2 == 0)
            say("commit" if n % 2 == 0 else "rollback", n)
        else:
            say("open", n)
        n += 1


for line in sys.stdin:
    path, round_no = line[:-1].rsplit(" ", 1)
    pid = os.fork()
    if pid == 0:
        try:
            child(path, round_no)
        finally:
            os._exit(1)
    os.waitpid(pid, 0)
    say("reaped")
"""


class Zygote:
    def __init__(self):
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
                   OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        self.p = subprocess.Popen([sys.executable, "-c", ZYGOTE.format(config=CONFIG)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, env=env)

    def line(self) -> list:
        text = self.p.stdout.readline()
        assert text, f"the zygote died (exit status {self.p.poll()})"
        return text.split()

    def close(self):
        self.p.stdin.close()
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.p.stdout.close()


def number(body: bytes) -> int:
    return int(body.split(b"-")[1])


def rule(m) -> R:
    return R.COMMIT if number(m.body) % 2 == 0 else R.ROLLBACK


def run_child(zygote, path, round_no, rng):
    """One round: a child that is SIGKILLed after a random number of outcomes; returns
    every outcome it printed, to its death."""
    zygote.p.stdin.write(f"{path} {round_no}\n")
    zygote.p.stdin.flush()
    kind, pid = zygote.line()
    assert kind == "pid"
    outcomes = {}
    stop_after = rng.randrange(5, 60)
    alive = True
    try:
        while len(outcomes) < stop_after:
            words = zygote.line()
            alive = words != ["reaped"]
            assert alive, "the child died before it was killed (its stderr says why)"
            kind, n = words
            outcomes[(round_no, int(n))] = kind
        time.sleep(rng.random() * 0.005)
    finally:
        if alive:
            os.kill(int(pid), signal.SIGKILL)
    while True:                     # what it printed before it died, until the zygote reaped it
        words = zygote.line()
        if words == ["reaped"]:
            return outcomes
        kind, n = words
        outcomes[(round_no, int(n))] = kind


def visible(b):
    deadline = time.monotonic() + 10
    while b.dispatch_behind_bytes() and time.monotonic() < deadline:
        time.sleep(0.002)
    out = []
    for q in range(b.get_topics().get("T", [0])[-1] + 1):
        off = 0
        while True:
            g = b.get_message("g", "T", q, off)
            if not g.messages:
                break
            out.extend(tuple(int(x) for x in m.body.split(b"-")) for m in g.messages)
            off = g.next_begin_offset
    return out


def test_sigkill_during_transactions(tmp_path):
    seed = int(os.environ.get("PYMQ_CRASH_SEED", random.SystemRandom().randrange(1 << 30)))
    print(f"PYMQ_CRASH_SEED={seed}")
    rng = random.Random(seed)
    path = tmp_path / "b"
    reported: dict[tuple, str] = {}
    zygote = Zygote()
    try:
        for round_no in range(ROUNDS):
            reported.update(run_child(zygote, path, round_no, rng))
            check_after_the_kill(path, reported)
    finally:
        zygote.close()


def check_after_the_kill(path, reported):
    """Reopen, let the check resolve what was left open, compare with what the children reported."""
    b = Broker(path, pymq.StoreConfig(**CONFIG), BrokerConfig(transaction_check_interval=3_600_000))
    b.transaction_service.clock = lambda: int(time.time() * 1000) + 3_600_000
    b.set_transaction_checker(rule)
    b.start()
    try:
        visible(b)
        b.transaction_service.check()
        seen = visible(b)
        assert len(seen) == len(set(seen)), "a transaction was committed twice"
        for n, kind in reported.items():
            if kind == "commit":
                assert n in seen, f"{n} was committed and is lost"
            elif kind == "rollback":
                assert n not in seen, f"{n} was rolled back and is visible"
            else:               # durable and open: the check asked the rule about it
                assert kind == "open"
                if n[1] % 2 == 0:
                    assert n in seen, f"{n} was left open, the checker committed it, and it is lost"
                else:
                    assert n not in seen, f"{n} was left open, the checker rolled it back, and it is visible"
        # halves left open (or whose end never returned) are resolved by the rule
        assert all(n % 2 == 0 for _r, n in seen)
    finally:
        b.shutdown()
