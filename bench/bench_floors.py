"""What this machine allows for `pymq bench`'s realistic workloads, and how close pymq is.

Each line is one cost measured in this process, best of ``--repeat`` runs, in ns per
message (or per lookup), next to the whole operation it bounds from below:

write (a 100-byte random body with one key, ~270-byte records)
  ``message object``     building ``Message(topic=, body=, keys=[key])`` in the loop the
                         benchmark uses (the Python object a put needs, nothing stored)
  ``lmdb tuple``         building ``(key.encode(), body)``, lmdb's equivalent
  ``append floor``       copying 270-byte records into a fresh, fallocated mapping in
                         256 KiB copies: page faults and memcpy, no Python per record
  ``put_message``        pymq, the whole put (dispatcher and index running beside it)
  ``put_messages``       pymq, prebuilt batches of 1,000, right after (``real_put_messages``)
  ``put prebuilt``       ``put_message`` of messages built beforehand, once the dispatcher
                         caught up
  ``lmdb putmulti``      lmdb, the same batches of prebuilt tuples

read (pages of 32, every body touched)
  ``consumer loop``      the benchmark's loop over already-made messages, ``len(m.body)``:
                         what a consumer pays even if reading cost nothing
  ``lmdb loop``          the same over prebuilt ``(key, value)`` tuples
  ``get_message``        pymq, the whole read
  ``lmdb cursor``        lmdb, the whole read

key lookup (p50 of single calls on 200,000 keys, timer overhead included)
  ``call floor``         a C call with one argument, timed the same way
  ``query miss``         ``query_message`` for absent keys: call, hash, slot
  ``query_message``      the whole lookup: slot, entry, record verified and copied
  ``query newest``       the same for keys of the newest phase: the 400,000 key hashes
                         of the other two phases came before them, and the table of
                         recent keys (``index_recent_keys``, 1,048,576 ways) holds the
                         newest, so these lookups read one line of it instead of the
                         slot and the entry (``query_message``'s keys, the oldest of
                         1,200,000 hashes, are partly pushed out and walk the file)
  ``lmdb get``           ``txn.get``

``python bench/bench_floors.py [--messages N] [--repeat N]``; needs lmdb.
"""

from __future__ import annotations

import argparse
import mmap
import os
import random
import shutil
import statistics
import tempfile
import time

import lmdb

import pymq

RECORD = 270


def _best(fn, repeat: int) -> float:
    return min(fn() for _ in range(repeat))


def _per(n: int, fn) -> float:
    t = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - t) / n


def _p50(fn, items) -> float:
    clock = time.perf_counter_ns
    samples = []
    for x in items:
        t0 = clock()
        fn(x)
        samples.append(clock() - t0)
    return statistics.median(samples)


