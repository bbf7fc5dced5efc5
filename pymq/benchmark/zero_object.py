"""Zero-object batch paths (issue 27): ``put_bodies`` and ``read_batch`` next to lmdb, and
the floors the machine sets for them, measured in the same run.

``put_bodies``
    ``store.put_bodies(topic, bodies)`` in batches of ``--batch`` (prebuilt lists of
    ``--body-size`` random bytes), next to lmdb ``cursor.putmulti`` of the same bodies
    under 8-byte keys (prebuilt ``(key, body)`` tuples, ``append=True``, one transaction
    per batch: its fastest path).
``put_bodies_keys``
    the same with one key per message (``order-<n>``-style strings, made before the timed
    loop): ``put_bodies(..., keys=)`` (the store indexes them) next to lmdb with those keys.
``read_batch``
    pages of 32 through ``read_batch`` (a ``with`` block each), every body touched
    (``len`` of its ``BodyView``), next to an lmdb read cursor over the same bodies
    (``iternext``, every value touched).

``pymq-no-dispatch`` is ``put_bodies`` with the store's dispatcher stopped: the writer's
own part. Each group has floor rows (``floor-*``): the same bytes with no store around
them, so their ratio (pymq / floor, < 1) says how close pymq is to what the machine allows:

- ``floor-fresh-map``: the records pymq writes (the same sizes and bytes: encoded once
  beforehand) copied into a fresh, ``fallocate``d file mapping a batch at a time, as
  pymq's segments are: page faults and ``memcpy``, nothing else.
- ``floor-pwrite``: the same bytes ``pwrite``n into a fresh file (what lmdb does at
  commit): the kernel's page-cache cost without a page fault per page.
- ``floor-memcpy``: the same copy into a mapping already written once (no faults): the
  memory bandwidth.
- ``floor-loop`` (reads): the consumer's loop alone, over 32 ready memoryviews a page;
  ``floor-views``: that loop over 32 memoryviews made per page (``map(memoryview, ...)``),
  what a body view costs in Python at the least.

Sizes: ``--real-messages`` messages per repeat (200,000 by default, the issue's size),
``--batch`` per put. pymq's store runs its dispatcher (and for keys its index) beside
the puts, as a user's store does; the floors do not.
"""

from __future__ import annotations

import mmap
import os
import random
from typing import Any

from pymq._core.record import encode_message

from .base import TOPIC, Workload, _expect, store_config
from .read import _wait_dispatched
from .write import _LmdbWorkload, _PymqWorkload

POOL = 1000        # distinct random bodies, cycled


def _pool(body_size: int) -> list[bytes]:
    rng = random.Random(27)
    return [rng.randbytes(body_size) for _ in range(POOL)]


def _key(i: int) -> str:
    return f"order-{i:010d}"


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
        cfg = store_config(self.options)
        bodies = _pool(self.options.body_size)
        batch = [encode_message(TOPIC, b, self._properties(i), store_host=cfg.store_host,
                                born_host=cfg.store_host) for i, b in enumerate(bodies[:self.options.batch])]
        self.block = b"".join(batch)
        self.per_message = len(self.block) / len(batch)
        size = int(self.per_message * self._total()) + 2 * len(self.block) + (1 << 20)
        self.fd = os.open(os.path.join(path, "segment"), os.O_RDWR | os.O_CREAT, 0o644)
        os.posix_fallocate(self.fd, 0, size)
        self.mm = mmap.mmap(self.fd, size)
        self.pos = 0

    def _properties(self, i: int) -> bytes:
        """What pymq writes: KEYS (with keys), UNIQ_KEY, the record's CRC entry."""
        props = b"KEYS\x01" + _key(i).encode() + b"\x02" if self.keys else b""
        return props + b"UNIQ_KEY\x01" + b"7F000001" * 4 + b"\x02__CRC32#\x010123456789\x02"

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


# -- read_batch ----------------------------------------------------------------------------------


class PymqReadBatch(_ZeroObject, _PymqWorkload):
    """pymq: pages of 32 through ``read_batch``, every body touched."""

    group = "read_batch"
    operation = "with read_batch(..., max_msgs=32) as b: len(body) for body in b.bodies"

    def prefill(self) -> None:
        bodies = _pool(self.options.body_size)
        total, batch = self._total(), self.options.batch
        for start in range(0, total, batch):
            r = self.store.put_bodies(TOPIC, bodies[:min(batch, total - start)])
            _expect(r.is_ok(), f"prefill put returned {r!r}")
        _wait_dispatched(self.store)
        self.offset = self.read = 0

    def run(self, n: int) -> None:
        read_batch, offset, read, touched = self.store.read_batch, self.offset, 0, 0
        while read < n:
            with read_batch(TOPIC, 0, offset, 32) as b:
                for body in b.bodies:
                    touched += len(body)
                read += len(b)
                offset = b.next_begin_offset
                if not len(b):
                    break
        self.offset, self.read, self.touched = offset, self.read + read, touched

    def check(self) -> None:
        _expect(self.offset == self.read and self.touched > 0, f"read {self.read}, offset {self.offset}")


class LmdbCursorBodies(_ZeroObject, _LmdbWorkload):
    """lmdb: a read cursor over the same bodies, every value touched."""

    group = "read_batch"
    operation = "cursor.iternext(), values touched"

    def _map_size(self) -> int:
        return 3 * self._total() * (self.options.body_size + 64) + (64 << 20)

    def prefill(self) -> None:
        total = self._total()
        _lmdb_put(self.env, _lmdb_items(self.options, total, False), 0, total, self.options.batch)
        self.txn = self.env.begin()
        self.cursor = self.txn.cursor().iternext()
        self.read = 0

    def run(self, n: int) -> None:
        items, touched = self.cursor, 0
        for _ in range(n):
            touched += len(next(items)[1])
        self.read += n

    def check(self) -> None:
        _expect(self.read > 0, "nothing read")


class FloorLoop(_ZeroObject, Workload):
    """The consumer's loop alone: 32 ready memoryviews a page, each touched."""

    group = "read_batch"
    implementation = "floor-loop"
    operation = "len(view) for view in 32 ready memoryviews"
    make_views = False

    def open(self, path: str) -> None:
        self.page = _pool(self.options.body_size)[:32]
        self.views = [memoryview(b) for b in self.page]
        self.read = 0

    def run(self, n: int) -> None:
        page, views, read, touched = self.page, self.views, 0, 0
        make = self.make_views
        while read < n:
            for body in (map(memoryview, page) if make else views):
                touched += len(body)
            read += 32
        self.read += read

    def check(self) -> None:
        _expect(self.read > 0, "nothing read")

    def close(self) -> None:
        self.views = []


class FloorViews(FloorLoop):
    """The loop over 32 memoryviews made per page."""

    implementation = "floor-views"
    operation = "len(view) for view in map(memoryview, 32 bodies)"
    make_views = True


ZERO_OBJECT = (PymqPutBodies, PymqPutBodiesNoDispatch, LmdbPutMultiBodies, FloorFreshMap, FloorPwrite, FloorMemcpy,
               PymqPutBodiesKeys, LmdbPutMultiKeys, FloorFreshMapKeys, FloorMemcpyKeys,
               PymqReadBatch, LmdbCursorBodies, FloorLoop, FloorViews)
