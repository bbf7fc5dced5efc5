"""The driver's commit: staged tasks appended to the store exactly once.

Spark calls the writer's ``commit`` on the driver once every task of a job (or of a
micro-batch) succeeded, with one message per partition from the attempt that succeeded;
failed attempts, retries and speculative duplicates never reach it. The commit opens the
store writable (it takes the store's exclusive lock for the duration), then for each task
not yet in the ledger (``pymq.spark.ledger``): records the intent, appends the staged rows
with ``put_messages`` (one batch per topic and queue, within the store's batch limits),
flushes the commit log, and marks the task done. Rows land in a fixed order (by topic,
then queue id, then their order in the task), and a row without a uniq key (column
``uniq_key`` or property ``UNIQ_KEY``) gets one derived from the job, the partition and its index (32 hex digits, like a
client message id), so a commit resumed after a crash can tell which of its rows are
already in the store.
"""

from __future__ import annotations

import gc
import hashlib
import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import pymq
from pymq._core.columns import build_messages
from pymq.errors import PymqError

from . import stores
from .ledger import Ledger
from .staging import STAGING_DIR, close_job, read_staged

CHUNK_ROWS = 65_536              # rows turned into Messages at a time


def uniq_prefix(job: str) -> str:
    """16 hex digits naming a job in the UNIQ_KEY of its rows."""
    return hashlib.sha1(job.encode()).hexdigest()[:16].upper()


def _append_order(table: pa.Table) -> list:
    """Row indices in append order: by topic, then queue id, then position (stable)."""
    return pc.sort_indices(table, sort_keys=[("topic", "ascending"), ("queue_id", "ascending")]).to_pylist()


def _lengths(arr) -> np.ndarray:
    return pc.fill_null(pc.binary_length(arr), 0).to_numpy(zero_copy_only=False).astype(np.int64)


def _estimates(t: pa.Table) -> np.ndarray:
    """Per row, a bound of what a row adds to a batch (record header, body, properties)."""
    props = t.column("properties").combine_chunks()
    entry = np.concatenate([[0], np.cumsum(_lengths(props.keys) + _lengths(props.items) + 2)])
    offsets = props.offsets.to_numpy(zero_copy_only=False)
    return (192 + _lengths(t.column("topic")) + _lengths(t.column("body")) + _lengths(t.column("tags"))
            + _lengths(t.column("keys")) + entry[offsets[1:]] - entry[offsets[:-1]])


def _runs(t: pa.Table, budget: int) -> list:
    """``[(start, end)]`` of the rows of ``t`` (in append order): runs of one topic and
    queue whose estimated size stays within ``budget`` (or of one row)."""
    n = t.num_rows
    if n == 0:
        return []
    topic = pc.dictionary_encode(t.column("topic")).combine_chunks().indices.to_numpy(zero_copy_only=False)
    queue = t.column("queue_id").to_numpy()
    cuts = np.flatnonzero((topic[1:] != topic[:-1]) | (queue[1:] != queue[:-1])) + 1
    total = np.concatenate([[0], np.cumsum(_estimates(t))])
    out = []
    for a, b in zip(np.concatenate([[0], cuts]).tolist(), np.concatenate([cuts, [n]]).tolist()):
        while a < b:
            end = int(np.searchsorted(total, total[a] + budget, side="right")) - 1
            end = min(b, max(end, a + 1))
            out.append((a, end))
            a = end
    return out


def _messages(table: pa.Table, rows: list, prefix: str, budget: int = 1 << 20) -> tuple:
    """``(messages, runs)`` of the staged ``rows`` in that order: the ``Message``
    objects, and how to cut them into ``put_messages`` batches (see ``_runs``)."""
    t = table.take(pa.array(rows, pa.int64())) if rows else table.slice(0, 0)
    props = t.column("properties").combine_chunks()
    if props.offset:
        props = pa.concat_arrays([props])           # offsets from 0 for the flattened lists
    enabled = gc.isenabled()
    gc.disable()                 # a cycle pass per 700 new objects makes this quadratic
    try:
        out = build_messages(
            t.column("topic").to_pylist(), t.column("body").to_pylist(), t.column("tags").to_pylist(),
            t.column("keys").to_pylist(), props.keys.to_pylist(), props.items.to_pylist(),
            props.offsets.to_pylist(), t.column("queue_id").to_pylist(), t.column("flag").to_pylist(),
            t.column("uniq_key").to_pylist(), rows, prefix)
    finally:
        if enabled:
            gc.enable()
    return out, _runs(t, budget)


