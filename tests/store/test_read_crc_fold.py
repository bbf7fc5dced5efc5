"""The CRC check on read through the reader's four-chunk fold (``src/pymq_crc_record.h``).

A pull checks every record's CRC before it returns it (``get_message`` and
``read_batch``). Records whose checked bytes are 17..272 long go through a fold of
their own on CPUs with VPCLMULQDQ; the oracle is zlib's CRC-32 for the fold itself, and
the reader with the fold switched off for what a pull returns, damaged records
included.
"""

from __future__ import annotations

import random
import time
import zlib

import pytest

import pymq
from pymq._core import reader

TOPIC = "Fold"


def small_config(**overrides) -> pymq.StoreConfig:
    return pymq.StoreConfig(commitlog_file_size=256 * 1024, consume_queue_entries=512,
                            flush_interval_commitlog=50, warm_mapped_file_enable=False, **overrides)


def fold_runs() -> bool:
    return reader._record_crc32(bytes(17)) != -1



def test_fold_page_is_the_records_crcs_and_stays_inside_its_data():
    """The benchmark's floor-check folds a page of records as a pull does: the xor of each
    record's CRC over its covered bytes (masked to 31 bits where the fold does not run),
    and it refuses records that would lie outside the data."""
    rng = random.Random(5)
    records = [rng.randbytes(200) for _ in range(32)]
    data = b"".join(records)
    expected = 0
    for r in records:
        expected ^= zlib.crc32(r[:180]) if fold_runs() else zlib.crc32(r[:180]) & 0x7FFFFFFF
    assert reader._fold_page(data, 0, 32, 200, 180) == expected
    assert reader._fold_page(data, 200 * 31, 1, 200, 180) == (
        zlib.crc32(records[31][:180]) & (0xFFFFFFFF if fold_runs() else 0x7FFFFFFF))
    for start, count, size, covered in [(0, 33, 200, 180), (1, 32, 200, 180), (-1, 1, 200, 180),
                                        (0, 1, 200, 201), (0, 1, 200, 0), (0, 1 << 62, 200, 180),
                                        (len(data) + 1, 0, 200, 180)]:
        with pytest.raises(ValueError):
            reader._fold_page(data, start, count, size, covered)

def test_the_fold_is_zlib_crc32_for_every_length_it_takes():
    rng = random.Random(27)
    runs = fold_runs()
    for n in range(0, 300):
        samples = [bytes(n), b"\xff" * n] + [rng.randbytes(n) for _ in range(12)]
        for data in samples:
            expected = zlib.crc32(data) if runs and 16 < n <= 272 else -1
            assert reader._record_crc32(data) == expected, (n, data.hex())
        # every alignment of the buffer (the fold loads unaligned, masked past the end)
        if runs and 16 < n <= 272:
            block = rng.randbytes(n + 64)
            for at in range(0, 64, 7):
                assert reader._record_crc32(memoryview(block)[at:at + n]) == zlib.crc32(block[at:at + n])


def wait_dispatched(store, timeout=10.0):
    deadline = time.monotonic() + timeout
    while store.dispatch_behind_bytes():
        assert time.monotonic() < deadline, "dispatch did not catch up"
        time.sleep(0.002)


def pull_all(store):
    """(queue offsets, bodies, damaged) of the whole queue, by read_batch and by get_message."""
    out = []
    for read in ("batch", "get"):
        offset, offsets, bodies, damaged = 0, [], [], 0
        while True:
            if read == "batch":
                with store.read_batch(TOPIC, 0, offset, 32) as b:
                    offsets += list(b.queue_offsets)
                    bodies += [bytes(v) for v in b.bodies]
                    damaged += b.damaged
                    status, offset = b.status, b.next_begin_offset
            else:
                r = store.get_message("g", TOPIC, 0, offset, 32)
                offsets += [m.queue_offset for m in r.messages]
                bodies += [m.body for m in r.messages]
                damaged += r.damaged
                status, offset = r.status, r.next_begin_offset
            if status not in (pymq.GetMessageStatus.FOUND, pymq.GetMessageStatus.NO_MATCHED_MESSAGE):
                break
        out.append((offsets, bodies, damaged))
    assert out[0] == out[1]
    return out[0]


@pytest.mark.parametrize("prop_crc", [True, False], ids=["record-crc", "body-crc"])
def test_pulls_with_the_fold_return_what_they_return_without_it(tmp_path, prop_crc):
    """Bodies of 0..299 bytes (every length modulo 16 of the checked bytes, on both sides
    of the fold's 272), then one byte changed in a dozen of them: the same messages come
    back, and the same ones are skipped as damaged, with the fold and without it."""
    root = tmp_path / "s"
    rng = random.Random(5)
    bodies = [rng.randbytes(n) for n in range(300)]
    config = small_config(enabled_append_prop_crc=prop_crc)
    with pymq.MessageStore(root, config) as store:
        results = [store.put_bodies(TOPIC, [body]) for body in bodies]
        assert all(r.is_ok() for r in results)
        wait_dispatched(store)
    damaged = sorted(set(rng.sample(range(1, 300), 12)) | {20, 260, 270, 271, 272, 273})
    before = reader._use_crc_fast(True)
    try:
        with pymq.MessageStore(root, config, read_only=True) as store:
            for fast in (True, False):
                reader._use_crc_fast(fast)
                offsets, got, skipped = pull_all(store)
                assert (offsets, got, skipped) == (list(range(300)), bodies, 0)
        seg = root / "commitlog" / ("0" * 20)
        with open(seg, "r+b") as f:                 # one body byte of each changes
            for i in damaged:
                r = results[i]
                f.seek(r.commitlog_offset)
                raw = f.read(r.wrote_bytes)
                at = raw.index(bodies[i]) + rng.randrange(len(bodies[i]))
                f.seek(r.commitlog_offset + at)
                f.write(bytes([raw[at] ^ (1 << rng.randrange(8))]))
        with pymq.MessageStore(root, config, read_only=True) as store:
            seen = []
            for fast in (True, False):
                reader._use_crc_fast(fast)
                seen.append(pull_all(store))
            assert seen[0] == seen[1]
            offsets, got, skipped = seen[0]
            kept = [i for i in range(300) if i not in damaged]
            assert (offsets, got, skipped) == (kept, [bodies[i] for i in kept], len(damaged))
    finally:
        reader._use_crc_fast(before)
