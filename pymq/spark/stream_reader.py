"""Streaming reads: ``spark.readStream.format("pymq")``, offsets like Spark's Kafka source.

An offset is the JSON of the next queue offset to read per (topic, queue) — nested by
store for a multi-store source — and is what Spark writes to the query's checkpoint, so a
restarted query resumes exactly where the last completed batch ended. ``startingOffsets``
(default ``latest``) and the timestamp options only place a new query.

Each trigger: ``latestOffset`` looks at the stores (read-only, refreshed), lets queues and
topics that appeared since the last look in from their earliest offset, and caps the end
by the read limit: ``maxOffsetsPerTrigger`` rows in all, shared by backlog
(``ReadMaxRows``). Under ``Trigger.AvailableNow`` the ends are also capped by what existed
when the query started (``prepareForTriggerAvailableNow``), so the query reads that much,
in batches within the limit, and stops.

Data loss (``failOnDataLoss``, default true): a batch whose start lies below a queue's
min offset (retention removed messages before they were read) fails the query; with
false, the missing range is skipped with a warning.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow

from . import offsets, partitions, stores
from .options import ReadOptions
from .scan import data_loss, read_partition


class PymqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A micro-batch stream over the subscribed queues of one or many stores."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._initial = None          # resolved once: initialOffset() may be called twice
        self._target = None           # AvailableNow: the latest offsets when the query started
        self._configs = {}

    # -- looking at the stores ----------------------------------------------------------------

    def _scan(self):
        """``(multi, {(store, topic, q): (lo, hi)}, {store name: (store, path, config)})``."""
        refs, multi = stores.discover(self.opts.path)
        bounds = {}
        opened = {}
        for ref in refs:
            config = self._configs.get(ref.path)
            if config is None:
                config = self._configs[ref.path] = stores.infer_config(ref.path, self.opts.store_overrides)
            store = stores.open_read_only(ref.path, config)
            stores.catch_up(store)
            opened[ref.name] = (store, ref.path, config)
            for topic, qids in store.get_topics().items():
                if not self.opts.matches(topic):
                    continue
                for q in qids:
                    bounds[(ref.name, topic, q)] = stores.queue_bounds(store, topic, q)
        return multi, bounds, opened

    # -- the offsets ----------------------------------------------------------------------------

    def initialOffset(self) -> dict:
        if self._initial is None:
            multi, bounds, opened = self._scan()
            start = {}
            for key, (lo, hi) in bounds.items():
                store_name, topic, q = key
                off = offsets.resolve("start", self.opts, opened[store_name][0], store_name, topic, q, lo, hi)
                start[key] = min(max(off, lo), hi)
            self._initial = offsets.to_json(start, multi)
        return self._initial

    def getDefaultReadLimit(self):
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        _multi, bounds, _opened = self._scan()
        self._target = {k: hi for k, (_lo, hi) in bounds.items()}

    def _current(self, start: dict):
        multi, bounds, _opened = self._scan()
        begin = offsets.from_json(start, multi)
        cur, latest = {}, {}
        for key, (lo, hi) in bounds.items():
            s = begin.get(key, lo)                  # a new queue or topic: from its earliest
            s = min(max(s, lo), hi)
            top = hi if self._target is None else self._target.get(key, s)
            cur[key] = s
            latest[key] = max(s, min(hi, top))
        return multi, begin, cur, latest

    def latestOffset(self, start: dict, limit) -> dict:
        multi, begin, cur, latest = self._current(start)
        if isinstance(limit, ReadMaxRows):
            end = offsets.limit_by_backlog(cur, latest, limit.max_rows)
        else:
            end = latest
        for key, off in begin.items():          # queues no longer listed keep their offset
            end.setdefault(key, off)
        return offsets.to_json(end, multi)

    def reportLatestOffset(self):
        multi, bounds, _opened = self._scan()
        return offsets.to_json({k: hi for k, (_lo, hi) in bounds.items()}, multi)

    # -- the batches ----------------------------------------------------------------------------

    def partitions(self, start: dict, end: dict):
        multi, bounds, opened = self._scan()
        begin = offsets.from_json(start, multi)
        stop = offsets.from_json(end, multi)
        ranges = []
        for key, e in sorted(stop.items()):
            store_name, topic, q = key
            lo, hi = bounds.get(key, (0, 0))
            s = begin.get(key, 0 if key not in bounds else lo)
            if e <= s:
                continue
            if store_name not in opened or key not in bounds:
                data_loss(f"{store_name or self.opts.path}: queue {topic}-{q} is gone", self.opts.fail_on_data_loss)
                continue
            if s < lo:
                data_loss(f"{store_name or self.opts.path}: {topic}-{q} starts at {lo}, after the batch's "
                          f"start offset {s}", self.opts.fail_on_data_loss)
                s = lo
            if s >= e:
                continue
            _store, path, config = opened[store_name]
            ranges.append(partitions.QueueRange(
                store_name, path, topic, q, s, e, tuple(sorted(config.items())),
                self.opts.fail_on_data_loss, self.opts.batch_rows, self.opts.batch_bytes))
        return partitions.split(ranges, self.opts.min_partitions, self.opts.max_records_per_partition)

    def read(self, partition):
        return read_partition(partition if isinstance(partition, partitions.QueueRange) else None)

    def commit(self, end: dict) -> None:
        """Nothing to do: progress lives in Spark's checkpoint, never in the store."""

    def stop(self) -> None:
        stores.close_all()