def _same(m, want) -> bool:
    return (m.topic == want.topic and m.queue_id == want.queue_id and m.body == want.body
            and m.properties.get("UNIQ_KEY") == want.properties.get("UNIQ_KEY"))


def count_landed(store: pymq.MessageStore, start: int, expected: list) -> int:
    """How many of ``expected`` (in append order) are the records from commit-log offset
    ``start`` on: the prefix an interrupted commit already appended."""
    file_size = store.config.commitlog_file_size
    end = store.get_max_phy_offset()
    off, k = start, 0
    while k < len(expected) and off < end:
        m = store.look_message_by_offset(off)
        if m is None:                        # the blank that closes a segment
            off = (off // file_size + 1) * file_size
            continue
        if not _same(m, expected[k]):
            break
        k += 1
        off += m.store_size
    return k


def batch_budget(config: pymq.StoreConfig) -> int:
    """Bytes of messages per ``put_messages``: well within the store's batch limits (the
    body-and-properties total, ``max_message_size``, and one commit-log segment)."""
    return max(1, min(config.max_message_size, config.commitlog_file_size // 2) * 3 // 4)


def append(store: pymq.MessageStore, msgs: list, runs: list) -> None:
    """``put_messages`` for each run of ``msgs``."""
    for a, b in runs:
        _put(store, msgs[a:b])


def _put(store: pymq.MessageStore, run: list) -> None:
    r = store.put_messages(run)
    if r.status is pymq.PutMessageStatus.PUT_OK:
        return
    if len(run) > 1 and r.status is pymq.PutMessageStatus.MESSAGE_ILLEGAL:
        half = len(run) // 2                 # a batch over the size limits: split it
        _put(store, run[:half])
        _put(store, run[half:])
        return
    raise PymqError(f"the store refused a batch of {len(run)} messages of {run[0].topic}-{run[0].queue_id}: "
                    f"{r.status.name}")


def append_task(store: pymq.MessageStore, ledger: Ledger, task, prefix: str) -> int:
    """Append one staged task (resuming an interrupted append); returns rows appended."""
    table = read_staged(task.path)
    order = _append_order(table)
    intent = ledger.intent(task.partition)
    done = 0
    if intent is None:
        ledger.write_intent(task.partition, store.get_max_phy_offset(), len(order))
    else:
        done = count_landed(store, intent["start"], _messages(table, order, prefix)[0])
    budget = batch_budget(store.config)
    for a in range(done, len(order), CHUNK_ROWS):
        msgs, runs = _messages(table, order[a:a + CHUNK_ROWS], prefix, budget)
        append(store, msgs, runs)
    store.flush()
    ledger.mark_task_done(task.partition, len(order), len(order) - done)
    return len(order) - done


def commit_job(store_path: str, config_values: dict, lock_timeout_ms: int, job: str, tasks: list,
               staging_dirs: list, close: bool = True) -> int:
    """Append the staged ``tasks`` (commit messages, None for tasks without one) of ``job``
    once; returns the number of rows appended by this call. Deletes the staged files and
    ``staging_dirs`` when done, marking them closed first when ``close`` (batch jobs)."""
    staging_root = os.path.join(store_path, STAGING_DIR)
    ledger = Ledger(staging_root, job)
    by_partition = {}
    for t in tasks:
        if t is not None:
            by_partition.setdefault(t.partition, t)
    appended = 0
    if not ledger.job_done():
        stores.close_all()                   # no read-only view of it in this process meanwhile
        config = pymq.StoreConfig(**stores.infer_config(store_path, config_values, for_writing=True))
        store = stores.open_writable(store_path, config, lock_timeout_ms)
        try:
            prefix = uniq_prefix(job)
            rows = 0
            for p in sorted(by_partition):
                task = by_partition[p]
                rows += task.rows
                if ledger.task_done(p):
                    continue
                appended += append_task(store, ledger, task, f"{prefix}{p & 0xFFFFFF:06X}")
            ledger.mark_job_done(len(by_partition), rows)
        finally:
            store.shutdown()
    _clean(store_path, tasks, staging_dirs, close)
    return appended


def _clean(store_path: str, tasks: list, staging_dirs: list, close: bool) -> None:
    if close:
        for d in staging_dirs:
            close_job(store_path, os.path.basename(d))
    for t in tasks:
        if t is not None:
            _remove(t.path)
    for d in staging_dirs:
        shutil.rmtree(d, ignore_errors=True)


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def abort_job(store_path: str, tasks: list, staging_dirs: list, close: bool = True) -> None:
    """Delete what the job staged; nothing was appended."""
    _clean(store_path, tasks, staging_dirs, close)
