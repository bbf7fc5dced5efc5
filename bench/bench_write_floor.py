"""The physical floor of appending records to a commit log on this machine.

pymq appends by copying records into a memory-mapped, fallocated segment. On a fresh
segment, the first write to each page takes a page fault in which the kernel allocates
a page-cache page, zeroes it and converts the file system's unwritten extent: work no
user-space code can avoid. This script measures, for ``--size`` MiB written in 256 KiB
copies (so Python's overhead is negligible), in one run:

* ``mmap fresh``     memcpy into a fresh fallocated file mapping (what a new segment costs)
* ``mmap faulted``   memcpy into the same mapping again (pages present: memory bandwidth)
* ``pwrite fresh``   write(2) of the same bytes into a fresh file (lmdb's default path)
* ``mmap fresh/250`` and ``mmap faulted/250``: the same two in 250-byte copies, as an
  appender writes records; their difference is what the page faults cost per record
  at that granularity (Python's per-copy overhead is in both and cancels out)

and prints each as GB/s and as ns per 250-byte record (a 100-byte body with a key and a
unique key makes a record of about 250 bytes). ``python bench/bench_write_floor.py``.
"""

from __future__ import annotations

import argparse
import mmap
import os
import tempfile
import time

CHUNK = 256 * 1024
RECORD = 250


def _fallocated(path: str, size: int) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    os.posix_fallocate(fd, 0, size)
    return fd


def measure(size: int, directory: str) -> dict:
    data = os.urandom(CHUNK)
    out = {}
    with tempfile.TemporaryDirectory(dir=directory) as d:
        path = os.path.join(d, "segment")
        fd = _fallocated(path, size)
        m = mmap.mmap(fd, size)
        t = time.perf_counter()
        for pos in range(0, size, CHUNK):
            m[pos:pos + CHUNK] = data
        out["mmap fresh"] = time.perf_counter() - t
        t = time.perf_counter()
        for pos in range(0, size, CHUNK):
            m[pos:pos + CHUNK] = data
        out["mmap faulted"] = time.perf_counter() - t
        m.close()
        os.close(fd)
        fd = os.open(os.path.join(d, "written"), os.O_WRONLY | os.O_CREAT, 0o644)
        t = time.perf_counter()
        for _ in range(0, size, CHUNK):
            os.write(fd, data)
        out["pwrite fresh"] = time.perf_counter() - t
        os.close(fd)
        fd = _fallocated(os.path.join(d, "records"), size)
        m = mmap.mmap(fd, size)
        rec = data[:RECORD]
        n = size // RECORD
        for label in ("mmap fresh/250", "mmap faulted/250"):
            t = time.perf_counter()
            for pos in range(0, n * RECORD, RECORD):
                m[pos:pos + RECORD] = rec
            out[label] = time.perf_counter() - t
        m.close()
        os.close(fd)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=512, help="MiB written per method (default 512)")
    ap.add_argument("--dir", default=None, help="where the files go (default: the temp dir)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    size = args.size << 20
    best: dict[str, float] = {}
    for _ in range(args.repeat):
        for k, v in measure(size, args.dir).items():
            best[k] = min(v, best.get(k, v))
    print(f"{'method':16} {'GB/s':>7} {'ns per 250-byte record':>24}")
    for k, v in best.items():
        print(f"{k:16} {size / v / 1e9:7.2f} {v / (size / RECORD) * 1e9:24.1f}")
    fault = (best["mmap fresh/250"] - best["mmap faulted/250"]) / (size / RECORD) * 1e9
    print(f"page faults of a fresh segment, per 250-byte record appended: {fault:.0f} ns")


if __name__ == "__main__":
    main()
