"""Named damage cases (issue 6; STORE_SPEC 8.3): what opening a damaged store does.

Each case damages a small, cleanly shut down store (150 messages of topic ``T``, bodies
``body-0000``.., keys ``k0000``.., alternating between queues 0 and 1, three commit-log
segments' worth of 8 KiB) in one named way and asserts one of the two acceptable outcomes:

* opening succeeds with the damage cut away, and what remains is consistent
  (``assert_recovered``): the max physical offset and the queue maxima are where the cut
  says; every kept message is readable at its offset and by queue, every dropped one is
  gone (offset, queue and index); the log, walked independently up to its end, holds
  exactly the kept records; every consume-queue entry (read from the files) points at its
  record; ``StoreChecker`` finds nothing; a new put into each queue gets the next queue
  offset and is found by pull and by key; and a clean reopen afterwards shows the same
  store (nothing cut comes back);
* or it raises a ``pymq.PymqError`` subclass naming the damaged file.

``assert_recovered`` collects every divergence before failing, so one failing case reports
all it found. The corruption model of RocketMQ's ``DefaultMessageStoreTest.testRecover``
(16 zero bytes at the last record's topic-length byte) is the first case.
"""

from __future__ import annotations

import dataclasses
import os
import random
import struct
import subprocess
import sys
import time

import pytest
import rocketmq_decoder as rd
from conftest import small_config, snapshot

import pymq

from rocketmq_decoder import index_hash
from pymq import testing
from pymq.checker import StoreChecker

TOPIC = "T"
N = 150
QUEUES = 2
SEG = 8 * 1024
CQ_ENTRIES = 16
SLOTS, ENTRIES = 16, 512
INT_MAX = (1 << 31) - 1


def cfg(**kw) -> pymq.StoreConfig:
    return small_config(commitlog_file_size=SEG, consume_queue_entries=CQ_ENTRIES,
                        index_hash_slots=SLOTS, index_max_entries=ENTRIES, **kw)


@dataclasses.dataclass(frozen=True)
class Written:
    offset: int
    size: int
    queue_id: int
    queue_offset: int
    key: str
    body: bytes
    uniq: str

    @property
    def end(self) -> int:
        return self.offset + self.size


def build(root: str, n: int = N, config: pymq.StoreConfig | None = None) -> list[Written]:
    """A cleanly shut down store with ``n`` messages; what was written, in order."""
    out = []
    with pymq.MessageStore(root, config or cfg()) as s:
        for i in range(n):
            body = b"body-%04d" % i
            r = s.put_message(pymq.Message(topic=TOPIC, body=body, keys=[f"k{i:04d}"], tags="TagA",
                                           queue_id=i % QUEUES))
            assert r.status is pymq.PutMessageStatus.PUT_OK
            out.append(Written(r.commitlog_offset, r.wrote_bytes, i % QUEUES, r.queue_offset,
                               f"k{i:04d}", body, r.uniq_key))
    assert not os.path.exists(os.path.join(root, "abort"))
    return out


# -- independent views of the files ----------------------------------------------------------


def log_walk(root: str, end: int) -> tuple[list[dict], int]:
    """Records of the commit log up to ``end``, decoded with ``rocketmq_decoder`` (blanks
    crossed), and the offset where the walk stopped."""
    recs, reach = [], 0
    for start, path in rd.segment_files(os.path.join(root, "commitlog")):
        if start >= end:
            break
        with open(path, "rb") as f:
            data = f.read()
        limit = min(len(data), end - start)
        buf, pos = data[:limit], 0
        while pos < limit:
            try:
                rec = rd.decode_record(buf, pos)
            except rd.DecodeError:
                return recs, start + pos
            if rec["blank"]:
                pos = len(data)
                break
            rec["offset"] = start + pos
            recs.append(rec)
            pos += rec["total_size"]
        reach = start + pos
    return recs, reach


def cq_units(root: str, topic: str, queue_id: int, count: int) -> list[tuple]:
    """Entries 0..count-1 of a consume queue read with struct (None where no file holds one)."""
    d = os.path.join(root, "consumequeue", topic, str(queue_id))
    fs = CQ_ENTRIES * 20
    out = []
    for i in range(count):
        start = i * 20 // fs * fs
        path = os.path.join(d, f"{start:020d}")
        if not os.path.exists(path):
            out.append(None)
            continue
        with open(path, "rb") as f:
            f.seek(i * 20 - start)
            out.append(struct.unpack(">qiq", f.read(20)))
    return out


