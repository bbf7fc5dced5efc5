"""Write tasks: rows normalized, checked and staged as Arrow IPC files; nothing appended.

A task turns its rows into the staging layout (``STAGE_SCHEMA``: topic, queue id, body,
tags, keys as one space-separated string, properties, flag, uniq key), fails on rows the
store would refuse (a missing topic or body, a topic the store's validation rejects, a
body above ``max_message_size``, a negative queue id, an empty property name or value or
one holding the separators \\x01 / \\x02), gives every row without a queue id one, and
writes the whole task to

    {store}/spark-staging/{job}/{partition}-{attempt}-{task attempt id}.arrow

under a temporary name renamed once the file is complete and on disk. The path goes
back to the driver in the task's commit message; only the driver's commit appends
(``pymq.spark.commit``). A failed or retried attempt leaves at most an orphan file, which
the job's commit or abort deletes; an attempt still running when the job ended finds the
job's ``_closed`` marker and removes its own file.

Queue ids: a row's ``queue_id`` when set; else, for a row with keys, Java's
``String.hashCode`` of its KEYS string modulo the topic's queue count (RocketMQ's
``SelectMessageQueueByHash``), so messages with the same keys keep their order in one
queue; else round-robin. The queue count is option ``queueNums``, else the topic's
current number of queues in the store, else 4.
"""

from __future__ import annotations

import dataclasses
import os
import time
import uuid

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import WriterCommitMessage

from pymq._core.appender import validate_topic
from pymq._core.record import java_hash_code

STAGING_DIR = "spark-staging"
CLOSED_DIR = "_closed"


def closed_marker(store_path: str, job_dir: str) -> str:
    """Exists once a batch job was committed or aborted: a task still running then (a
    zombie attempt) must not leave a file behind."""
    return os.path.join(store_path, STAGING_DIR, CLOSED_DIR, job_dir)


def close_job(store_path: str, job_dir: str, keep_s: float = 86_400.0) -> None:
    """Mark a batch job closed; markers older than ``keep_s`` are dropped meanwhile (no
    task outlives its job by a day)."""
    path = closed_marker(store_path, job_dir)
    root = os.path.dirname(path)
    os.makedirs(root, exist_ok=True)
    with open(path, "w"):
        pass
    now = time.time()
    for name in os.listdir(root):
        try:
            if now - os.path.getmtime(os.path.join(root, name)) > keep_s:
                os.remove(os.path.join(root, name))
        except FileNotFoundError:
            pass

STAGE_SCHEMA = pa.schema([
    pa.field("topic", pa.string(), nullable=False),
    pa.field("queue_id", pa.int32(), nullable=False),
    pa.field("body", pa.binary(), nullable=False),
    pa.field("tags", pa.string()),
    pa.field("keys", pa.string()),
    pa.field("properties", pa.map_(pa.string(), pa.string())),
    pa.field("flag", pa.int32(), nullable=False),
    pa.field("uniq_key", pa.string()),
])


@dataclasses.dataclass
class StagedTask(WriterCommitMessage):
    """What a write task sends to the driver: where its rows wait, and how many."""

    partition: int
    attempt: int
    path: str
    rows: int


@dataclasses.dataclass(frozen=True)
class StageSpec:
    """Everything a task needs, pickled from the driver."""

    store_path: str
    job_dir: str                   # subdirectory of spark-staging/
    queue_nums: dict               # topic -> queue count (existing topics)
    default_queue_nums: int
    fixed_queue_nums: bool         # queueNums given: it wins over existing counts
    topic_validation: str
    max_message_size: int
    closable: bool = True          # a batch job: closed once committed or aborted

    @property
    def directory(self) -> str:
        return os.path.join(self.store_path, STAGING_DIR, self.job_dir)

    @property
    def closed_marker(self) -> str:
        return closed_marker(self.store_path, self.job_dir)

    def queue_count(self, topic: str) -> int:
        if self.fixed_queue_nums:
            return self.default_queue_nums
        return self.queue_nums.get(topic, self.default_queue_nums)


class _QueueChooser:
    def __init__(self, spec: StageSpec, seed: int) -> None:
        self.spec = spec
        self.next = seed

    def choose(self, topics: list, keys: list, given: list) -> pa.Array:
        out = []
        for t, k, q in zip(topics, keys, given):
            if q is None:
                n = self.spec.queue_count(t)
                if k:
                    h = java_hash_code(k)
                    q = (-h if h < 0 else h) % n
                else:
                    q = self.next % n
                    self.next += 1
            out.append(q)
        return pa.array(out, pa.int32())


def _column(batch: pa.RecordBatch, name: str):
    i = batch.schema.get_field_index(name)
    return batch.column(i) if i >= 0 else None


