"""Streaming reads: bounded batches, AvailableNow, restarts from the checkpoint, new queues
and topics, data loss."""

from __future__ import annotations

import os
import time

import pytest

import pymq
from pymq.spark import offsets
from pymq.spark.options import parse_read_options
from pymq.spark.stream_reader import PymqStreamReader

from .helpers import body_of, fill_store, spark_config


class Batches:
    """A foreachBatch sink that keeps (batch id, rows) of every micro-batch."""

    def __init__(self):
        self.batches = []

    def __call__(self, df, batch_id):
        rows = [(r.topic, r.queue_id, r.queue_offset, r.body) for r in
                df.select("topic", "queue_id", "queue_offset", "body").collect()]
        self.batches.append((batch_id, rows))

    @property
    def rows(self):
        return [r for _, rows in self.batches for r in rows]


def run_available_now(spark, path, checkpoint, sink, **options):
    reader = spark.readStream.format("pymq").option("path", str(path))
    for k, v in options.items():
        reader = reader.option(k, str(v))
    q = (reader.load().writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start())
    q.awaitTermination(120)
    progress = [p["numInputRows"] for p in q.recentProgress]
    if q.exception() is not None:
        raise RuntimeError(str(q.exception()))
    return progress


def append(path, layout, start):
    """Add ``layout[(topic, q)]`` messages per queue, numbered on from ``start``'s counts."""
    with pymq.MessageStore(path, spark_config()) as store:
        for (topic, q), n in layout.items():
            base = start.get((topic, q), 0)
            for i in range(base, base + n):
                r = store.put_message(pymq.Message(topic, body_of(topic, q, i), queue_id=q))
                assert r.status is pymq.PutMessageStatus.PUT_OK


def test_bounded_batches_read_everything_once_and_a_restart_reads_only_new_messages(spark, tmp_path):
    path = tmp_path / "store"
    first = {("T", 0): 500, ("T", 1): 200, ("T", 2): 100}
    fill_store(path, first)
    sink = Batches()
    progress = run_available_now(spark, path, tmp_path / "ck", sink, topicPattern="T.*",
                                 startingOffsets="earliest", maxOffsetsPerTrigger=300)
    sizes = [len(rows) for _, rows in sink.batches]
    assert sizes == [300, 300, 200]                        # bounded, and all of it
    assert [p for p in progress if p] == sizes
    got = sink.rows
    assert len(set(got)) == len(got) == 800
    assert sorted(got) == sorted((t, q, i, body_of(t, q, i)) for (t, q), n in first.items() for i in range(n))
    per_queue = [sum(1 for r in sink.batches[0][1] if r[1] == q) for q in range(3)]
    assert per_queue == [188, 75, 37]                      # the limit shared by backlog

    # new messages, a new queue and a new topic while the query is stopped
    more = {("T", 0): 100, ("T", 3): 50, ("T2", 0): 30, ("Other", 0): 10}
    append(path, more, {k: v for k, v in first.items()})
    sink2 = Batches()
    run_available_now(spark, path, tmp_path / "ck", sink2, topicPattern="T.*", startingOffsets="earliest",
                      maxOffsetsPerTrigger=300)
    assert [len(rows) for _, rows in sink2.batches] == [180]
    assert sorted(sink2.rows) == sorted(
        [("T", 0, i, body_of("T", 0, i)) for i in range(500, 600)]
        + [("T", 3, i, body_of("T", 3, i)) for i in range(50)]
        + [("T2", 0, i, body_of("T2", 0, i)) for i in range(30)])
    assert sink2.batches[0][0] == sink.batches[-1][0] + 1    # batch ids go on from the checkpoint

    # nothing new: a third run reads nothing
    sink3 = Batches()
    run_available_now(spark, path, tmp_path / "ck", sink3, topicPattern="T.*", maxOffsetsPerTrigger=300)
    assert sink3.rows == []


def test_starting_from_latest_or_a_timestamp(spark, tmp_path):
    path = tmp_path / "store"
    fill_store(path, {("T", 0): 40})
    with pymq.MessageStore(path, spark_config()) as store:
        ts = store.put_message(pymq.Message("T", body_of("T", 0, 40), queue_id=0)).store_timestamp
    sink = Batches()
    run_available_now(spark, path, tmp_path / "ck1", sink, topics="T", startingTimestamp=ts)
    first = offsets_by_time(path, ts)
    assert first <= 40 and sorted(r[2] for r in sink.rows) == list(range(first, 41))
    sink = Batches()
    run_available_now(spark, path, tmp_path / "ck2", sink, topics="T")      # default: latest
    assert sink.rows == []


def offsets_by_time(path, ts):
    store = pymq.MessageStore(path, spark_config(), read_only=True)
    try:
        return store.get_offset_in_queue_by_time("T", 0, ts, pymq.BoundaryType.LOWER)
    finally:
        store.shutdown()


def test_initial_offset_is_resolved_once(tmp_path):
    path = tmp_path / "store"
    fill_store(path, {("T", 0): 10})
    reader = PymqStreamReader(parse_read_options({"path": str(path), "topics": "T"}, streaming=True))
    first = reader.initialOffset()
    assert first == {"T": {"0": 10}}
    append(path, {("T", 0): 5}, {("T", 0): 10})
    assert reader.initialOffset() == first                 # "latest" is not resolved again
    from pyspark.sql.streaming.datasource import ReadMaxRows

    assert reader.latestOffset(first, ReadMaxRows(3)) == {"T": {"0": 13}}


def test_limit_by_backlog_shares_and_totals():
    start = {("", "T", q): 0 for q in range(3)}
    latest = {("", "T", 0): 1000, ("", "T", 1): 10, ("", "T", 2): 1}
    end = offsets.limit_by_backlog(start, latest, 100)
    assert sum(end.values()) == 100 and end[("", "T", 0)] >= 98 and end[("", "T", 1)] >= 1
    assert offsets.limit_by_backlog(start, latest, 5000) == latest
    assert offsets.to_json(latest, False) == {"T": {"0": 1000, "1": 10, "2": 1}}
    assert offsets.from_json(offsets.to_json(latest, True), True) == latest


@pytest.mark.parametrize("how", ["segments removed by hand", "store cleaning"])
def test_fail_on_data_loss_when_retention_removed_unread_messages(spark, tmp_path, how):
    path = tmp_path / "store"
    fill_store(path, {("T", 0): 300})
    sink = Batches()
    run_available_now(spark, path, tmp_path / "ck", sink, topics="T", startingOffsets="earliest")
    assert len(sink.rows) == 300
    append(path, {("T", 0): 1500}, {("T", 0): 300})
    if how == "store cleaning":                              # the store's own retention
        time.sleep(0.3)
        cfg = spark_config()
        cfg.file_reserved_time = 0.2 / 3600
        with pymq.MessageStore(path, cfg) as store:
            out = store.delete_expired_files()
            assert out["commitlog"] >= 2 and out["consume_queue"] >= 1
    else:
        names = sorted(os.listdir(path / "commitlog"))
        for name in names[:2]:                              # retention: the oldest segments go
            os.remove(path / "commitlog" / name)
    with pytest.raises(Exception, match="failOnDataLoss"):
        run_available_now(spark, path, tmp_path / "ck", Batches(), topics="T")
    sink = Batches()
    run_available_now(spark, path, tmp_path / "ck", sink, topics="T", failOnDataLoss="false")
    offs = sorted(r[2] for r in sink.rows)
    assert offs and offs[0] > 300 and offs == list(range(offs[0], 1800))
    assert all(r[3] == body_of("T", 0, r[2]) for r in sink.rows)
