"""Scale and crash test: 8 producer processes and 4 consumer processes of one group through
``pymq serve`` (official client), the server killed with SIGKILL mid-run and restarted on the
same port and store. Every stored message is acknowledged exactly once (an ack whose call
failed while the server died may or may not have been applied), and every message a
producer got a receipt for is in the store: nothing acknowledged is lost.

``PYMQ_SCALE_MESSAGES`` sets the total: 100,000 by default, so that the whole suite stays
under its 25-minute budget on a 2-core CI machine (each message sent, received and acked
costs about 4 ms of CPU in the official Python clients and the server, and 200,000 take
9-10 minutes there); ``PYMQ_SCALE_MESSAGES=200000`` runs the issue's full figure
(docs/server.md has a run).
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time

import pytest

from .conftest import ServerProcess

WORKER = os.path.join(os.path.dirname(__file__), "scale_worker.py")
TOTAL = int(os.environ.get("PYMQ_SCALE_MESSAGES", "100000"))
PRODUCERS, CONSUMERS = 8, 4


def _lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [line.split(" ", 2) for line in f.read().splitlines() if line]


@pytest.mark.slow
def test_many_producers_and_consumers_with_a_server_kill(tmp_path):
    store = str(tmp_path / "store")
    srv = ServerProcess(store).start()
    topic, group = "ScaleTopic", "scale-group"
    stop = str(tmp_path / "stop")
    env = dict(os.environ)
    procs = []
    try:
        for i in range(CONSUMERS):
            procs.append(subprocess.Popen([sys.executable, WORKER, "consumer", srv.endpoint, topic, group,
                                           str(tmp_path / f"c{i}.txt"), stop], env=env))
        per = TOTAL // PRODUCERS
        producers = [subprocess.Popen([sys.executable, WORKER, "producer", srv.endpoint, topic, f"p{i}", str(per),
                                       str(tmp_path / f"p{i}.txt")], env=env) for i in range(PRODUCERS)]
        # kill -9 the server once about a third of the messages were sent, restart it
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            sent = sum(len(_lines(tmp_path / f"p{i}.txt")) for i in range(PRODUCERS))
            if sent >= TOTAL // 3:
                break
            time.sleep(0.5)
        srv.stop(signal.SIGKILL)
        time.sleep(1.0)
        srv = ServerProcess(store, port=srv.port).start()
        for p in producers:
            assert p.wait(timeout=900) == 0
        confirmed = [l for i in range(PRODUCERS) for l in _lines(tmp_path / f"p{i}.txt")]
        assert len({l[2] for l in confirmed}) == PRODUCERS * per
        # wait until the consumers acknowledged every confirmed message
        want = {l[1] for l in confirmed}
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            done = {l[1] for i in range(CONSUMERS) for l in _lines(tmp_path / f"c{i}.txt") if l[0] in ("ack", "unsure")}
            if want <= done:
                break
            time.sleep(1.0)
        time.sleep(6)       # let anything redelivered by now be taken
    finally:
        open(stop, "w").close()
        for p in procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
        code = srv.stop(signal.SIGTERM)
    assert code == 0, "".join(srv.output)
    acks = collections.Counter()
    unsure = set()
    for i in range(CONSUMERS):
        for l in _lines(tmp_path / f"c{i}.txt"):
            if l[0] == "ack":
                acks[l[1]] += 1
            elif l[0] == "unsure":
                unsure.add(l[1])
    import pymq
    copies = collections.Counter()
    with pymq.MessageStore(store, read_only=True) as s:
        for qid in s.get_topics()[topic]:
            off = 0
            while True:
                r = s.get_message(group, topic, qid, off, 32)
                if not r.messages:
                    break
                for m in r.messages:
                    copies[m.properties["UNIQ_KEY"]] += 1
                off = r.next_begin_offset
    # every receipt is in the store (nothing acknowledged to a producer is lost)
    assert {l[1] for l in confirmed} <= set(copies)
    # every stored message acked exactly once (a failed ack call may have been applied)
    wrong = {k: (copies[k], acks[k]) for k in copies if acks[k] != copies[k] and not (k in unsure and acks[k] < copies[k])}
    assert not wrong, list(wrong.items())[:10]
    assert not set(acks) - set(copies)
