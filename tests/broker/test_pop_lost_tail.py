"""What ASYNC_FLUSH may lose in a power failure: the tail of the commit log. Cutting the
log after any revive-log record and reopening (abnormal recovery, no snapshot) must give
exactly the pop state that held right after that record: the state is always a prefix
of the records that reached the disk."""

from __future__ import annotations

import os
import random

import pytest

import pymq.testing as t

try:
    from . import pop_testlib as lib
except ImportError:
    import pop_testlib as lib


@pytest.mark.parametrize("seed", range(8))
def test_lost_log_tail_leaves_a_prefix_of_the_state(tmp_path, seed):
    rnd = random.Random(seed)
    clock = lib.FakeClock()
    path = tmp_path / "b"
    b = lib.open_broker(path, clock, max_reconsume_times=1)
    lib.set_group(b, "f", fifo=True, retry_max_times=1)
    for i in range(30):
        lib.put(b, "T", b"m%d" % i, queue_id=i % 2, message_group=rnd.choice([None, "a", "b"]))
    lib.wait_dispatched(b)
    captures = []                      # (commit-log end, state) after each change
    handles = []
    for _ in range(60):
        x = rnd.random()
        try:
            if x < 0.4:
                g = rnd.choice(["g", "f"])
                handles += [m.receipt_handle for m in b.pop_message(g, "T", rnd.randint(1, 4), 1000).messages]
            elif x < 0.7 and handles:
                b.ack_message(rnd.choice(handles))
            elif x < 0.8 and handles:
                handles.append(b.change_invisible_time(rnd.choice(handles), rnd.choice([0, 500, 3000])))
            else:
                clock.advance(rnd.choice([300, 1000]))
        except lib.InvalidReceiptHandleError:
            pass
        lib.wait_dispatched(b)
        end = b.get_max_phy_offset()
        if not captures or captures[-1][0] != end:
            captures.append((end, b.pop_service.state.to_json()))
    written = b.get_max_phy_offset()
    size = b.config.commitlog_file_size
    b.shutdown()
    snap = os.path.join(path, "config", "popState.json")
    for p in (snap, snap + ".bak"):
        if os.path.exists(p):
            os.remove(p)
    t.create_abort(str(path))
    cut, expected = rnd.choice(captures[:-1])
    segs = t.segments(str(path))
    off = cut
    while off < written:                                   # zero [cut, written)
        n = min(size - off % size, written - off)
        t.zero_bytes(segs[off // size], off % size, n)
        off += n
    b = lib.open_broker(path, clock, start=False, max_reconsume_times=1)   # no revive pass
    try:
        assert b.get_max_phy_offset() == cut
        assert b.pop_service.state.to_json() == expected
    finally:
        b.shutdown()
