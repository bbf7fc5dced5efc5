"""Zero-object batch paths (issue 27), the write side: ``put_bodies`` next to lmdb, and the
floors the machine sets for it, measured in the same run (the read side:
``zero_object_read``).

``put_bodies``
    ``store.put_bodies(topic, bodies)`` in batches of ``--batch`` (prebuilt lists of
    ``--body-size`` random bytes), next to lmdb ``cursor.putmulti`` of the same bodies
    under 8-byte keys (prebuilt ``(key, body)`` tuples, ``append=True``, one transaction
    per batch: its fastest path).
``put_bodies_keys``
    the same with one key per message (``order-<n>``-style strings, made before the timed
    loop): ``put_bodies(..., keys=)`` (the store indexes them) next to lmdb with those keys.
``pymq-no-dispatch`` is ``put_bodies`` with the store's dispatcher stopped: the writer's
own part. Each group has floor rows (``floor-*``): the same bytes with no store around
them, so their ratio (pymq / floor, < 1) says how close pymq is to what the machine allows:

- ``floor-fresh-map``: the records pymq writes (the same sizes and bytes: encoded once
  beforehand) copied into a fresh, ``fallocate``d file mapping a batch at a time, as
  pymq's segments are: page faults and ``memcpy``, nothing else.
- ``floor-window``: that copy while a second thread populates the mapping ahead of it
  (``MADV_POPULATE_WRITE``, 8 MiB ahead), as pymq's write window does: the page work off
  the copying thread, on the other core.
- ``floor-pwrite``: the same bytes ``pwrite``n into a fresh file (what lmdb does at
  commit): the kernel's page-cache cost without a page fault per page.
- ``floor-memcpy``: the same copy into a mapping already written once (no faults): the
  memory bandwidth.

Sizes: ``--real-messages`` messages per repeat (200,000 by default, the issue's size),
``--batch`` per put. pymq's store runs its dispatcher (and for keys its index) beside
the puts, as a user's store does; the floors do not.
"""

from __future__ import annotations

import mmap
import os
import random
import time
from typing import Any

from pymq._core.record import encode_message

from .base import TOPIC, Workload, _expect, store_config
from .write import _LmdbWorkload, _PymqWorkload

POOL = 1000        # distinct random bodies, cycled


def _pool(body_size: int) -> list[bytes]:
    rng = random.Random(27)
    return [rng.randbytes(body_size) for _ in range(POOL)]


def _key(i: int) -> str:
    return f"order-{i:010d}"


def pool_records(options, n: int, keys: bool = False) -> list[bytes]:
    """The records pymq writes for the first ``n`` pool bodies (with ``order-<i>`` keys when
    ``keys``): KEYS, UNIQ_KEY and the record's CRC entry as properties, the run's hosts."""
    cfg = store_config(options)
    out = []
    for i, body in enumerate(_pool(options.body_size)[:n]):
        props = b"KEYS\x01" + _key(i).encode() + b"\x02" if keys else b""
        props += b"UNIQ_KEY\x01" + b"7F000001" * 4 + b"\x02__CRC32#\x010123456789\x02"
        out.append(encode_message(TOPIC, body, props, store_host=cfg.store_host, born_host=cfg.store_host))
    return out


class _ZeroObject:
    """Shared: the sizes of a repeat and the bodies."""

    batched = True

    def message_count(self) -> int:
        return self.options.real_messages

    def _total(self) -> int:
        return min(self.options.warmup, self.message_count()) + self.message_count()


# -- put_bodies ----------------------------------------------------------------------------------


class PymqPutBodies(_ZeroObject, _PymqWorkload):
    """pymq: ``put_bodies`` of prebuilt bodies, one call per batch."""

    group = "put_bodies"
    operation = "store.put_bodies(topic, bodies x batch)"
    keys = False

    def prefill(self) -> None:
        self.bodies = _pool(self.options.body_size)
        self.next = 0
        total = self._total()
        self.key_list = [_key(i) for i in range(total)] if self.keys else None

    def run(self, n: int) -> None:
        put, bodies, batch, keys = self.store.put_bodies, self.bodies, self.options.batch, self.key_list
        i, end, r = self.next, self.next + n, None
        while i < end:
            k = min(batch, end - i)
            if keys is None:
                r = put(TOPIC, bodies if k == POOL else bodies[:k])
            else:
                r = put(TOPIC, bodies if k == POOL else bodies[:k], keys=keys[i:i + k])
            i += k
        self.next = end
        self.last, self.written = r, end


