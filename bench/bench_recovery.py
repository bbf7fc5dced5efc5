"""Recovery speed: a 1 GiB commit log scanned with CRC checks, next to memory bandwidth.

    python bench/bench_recovery.py [--size-mib 1024] [--body-size 1024] [--dir DIR]

Fills a store with --size-mib of records, shuts it down, then measures in one run:

* the CRC-checked scan recovery does (``CommitLog.recover_abnormally`` from segment 0);
* the same scan without CRC checks (what normal recovery and dispatch parse);
* a whole reopen after a crash (abort marker, no checkpoint): recovery plus the replay
  that rebuilds consume queues and index;
* memory bandwidth: numpy copying a 256 MiB array (read + write counted as bytes copied),
  and reading it (sum), as the ceiling to compare with.

Page cache state matters: the store's files were just written, so they are in memory;
the figures are for the CPU side of recovery, not the disk.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

import numpy as np

import pymq
from pymq._core import record
from pymq import testing


def fill(path: str, size: int, body_size: int) -> int:
    cfg = pymq.StoreConfig(commitlog_file_size=1 << 30)
    body = os.urandom(body_size)
    with pymq.MessageStore(path, cfg) as store:
        while store.get_max_phy_offset() < size:
            store.put_messages([pymq.Message(topic="Recovery", body=body, keys=["k"]) for _ in range(1000)])
        return store.get_max_phy_offset()


def best(f, repeat=3):
    return min(f() for _ in range(repeat))


def scan_seconds(path: str) -> tuple[float, float]:
    """Best of 3 of the scan with and without CRC checks, alternated on one mapping of the
    log (a first pass over a fresh mapping pays for setting up its page tables)."""
    from pymq.store.commit_log import CommitLog
    cl = CommitLog(path, pymq.store_sizes.config_for_store(path))
    cl.load()
    files = cl.mapped_file_queue.mapped_files
    for mf in files:
        mf.warm()
    times = {True: [], False: []}
    for check_crc in (False, True) * 4:
        t = time.perf_counter()
        for mf in files:
            record.scan_segment(mf, 0, mf.file_size, check_crc)
        times[check_crc].append(time.perf_counter() - t)
    cl.mapped_file_queue.shutdown()
    return min(times[True][1:]), min(times[False][1:])


def reopen_after_crash_seconds(path: str) -> float:
    testing.create_abort(path)
    testing.remove_checkpoint(path)
    t = time.perf_counter()
    store = pymq.MessageStore(path)
    dt = time.perf_counter() - t
    store.shutdown()
    return dt


def memory_bandwidth() -> tuple[float, float]:
    a = np.ones(256 << 20, dtype=np.uint8)
    b = np.empty_like(a)
    copy = best(lambda: _timed(lambda: np.copyto(b, a)))
    words = a.view(np.uint64)
    read = best(lambda: _timed(lambda: words.sum()))
    return a.nbytes / copy / 1e9, a.nbytes / read / 1e9


def _timed(f) -> float:
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--body-size", type=int, default=1024)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    d = tempfile.mkdtemp(prefix="pymq-recovery-", dir=args.dir)
    path = os.path.join(d, "store")
    try:
        size = fill(path, args.size_mib << 20, args.body_size)
        gb = size / 1e9
        crc, plain = scan_seconds(path)
        reopen = best(lambda: reopen_after_crash_seconds(path), 2)
        copy_gbs, read_gbs = memory_bandwidth()
        print(f"log: {size / (1 << 20):,.0f} MiB of {args.body_size}-byte bodies, crc32={record.crc32_impl()}")
        print(f"{'measurement':44} {'seconds':>8} {'GB/s':>7}")
        print(f"{'recovery scan with CRC checks':44} {crc:8.3f} {gb / crc:7.2f}")
        print(f"{'scan without CRC checks':44} {plain:8.3f} {gb / plain:7.2f}")
        print(f"{'reopen after a crash (recover + replay)':44} {reopen:8.3f} {gb / reopen:7.2f}")
        print(f"{'memory: numpy copy 256 MiB (bytes copied)':44} {'':8} {copy_gbs:7.2f}")
        print(f"{'memory: numpy sum 256 MiB (bytes read)':44} {'':8} {read_gbs:7.2f}")
    finally:
        shutil.rmtree(d)


if __name__ == "__main__":
    main()
