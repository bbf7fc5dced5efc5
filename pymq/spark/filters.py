"""Filter pushdown: which queues and offset ranges a batch read must touch at all.

Handled exactly, and so removed from Spark's plan:

    topic, store          =, IN
    queue_id              =, IN, <, <=, >, >=
    queue_offset          =, <, <=, >, >=
    IS NOT NULL           on any NOT NULL column

Used to narrow the ranges, and still evaluated by Spark (returned as unhandled):

    store_timestamp       <, <=, >, >=, =   through the time lookup of each queue. Store
                          times do not decrease within a queue when one writer appends, so
                          the narrowed range holds every match; Spark re-checks the rows,
                          which keeps the answer right even for a queue whose clock went
                          back.
    queue_offset          IN                narrowed to [min, max]

Everything else is returned to Spark untouched.
"""

from __future__ import annotations

import calendar
import dataclasses
import datetime
import time
from typing import Optional

from pyspark.sql.datasource import (EqualTo, GreaterThan, GreaterThanOrEqual, In, IsNotNull, LessThan,
                                    LessThanOrEqual)

from .schema import READ_COLUMNS

_NOT_NULL = {name for name, _, nullable, _ in READ_COLUMNS if not nullable}


@dataclasses.dataclass
class Pushdown:
    """What pushed filters allow: ``None`` means no constraint. Offset and time bounds are
    half-open, [lo, hi)."""

    topics: Optional[set] = None
    stores: Optional[set] = None
    queue_ids: Optional[set] = None
    queue_id_lo: Optional[int] = None
    queue_id_hi: Optional[int] = None
    offset_lo: Optional[int] = None
    offset_hi: Optional[int] = None
    ts_lo_ms: Optional[int] = None
    ts_hi_ms: Optional[int] = None

    def allows_topic(self, topic: str) -> bool:
        return self.topics is None or topic in self.topics

    def allows_store(self, path: str) -> bool:
        return self.stores is None or path in self.stores

    def allows_queue(self, queue_id: int) -> bool:
        if self.queue_ids is not None and queue_id not in self.queue_ids:
            return False
        if self.queue_id_lo is not None and queue_id < self.queue_id_lo:
            return False
        return self.queue_id_hi is None or queue_id < self.queue_id_hi

    def narrow(self, start: int, end: int) -> tuple[int, int]:
        if self.offset_lo is not None:
            start = max(start, self.offset_lo)
        if self.offset_hi is not None:
            end = min(end, self.offset_hi)
        return start, end


def _intersect(current: Optional[set], values) -> set:
    values = set(values)
    return values if current is None else current & values


def _lo(current, value):
    if value is None:
        return current
    return value if current is None else max(current, value)


def _hi(current, value):
    if value is None:
        return current
    return value if current is None else min(current, value)


def _int_range(flt, value: int):
    """The half-open ``(lo, hi)`` of integers a comparison with ``value`` keeps (``None``
    for an open end), or ``None`` for a filter that is not a comparison."""
    if isinstance(flt, EqualTo):
        return value, value + 1
    if isinstance(flt, GreaterThan):
        return value + 1, None
    if isinstance(flt, GreaterThanOrEqual):
        return value, None
    if isinstance(flt, LessThan):
        return None, value
    if isinstance(flt, LessThanOrEqual):
        return None, value + 1
    return None


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def timestamp_us(value) -> Optional[int]:
    """Microseconds since the epoch of a filter's timestamp value (an aware datetime, or a
    naive one in local time as pyspark makes them); None for anything else."""
    if isinstance(value, datetime.datetime):
        if value.tzinfo is not None:
            secs = calendar.timegm(value.utctimetuple())
        else:
            secs = int(time.mktime(value.timetuple()))
        return secs * 1_000_000 + value.microsecond
    return None


def _ms_ceil(us: int) -> int:
    return -((-us) // 1000)


def push(pd: Pushdown, flt) -> bool:
    """Fold one filter into ``pd``; True when it is handled exactly."""
    attr = getattr(flt, "attribute", None)
    if not isinstance(attr, tuple) or len(attr) != 1:
        return False
    col = attr[0]
    value = getattr(flt, "value", None)
    if isinstance(flt, IsNotNull):
        return col in _NOT_NULL
    if col in ("topic", "store"):
        if isinstance(flt, EqualTo) and isinstance(value, str):
            values = {value}
        elif isinstance(flt, In) and all(isinstance(v, str) for v in value):
            values = set(value)
        else:
            return False
        if col == "topic":
            pd.topics = _intersect(pd.topics, values)
        else:
            pd.stores = _intersect(pd.stores, values)
        return True
    if col == "queue_id":
        if isinstance(flt, In) and all(_is_int(v) for v in value):
            pd.queue_ids = _intersect(pd.queue_ids, value)
            return True
        if not _is_int(value):
            return False
        if isinstance(flt, EqualTo):
            pd.queue_ids = _intersect(pd.queue_ids, [value])
            return True
        bounds = _int_range(flt, value)
        if bounds is None:
            return False
        pd.queue_id_lo = _lo(pd.queue_id_lo, bounds[0])
        pd.queue_id_hi = _hi(pd.queue_id_hi, bounds[1])
        return True
    if col == "queue_offset":
        if isinstance(flt, In) and value and all(_is_int(v) for v in value):
            pd.offset_lo = _lo(pd.offset_lo, min(value))
            pd.offset_hi = _hi(pd.offset_hi, max(value) + 1)
            return False
        if not _is_int(value):
            return False
        bounds = _int_range(flt, value)
        if bounds is None:
            return False
        pd.offset_lo = _lo(pd.offset_lo, bounds[0])
        pd.offset_hi = _hi(pd.offset_hi, bounds[1])
        return True
    if col == "store_timestamp":
        us = timestamp_us(value)
        if us is None:
            return False
        # store times are whole ms: ts_us >= v  <=>  ts_ms >= ceil(v / 1000), and so on
        if isinstance(flt, GreaterThanOrEqual):
            pd.ts_lo_ms = _lo(pd.ts_lo_ms, _ms_ceil(us))
        elif isinstance(flt, GreaterThan):
            pd.ts_lo_ms = _lo(pd.ts_lo_ms, us // 1000 + 1)
        elif isinstance(flt, LessThan):
            pd.ts_hi_ms = _hi(pd.ts_hi_ms, _ms_ceil(us))
        elif isinstance(flt, LessThanOrEqual):
            pd.ts_hi_ms = _hi(pd.ts_hi_ms, us // 1000 + 1)
        elif isinstance(flt, EqualTo):
            pd.ts_lo_ms = _lo(pd.ts_lo_ms, _ms_ceil(us))
            pd.ts_hi_ms = _hi(pd.ts_hi_ms, us // 1000 + 1)
        return False
    return False


def push_filters(pd: Pushdown, filters) -> list:
    """Fold ``filters`` into ``pd``; return those Spark must still evaluate."""
    return [f for f in filters if not push(pd, f)]
