"""SIGKILL in the middle of transactions (issue 12): 12 kills under SYNC_FLUSH.

A child process puts halves and commits or rolls them back (body ``<round>-<n>``: commit when
n is even, roll back when odd), printing each outcome once ``end_transaction`` returned. It is
killed at random moments. After every kill the parent reopens the broker, lets the check
resolve the halves the child left open (its checker gives the same answer by the same
rule), and checks: every transaction the child reported committed is visible exactly
once, none reported rolled back is visible, and no committed transaction appears twice
or is missing once the check has run.
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

ROUNDS = 12
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = dict(commitlog_file_size=64 * 1024, consume_queue_entries=256, index_hash_slots=64,
              index_max_entries=512, flush_disk_type="SYNC_FLUSH", warm_mapped_file_enable=False)

CHILD = """
import sys
import pymq
from pymq.broker import Broker, BrokerConfig
b = Broker(sys.argv[1], pymq.StoreConfig(**{config!r}),
           BrokerConfig(transaction_check_interval=3_600_000)).start()
n = 0
while True:
    r = b.put_half_message(pymq.Message("T", b"%s-%d" % (sys.argv[2].encode(), n)))
    if n % 3:                       # a third of the halves are left open
        b.end_transaction(r.msg_id, commit=n % 2 == 0)
        print("commit" if n % 2 == 0 else "rollback", n, flush=True)
    else:
        print("open", n, flush=True)
    n += 1
"""


def number(body: bytes) -> int:
    return int(body.split(b"-")[1])


def rule(m) -> R:
    return R.COMMIT if number(m.body) % 2 == 0 else R.ROLLBACK


def run_child(path, round_no, rng):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.Popen([sys.executable, "-c", CHILD.format(config=CONFIG), str(path), str(round_no)],
                         stdout=subprocess.PIPE, text=True, env=env)
    outcomes = {}
    stop_after = rng.randrange(5, 60)
    try:
        for line in p.stdout:
            kind, n = line.split()
            outcomes[(round_no, int(n))] = kind
            if len(outcomes) >= stop_after:
                time.sleep(rng.random() * 0.005)
                break
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
        p.stdout.close()
    return outcomes


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
    for round_no in range(ROUNDS):
        reported.update(run_child(path, round_no, rng))
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
            # halves left open (or whose end never returned) are resolved by the rule
            assert all(n % 2 == 0 for _r, n in seen)
        finally:
            b.shutdown()