class PymqPutBodiesNoDispatch(PymqPutBodies):
    """``put_bodies`` with the dispatcher stopped: the writer's own part (on 2 cores the
    dispatcher shares the CPU with the writer; this row shows what that costs)."""

    implementation = "pymq-no-dispatch"
    operation = "store.put_bodies(topic, bodies x batch), the dispatcher stopped"

    def open(self, path: str) -> None:
        super().open(path)
        self.store.reput_service.shutdown()


class PymqPutBodiesKeys(PymqPutBodies):
    """pymq: ``put_bodies`` with one key per message."""

    group = "put_bodies_keys"
    operation = "store.put_bodies(topic, bodies x batch, keys=)"
    keys = True


def _lmdb_items(options, total: int, keys: bool) -> list[tuple[bytes, bytes]]:
    """lmdb's ``(key, body)`` tuples of the same bodies: 8-byte big-endian numbers, or
    the messages' keys (both in ascending order, for ``append=True``)."""
    bodies = _pool(options.body_size)
    if keys:
        return [(_key(i).encode(), bodies[i % POOL]) for i in range(total)]
    return [(i.to_bytes(8, "big"), bodies[i % POOL]) for i in range(total)]


def _lmdb_put(env, items: list, start: int, n: int, batch: int) -> None:
    """``putmulti`` of ``items[start:start + n]``, one write transaction per batch."""
    i, end = start, start + n
    while i < end:
        k = min(batch, end - i)
        with env.begin(write=True) as txn:
            txn.cursor().putmulti(items[i:i + k], append=True)
        i += k


class LmdbPutMultiBodies(_ZeroObject, _LmdbWorkload):
    """lmdb: ``putmulti`` of prebuilt ``(key, body)`` tuples, one transaction per batch."""

    group = "put_bodies"
    operation = "cursor.putmulti(prebuilt (8-byte key, body) x batch, append=True)"
    keys = False

    def _map_size(self) -> int:
        return 3 * self._total() * (self.options.body_size + 64) + (64 << 20)

    def prefill(self) -> None:
        self.items = _lmdb_items(self.options, self._total(), self.keys)

    def run(self, n: int) -> None:
        _lmdb_put(self.env, self.items, self.next_key, n, self.options.batch)
        self.next_key += n


class LmdbPutMultiKeys(LmdbPutMultiBodies):
    """lmdb: ``putmulti`` with the messages' keys as lmdb keys."""

    group = "put_bodies_keys"
    operation = "cursor.putmulti(prebuilt (key, body) x batch, append=True)"
    keys = True


class FloorFreshMap(_ZeroObject, Workload):
    """The records' bytes copied into a fresh file mapping, a batch at a time."""

    group = "put_bodies"
    implementation = "floor-fresh-map"
    operation = "mapping[pos:pos + batch bytes] = the batch's records (faults + memcpy)"
    keys = False
    warm = False
    mm: Any = None

    def note(self) -> str:
        return "a fallocated file, mmap'd; the batch's records encoded once beforehand"

    def open(self, path: str) -> None:
        batch = pool_records(self.options, self.options.batch, self.keys)
        self.block = b"".join(batch)
        self.per_message = len(self.block) / len(batch)
        size = int(self.per_message * self._total()) + 2 * len(self.block) + (1 << 20)
        self.fd = os.open(os.path.join(path, "segment"), os.O_RDWR | os.O_CREAT, 0o644)
        os.posix_fallocate(self.fd, 0, size)
        self.mm = mmap.mmap(self.fd, size)
        self.pos = 0

    def before_run(self, n: int) -> None:
        if self.warm:
            # every page of the mapping faulted in and dirty, after the sync (a page
            # written back is write-protected again, and the next write faults)
            os.sync()
            self.mm[:] = bytes(len(self.mm))
            self.pos = 0

    def run(self, n: int) -> None:
        mm, block, batch = self.mm, self.block, self.options.batch
        pos, done = self.pos, 0
        while done < n:
            k = min(batch, n - done)
            chunk = block if k == batch else block[:int(self.per_message * k)]
            mm[pos:pos + len(chunk)] = chunk
            pos += len(chunk)
            done += k
        self.pos = pos

    def check(self) -> None:
        _expect(self.pos > 0, "nothing copied")

    def close(self) -> None:
        mm, self.mm = self.mm, None
        if mm is not None:
            mm.close()
            os.close(self.fd)


