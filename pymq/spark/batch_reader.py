"""Batch reads: ``spark.read.format("pymq")``.

Planning (driver) opens each store read-only, lists the subscribed queues, resolves the
start and end offsets of each (options, then pushed filters) and splits the ranges into
partitions. ``read`` (executors) decodes one range into Arrow batches.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSourceReader

from . import offsets, partitions, stores
from .filters import Pushdown, push_filters
from .options import ReadOptions
from .scan import data_loss, read_partition


def plan_ranges(opts: ReadOptions, pushdown: Pushdown | None = None) -> list:
    """The ``QueueRange`` of every subscribed queue the filters allow, unsplit."""
    pd = pushdown or Pushdown()
    refs, _multi = stores.discover(opts.path)
    out = []
    for ref in refs:
        if not pd.allows_store(ref.path):
            continue
        config = stores.infer_config(ref.path, opts.store_overrides)
        store = stores.open_read_only(ref.path, config)
        stores.catch_up(store)
        for topic, qids in sorted(store.get_topics().items()):
            if not opts.matches(topic) or not pd.allows_topic(topic):
                continue
            for q in qids:
                if not pd.allows_queue(q):
                    continue
                lo, hi = stores.queue_bounds(store, topic, q)
                start = offsets.resolve("start", opts, store, ref.name, topic, q, lo, hi)
                end = offsets.resolve("end", opts, store, ref.name, topic, q, lo, hi)
                if start < lo:
                    data_loss(f"{ref.path}: {topic}-{q} starts at {lo}, after the requested start {start}",
                              opts.fail_on_data_loss)
                    start = lo
                end = min(end, hi)
                start, end = pd.narrow(start, end)
                if pd.ts_lo_ms is not None and start < end:
                    start = max(start, offsets.by_time(store, topic, q, pd.ts_lo_ms, lo, hi))
                if pd.ts_hi_ms is not None and start < end:
                    end = min(end, offsets.by_time(store, topic, q, pd.ts_hi_ms, lo, hi))
                if start < end:
                    out.append(partitions.QueueRange(
                        ref.name, ref.path, topic, q, start, end, tuple(sorted(config.items())),
                        opts.fail_on_data_loss, opts.batch_rows, opts.batch_bytes))
    return out


class PymqBatchReader(DataSourceReader):
    """Reads the messages of one or many stores as of planning time."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self.pushdown = Pushdown()

    def partitions(self):
        ranges = plan_ranges(self.opts, self.pushdown)
        return partitions.split(ranges, self.opts.min_partitions, self.opts.max_records_per_partition)

    def read(self, partition):
        return read_partition(partition if isinstance(partition, partitions.QueueRange) else None)


class PymqPushdownReader(PymqBatchReader):
    """A batch reader that also takes pushed filters (option ``filterPushdown``).

    A separate class because Spark refuses any read through a reader that implements
    ``pushFilters`` unless ``spark.sql.python.filterPushdown.enabled`` is true, and because
    Spark 4.3.0 keeps the partitions planned with pushed filters on the DataFrame and
    reuses them for a later query of the same DataFrame that pushes no filter (see
    docs/spark.md): pushdown is for queries that load the source for themselves.
    """

    def pushFilters(self, filters):
        """Fold what the queues and offsets can answer into the plan; return the rest."""
        return push_filters(self.pushdown, filters)
