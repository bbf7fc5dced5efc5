"""Zero-object batch paths (issue 27), the read side: ``read_batch`` next to an lmdb cursor,
and the floors the consumer's own loop and the CRC check on read set, in the same run.

``read_batch``
    pages of 32 through ``read_batch`` (a ``with`` block each), every body touched
    (``len`` of its ``BodyView``), next to an lmdb read cursor over the same bodies
    (``iternext``, every value touched).

Floor rows (no store around them; pymq / floor < 1 says how close pymq is):

- ``floor-loop``: the consumer's loop alone, over 32 ready memoryviews a page.
- ``floor-views``: that loop over 32 memoryviews made per page (``map(memoryview, ...)``),
  what a body view costs in Python at the least.
- ``floor-check``: ``floor-loop`` plus the CRC check on read the issue asks of every
  pull, alone: each page's 32 records (pymq's, as ``put_bodies`` writes them, lying back
  to back in memory as large as the store's log) folded by the reader's CRC code in one C
  call. No store can check its records and run the consumer's loop in less.
"""

from __future__ import annotations

from pymq._core.reader import _fold_page

from .base import TOPIC, Workload, _expect
from .read import LmdbCursorRead, _wait_dispatched
from .write import _PymqWorkload
from .zero_object import _lmdb_items, _lmdb_put, _pool, _ZeroObject, pool_records

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


class LmdbCursorBodies(_ZeroObject, LmdbCursorRead):
    """lmdb: a read cursor over the same bodies, every value touched (``LmdbCursorRead``'s
    loop over this group's random bodies)."""

    group = "read_batch"
    operation = "cursor.iternext(), values touched"

    def _map_size(self) -> int:
        return 3 * self._total() * (self.options.body_size + 64) + (64 << 20)

    def prefill(self) -> None:
        total = self._total()
        _lmdb_put(self.env, _lmdb_items(self.options, total, False), 0, total, self.options.batch)
        self.txn = self.env.begin()
        self.items = self.txn.cursor().iternext()
        self.read = 0


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


class FloorCheck(FloorLoop):
    """``floor-loop`` plus each page's records CRC-folded as a pull checks them."""

    implementation = "floor-check"
    operation = "the CRC fold of each page's 32 records (one C call), then the loop over 32 ready memoryviews"

    def open(self, path: str) -> None:
        super().open(path)
        records = pool_records(self.options, len(_pool(self.options.body_size)))
        self.size = len(records[0])
        _expect(all(len(r) == self.size for r in records), "the records differ in size")
        block = b"".join(records)
        pages = -(-self._total() // 32)
        self.log = block * -(-pages * 32 // len(records))      # as much as the store's log holds
        self.pos = 0

    def run(self, n: int) -> None:
        views, read, touched = self.views, 0, 0
        log, size, pos, end, fold = self.log, self.size, self.pos, len(self.log) - 32 * self.size, _fold_page
        step = 32 * size
        while read < n:
            if pos > end:
                pos = 0
            fold(log, pos, 32, size, size - 20)       # covered: all but the CRC entry
            pos += step
            for body in views:
                touched += len(body)
            read += 32
        self.pos, self.read = pos, self.read + read

    def close(self) -> None:
        super().close()
        self.log = b""


ZERO_OBJECT_READS = (PymqReadBatch, LmdbCursorBodies, FloorLoop, FloorViews, FloorCheck)