class FloorWindow(FloorFreshMap):
    """The same copy into a fresh mapping while a second thread populates it ahead of the
    copy (``MADV_POPULATE_WRITE``, 1 MiB at a time, up to 8 MiB ahead): the kernel's page
    work moved off the copying thread, as pymq's write window does, nothing else."""

    implementation = "floor-window"
    operation = "the same copy, a thread populating the mapping 8 MiB ahead of it"
    window = 8 << 20
    chunk = 1 << 20

    def note(self) -> str:
        return "a fallocated file, mmap'd; a thread madvise(MADV_POPULATE_WRITE)s ahead of the copy"

    def before_run(self, n: int) -> None:
        import ctypes
        import threading

        libc = ctypes.CDLL(None, use_errno=True)
        madvise = libc.madvise
        madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        anchor = ctypes.c_char.from_buffer(self.mm)
        base = ctypes.addressof(anchor)
        del anchor                      # the address stays valid while the mapping is open
        self.stop = threading.Event()
        size, start = len(self.mm), self.pos - self.pos % self.chunk

        def populate() -> None:         # ctypes lets go of the GIL for each call
            at = start
            while not self.stop.is_set() and at < size:
                if at >= self.pos + self.window:
                    time.sleep(0.0001)
                    continue
                if madvise(base + at, min(self.chunk, size - at), 23) != 0:   # MADV_POPULATE_WRITE
                    return
                at += self.chunk

        self.thread = threading.Thread(target=populate, name="floor-window", daemon=True)
        self.thread.start()

    def close(self) -> None:
        thread = getattr(self, "thread", None)
        if thread is not None:
            self.stop.set()
            thread.join()
            self.thread = None
        super().close()


class FloorMemcpy(FloorFreshMap):
    """The same copy into a mapping written once before (memory bandwidth, no faults)."""

    implementation = "floor-memcpy"
    operation = "the same copy into pages already faulted in"
    warm = True
    sync_before_run = False     # before_run syncs, then dirties the pages


class FloorPwrite(FloorFreshMap):
    """The same bytes written into a fresh file with ``pwrite`` (lmdb's way): no mapping,
    so no page fault; the kernel fills its page cache from the write."""

    implementation = "floor-pwrite"
    operation = "os.pwrite(fd, the batch's records, pos) into a fresh fallocated file"

    def run(self, n: int) -> None:
        fd, block, batch, pwrite = self.fd, self.block, self.options.batch, os.pwrite
        pos, done = self.pos, 0
        while done < n:
            k = min(batch, n - done)
            chunk = block if k == batch else block[:int(self.per_message * k)]
            pwrite(fd, chunk, pos)
            pos += len(chunk)
            done += k
        self.pos = pos


class FloorFreshMapKeys(FloorFreshMap):
    """``FloorFreshMap`` of the records with their KEYS."""

    group = "put_bodies_keys"
    keys = True


class FloorMemcpyKeys(FloorMemcpy):
    """``FloorMemcpy`` of the records with their KEYS."""

    group = "put_bodies_keys"
    keys = True


ZERO_OBJECT_PUTS = (PymqPutBodies, PymqPutBodiesNoDispatch, LmdbPutMultiBodies, FloorFreshMap, FloorWindow,
                    FloorPwrite, FloorMemcpy,
                    PymqPutBodiesKeys, LmdbPutMultiKeys, FloorFreshMapKeys, FloorMemcpyKeys)
