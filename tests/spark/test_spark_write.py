"""Writes: every row exactly once through task retries, aborted jobs, repeated commits, a
driver that died mid-commit, and streaming batches run again; a locked store."""

from __future__ import annotations

import os
import threading

import pyarrow as pa
import pytest

import pymq
from pymq.spark import commit as commit_mod
from pymq.spark import stores
from pymq.spark.ledger import Ledger
from pymq.spark.options import parse_write_options
from pymq.spark.staging import STAGING_DIR, StageSpec, stage_task
from pymq.spark.writer import PymqStreamWriter

from .helpers import fill_store, spark_config, store_messages

SPARK_MASTER = "local[2,3]"            # failed tasks are retried up to 3 times
STORE_OPTS = {"store.commitlog_file_size": str(64 * 1024), "store.consume_queue_entries": "64",
              "store.index_hash_slots": "64", "store.index_max_entries": "256"}


def source(spark, n, partitions=4):
    return spark.range(n).repartition(partitions).selectExpr(
        "'W' as topic", "cast(concat('m', id) as binary) as body", "concat('k', id) as keys",
        "cast(id % 3 as int) as queue_id", "map('id', cast(id as string)) as properties",
        "if(id % 2 = 0, 'even', null) as tags")


def write(df, path, **options):
    w = df.write.format("pymq").mode("append")
    for k, v in {**STORE_OPTS, **options}.items():
        w = w.option(k, v)
    w.save(str(path))


def bodies(path):
    return sorted(m.body for m in store_messages(path))


def staged_files(path):
    root = os.path.join(path, STAGING_DIR)
    out = []
    for dirpath, _dirs, files in os.walk(root):
        if "_ledger" not in dirpath and "_closed" not in dirpath:
            out.extend(files)
    return out


def failing_once(marker: str, bad_id: int):
    """A column that raises for row ``bad_id`` the first time only (a marker file
    remembers), as a lost executor or a flaky UDF would."""
    from pyspark.sql.functions import udf

    @udf("long", useArrow=False)
    def check(i):
        if i == bad_id and not os.path.exists(marker):
            open(marker, "w").close()
            raise RuntimeError("injected failure")
        return i

    return check


def test_a_batch_write_with_a_failing_task_lands_every_row_once(spark, tmp_path):
    path = tmp_path / "out"
    marker = str(tmp_path / "failed-once")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
    try:
        ids = spark.range(4000).repartition(4).withColumn("i", failing_once(marker, 3001)("id"))
        df = ids.selectExpr("'W' as topic", "cast(concat('m', i) as binary) as body", "concat('k', i) as keys",
                            "cast(i % 3 as int) as queue_id", "map('id', cast(i as string)) as properties",
                            "if(i % 2 = 0, 'even', null) as tags")
        write(df, path)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert os.path.exists(marker)                         # the failure did happen
    msgs = store_messages(path)
    assert sorted(m.body for m in msgs) == sorted(b"m%d" % i for i in range(4000))
    for m in msgs:
        i = int(m.body[1:])
        assert (m.queue_id, m.keys, m.properties["id"], m.tags) == (i % 3, [f"k{i}"], str(i),
                                                                    "even" if i % 2 == 0 else None)
    assert len({m.uniq_key for m in msgs}) == 4000
    assert staged_files(str(path)) == []                  # the failed attempt's file is gone too


def test_an_aborted_job_appends_nothing(spark, tmp_path):
    path = tmp_path / "out"
    write(source(spark, 100), path)
    from pyspark.sql.functions import udf

    @udf("long", useArrow=False)
    def never(i):
        if i == 77:
            raise RuntimeError("this row never works")
        return i

    df = spark.range(500).repartition(4).withColumn("i", never("id")).selectExpr(
        "'W' as topic", "cast(concat('x', i) as binary) as body")
    with pytest.raises(Exception, match="this row never works"):
        write(df, path)
    assert bodies(path) == sorted(b"m%d" % i for i in range(100))
    assert staged_files(str(path)) == []


def test_rows_the_store_would_refuse_fail_the_job_before_anything_is_appended(spark, tmp_path):
    path = tmp_path / "out"
    bad = spark.createDataFrame([("ok", b"x"), ("a/b", b"y")], "topic string, body binary")
    with pytest.raises(Exception, match="refused by the store"):
        write(bad, path)
    assert not os.path.exists(path / "commitlog") or bodies(path) == []
    with pytest.raises(Exception, match="must not be empty"):
        schema = "topic string, body binary, properties map<string,string>"
        write(spark.createDataFrame([("t", b"x", {"a": ""})], schema), path)
    with pytest.raises(Exception, match="unknown columns"):
        write(spark.createDataFrame([("t", b"x", 1)], "topic string, body binary, tag int"), path)
    with pytest.raises(Exception, match="append-only"):
        spark.createDataFrame([("t", b"x")], "topic string, body binary").write.format("pymq") \
            .mode("overwrite").save(str(path))


def test_a_read_written_back_keeps_tags_keys_properties_and_ids(spark, tmp_path):
    src = tmp_path / "src"
    fill_store(src, {("A", 0): 30, ("A", 1): 20, ("B", 0): 10})
    dst = tmp_path / "dst"
    write(spark.read.format("pymq").load(str(src)), dst)
    a = {m.uniq_key: m for m in store_messages(src)}
    b = {m.uniq_key: m for m in store_messages(dst)}
    assert a.keys() == b.keys()
    for k, m in a.items():
        n = b[k]
        assert (n.topic, n.queue_id, n.body, n.tags, n.keys) == (m.topic, m.queue_id, m.body, m.tags, m.keys)
        assert n.properties == m.properties


