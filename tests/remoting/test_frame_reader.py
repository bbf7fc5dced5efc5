"""The remoting frame reader against an oracle: any stream of frames, cut into reads of any
size, gives the same commands in the same order as decoding them one by one; what the
reader buffers stays within one read's buffer plus the admitted frame; admission waits,
refusals and budgets return every byte they took.

The connection side is a small harness that records what the reader asks of it and admits,
refuses or makes frames wait as a budget says (the real connection is exercised against a
live server in tests/server/test_remoting_attacks.py)."""

from __future__ import annotations

import json
import struct

from hypothesis import given, settings, strategies as st

from pymq.server.remoting.admission import ByteBudget
from pymq.server.remoting.codec import RemotingCommand, decode_frame, encode
from pymq.server.remoting.frame_reader import ADMITTED, CHUNK, REFUSED, WAITING, FrameReader


class Harness:
    """What :class:`FrameReader` calls on its connection."""

    def __init__(self, budget: int, refuse_code: int | None = None) -> None:
        self.pool = ByteBudget("test", budget)
        self.closed = False
        self.why = None
        self.got: list[RemotingCommand] = []
        self.refused: list[int] = []
        self.held = 0
        self.budget_wanted = 0
        self.waiting = False
        self.refuse_code = refuse_code
        self.reader = FrameReader(self, 64 << 10, 128)

    def dispatch(self, cmd, size):
        self.got.append(cmd)

    def refuse(self, why):
        self.closed, self.why = True, why

    def frame_begun(self, new):
        pass

    def frame_done(self):
        pass

    def admit_frame(self, cmd, size):
        if cmd.code == self.refuse_code:
            self.refused.append(cmd.opaque)
            return REFUSED
        self.budget_wanted = size
        if not self.pool.waiters and self.budget_fits(self.pool):
            self.pool.take(size)
            self.budget_wanted = 0
            return ADMITTED
        self.pool.wait(self)
        self.waiting = True
        return WAITING

    def budget_fits(self, pool):
        return pool.used + self.budget_wanted <= pool.limit

    def budget_granted(self):
        size, self.budget_wanted = self.budget_wanted, 0
        self.pool.take(size)
        self.waiting = False
        self.reader.granted(size)

    def release_frame(self, size):
        self.pool.give(size)

    def feed(self, data: bytes, cuts: list[int], on_wait) -> int:
        """Feed ``data`` in reads no longer than the reader's buffers and ``cuts``; calls
        ``on_wait()`` while a frame waits. The most bytes the reader buffered at once."""
        pos = i = 0
        most = 0
        while pos < len(data) and not self.closed:
            if self.waiting:
                on_wait()
                assert not self.waiting
            buf = self.reader.buffer()
            n = min(len(buf), cuts[i % len(cuts)], len(data) - pos)
            i += 1
            buf[:n] = data[pos:pos + n]
            pos += n
            self.reader.filled(n)
            most = max(most, len(self.reader.buf))
        return most


def _cmd(code: int, opaque: int, body_len: int, fields: int) -> RemotingCommand:
    return RemotingCommand(code, opaque, 0, None, {f"k{i}": f"v{opaque}-{i}" for i in range(fields)},
                           bytes([opaque % 251]) * body_len)


