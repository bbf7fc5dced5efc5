"""Writers: ``df.write.format("pymq")`` and ``df.writeStream.format("pymq")``, exactly once.

Tasks stage their rows (``pymq.spark.staging``); the driver's commit appends them and
records them in the store's ledger (``pymq.spark.commit``, ``pymq.spark.ledger``); abort
deletes the staged files. A batch write is one job (a fresh id); a streaming write is
one job per micro-batch, named by the sink (option ``sinkId``, else the checkpoint
location) and the batch id, so a batch Spark re-runs after a restart is skipped.

The commit takes the store's exclusive lock: a process that keeps the store open for
writing (a running ``MessageStore``) blocks it. Stop that process, give
``lockTimeoutMs`` to wait for it, or write into a store of its own.
"""

from __future__ import annotations

import hashlib
import os
import uuid

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter

import pymq

from . import stores
from .commit import abort_job, commit_job
from .ledger import Ledger
from .options import DEFAULT_QUEUE_NUMS, WriteOptions
from .schema import READ_SCHEMA, WRITE_COLUMNS
from .staging import STAGING_DIR, StageSpec, stage_task


def check_write_schema(schema) -> None:
    """Refuse a DataFrame without topic and body, or with a column pymq does not know."""
    names = [f.name for f in schema.fields]
    missing = [c for c in ("topic", "body") if c not in names]
    if missing:
        raise ValueError(f"a pymq write needs columns topic and body; missing {missing}")
    known = set(WRITE_COLUMNS) | set(READ_SCHEMA.fieldNames())
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown columns {unknown} for a pymq write; it takes {sorted(WRITE_COLUMNS)} "
                         "(and ignores the other columns a pymq read returns)")


def _stage_spec(opts: WriteOptions, job_dir: str, closable: bool) -> StageSpec:
    path = os.path.abspath(opts.path)
    values = stores.infer_config(path, opts.store_overrides) if stores.is_store(path) else dict(opts.store_overrides)
    config = pymq.StoreConfig(**values)
    counts = {}
    if stores.is_store(path):
        store = stores.open_read_only(path, values)
        stores.catch_up(store)
        counts = {t: max(qids) + 1 for t, qids in store.get_topics().items() if qids}
    return StageSpec(path, job_dir, counts, opts.queue_nums or DEFAULT_QUEUE_NUMS, opts.queue_nums is not None,
                     config.topic_validation, config.max_message_size, closable)


class PymqBatchWriter(DataSourceArrowWriter):
    """Appends a DataFrame to one store in the driver's commit, exactly once."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts
        self.job = uuid.uuid4().hex
        self.spec = _stage_spec(opts, self.job, closable=True)

    def write(self, iterator):
        return stage_task(self.spec, iterator)

    def commit(self, messages) -> None:
        commit_job(self.spec.store_path, self.opts.store_overrides, self.opts.lock_timeout_ms, self.job,
                   list(messages), [self.spec.directory])

    def abort(self, messages) -> None:
        abort_job(self.spec.store_path, list(messages), [self.spec.directory])


def sink_name(sink_id: str) -> str:
    return "sink-" + hashlib.sha1(sink_id.encode()).hexdigest()[:16]


class PymqStreamWriter(DataSourceStreamArrowWriter):
    """Appends each micro-batch once, keyed by (sink, batch id)."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts
        self.sink = sink_name(opts.sink_id)
        self.spec = _stage_spec(opts, f"{self.sink}-{uuid.uuid4().hex[:12]}", closable=False)

    def write(self, iterator):
        return stage_task(self.spec, iterator)

    def commit(self, messages, batchId: int) -> None:
        job = f"{self.sink}-batch-{batchId}"
        commit_job(self.spec.store_path, self.opts.store_overrides, self.opts.lock_timeout_ms, job,
                   list(messages), [self.spec.directory], close=False)
        Ledger(os.path.join(self.spec.store_path, STAGING_DIR), job).prune(f"{self.sink}-batch-", batchId)

    def abort(self, messages, batchId: int) -> None:
        abort_job(self.spec.store_path, list(messages), [self.spec.directory], close=False)
