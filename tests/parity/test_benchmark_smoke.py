"""RocketMQ's own benchmark (lib/rocketmq-example-benchmark.jar, the Producer and Consumer that
``bin/run.sh bench`` runs) for a few seconds against RocketMQ 4.9.7 and against ``pymq serve``
(issue 25): the benchmark consumer runs while a sync producer (4 threads, 4,000 messages of
128 B) and then an async producer (the tool's one thread) send; no sync send fails, every
async send the producer counts is stored, and the consumer gets every message stored.

The 4.9.7 tool's async mode cannot be given a message count (with ``-q`` it shuts the
producer down before its sends went out: "Send Total: 0"), so the async producer runs until
its first statistics line, printed after 10 s, and is then stopped. Its failures are not
asserted to be none: it keeps 10,000 sends queued in the client, and where the client sends
fewer than 3,333 a second (2 cores shared with the broker and the consumer) the last of them
wait past the 3 s send timeout and fail in the client, against the real broker too (measured
there: 2,961 sent/s, 30,282 failed, average RT 3.4 s; client log: "call timeout", "response
timeout"). How much pymq sends in that flood is issue 25's throughput goal, measured by
bench/, not a parity outcome.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time

import pytest

TOPIC = "BenchSmoke"
GROUP = "bench_smoke"
SYNC_MESSAGES = 4000
BENCH = "org.apache.rocketmq.example.benchmark."
# "[Complete] Send Total: 4000 Send TPS: 1347 Max RT(ms): 498 Average RT(ms):   2.993 Send Failed: 0
# Response Failed: 0" (no TPS part when the run took under two seconds), and every 10 s
# "Current Time: ... Send TPS: 1347 Max RT(ms): ... Send Failed: 0 Response Failed: 0"
COMPLETE = re.compile(r"\[Complete\] Send Total: (\d+)(?: Send TPS: (\d+))?.* Send Failed: (\d+) "
                      r"Response Failed: (\d+)")
PERIODIC = re.compile(r"Current Time: .* Send TPS: (\d+) .* Send Failed: (\d+) Response Failed: (\d+)")


def _wait_for(path, pattern: re.Pattern, proc: subprocess.Popen, timeout: float) -> re.Match:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = pattern.search(path.read_text(errors="replace"))
        if m:
            return m
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    raise AssertionError(f"no {pattern.pattern!r} in {path.name} (exit {proc.poll()}):\n"
                         + path.read_text(errors="replace")[-3000:])


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _progress(probe, counterpart) -> tuple[int, int]:
    """(stored, consumed): the topic's broker offsets and the group's committed offsets
    summed, as ``mqadmin consumerProgress`` prints them."""
    out, = probe.run(counterpart, [{"op": "mqadmin", "args": ["consumerProgress", "-g", GROUP]}])
    stored = consumed = 0
    for line in out.splitlines():
        cols = line.split()
        if cols and cols[0] == TOPIC:
            stored += int(cols[3])
            consumed += int(cols[4])
    return stored, consumed


@pytest.fixture(scope="module")
def bench(counterpart, rocketmq_home, rocketmq_probe) -> dict:
    """One benchmark run against the counterpart: the sync producer's [Complete] line, the
    async producer's first statistics line, and (stored, consumed) once the consumer's
    committed offsets stop moving or reach the stored ones."""
    from real_rocketmq import JavaProgram
    run = counterpart.run_dir / "bench"
    run.mkdir(parents=True, exist_ok=True)
    rocketmq_probe.run(counterpart, [{"op": "createTopic", "topic": TOPIC, "queues": 4}])
    ns = ["-n", counterpart.namesrv, "-t", TOPIC]
    consumer = JavaProgram(rocketmq_home, BENCH + "Consumer").start(run, run / "consumer.out", *ns, "-g", GROUP,
                                                                      "-w", "4")
    try:
        _wait_for(run / "consumer.out", re.compile("Consumer Started"), consumer, 60)
        producer = JavaProgram(rocketmq_home, BENCH + "Producer")
        p = producer.run(run, *ns, "-w", "4", "-s", "128", "-q", str(SYNC_MESSAGES), timeout=180)
        (run / "producer-sync.out").write_text(p.stdout)
        sync = COMPLETE.search(p.stdout)
        assert p.returncode == 0 and sync, f"benchmark Producer exited {p.returncode}:\n{p.stdout[-3000:]}"
        flood = producer.start(run, run / "producer-async.out", *ns, "-s", "128", "-y", "true")
        try:
            first = _wait_for(run / "producer-async.out", PERIODIC, flood, 60)
        finally:
            _stop(flood)
        # the consumer commits its offsets every 5 s
        deadline = time.monotonic() + 60
        stored, consumed = _progress(rocketmq_probe, counterpart)
        while consumed < stored and time.monotonic() < deadline:
            time.sleep(2)
            stored, consumed = _progress(rocketmq_probe, counterpart)
    finally:
        _stop(consumer)
    return {"sync": {"total": int(sync[1]), "tps": sync[2] and int(sync[2]), "send_failed": int(sync[3]),
                     "response_failed": int(sync[4])},
            "async": {"tps": int(first[1]), "send_failed": int(first[2]), "response_failed": int(first[3])},
            "stored": stored, "consumed": consumed}


def test_sync_benchmark_sends_every_message(bench):
    s = bench["sync"]
    assert (s["total"], s["send_failed"], s["response_failed"]) == (SYNC_MESSAGES, 0, 0), s
    assert s["tps"] is None or s["tps"] > 0, s


def test_async_benchmark_sends_and_what_it_counts_is_stored(bench):
    a = bench["async"]
    assert a["tps"] > 0 and a["response_failed"] == 0, a
    # the line's TPS is over the 9 s between its first and last snapshot
    assert bench["stored"] >= SYNC_MESSAGES + 8 * a["tps"], bench


def test_benchmark_consumer_receives_every_stored_message(bench):
    assert bench["stored"] > SYNC_MESSAGES, bench          # the sync run's and some of the async run's
    assert bench["consumed"] == bench["stored"], bench