def _stage(spec, rows, partition):
    batch = pa.RecordBatch.from_pydict({"topic": ["C"] * len(rows), "body": rows,
                                        "queue_id": pa.array([0] * len(rows), pa.int32())})
    return stage_task(spec, [batch], partition=partition, attempt=0)


def test_commit_is_idempotent_and_resumes_an_interrupted_append(tmp_path):
    path = str(tmp_path / "store")
    overrides = stores.config_overrides(STORE_OPTS)
    spec = StageSpec(path, "job-a", {}, 4, False, "strict", 4 << 20)
    tasks = [_stage(spec, [b"a%d" % i for i in range(300)], 0), _stage(spec, [b"b%d" % i for i in range(200)], 1)]
    assert commit_mod.commit_job(path, overrides, 0, "job-a", tasks + [None], [spec.directory]) == 500
    assert commit_mod.commit_job(path, overrides, 0, "job-a", tasks, [spec.directory]) == 0   # again: nothing

    # a driver that died while appending: the intent is recorded, part of the rows are in
    spec = StageSpec(path, "job-b", {}, 4, False, "strict", 4 << 20)
    task = _stage(spec, [b"c%d" % i for i in range(400)], 0)
    ledger = Ledger(os.path.join(path, STAGING_DIR), "job-b")
    store = pymq.MessageStore(path, spark_config()).start()
    try:
        ledger.write_intent(0, store.get_max_phy_offset(), 400)
        table = commit_mod.read_staged(task.path)
        order = commit_mod._append_order(table)
        msgs, _runs = commit_mod._messages(table, order[:150], commit_mod.uniq_prefix("job-b") + "000000")
        commit_mod.append(store, msgs, [(0, 60), (60, 150)])
    finally:
        store.shutdown()
    assert commit_mod.commit_job(path, overrides, 0, "job-b", [task], [spec.directory]) == 250
    got = bodies(path)
    assert got == sorted([b"a%d" % i for i in range(300)] + [b"b%d" % i for i in range(200)]
                         + [b"c%d" % i for i in range(400)])


def test_a_streaming_write_lands_each_batch_once(spark, tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    fill_store(src, {("S", 0): 250, ("S", 1): 150})

    def run():
        q = (spark.readStream.format("pymq").option("path", str(src)).option("topics", "S")
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "150").load()
             .select("topic", "body", "queue_id", "keys", "tags", "properties")
             .writeStream.format("pymq").option("checkpointLocation", str(tmp_path / "ck"))
             .options(**STORE_OPTS).trigger(availableNow=True).start(str(dst)))
        q.awaitTermination(120)
        assert q.exception() is None, q.exception()

    run()
    assert bodies(dst) == bodies(src)
    with pymq.MessageStore(src, spark_config()) as store:
        for i in range(250, 300):
            store.put_message(pymq.Message("S", b"S/0/%d" % i, queue_id=0))
    run()                                            # a restart appends only the new batch
    assert bodies(dst) == bodies(src)

    # Spark running a batch again after a restart: the sink's ledger skips it
    opts = parse_write_options({"path": str(dst), "checkpointLocation": str(tmp_path / "ck"), **STORE_OPTS},
                               streaming=True)
    writer = PymqStreamWriter(opts)
    task = stage_task(writer.spec, [pa.RecordBatch.from_pydict({"topic": ["S"], "body": [b"again"]})], partition=0)
    writer.commit([task], 0)
    assert b"again" not in bodies(dst)
    task = stage_task(writer.spec, [pa.RecordBatch.from_pydict({"topic": ["S"], "body": [b"again"]})], partition=0)
    writer.commit([task], 10_000)                    # a new batch id is appended
    assert bodies(dst).count(b"again") == 1


def test_a_store_held_by_a_writer_blocks_the_commit_until_released(spark, tmp_path):
    path = tmp_path / "held"
    write(source(spark, 10), path)
    holder = pymq.MessageStore(path, spark_config()).start()
    try:
        with pytest.raises(Exception, match="lockTimeoutMs"):
            write(source(spark, 20), path)
    finally:
        timer = threading.Timer(1.0, holder.shutdown)
        timer.start()
    write(source(spark, 20), path, lockTimeoutMs="30000")     # waits for the holder to let go
    timer.join()
    assert len(bodies(path)) == 30
    assert staged_files(str(path)) == []


def test_batches_are_cut_to_the_store_limits(tmp_path):
    path = str(tmp_path / "store")
    big = [bytes([65 + i % 26]) * 30_000 for i in range(12)]
    spec = StageSpec(path, "job-big", {}, 4, False, "strict", 4 << 20)
    task = _stage(spec, big, 0)
    table = commit_mod.read_staged(task.path)
    budget = commit_mod.batch_budget(spark_config())           # 24 KiB with 64 KiB segments
    _msgs, runs = commit_mod._messages(table, commit_mod._append_order(table), "X" * 22, budget)
    assert runs == [(i, i + 1) for i in range(12)]              # a body above the budget goes alone
    assert commit_mod.commit_job(path, stores.config_overrides(STORE_OPTS), 0, "job-big", [task],
                                 [spec.directory]) == 12
    assert bodies(path) == sorted(big)
