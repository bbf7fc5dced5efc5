"""Spark partitions: one per (store, topic, queue) offset range, large ranges split.

A partition is a small picklable description; the executor opens the store itself.
Splitting follows Spark's Kafka source (``KafkaOffsetRangeCalculator``): with
``minPartitions`` above the number of ranges, each range gets a share of the partitions
proportional to its size; ``maxRecordsPerPartition`` then cuts any range still larger.
"""

from __future__ import annotations

import dataclasses
import math

from pyspark.sql.datasource import InputPartition


@dataclasses.dataclass
class QueueRange(InputPartition):
    """Messages [start, end) of one queue of one store."""

    store_name: str
    store_path: str
    topic: str
    queue_id: int
    start: int
    end: int
    config: tuple                    # StoreConfig values as sorted (name, value) pairs
    fail_on_data_loss: bool = True
    batch_rows: int = 32_768
    batch_bytes: int = 16 << 20

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


def _cut(r: QueueRange, parts: int) -> list:
    if parts <= 1 or r.size <= 1:
        return [r]
    parts = min(parts, r.size)
    out = []
    for i in range(parts):
        a = r.start + r.size * i // parts
        b = r.start + r.size * (i + 1) // parts
        if b > a:
            out.append(dataclasses.replace(r, start=a, end=b))
    return out


def split(ranges: list, min_partitions, max_records) -> list:
    """Split non-empty ``ranges`` into partitions (see the module docstring)."""
    ranges = [r for r in ranges if r.size > 0]
    if min_partitions and min_partitions > len(ranges) and ranges:
        total = sum(r.size for r in ranges)
        ranges = [p for r in ranges for p in _cut(r, max(1, round(r.size / total * min_partitions)))]
    if max_records:
        ranges = [p for r in ranges for p in _cut(r, math.ceil(r.size / max_records))]
    return ranges