def normalize(batch: pa.RecordBatch, spec: StageSpec, chooser: _QueueChooser, checked: set) -> pa.RecordBatch:
    """One input batch in ``STAGE_SCHEMA``; raises ``ValueError`` for rows the store refuses."""
    n = batch.num_rows
    topic = _column(batch, "topic")
    body = _column(batch, "body")
    if topic is None or body is None:
        raise ValueError("a pymq write needs columns topic and body")
    topic = topic.cast(pa.string())
    if topic.null_count:
        raise ValueError("column topic has nulls: every message needs a topic")
    for t in pc.unique(topic).to_pylist():
        if t not in checked:
            why = validate_topic(t, spec.topic_validation)
            if why is not None:
                raise ValueError(f"topic {t!r} is refused by the store: {why}")
            checked.add(t)
    body = body.cast(pa.binary())
    if body.null_count:
        raise ValueError("column body has nulls: every message needs a body (b'' for an empty one)")
    if n and pc.max(pc.binary_length(body)).as_py() > spec.max_message_size:
        raise ValueError(f"a body is larger than max_message_size ({spec.max_message_size} bytes)")
    tags = _column(batch, "tags")
    tags = pa.nulls(n, pa.string()) if tags is None else tags.cast(pa.string())
    keys = _column(batch, "keys")
    if keys is None:
        keys = pa.nulls(n, pa.string())
    elif pa.types.is_list(keys.type) or pa.types.is_large_list(keys.type):
        keys = pc.binary_join(keys.cast(pa.list_(pa.string())), " ")
    else:
        keys = keys.cast(pa.string())
    props = _column(batch, "properties")
    if props is None:
        props = pa.nulls(n, STAGE_SCHEMA.field("properties").type)
    else:
        props = props.cast(STAGE_SCHEMA.field("properties").type)
    flag = _column(batch, "flag")
    flag = pa.array([0] * n, pa.int32()) if flag is None else pc.fill_null(flag.cast(pa.int32()), 0)
    uniq = _column(batch, "uniq_key")
    uniq = pa.nulls(n, pa.string()) if uniq is None else uniq.cast(pa.string())
    queue = _column(batch, "queue_id")
    if queue is None or queue.null_count:
        given = [None] * n if queue is None else queue.cast(pa.int32()).to_pylist()
        queue = chooser.choose(topic.to_pylist(), keys.to_pylist(), given)
    else:
        queue = queue.cast(pa.int32())
    if n and pc.min(queue).as_py() < 0:
        raise ValueError("column queue_id has a negative value")
    _check_separators(tags, keys, props, uniq)
    return pa.RecordBatch.from_arrays([topic, queue, body, tags, keys, props, flag, uniq], schema=STAGE_SCHEMA)


def _bad_strings(arr) -> bool:
    """True when a string holds RocketMQ's property separators (\\x01, \\x02)."""
    if arr is None or len(arr) == 0 or arr.null_count == len(arr):
        return False
    return bool(pc.any(pc.match_substring_regex(arr, "[\\x01\\x02]")).as_py())


def _check_separators(tags, keys, props, uniq) -> None:
    names, values = props.keys, props.items
    if _bad_strings(tags) or _bad_strings(keys) or _bad_strings(uniq) or _bad_strings(names) or _bad_strings(values):
        raise ValueError("tags, keys, uniq_key and properties must not hold the characters \\x01 or \\x02")
    if len(names) and (pc.min(pc.binary_length(names)).as_py() == 0
                       or pc.min(pc.fill_null(pc.binary_length(values), 1)).as_py() == 0):
        raise ValueError("property names and values must not be empty")


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def stage_task(spec: StageSpec, batches, partition=None, attempt=None) -> StagedTask:
    """Stage the rows of the running task (or of ``partition`` / ``attempt`` outside a
    Spark task); returns its commit message."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if partition is None:
        partition = ctx.partitionId() if ctx else 0
    if attempt is None:
        attempt = ctx.attemptNumber() if ctx else 0
    task_attempt = ctx.taskAttemptId() if ctx else uuid.uuid4().int % 10**9
    if spec.closable and os.path.exists(spec.closed_marker):
        raise RuntimeError(f"job {spec.job_dir} was already committed or aborted")
    os.makedirs(spec.directory, exist_ok=True)
    final = os.path.join(spec.directory, f"{partition:05d}-{attempt}-{task_attempt}.arrow")
    tmp = final + ".tmp"
    rows = 0
    chooser = _QueueChooser(spec, partition)
    checked: set = set()
    with open(tmp, "wb") as f:
        with pa.ipc.new_file(f, STAGE_SCHEMA) as w:
            for batch in batches:
                if batch.num_rows:
                    w.write_batch(normalize(batch, spec, chooser, checked))
                    rows += batch.num_rows
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, final)
    _fsync_dir(spec.directory)
    if spec.closable and os.path.exists(spec.closed_marker):
        # the job ended while this attempt ran (its commit or abort is done): the order
        # marker-then-delete there and write-then-check here leaves no file behind
        os.remove(final)
        raise RuntimeError(f"job {spec.job_dir} was already committed or aborted")
    return StagedTask(partition, attempt, final, rows)


def read_staged(path: str) -> pa.Table:
    with pa.OSFile(path, "rb") as source:
        return pa.ipc.open_file(source).read_all()
