"""Reading one partition on an executor: a queue range to Arrow record batches.

The store is opened read-only here (never on the driver's behalf) and kept open by the
Python worker for the next task; it is refreshed when the range reaches past what this
process has seen, so a read of a live store sees what the driver planned. Records are
decoded by the compiled column reader (``pymq._core.columns``), ``batch_rows`` rows or
``batch_bytes`` bytes of records per batch.
"""

from __future__ import annotations

import logging
from typing import Iterator

from pymq._core import columns as _columns
from pymq.errors import CorruptStoreError

from . import stores
from .arrow import to_record_batch

log = logging.getLogger("pymq.spark")


class DataLossError(RuntimeError):
    """Offsets a query needs are gone (retention deleted them, or the store was replaced)."""


def data_loss(message: str, fail: bool) -> None:
    """Raise when ``failOnDataLoss`` is on, else log (Spark's Kafka source does the same)."""
    if fail:
        raise DataLossError(
            f"{message}. Some data may have been lost because it is no longer in the store (retention "
            "removed it). If you want your query to carry on, set option failOnDataLoss to false")
    log.warning("%s; skipping what is gone (failOnDataLoss=false)", message)


def read_partition(p) -> Iterator:
    """Yield ``pyarrow.RecordBatch`` objects with the messages [p.start, p.end) of a queue."""
    if p is None or getattr(p, "topic", None) is None or p.end <= p.start:
        return
    config = dict(p.config)
    store = stores.open_read_only(p.store_path, config)
    if not stores.has_queue(store, p.topic, p.queue_id) or store.get_max_offset_in_queue(p.topic, p.queue_id) < p.end:
        stores.catch_up(store)
    if not stores.has_queue(store, p.topic, p.queue_id):
        data_loss(f"{p.store_path}: queue {p.topic}-{p.queue_id} is gone", p.fail_on_data_loss)
        return
    where = f"{p.store_path}: {p.topic}-{p.queue_id}"
    offset = p.start
    refreshed = False
    while offset < p.end:
        lo = stores.queue_min(store, p.topic, p.queue_id)
        if offset < lo:
            data_loss(f"{where}: offsets [{offset}, {min(lo, p.end)}) were removed (queue min {lo})",
                      p.fail_on_data_loss)
            offset = lo
            continue
        n, status, cols = store.read_columns(p.topic, p.queue_id, offset, p.end, p.batch_rows, p.batch_bytes)
        if n:
            refreshed = False
            offset += n
            yield to_record_batch(n, cols, p.topic, p.queue_id, p.store_path)
            continue
        if status == _columns.READ_MISMATCH:
            raise CorruptStoreError(f"{where}: the entry at offset {offset} points at another queue's record")
        if not refreshed:
            stores.catch_up(store)           # the writer may have moved on since we looked
            refreshed = True
            continue
        if offset < stores.queue_min(store, p.topic, p.queue_id) or status == _columns.READ_UNREADABLE:
            data_loss(f"{where}: the record at offset {offset} is not readable", p.fail_on_data_loss)
            offset += 1
            refreshed = False
            continue
        raise CorruptStoreError(f"{where}: offsets [{offset}, {p.end}) were planned but the consume queue "
                                f"ends at {store.get_max_offset_in_queue(p.topic, p.queue_id)}")
