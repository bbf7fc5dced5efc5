"""Four worker threads share one SimpleConsumer group over 100,000 messages: each
message is acked exactly once and none is lost. Four workers on a FIFO group receive each
message group's messages in order, each once."""

from __future__ import annotations

import collections
import threading
import time

import pymq

try:
    from . import pop_testlib as lib
except ImportError:
    import pop_testlib as lib

N = 100_000
WORKERS = 4
QUEUES = 4


def test_four_workers_ack_each_message_once(tmp_path):
    b = lib.open_broker(tmp_path / "b", config=lib.small_config(commitlog_file_size=16 << 20,
                                                                 consume_queue_entries=50_000))
    try:
        batch = 100
        for start in range(0, N, batch):
            q = (start // batch) % QUEUES
            r = b.put_messages([pymq.Message("W", b"%d" % i, queue_id=q) for i in range(start, start + batch)])
            assert r.status is pymq.PutMessageStatus.PUT_OK
        acked = collections.Counter()
        errors = []

        def work() -> None:
            c = pymq.SimpleConsumer(b, "workers", "W", await_duration=0.2)
            mine = []
            try:
                while True:
                    msgs = c.receive(32, 60)
                    if not msgs:
                        if done[0] >= N or time.monotonic() > stop_at:
                            break
                        continue
                    for m in msgs:
                        c.ack(m)
                        mine.append(m.body)
                    with lock:
                        done[0] += len(msgs)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)
            finally:
                results.append(mine)

        results: list = []
        done = [0]
        lock = threading.Lock()
        stop_at = time.monotonic() + 120
        threads = [threading.Thread(target=work) for _ in range(WORKERS)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - t0
        assert not errors, errors
        for mine in results:
            acked.update(mine)
        assert sum(1 for mine in results if mine) >= 2, "the workers did not share the group"
        assert len(acked) == N, f"{N - len(acked)} messages never acked"
        assert max(acked.values()) == 1
        assert set(acked) == {b"%d" % i for i in range(N)}
        assert b.pop_message("workers", "W", 32, 1000).messages == []
        print(f"{N} messages received and acked by {WORKERS} threads in {elapsed:.1f} s")
    finally:
        b.shutdown()


def test_four_workers_fifo_group_keeps_order_per_message_group(tmp_path):
    b = lib.open_broker(tmp_path / "b")
    try:
        lib.set_group(b, "fifo", fifo=True)
        groups, per_group = 20, 100
        for i in range(per_group):
            for g in range(groups):
                lib.put(b, "F", b"%d:%d" % (g, i), queue_id=g % 2, message_group=f"mg{g}")
        lib.wait_dispatched(b)
        order: dict = {}
        lock = threading.Lock()
        errors: list = []
        done = [0]

        def work() -> None:
            c = pymq.SimpleConsumer(b, "fifo", "F", await_duration=0.2)
            try:
                while done[0] < groups * per_group:
                    for m in c.receive(8, 60):
                        g, i = m.body.split(b":")
                        with lock:
                            order.setdefault(g, []).append(int(i))
                        c.ack(m)
                        with lock:
                            done[0] += 1
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=work) for _ in range(WORKERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors
        assert len(order) == groups
        assert all(seq == list(range(per_group)) for seq in order.values())
    finally:
        b.shutdown()
