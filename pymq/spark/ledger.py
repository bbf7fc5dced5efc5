"""The commit ledger: which staged tasks a store has appended, kept in the store.

``{store}/spark-staging/_ledger/{job}/`` holds small JSON markers, each written to a
temporary name, fsynced and renamed (then the directory fsynced), so a marker is either
absent or whole:

    {partition}.intent   before a task's rows are appended: the commit-log end offset
                         then (where its records start) and how many rows it has
    {partition}.done     after its rows are appended and flushed to disk
    _job.done            after every task of the job (or streaming batch) is appended

A commit skips a job with ``_job.done`` and a task with ``.done``. A task with only an
``.intent`` was cut short (the driver died mid-append): its records are compared, in
append order, with the staged rows from the intent's offset, and only the rows not found
are appended. Jobs are ``{uuid}`` for a batch write and ``sink-{id}-batch-{n}`` for a
micro-batch of a streaming write, so a batch Spark runs again after a restart is
recognised and skipped.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time

LEDGER_DIR = "_ledger"
KEEP_BATCH_JOBS_S = 7 * 24 * 3600        # ledgers of finished batch jobs kept a week
KEEP_STREAM_BATCHES = 100                # and the last 100 batches of each streaming sink


def _write_atomic(path: str, payload: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(payload, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read(path: str):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


class Ledger:
    """The markers of one job in one store."""

    def __init__(self, staging_root: str, job: str) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", job):
            raise ValueError(f"bad job name {job!r}")
        self.root = os.path.join(staging_root, LEDGER_DIR)
        self.path = os.path.join(self.root, job)
        self.job = job

    def job_done(self) -> bool:
        return os.path.exists(os.path.join(self.path, "_job.done"))

    def task_done(self, partition: int) -> bool:
        return os.path.exists(os.path.join(self.path, f"{partition}.done"))

    def intent(self, partition: int):
        return _read(os.path.join(self.path, f"{partition}.intent"))

    def write_intent(self, partition: int, start_offset: int, rows: int) -> None:
        os.makedirs(self.path, exist_ok=True)
        _write_atomic(os.path.join(self.path, f"{partition}.intent"), {"start": start_offset, "rows": rows})

    def mark_task_done(self, partition: int, rows: int, appended: int) -> None:
        os.makedirs(self.path, exist_ok=True)
        _write_atomic(os.path.join(self.path, f"{partition}.done"), {"rows": rows, "appended": appended})

    def mark_job_done(self, tasks: int, rows: int) -> None:
        os.makedirs(self.path, exist_ok=True)
        _write_atomic(os.path.join(self.path, "_job.done"), {"tasks": tasks, "rows": rows, "time": time.time()})

    def prune(self, sink_prefix: str | None = None, batch_id: int | None = None) -> None:
        """Drop old ledgers: a streaming sink's batches older than the last
        ``KEEP_STREAM_BATCHES``, finished batch jobs older than a week."""
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return
        now = time.time()
        for name in names:
            path = os.path.join(self.root, name)
            if sink_prefix is not None and batch_id is not None and name.startswith(sink_prefix):
                try:
                    n = int(name[len(sink_prefix):])
                except ValueError:
                    continue
                if n < batch_id - KEEP_STREAM_BATCHES:
                    shutil.rmtree(path, ignore_errors=True)
            elif not name.startswith("sink-"):
                done = _read(os.path.join(path, "_job.done"))
                if done is not None and now - done.get("time", now) > KEEP_BATCH_JOBS_S:
                    shutil.rmtree(path, ignore_errors=True)
