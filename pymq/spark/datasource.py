"""``PymqDataSource``: the data source named ``pymq`` (batch and streaming, read and write)."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource

from .batch_reader import PymqBatchReader, PymqPushdownReader
from .options import parse_read_options, parse_write_options
from .schema import READ_SCHEMA
from .stream_reader import PymqStreamReader
from .writer import PymqBatchWriter, PymqStreamWriter, check_write_schema


def _options(options) -> dict:
    """Spark's options, with ``load(p1, p2)``'s ``paths`` folded into ``path``."""
    opts = options
    paths = opts.get("paths")
    if paths and not opts.get("path"):
        import json

        opts = type(options)(options)
        opts["path"] = ",".join(json.loads(paths))
    if "paths" in opts:
        opts = type(opts)(opts)
        del opts["paths"]
    return opts


class PymqDataSource(DataSource):
    """RocketMQ-format message stores as a Spark source and sink.

    Read options: ``path`` (a store, a directory of stores, or a comma list), ``topics``,
    ``topicPattern``, ``startingOffsets``, ``endingOffsets``, ``startingTimestamp``,
    ``endingTimestamp``, ``startingOffsetsByTimestamp``, ``endingOffsetsByTimestamp``,
    ``minPartitions``, ``maxRecordsPerPartition``, ``maxOffsetsPerTrigger``,
    ``failOnDataLoss``, ``filterPushdown``, ``batchRows``, ``batchBytes``,
    ``store.<StoreConfig field>``.
    Write options: ``path``, ``queueNums``, ``lockTimeoutMs``, ``sinkId``,
    ``store.<StoreConfig field>``. See docs/spark.md.
    """

    @classmethod
    def name(cls) -> str:
        return "pymq"

    def schema(self):
        return READ_SCHEMA

    def _check_read_schema(self, schema) -> None:
        if schema is not None and schema != READ_SCHEMA:
            raise ValueError("the pymq source has a fixed schema (see pymq.spark.schema.READ_SCHEMA); "
                             "do not pass .schema(...), select the columns you need instead")

    def reader(self, schema):
        self._check_read_schema(schema)
        opts = parse_read_options(_options(self.options), streaming=False)
        return (PymqPushdownReader if opts.filter_pushdown else PymqBatchReader)(opts)

    def streamReader(self, schema):
        self._check_read_schema(schema)
        return PymqStreamReader(parse_read_options(_options(self.options), streaming=True))

    def writer(self, schema, overwrite: bool):
        if overwrite:
            raise ValueError("a pymq store is an append-only log: use mode('append')")
        check_write_schema(schema)
        return PymqBatchWriter(parse_write_options(_options(self.options), streaming=False))

    def streamWriter(self, schema, overwrite: bool):
        if overwrite:
            raise ValueError("a pymq store is an append-only log: use outputMode('append')")
        check_write_schema(schema)
        return PymqStreamWriter(parse_write_options(_options(self.options), streaming=True))
