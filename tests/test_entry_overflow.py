"""Consume-queue entries and queue offsets at the edge of int64: a damaged entry whose
commit-log offset lies near 2**63 (its offset + size overflows) and queue offsets whose
byte position in the queue would overflow give a status, never a read outside the log,
on every read path over the queue (columns, pulls, batches)."""

from __future__ import annotations

import pathlib
import struct
import time

import pytest

import pymq
from conftest import small_config

INT64_MAX = (1 << 63) - 1


@pytest.fixture
def store(tmp_path):
    s = pymq.MessageStore(tmp_path / "s", small_config())
    s.start()
    for i in range(3):
        assert s.put_message(pymq.Message("T", b"x%d" % i)).is_ok()
    deadline = time.monotonic() + 10
    while s.dispatch_behind_bytes() and time.monotonic() < deadline:
        time.sleep(0.005)
    yield s
    s.shutdown()


def damage_entry(store, index, phy, size):
    """Overwrite entry ``index`` of (T, 0) in place (the file is shared, so the store sees it)."""
    files = sorted((pathlib.Path(store.store_path) / "consumequeue" / "T" / "0").iterdir())
    with open(files[0], "r+b") as f:
        f.seek(index * 20)
        f.write(struct.pack(">qi", phy, size))


@pytest.mark.parametrize("phy,size", [(INT64_MAX - 10, 100), (INT64_MAX, 1), (INT64_MAX - 99, 100)],
                         ids=["wraps", "max", "ends-at-max"])
def test_an_entry_near_int64_max_stops_the_read(store, phy, size):
    damage_entry(store, 1, phy, size)
    # the columns: the first record is read, the damaged entry stops the read there (it used
    # to pass the segment check by overflow when the first record's segment was cached)
    count, status, cols = store.read_columns("T", 0, 0, 3)
    assert (count, status) == (1, 2)            # READ_UNREADABLE
    assert bytes(cols["body"]["data"]) == b"x0"
    # a batch and a pull stop at it as damage; the queue is rebuilt from the log, and every
    # message is read in the end
    with store.read_batch("T", 0, 0, 3) as b:
        assert [bytes(v) for v in b.bodies] == [b"x0"]
    got, offset = [], 0
    for _ in range(5):
        r = store.get_message("g", "T", 0, offset, 3)
        got += [m.body for m in r.messages]
        offset = r.next_begin_offset
    assert got == [b"x0", b"x1", b"x2"]


@pytest.mark.parametrize("start", [(1 << 62) // 20 + 1, INT64_MAX // 20 + 1, INT64_MAX - 1])
def test_queue_offsets_whose_byte_position_overflows(store, start):
    count, status, _cols = store.read_columns("T", 0, start, INT64_MAX)
    assert (count, status) == (0, 1)            # READ_CQ_END
    r = store.get_message("g", "T", 0, start, 3)
    assert not r.messages and r.status is not pymq.GetMessageStatus.FOUND
