"""Column buffers from the compiled reader to ``pyarrow.RecordBatch`` (zero-copy).

``pymq._core.columns.read_range`` decodes a queue range into buffers laid out as Arrow
arrays; ``pymq._core.arrow_columns`` wraps them (as ``ReadBatch.to_arrow`` does) and this
module adds the column that is constant within a partition (the store).
"""

from __future__ import annotations

import pyarrow as pa

from pymq._core.arrow_columns import constant, message_arrays

from .schema import ARROW_SCHEMA


def to_record_batch(n: int, columns: dict, topic: str, queue_id: int, store: str) -> pa.RecordBatch:
    """The ``n`` rows of one ``read_range`` call as a batch of ``ARROW_SCHEMA``."""
    arrays = message_arrays(n, columns, topic, queue_id)
    arrays.append(constant(store, pa.string(), n))
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)
