"""The driver's commit: staged tasks appended to the store exactly once.

Spark calls the writer's ``commit`` on the driver once every task of a job (or of a
micro-batch) succeeded, with one message per partition from the attempt that succeeded;
failed attempts, retries and speculative duplicates never reach it. The commit opens the
store writable (it takes the store's exclusive lock for the duration), then for each task
not yet in the ledger (``pymq.spark.ledger``): records the intent, appends the staged rows
with ``put_messages`` (one batch per topic and queue, within the store's batch limits),
flushes the commit log, and marks the task done. Rows land in a fixed order (by topic,
then queue id, then their order in the task), and a row without a ``UNIQ_KEY`` property
gets one derived from the job, the partition and its index (32 hex digits, like a
client message id), so a commit resumed after a
crash can tell which of its rows are already in the store.
"""

from __future__ import annotations

import hashlib
import os
import shutil

import pyarrow as pa
import pyarrow.compute as pc

import pymq
from pymq.errors import PymqError

from . import stores
from .ledger import Ledger
from .staging import STAGING_DIR, read_staged


def uniq_prefix(job: str) -> str:
    """16 hex digits naming a job in the UNIQ_KEY of its rows."""
    return hashlib.sha1(job.encode()).hexdigest()[:16].upper()


def _append_order(table: pa.Table) -> list:
    """Row indices in append order: by topic, then queue id, then position (stable)."""
    return pc.sort_indices(table, sort_keys=[("topic", "ascending"), ("queue_id", "ascending")]).to_pylist()


def _messages(table: pa.Table, order: list, prefix: str) -> list:
    t = table.take(pa.array(order, pa.int64())) if order else table.slice(0, 0)
    topics = t.column("topic").to_pylist()
    queues = t.column("queue_id").to_pylist()
    bodies = t.column("body").to_pylist()
    tags = t.column("tags").to_pylist()
    keys = t.column("keys").to_pylist()
    props = t.column("properties").to_pylist()
    flags = t.column("flag").to_pylist()
    out = []
    Message = pymq.Message
    for i, row in enumerate(order):
        p = dict(props[i]) if props[i] else {}
        if "UNIQ_KEY" not in p:
            p["UNIQ_KEY"] = f"{prefix}{row:010X}"
        out.append(Message(topics[i], bodies[i], tags=tags[i] or None, keys=keys[i] or None, properties=p,
                           queue_id=queues[i], flag=flags[i]))
    return out


def _same(m, want) -> bool:
    return (m.topic == want.topic and m.queue_id == want.queue_id and m.body == want.body
            and m.properties.get("UNIQ_KEY") == want.properties.get("UNIQ_KEY"))


def count_landed(store: pymq.MessageStore, start: int, expected: list) -> int:
    """How many of ``expected`` (in append order) are the records from commit-log offset
    ``start`` on: the prefix an interrupted commit already appended."""
    file_size = store.commit_log.file_size
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


def _estimate(m) -> int:
    props = m.properties
    size = 20 + len(m.body) + 2 + sum(len(k) + len(v) + 2 for k, v in props.items())
    if m.tags:
        size += len(m.tags) + 6
    if m.keys:
        size += sum(len(k) + 1 for k in m.keys) + 6
    return size + 128 + len(m.topic)


def append(store: pymq.MessageStore, msgs: list) -> None:
    """``put_messages`` in runs of one topic and queue, each within the store's limits."""
    cfg = store.config
    budget = max(1, min(cfg.max_message_size, cfg.commitlog_file_size // 2) * 3 // 4)
    run: list = []
    size = 0
    key = None
    for m in msgs:
        k = (m.topic, m.queue_id)
        s = _estimate(m)
        if run and (k != key or size + s > budget):
            _put(store, run)
            run, size = [], 0
        run.append(m)
        size += s
        key = k
    if run:
        _put(store, run)


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


def commit_job(store_path: str, config_values: dict, lock_timeout_ms: int, job: str, tasks: list,
               staging_dirs: list) -> int:
    """Append the staged ``tasks`` (commit messages, None for tasks without one) of ``job``
    once; returns the number of rows appended by this call. Deletes the staged files and
    ``staging_dirs`` when done."""
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
                table = read_staged(task.path)
                order = _append_order(table)
                msgs = _messages(table, order, f"{prefix}{p & 0xFFFFFF:06X}")
                intent = ledger.intent(p)
                if intent is None:
                    ledger.write_intent(p, store.get_max_phy_offset(), len(msgs))
                    done = 0
                else:
                    done = count_landed(store, intent["start"], msgs)
                append(store, msgs[done:])
                store.flush()
                ledger.mark_task_done(p, len(msgs), len(msgs) - done)
                appended += len(msgs) - done
            ledger.mark_job_done(len(by_partition), rows)
        finally:
            store.shutdown()
    for t in by_partition.values():
        _remove(t.path)
    for d in staging_dirs:
        shutil.rmtree(d, ignore_errors=True)
    return appended


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def abort_job(tasks: list, staging_dirs: list) -> None:
    """Delete what the job staged; nothing was appended."""
    for t in tasks:
        if t is not None:
            _remove(t.path)
    for d in staging_dirs:
        shutil.rmtree(d, ignore_errors=True)