def wait_dispatched(store, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while store.dispatch_behind_bytes():
        assert time.monotonic() < deadline, "the dispatcher did not catch up"
        time.sleep(0.002)


# -- the consistency oracle -------------------------------------------------------------------


class Findings:
    """Collects divergences so that a failing case reports everything it found."""

    def __init__(self, ctx: str) -> None:
        self.ctx = ctx
        self.items: list[str] = []

    def expect(self, cond: bool, what: str) -> bool:
        if not cond:
            self.items.append(what)
        return cond

    def assert_none(self) -> None:
        assert not self.items, f"{self.ctx}:\n  - " + "\n  - ".join(self.items)


def _check_view(f: Findings, store, root: str, kept: list[Written], dropped: list[Written], end: int,
                stage: str) -> None:
    """The store's view and the files agree with ``kept`` (and nothing of ``dropped``)."""
    f.expect(store.get_max_phy_offset() == end,
             f"{stage}: max physical offset {store.get_max_phy_offset()}, expected {end}")
    for w in kept:
        m = store.look_message_by_offset(w.offset)
        if not f.expect(m is not None and m.body == w.body, f"{stage}: kept message {w.key} at {w.offset} unreadable"):
            break
    for w in dropped:
        if w.offset >= end:
            f.expect(store.look_message_by_offset(w.offset) is None,
                     f"{stage}: dropped message {w.key} still readable at {w.offset}")
    recs, reach = log_walk(root, end)
    f.expect(reach == end, f"{stage}: the log's whole records end at {reach}, the store says {end}")
    f.expect([r["offset"] for r in recs] == [w.offset for w in kept],
             f"{stage}: the log up to {end} holds {len(recs)} records, expected the {len(kept)} kept")
    for q in range(QUEUES):
        mine = [w for w in kept if w.queue_id == q]
        f.expect(store.get_max_offset_in_queue(TOPIC, q) == len(mine),
                 f"{stage}: queue {q} max offset {store.get_max_offset_in_queue(TOPIC, q)}, expected {len(mine)}")
        f.expect([w.queue_offset for w in mine] == list(range(len(mine))),
                 f"{stage}: queue {q}: the messages' queue offsets are not 0..{len(mine) - 1}")
        units = cq_units(root, TOPIC, q, len(mine))
        bad = [i for i, (u, w) in enumerate(zip(units, mine)) if u is None or u[:2] != (w.offset, w.size)]
        f.expect(not bad, f"{stage}: queue {q} entries {bad[:5]} do not point at their records")
        pulled, off = [], 0
        while off < len(mine):
            g = store.get_message("g", TOPIC, q, off, 32)
            if not f.expect(g.messages, f"{stage}: pull of queue {q} at {off}: {g.status.name}"):
                break
            pulled += [(m.queue_offset, m.commitlog_offset) for m in g.messages]
            off = g.next_begin_offset
        want = [(w.queue_offset, w.offset) for w in mine]
        if pulled != want:
            diff = next((i for i, (a, b) in enumerate(zip(pulled, want)) if a != b), min(len(pulled), len(want)))
            f.expect(False, f"{stage}: pulling queue {q} gives {len(pulled)} messages, expected {len(want)}; "
                            f"they differ from position {diff}")
    lost = [w.key for w in kept if [m.commitlog_offset for m in store.query_message(TOPIC, w.key)] != [w.offset]]
    f.expect(not lost, f"{stage}: the index does not find kept keys {lost[:5]}")
    found = [w.key for w in dropped if store.query_message(TOPIC, w.key)]
    f.expect(not found, f"{stage}: the index still finds dropped keys {found[:5]}")


def assert_recovered(root: str, kept: list[Written], dropped: list[Written], *, ctx: str,
                     config: pymq.StoreConfig | None = None, end: int | None = None) -> list[Written]:
    """Open the damaged store and check that the damage was cut away and the rest is whole
    (see the module docstring). Returns what the store holds at the end (kept + new)."""
    config = config or cfg()
    f = Findings(ctx)
    if end is None:
        end = dropped[0].offset if dropped else kept[-1].end
    store = pymq.MessageStore(root, config)
    try:
        _check_view(f, store, root, kept, dropped, end, "after recovery")
        report = StoreChecker(root, config).run()
        f.expect(report.ok, f"after recovery: StoreChecker reports {[(p.where, p.detail) for p in report.problems][:4]}")
        # writing continues where the queues end
        store.start()
        new = []
        for q in range(QUEUES):
            count = sum(1 for w in kept if w.queue_id == q)
            key = f"new{q}"
            r = store.put_message(pymq.Message(topic=TOPIC, body=key.encode(), keys=[key], queue_id=q))
            f.expect(r.status is pymq.PutMessageStatus.PUT_OK, f"new put into queue {q}: {r.status.name}")
            f.expect(r.queue_offset == count, f"new put into queue {q} got queue offset {r.queue_offset}, expected {count}")
            f.expect(r.commitlog_offset >= end, f"new put at {r.commitlog_offset}, before the log end {end}")
            new.append(Written(r.commitlog_offset, r.wrote_bytes, q, r.queue_offset, key, key.encode(), r.uniq_key))
        wait_dispatched(store)
        for w in new:
            g = store.get_message("g", TOPIC, w.queue_id, w.queue_offset, 1)
            f.expect([m.body for m in g.messages] == [w.body], f"new message {w.key} not pulled: {g.status.name}")
            f.expect([m.commitlog_offset for m in store.query_message(TOPIC, w.key)] == [w.offset],
                     f"new message {w.key} not found by key")
    finally:
        store.shutdown()
    f.expect(not os.path.exists(os.path.join(root, "abort")), "the abort marker survived a clean shutdown")
    # a clean reopen shows the same store: nothing that was cut comes back
    allw = sorted(kept + new, key=lambda w: w.offset)
    store = pymq.MessageStore(root, config)
    try:
        _check_view(f, store, root, allw, dropped, new[-1].end, "after a clean reopen")
    finally:
        store.shutdown()
    report = StoreChecker(root, config).run()
    f.expect(report.ok, f"after a clean reopen: StoreChecker reports {[(p.where, p.detail) for p in report.problems][:4]}")
    f.assert_none()
    return allw


def assert_clear_error(root: str, expected_file: str, config: pymq.StoreConfig | None = None) -> pymq.PymqError:
    with pytest.raises(pymq.PymqError) as info:
        pymq.MessageStore(root, config or cfg())
    assert os.path.basename(expected_file) in str(info.value), str(info.value)
    return info.value


# -- the cases --------------------------------------------------------------------------------


@pytest.mark.parametrize("abort", [False, True], ids=["clean-shutdown", "abort-marker"])
def test_last_record_torn(tmp_path, abort):
    """RocketMQ's testRecover: 16 zero bytes at the last record's topic-length byte make
    its size disagree with its fields; recovery stops there, and the max physical offset
    and the queue's max roll back to the previous message; further writes work."""
    root = str(tmp_path / "s")
    written = build(root)
    path, pos, size = testing.last_record(root)
    assert (pos + int(os.path.basename(path)), size) == (written[-1].offset, written[-1].size)
    testing.zero_bytes(path, testing.topic_length_position(path, pos), 16)
    if abort:
        testing.create_abort(root)
    assert_recovered(root, written[:-1], written[-1:], ctx=f"torn last record, abort={abort}")


def test_queue_entries_cut_by_recovery_stay_cut(tmp_path):
    """The torn last record (queue 1) loses its queue entry at recovery. Only queue 0 is
    written afterwards; after a clean restart queue 1 must still end where recovery cut
    it, and its next put must get that offset (the cut entry must not come back)."""
    root = str(tmp_path / "s")
    written = build(root)
    last = written[-1]
    assert last.queue_id == 1
    path, pos, _ = testing.last_record(root)
    testing.zero_bytes(path, testing.topic_length_position(path, pos), 16)
    with pymq.MessageStore(root, cfg()) as s:
        assert s.get_max_offset_in_queue(TOPIC, 1) == last.queue_offset
        r = s.put_message(pymq.Message(topic=TOPIC, body=b"q0", queue_id=0))
        assert r.status is pymq.PutMessageStatus.PUT_OK
        wait_dispatched(s)
    with pymq.MessageStore(root, cfg()) as s:
        f = Findings("queue entries cut by recovery")
        f.expect(s.get_max_offset_in_queue(TOPIC, 1) == last.queue_offset,
                 f"queue 1 max offset is {s.get_max_offset_in_queue(TOPIC, 1)} after a clean restart, "
                 f"expected {last.queue_offset} (the entry recovery cut came back)")
        g = s.get_message("g", TOPIC, 1, last.queue_offset, 1)
        f.expect(not g.messages or g.messages[0].queue_id == 1,
                 f"queue 1 offset {last.queue_offset} returns {[(m.topic, m.queue_id) for m in g.messages]}")
        r = s.put_message(pymq.Message(topic=TOPIC, body=b"q1", queue_id=1))
        f.expect(r.queue_offset == last.queue_offset,
                 f"the next put into queue 1 got offset {r.queue_offset}, expected {last.queue_offset}")
        wait_dispatched(s)
    report = StoreChecker(root, cfg()).run()
    f.expect(report.ok, f"StoreChecker: {[(p.where, p.detail) for p in report.problems][:4]}")
    f.assert_none()


# cut points, as bytes cut off the end of the last record: into its properties, into its
# body, into its fixed header, all of it (the log then simply ends one record earlier),
# and into the record before it
@pytest.mark.parametrize("cut", [1, 30, 70, 150, "record", "record+40"])
def test_truncated_last_segment(tmp_path, cut):
    """The last segment file is shorter than a segment (a copy or a disk that lost its
    tail). Every record not wholly inside the remaining bytes is dropped."""
    root = str(tmp_path / "s")
    written = build(root)
    path, pos, size = testing.last_record(root)
    if cut == "record":
        new_len = pos
    elif cut == "record+40":
        new_len = pos - 40
    else:
        new_len = pos + size - cut
    testing.truncate_to(path, new_len)
    seg_start = int(os.path.basename(path))
    kept = [w for w in written if w.end <= seg_start + new_len]
    dropped = written[len(kept):]
    assert dropped
    assert_recovered(root, kept, dropped, ctx=f"last segment cut to {new_len} bytes")


@pytest.mark.parametrize("abort", [False, True], ids=["clean-shutdown", "abort-marker"])
def test_truncated_last_segment_to_nothing(tmp_path, abort):
    """The last segment is an empty file: its records are gone, the log ends at the
    segment's start (the previous segment is closed by its blank)."""
    root = str(tmp_path / "s")
    written = build(root)
    path = testing.segments(root)[-1]
    seg_start = int(os.path.basename(path))
    testing.truncate_to(path, 0)
    if abort:
        testing.create_abort(root)
    kept = [w for w in written if w.end <= seg_start]
    assert_recovered(root, kept, written[len(kept):], ctx=f"empty last segment, abort={abort}", end=seg_start)


@pytest.mark.parametrize("kind", ["random", "fake-header"])
@pytest.mark.parametrize("abort", [False, True], ids=["clean-shutdown", "abort-marker"])
def test_garbage_after_last_record(tmp_path, kind, abort):
    """Bytes after the last record inside the last segment (a torn write of a record that
    never completed, or junk): nothing is lost, the garbage is not taken for records."""
    root = str(tmp_path / "s")
    written = build(root, n=140)                # room left in the last segment
    path, pos, size = testing.last_record(root)
    at = pos + size
    if kind == "random":
        testing.write_garbage(path, at, 300, random.Random(7))
    else:
        # a header that claims a whole record (right magic) running past the segment
        with open(path, "r+b") as f:
            f.seek(at)
            f.write(struct.pack(">iI", SEG, rd.MESSAGE_MAGIC_CODE) + bytes(range(200)))
    if abort:
        testing.create_abort(root)
    assert_recovered(root, written, [], ctx=f"{kind} garbage after the last record, abort={abort}")


def test_garbage_appended_to_last_segment_file(tmp_path):
    """A last segment file longer than a segment: a clear error naming it."""
    root = str(tmp_path / "s")
    build(root)
    path = testing.segments(root)[-1]
    with open(path, "ab") as f:
        f.write(b"junk" * 100)
    assert isinstance(assert_clear_error(root, path), pymq.CorruptStoreError)


def test_truncated_middle_segment_is_a_clear_error(tmp_path):
    """A segment that is not the last one is short: recovery cannot cut that away
    (later segments hold acknowledged records), so opening refuses, naming the file."""
    root = str(tmp_path / "s")
    build(root)
    path = testing.segments(root)[0]
    testing.truncate_tail(path, 100)
    assert isinstance(assert_clear_error(root, path), pymq.SegmentSizeError)


def test_missing_middle_segment_is_a_clear_error(tmp_path):
    root = str(tmp_path / "s")
    build(root)
    segs = testing.segments(root)
    os.remove(segs[1])
    assert_clear_error(root, segs[-1])


# -- consume queues ---------------------------------------------------------------------------

# A damaged consume-queue entry (zeroed, or pointing at another queue's record, into the
# middle of a record, past the log end). The queue is derived data; the chosen behaviour:
#
# * ``pymq check`` reports the entry, without changing anything;
# * a reopen after a crash (abort marker) replays the log and rebuilds the entry, so every
#   message is reachable at its queue offset again (issue 6's requirement);
# * a clean reopen trusts the queues (RocketMQ: no replay below the queues' end): the
#   damage stays and is still reported, but reading and writing work, pulls deliver every
#   healthy entry around the damaged one and never another queue's message, and a queue
#   whose damaged entry is in its last files (rescanned by recovery) is not cut there with
#   its later entries stranded and their queue offsets handed out again.

DAMAGED_ENTRY = 21          # queue 0, second of five files (entries 16..31), not rescanned
HOWS = ["zeroed", "other-queue", "mid-record", "past-log-end"]


def _damage_entry(root: str, written: list[Written], how: str, entry: int = DAMAGED_ENTRY) -> str:
    path = testing.segments(root, f"consumequeue/{TOPIC}/0")[entry * 20 // (CQ_ENTRIES * 20)]
    at = entry * 20 % (CQ_ENTRIES * 20)
    if how == "zeroed":
        testing.zero_bytes(path, at, 20)
    else:
        phy = {"other-queue": written[1].offset,                # a whole record of queue 1
               "mid-record": written[2 * entry].offset + 7,      # inside the record it should name
               "past-log-end": 10 ** 9}[how]
        with open(path, "r+b") as f:
            f.seek(at)
            f.write(struct.pack(">q", phy))
    return path


@pytest.mark.parametrize("how", HOWS)
def test_damaged_consume_queue_entry_is_reported(tmp_path, how):
    root = str(tmp_path / "s")
    written = build(root)
    _damage_entry(root, written, how)
    before = snapshot(root)
    report = StoreChecker(root, cfg()).run()
    assert not report.ok
    assert any(p.kind == "consumequeue" and p.where == f"{TOPIC}/0" and str(DAMAGED_ENTRY) in p.detail
               for p in report.problems), report.problems
    assert snapshot(root) == before, "the check changed files"


@pytest.mark.parametrize("how", HOWS)
def test_damaged_consume_queue_entry_is_rebuilt_after_a_crash(tmp_path, how):
    root = str(tmp_path / "s")
    written = build(root)
    _damage_entry(root, written, how)
    testing.create_abort(root)
    assert_recovered(root, written, [], ctx=f"consume-queue entry {DAMAGED_ENTRY} {how}, abort marker")


@pytest.mark.parametrize("how", HOWS)
def test_damaged_consume_queue_entry_after_a_clean_shutdown(tmp_path, how):
    root = str(tmp_path / "s")
    written = build(root)
    _damage_entry(root, written, how)
    mine = [w for w in written if w.queue_id == 0]
    f = Findings(f"consume-queue entry {DAMAGED_ENTRY} {how}, clean reopen")
    with pymq.MessageStore(root, cfg()) as s:
        f.expect(s.get_max_offset_in_queue(TOPIC, 0) == len(mine), "queue 0 lost entries")
        pulled, off = [], 0
        while off < len(mine):
            g = s.get_message("g", TOPIC, 0, off, 32)
            if not g.messages and g.next_begin_offset <= off:
                break
            pulled += g.messages
            off = g.next_begin_offset
        got = {m.queue_offset for m in pulled if (m.topic, m.queue_id) == (TOPIC, 0)}
        skipped = sorted({w.queue_offset for w in mine} - got - {DAMAGED_ENTRY})
        f.expect(not skipped, f"pulling queue 0 skipped healthy entries {skipped} after the damaged one")
        strangers = [(m.topic, m.queue_id, m.queue_offset) for m in pulled if (m.topic, m.queue_id) != (TOPIC, 0)]
        f.expect(not strangers, f"pulling queue 0 returned other queues' messages {strangers}")
        r = s.put_message(pymq.Message(topic=TOPIC, body=b"after", queue_id=0))
        f.expect(r.status is pymq.PutMessageStatus.PUT_OK and r.queue_offset == len(mine),
                 f"the next put into queue 0: {r.status.name} at queue offset {r.queue_offset}")
        wait_dispatched(s)
    report = StoreChecker(root, cfg()).run()
    f.expect(any(p.where == f"{TOPIC}/0" for p in report.problems), "the damage is no longer reported")
    f.assert_none()


def test_zeroed_entry_in_a_rescanned_queue_file_after_a_clean_shutdown(tmp_path):
    """The zeroed entry lies in the queue's last three files, which recovery rescans: the
    queue must not end there, stranding its later entries (their messages unreachable by
    queue) and giving their queue offsets to new messages (two records with one queue
    offset in the log)."""
    root = str(tmp_path / "s")
    written = build(root)
    entry = 50                                   # queue 0 has 75 entries in 5 files
    _damage_entry(root, written, "zeroed", entry)
    mine = [w for w in written if w.queue_id == 0]
    f = Findings("zeroed entry 50 of queue 0, clean reopen")
    with pymq.MessageStore(root, cfg()) as s:
        f.expect(s.get_max_offset_in_queue(TOPIC, 0) == len(mine),
                 f"queue 0 ends at {s.get_max_offset_in_queue(TOPIC, 0)}, the log holds {len(mine)} of its messages")
        r = s.put_message(pymq.Message(topic=TOPIC, body=b"after", queue_id=0))
        f.expect(r.queue_offset == len(mine),
                 f"the next put into queue 0 got queue offset {r.queue_offset}, already used by {mine[r.queue_offset].key}"
                 if r.queue_offset < len(mine) else f"the next put got {r.queue_offset}")
        wait_dispatched(s)
    f.assert_none()


def test_consume_queue_file_of_wrong_size_is_rebuilt(tmp_path):
    root = str(tmp_path / "s")
    written = build(root)
    path = testing.segments(root, f"consumequeue/{TOPIC}/1")[1]
    testing.truncate_tail(path, 7)
    assert_recovered(root, written, [], ctx="consume-queue file 7 bytes short")


@pytest.mark.parametrize("change", ["short", "long", "empty"])
def test_checker_leaves_a_wrong_size_queue_file_alone(tmp_path, change):
    """``pymq check`` (a read-only open) must report a consume-queue file of the wrong
    length, not delete it: the writer may be running, and the check changes nothing."""
    root = str(tmp_path / "s")
    build(root)
    path = testing.segments(root, f"consumequeue/{TOPIC}/1")[1]
    if change == "short":
        testing.truncate_tail(path, 7)
    elif change == "long":
        with open(path, "ab") as fh:
            fh.write(bytes(13))
    else:
        testing.truncate_to(path, 0)
    before = snapshot(root)
    report = StoreChecker(root, cfg()).run()
    after = snapshot(root)
    assert after == before, (f"StoreChecker changed the store: removed {sorted(set(before) - set(after))}, "
                             f"changed {sorted(p for p in before if p in after and before[p] != after[p])}")
    assert any(p.kind == "consumequeue" for p in report.problems), report.problems


def test_consume_queue_deleted_is_rebuilt(tmp_path):
    root = str(tmp_path / "s")
    written = build(root)
    for p in testing.segments(root, f"consumequeue/{TOPIC}/1"):
        os.remove(p)
    testing.create_abort(root)
    assert_recovered(root, written, [], ctx="consume queue 1 deleted, abort marker")


# Record headers whose body CRC still matches but whose queue fields are impossible (a bit
# flip in the header): a crash recovery replays and dispatches them. Opening must either cut
# them away like any damaged record or refuse with a PymqError naming the segment; it must
# not raise ValueError/OverflowError or create queues with negative ids or offsets.


@pytest.mark.parametrize("queue_id,queue_offset", [(-5, None), (7, 1 << 62), (7, -3), (0, -1)],
                         ids=["negative-queue-id", "huge-offset-new-queue", "negative-offset-new-queue",
                              "negative-offset"])
def test_record_header_with_impossible_queue_fields(tmp_path, queue_id, queue_offset):
    root = str(tmp_path / "s")
    written = build(root)
    w = written[BAD]
    path = os.path.join(root, "commitlog", f"{w.offset // SEG * SEG:020d}")
    with open(path, "r+b") as fh:
        fh.seek(w.offset % SEG + 12)
        fh.write(struct.pack(">i", queue_id))
        if queue_offset is not None:
            fh.seek(w.offset % SEG + 20)
            fh.write(struct.pack(">q", queue_offset))
    testing.create_abort(root)
    try:
        store = pymq.MessageStore(root, cfg())
    except pymq.PymqError as e:
        assert os.path.basename(path) in str(e), str(e)
        return
    except Exception as e:  # noqa: BLE001 - the point: anything else is a bug
        pytest.fail(f"opening raised {type(e).__name__}: {e} (not a PymqError)")
    try:
        topics = store.get_topics()
        assert all(q >= 0 for qs in topics.values() for q in qs), topics
        for topic, qids in topics.items():
            for q in qids:
                assert store.get_min_offset_in_queue(topic, q) >= 0, (topic, q)
                assert store.get_max_offset_in_queue(topic, q) < 1 << 40, (topic, q)
        store.start()
        r = store.put_message(pymq.Message(topic=TOPIC, body=b"after", queue_id=0))
        assert r.status is pymq.PutMessageStatus.PUT_OK
    finally:
        store.shutdown()
    names = [n for _dp, _dn, fn in os.walk(os.path.join(root, "consumequeue")) for n in fn]
    assert all(len(n) == 20 and n.isdigit() for n in names), sorted(set(names))[:5]


# -- index ------------------------------------------------------------------------------------

INDEX_BASE = 40 + SLOTS * 4


def _index_path(root: str) -> str:
    d = os.path.join(root, "index")
    names = sorted(n for n in os.listdir(d) if n.isdigit())
    assert len(names) == 1, names
    return os.path.join(d, names[0])


def _entry(data: bytes, n: int) -> tuple:
    return struct.unpack_from(">iqii", data, INDEX_BASE + n * 20)


def _put_i32(path: str, at: int, value: int) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(struct.pack(">i", value))


@pytest.mark.parametrize("damage", ["self-link", "cycle", "link-out-of-range", "negative-link",
                                    "slot-out-of-range", "huge-index-count", "negative-index-count"])
def test_damaged_index_chain(tmp_path, damage):
    """Queries terminate, keys on undamaged chains are found exactly, keys on the damaged
    chain find only their own messages (the query checks records), StoreChecker reports
    the damage (without changing files), and new messages are indexed and found."""
    root = str(tmp_path / "s")
    written = build(root)
    path = _index_path(root)
    with open(path, "rb") as fh:
        data = fh.read()
    count = struct.unpack_from(">i", data, 36)[0]
    assert count == 2 * N + 1                    # key + unique key per message, entry 0 unused
    last = count - 1
    h, _phy, _diff, prev = _entry(data, last)
    damaged_slot = h % SLOTS          # keys hashing there may be cut off; "all": any key may
    if damage == "self-link":
        _put_i32(path, INDEX_BASE + last * 20 + 16, last)
    elif damage == "cycle":                      # an older entry of the chain links back to the newest
        _put_i32(path, INDEX_BASE + prev * 20 + 16, last)
    elif damage == "link-out-of-range":
        _put_i32(path, INDEX_BASE + last * 20 + 16, 10 ** 8)
    elif damage == "negative-link":
        _put_i32(path, INDEX_BASE + last * 20 + 16, -7)
    elif damage == "slot-out-of-range":
        _put_i32(path, 40 + damaged_slot * 4, 10 ** 8)
    elif damage == "huge-index-count":
        _put_i32(path, 36, INT_MAX)
        damaged_slot = None
    elif damage == "negative-index-count":
        _put_i32(path, 36, -5)            # read as 1: the file looks empty, new entries overwrite
        damaged_slot = "all"
    before = snapshot(root)
    report = StoreChecker(root, cfg()).run()
    assert any(p.kind == "index" for p in report.problems), f"StoreChecker missed {damage}: {report.problems}"
    assert snapshot(root) == before, "the check changed files"

    def check_queries(store, messages, stage):
        t0 = time.monotonic()
        for w in messages:
            for key in (w.key, w.uniq):
                got = [m.commitlog_offset for m in store.query_message(TOPIC, key)]
                if damaged_slot == "all" or (damaged_slot is not None
                                             and index_hash(f"{TOPIC}#{key}") % SLOTS == damaged_slot):
                    assert set(got) <= {w.offset}, f"{stage}: {damage}: {key} -> {got}"
                else:
                    assert got == [w.offset], f"{stage}: {damage}: {key} -> {got}, expected [{w.offset}]"
        assert time.monotonic() - t0 < 10, "queries on a damaged index took too long"

    with pymq.MessageStore(root, cfg()) as s:
        check_queries(s, written, "after opening")
        new = []
        for i in range(20):
            key = f"fresh{i}"
            r = s.put_message(pymq.Message(topic=TOPIC, body=key.encode(), keys=[key], queue_id=i % QUEUES))
            assert r.status is pymq.PutMessageStatus.PUT_OK
            new.append(Written(r.commitlog_offset, r.wrote_bytes, i % QUEUES, r.queue_offset, key, key.encode(),
                               r.uniq_key))
        wait_dispatched(s)
        # new entries chained onto a damaged slot may be cut off by the damage below them,
        # never the newest entry of each chain
        for w in new:
            got = [m.commitlog_offset for m in s.query_message(TOPIC, w.key)]
            assert got == [w.offset], f"{damage}: new key {w.key} -> {got}"
        check_queries(s, written, "after new puts")


# -- checkpoint and abort marker --------------------------------------------------------------


@pytest.mark.parametrize("abort", [False, True], ids=["clean-shutdown", "abort-marker"])
def test_missing_checkpoint(tmp_path, abort):
    """Without a checkpoint a crash recovery has no safe point: it replays from the first
    segment. Nothing is lost, nothing is dispatched twice; the checkpoint is recreated."""
    root = str(tmp_path / "s")
    written = build(root)
    testing.remove_checkpoint(root)
    if abort:
        testing.create_abort(root)
    assert_recovered(root, written, [], ctx=f"checkpoint removed, abort={abort}")
    assert os.path.getsize(os.path.join(root, "checkpoint")) == 4096


@pytest.mark.parametrize("size", [0, 17, 8192])
def test_checkpoint_of_wrong_size(tmp_path, size):
    root = str(tmp_path / "s")
    written = build(root)
    testing.truncate_to(os.path.join(root, "checkpoint"), size)
    testing.create_abort(root)
    assert_recovered(root, written, [], ctx=f"checkpoint of {size} bytes, abort marker")
    assert os.path.getsize(os.path.join(root, "checkpoint")) == 4096


def test_stray_abort_marker(tmp_path):
    """An abort marker on a cleanly shut down store: crash recovery runs (a full CRC
    checked replay here, all records being younger than the checkpoint's 3 s margin),
    nothing is lost, nothing is dispatched twice."""
    root = str(tmp_path / "s")
    written = build(root)
    testing.create_abort(root)
    assert_recovered(root, written, [], ctx="stray abort marker")


def test_checkpoint_in_the_future(tmp_path):
    """Checkpoint timestamps beyond every record (a clock that jumped back, or damage):
    recovery starts at the last segment's first record, which is still safe here because
    the queues were flushed; nothing is lost."""
    root = str(tmp_path / "s")
    written = build(root)
    with open(os.path.join(root, "checkpoint"), "r+b") as f:
        f.write(struct.pack(">qqq", 1 << 60, 1 << 60, 1 << 60))
    testing.create_abort(root)
    assert_recovered(root, written, [], ctx="checkpoint in the future, abort marker")


# -- CRC --------------------------------------------------------------------------------------

BAD = 40                    # a record in the middle of the first segment


def _flip_body_byte(root: str, written: list[Written], i: int) -> str:
    w = written[i]
    seg_start = w.offset // SEG * SEG
    path = os.path.join(root, "commitlog", f"{seg_start:020d}")
    body_at = testing.topic_length_position(path, w.offset - seg_start) - len(w.body)
    testing.flip_bytes(path, body_at + 2, 1, random.Random(1))
    return path


def test_crc_mismatch_mid_log_cuts_the_log_after_a_crash(tmp_path):
    """RocketMQ's semantics: crash recovery (abort marker) with check_crc_on_recover
    stops at the first record whose body CRC does not match and cuts the log there. This
    DROPS every later record, whole and acknowledged as they were (here 110 of 150, two
    and a half segments); the queues and the index are cut to match."""
    root = str(tmp_path / "s")
    written = build(root)
    _flip_body_byte(root, written, BAD)
    testing.create_abort(root)
    assert cfg().check_crc_on_recover
    assert_recovered(root, written[:BAD], written[BAD:], ctx="CRC mismatch at record 40 + abort")


def test_records_cut_by_recovery_stay_cut(tmp_path):
    """After the CRC cut above, new records of the same size are written over the cut
    point (into queue 0 only) and the store is shut down cleanly. The records that
    recovery dropped must not come back at the next (normal) recovery: the bytes after
    the cut are not part of the log any more."""
    root = str(tmp_path / "s")
    written = build(root)
    _flip_body_byte(root, written, BAD)
    testing.create_abort(root)
    new = []
    with pymq.MessageStore(root, cfg()) as s:
        assert s.get_max_phy_offset() == written[BAD].offset
        for i in range(5):                      # same size as the originals: record boundaries line up
            body = b"BODY-%04d" % i
            r = s.put_message(pymq.Message(topic=TOPIC, body=body, keys=[f"n{i:04d}"], tags="TagA", queue_id=0))
            assert r.wrote_bytes == written[BAD].size
            new.append(Written(r.commitlog_offset, r.wrote_bytes, 0, r.queue_offset, f"n{i:04d}", body, r.uniq_key))
        wait_dispatched(s)
    end = new[-1].end
    kept = sorted(written[:BAD] + new, key=lambda w: w.offset)
    f = Findings("records cut by a CRC recovery, then overwritten by same-size records")
    with pymq.MessageStore(root, cfg()) as s:
        _check_view(f, s, root, kept, written[BAD:], end, "after a clean restart")
    f.assert_none()


def test_crc_mismatch_is_reported_by_the_checker_without_changes(tmp_path):
    root = str(tmp_path / "s")
    written = build(root)
    path = _flip_body_byte(root, written, BAD)
    testing.create_abort(root)
    before = snapshot(root)
    mtimes = {p: os.stat(os.path.join(root, p)).st_mtime_ns for p in before}
    report = StoreChecker(root, cfg()).run()
    assert snapshot(root) == before, "StoreChecker changed files"
    assert {p: os.stat(os.path.join(root, p)).st_mtime_ns for p in before} == mtimes
    crc = [p for p in report.problems if p.kind == "commitlog"]
    assert crc and crc[0].where == os.path.basename(path), report.problems
    assert str(written[BAD].offset) in crc[0].detail or "CRC" in crc[0].detail, crc
    assert any("abort" in n for n in report.notes)
    # the command line says the same and exits 1
    proc = subprocess.run([sys.executable, "-m", "pymq", "--store", root, "check"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert os.path.basename(path) in proc.stdout + proc.stderr
    assert snapshot(root) == before, "pymq check changed files"


def test_crc_mismatch_in_older_segment_is_not_seen_by_normal_recovery(tmp_path):
    """After a clean shutdown only the last three segments are rescanned (recoverNormally);
    damage further back is left to ``pymq check``. Documented, RocketMQ's behaviour."""
    root = str(tmp_path / "s")
    written = build(root, n=300)                 # 6 segments
    assert len(testing.segments(root)) >= 5
    _flip_body_byte(root, written, 3)
    with pymq.MessageStore(root, cfg()) as s:
        assert s.get_max_phy_offset() == written[-1].end
    assert not StoreChecker(root, cfg()).run().ok