frames = st.lists(st.tuples(st.sampled_from([10, 11, 310]), st.integers(0, 300_000), st.integers(0, 20)),
                  min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(frames, st.lists(st.integers(1, 200_000), min_size=1, max_size=8))
def test_any_cut_gives_the_frames_in_order(spec, cuts):
    cmds = [_cmd(code, i, body, fields) for i, (code, body, fields) in enumerate(spec)]
    data = b"".join(encode(c) for c in cmds)
    h = Harness(budget=1 << 30)
    most = h.feed(data, cuts, on_wait=lambda: None)
    assert not h.closed, h.why
    assert [(c.code, c.opaque, c.ext_fields, c.body) for c in h.got] == \
        [(c.code, c.opaque, c.ext_fields, c.body) for c in cmds]
    biggest = max(len(encode(c)) for c in cmds)
    assert most <= max(CHUNK, biggest), (most, biggest)
    assert h.pool.used == 0 and not h.reader.in_frame


@settings(max_examples=100, deadline=None)
@given(frames, st.lists(st.integers(1, 200_000), min_size=1, max_size=8))
def test_refused_frames_are_dropped_and_the_rest_served(spec, cuts):
    """Frames of code 310 larger than a read's buffer are refused at their header: none of
    their bytes is kept, the frames around them come through intact."""
    cmds = [_cmd(code, i, body, fields) for i, (code, body, fields) in enumerate(spec)]
    data = b"".join(encode(c) for c in cmds)
    h = Harness(budget=1 << 30, refuse_code=310)
    h.feed(data, cuts, on_wait=lambda: None)
    assert not h.closed, h.why
    # a frame is refused only when it had to be admitted: it was still arriving after its
    # header; which ones that is depends on the cuts, so compare the two sets
    got = {c.opaque for c in h.got}
    assert got | set(h.refused) == set(range(len(cmds))) and not got & set(h.refused)
    assert all(cmds[o].code == 310 and len(encode(cmds[o])) > CHUNK for o in h.refused)
    for c in h.got:
        assert c.body == cmds[c.opaque].body and c.ext_fields == cmds[c.opaque].ext_fields


def test_a_frame_waits_for_its_budget_and_reads_on_once_granted():
    big = _cmd(310, 1, 3 << 20, 3)
    small = _cmd(10, 2, 10, 1)
    data = encode(big) + encode(small)
    h = Harness(budget=4 << 20)
    h.pool.take(2 << 20)            # someone else holds half the budget
    waits = []

    def on_wait():
        waits.append(h.reader.end - h.reader.start)
        assert len(h.reader.buf) <= CHUNK + 8      # nothing of the body kept beyond one buffer
        h.pool.give(2 << 20)       # the other frame is served: this one is admitted
    h.feed(data, [CHUNK], on_wait)
    assert len(waits) == 1 and [c.opaque for c in h.got] == [1, 2]
    assert h.pool.used == 0


def test_oversized_length_header_and_fields_close():
    for raw, why in ((struct.pack(">i", (16 << 20) + 1), "frame length"),
                     (struct.pack(">i", 2), "frame length"),
                     (struct.pack(">ii", 100, (65 << 10)), "header of"),
                     (encode(_cmd(10, 1, 0, 129)), "129 fields")):
        h = Harness(budget=1 << 30)
        h.feed(raw + b"\0" * 16, [7], on_wait=lambda: None)
        assert h.closed and why in h.why, (raw[:8], h.why)


def test_a_big_frame_then_idle_gives_back_its_buffer():
    h = Harness(budget=1 << 30)
    h.feed(encode(_cmd(310, 1, 2 << 20, 1)), [CHUNK], on_wait=lambda: None)
    assert len(h.got) == 1 and len(h.reader.buf) <= CHUNK
    assert json.loads(json.dumps(h.got[0].ext_fields)) == {"k0": "v1-0"}
    assert decode_frame(memoryview(encode(h.got[0]))[4:]).body == h.got[0].body


def test_release_gives_the_buffer_back_at_once():
    """A closed connection's reader drops its buffer itself: connection and reader refer to
    each other, and a quiet server may not run the cycle collector for a long time (a
    stalled 16 MiB frame per closed connection stayed resident before)."""
    h = Harness(budget=1 << 30)
    raw = encode(_cmd(310, 1, 2 << 20, 1))
    h.feed(raw[:1 << 20], [CHUNK], on_wait=lambda: None)      # admitted, half read
    assert len(h.reader.buf) >= 2 << 20 and h.reader.admitted
    assert h.reader.release() == len(raw) and len(h.reader.buf) == 0 and not h.reader.in_frame