def append_floor(directory: str, size: int = 128 << 20) -> float:
    """ns per 270-byte record for bulk copies into a fresh fallocated mapping."""
    data = os.urandom(256 * 1024)
    with tempfile.TemporaryDirectory(dir=directory) as d:
        fd = os.open(os.path.join(d, "segment"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.posix_fallocate(fd, 0, size)
            m = mmap.mmap(fd, size)
            t = time.perf_counter_ns()
            for pos in range(0, size, len(data)):
                m[pos:pos + len(data)] = data
            elapsed = time.perf_counter_ns() - t
            m.close()
        finally:
            os.close(fd)
    return elapsed / (size / RECORD)


def measure(n: int, repeat: int, directory: str) -> dict[str, float]:
    rng = random.Random(1)
    bodies = [rng.randbytes(100) for _ in range(n)]
    keys = [f"order-{i:010d}" for i in range(n)]
    M = pymq.Message
    out: dict[str, float] = {}

    def build():
        for i in range(n):
            M(topic="OrderEvents", body=bodies[i], keys=[keys[i]])

    def tuples():
        for i in range(n):
            (keys[i].encode(), bodies[i])

    out["message object"] = _best(lambda: _per(n, build), repeat)
    out["lmdb tuple"] = _best(lambda: _per(n, tuples), repeat)
    out["append floor"] = _best(lambda: append_floor(directory), repeat)

    def pymq_run() -> dict[str, float]:
        d = tempfile.mkdtemp(dir=directory)
        try:
            store = pymq.MessageStore(os.path.join(d, "s"), pymq.StoreConfig(commitlog_file_size=256 << 20))
            store.start()
            r: dict[str, float] = {}
            put = store.put_message

            def puts():
                for i in range(n):
                    put(M(topic="OrderEvents", body=bodies[i], keys=[keys[i]]))
            r["put_message"] = _per(n, puts)
            batch = [M(topic="OrderEventsBatch", body=b, keys=[k]) for b, k in zip(bodies, keys)]

            def batches():
                for s in range(0, n, 1000):
                    store.put_messages(batch[s:s + 1000])
            r["put_messages"] = _per(n, batches)
            while store.dispatch_behind_bytes():
                time.sleep(0.01)
            pre = [M(topic="Prebuilt", body=b, keys=[k]) for b, k in zip(bodies, keys)]

            def prebuilt():
                for m in pre:
                    put(m)
            r["put prebuilt"] = _per(n, prebuilt)
            while store.dispatch_behind_bytes():
                time.sleep(0.01)
            get = store.get_message

            def reads():
                offset, read, touched = 0, 0, 0
                while read < n:
                    res = get("g", "OrderEvents", 0, offset, 32)
                    for m in res.messages:
                        touched += len(m.body)
                    read += len(res.messages)
                    offset = res.next_begin_offset
            r["get_message"] = _per(n, reads)
            pages = [get("g", "OrderEvents", 0, o, 32).messages for o in range(0, n, 32)]
            for page in pages:
                for m in page:
                    m.body                    # decoded: the loop alone is left to time

            def loop():
                touched = 0
                for page in pages:
                    for m in page:
                        touched += len(m.body)
            r["consumer loop"] = _per(n, loop)
            q = store.query_message
            hits = [keys[rng.randrange(n)] for _ in range(5000)]
            misses = [f"absent-{rng.randrange(10 ** 9):010d}" for _ in range(5000)]
            r["call floor"] = _p50(len, hits)
            r["query miss"] = _p50(lambda k: q("OrderEvents", k, 1), misses)
            r["query_message"] = _p50(lambda k: q("OrderEvents", k, 1), hits)
            r["query newest"] = _p50(lambda k: q("Prebuilt", k, 1), hits)
            store.shutdown()
            return r
        finally:
            shutil.rmtree(d)

    def lmdb_run() -> dict[str, float]:
        d = tempfile.mkdtemp(dir=directory)
        try:
            env = lmdb.open(os.path.join(d, "l"), map_size=1 << 30, sync=False, metasync=False, max_dbs=2)
            a, b = env.open_db(b"a"), env.open_db(b"b")
            for i in range(n):
                with env.begin(write=True, db=a) as txn:
                    txn.put(keys[i].encode(), bodies[i], db=a)
            pre = [(k.encode(), v) for k, v in zip(keys, bodies)]
            r: dict[str, float] = {}

            def multi():
                for s in range(0, n, 1000):
                    with env.begin(write=True, db=b) as txn:
                        txn.cursor(db=b).putmulti(pre[s:s + 1000], append=True)
            r["lmdb putmulti"] = _per(n, multi)

            def cursor():
                touched = 0
                with env.begin(db=a) as txn:
                    for _k, v in txn.cursor(db=a).iternext():
                        touched += len(v)
            r["lmdb cursor"] = _per(n, cursor)

            def loop():
                touched = 0
                for _k, v in pre:
                    touched += len(v)
            r["lmdb loop"] = _per(n, loop)
            hits = [keys[rng.randrange(n)].encode() for _ in range(5000)]
            with env.begin(db=a) as txn:
                r["lmdb get"] = _p50(txn.get, hits)
            env.close()
            return r
        finally:
            shutil.rmtree(d)

    for run in (pymq_run, lmdb_run):
        for _ in range(repeat):
            for k, v in run().items():
                out[k] = min(v, out.get(k, v))
    return out


ROWS = (
    ("write", ("message object", "lmdb tuple", "append floor", "put_message", "put_messages",
               "put prebuilt", "lmdb putmulti")),
    ("read", ("consumer loop", "lmdb loop", "get_message", "lmdb cursor")),
    ("key lookup (p50)", ("call floor", "query miss", "query_message", "query newest", "lmdb get")),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where the stores go (default: the temp dir)")
    args = ap.parse_args()
    best = measure(args.messages, args.repeat, args.dir or tempfile.gettempdir())
    for title, names in ROWS:
        print(title)
        for name in names:
            print(f"  {name:16} {best[name]:8.0f} ns")


if __name__ == "__main__":
    main()
