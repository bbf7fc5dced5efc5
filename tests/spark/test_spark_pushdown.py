"""Filter pushdown: pushed filters shrink what is read (partitions, rows planned) and give
the same rows as the same conditions written so Spark cannot push them."""

from __future__ import annotations

import datetime
import time

import pytest
from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, In, IsNotNull, LessThan, StringStartsWith

import pymq
from pymq.spark.batch_reader import PymqPushdownReader
from pymq.spark.options import parse_read_options

from .helpers import fill_store, spark_config

LAYOUT = {("Orders", 0): 200, ("Orders", 1): 100, ("Orders", 2): 60, ("Audit", 0): 50, ("Audit", 1): 30}
PER_PARTITION = 10


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("pushdown") / "store"
    fill_store(path, LAYOUT)
    return str(path)


@pytest.fixture(scope="module")
def timed_dir(tmp_path_factory):
    """Three queues written in three bursts 30 ms apart; returns (path, the bursts' times)."""
    path = tmp_path_factory.mktemp("pushdown") / "timed"
    stamps = []
    with pymq.MessageStore(path, spark_config()) as store:
        for burst in range(3):
            for i in range(60):
                r = store.put_message(pymq.Message("T", b"%d/%d" % (burst, i), queue_id=i % 3))
                stamps.append(r.store_timestamp)
            time.sleep(0.03)
    return str(path), stamps


def scan(spark, path, pushdown=True):
    # a fresh DataFrame per query: Spark 4.3.0 would reuse one's pushed-down plan (docs/spark.md)
    return (spark.read.format("pymq").option("maxRecordsPerPartition", PER_PARTITION)
            .option("filterPushdown", str(pushdown).lower()).load(path))


def read(df):
    """``(rows, number of partitions planned)``."""
    got = df.select("topic", "queue_id", "queue_offset", "store_timestamp", "body").collect()
    return sorted(tuple(r) for r in got), df.rdd.getNumPartitions()


@pytest.fixture(scope="module")
def unfiltered(spark, store_dir):
    """Every row, read without any filter, and the number of partitions that takes."""
    return read(scan(spark, store_dir))


def check(spark, path, unfiltered, pushed: str, keep, expect_rows: int) -> int:
    """The rows of ``.filter(pushed)`` are those of the unfiltered read that ``keep``
    accepts, from fewer partitions; returns how many."""
    everything, all_parts = unfiltered
    got, parts = read(scan(spark, path).filter(pushed))
    assert got == [r for r in everything if keep(*r)]
    assert len(got) == expect_rows
    assert parts < all_parts, (pushed, parts, all_parts)
    return parts


def test_topic_equal_and_in(spark, store_dir, unfiltered):
    assert unfiltered[1] == 44
    assert check(spark, store_dir, unfiltered, "topic = 'Audit'", lambda t, q, o, ts, b: t == "Audit", 80) == 8
    check(spark, store_dir, unfiltered, "topic in ('Audit', 'Nope')", lambda t, q, o, ts, b: t == "Audit", 80)


def test_same_answer_as_the_same_condition_spark_cannot_push(spark, store_dir):
    pushed, opaque = "topic = 'Orders' and queue_id > 1", "concat(topic, '#') = 'Orders#' and queue_id + 1 > 2"
    a, parts_a = read(scan(spark, store_dir).filter(pushed))
    b, parts_b = read(scan(spark, store_dir).filter(opaque))
    assert a == b and len(a) == 60
    assert (parts_a, parts_b) == (6, 44)             # only the pushed one reads less


def test_queue_id_equal_in_and_ranges(spark, store_dir, unfiltered):
    check(spark, store_dir, unfiltered, "queue_id = 1", lambda t, q, o, ts, b: q == 1, 130)
    check(spark, store_dir, unfiltered, "queue_id in (0, 2)", lambda t, q, o, ts, b: q in (0, 2), 310)
    check(spark, store_dir, unfiltered, "queue_id >= 1 and queue_id < 2", lambda t, q, o, ts, b: q == 1, 130)


def test_queue_offset_ranges(spark, store_dir, unfiltered):
    assert check(spark, store_dir, unfiltered, "queue_offset >= 150", lambda t, q, o, ts, b: o >= 150, 50) == 5
    check(spark, store_dir, unfiltered, "queue_offset > 20 and queue_offset <= 40 and topic = 'Orders'",
          lambda t, q, o, ts, b: 20 < o <= 40 and t == "Orders", 60)
    check(spark, store_dir, unfiltered, "queue_offset in (3, 70)", lambda t, q, o, ts, b: o in (3, 70), 7)


def test_store_timestamp_ranges_use_the_time_lookup(spark, timed_dir):
    path, stamps = timed_dir
    everything = read(scan(spark, path))
    assert everything[1] == 18
    lo, hi = stamps[60], stamps[119]                  # the second burst
    spark.conf.set("spark.sql.session.timeZone", "UTC")

    def iso(ms):
        return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")

    def ms(ts):
        return round(ts.timestamp() * 1000)

    between = f"store_timestamp >= timestamp'{iso(lo)}' and store_timestamp <= timestamp'{iso(hi)}'"
    check(spark, path, everything, between, lambda t, q, o, ts, b: lo <= ms(ts) <= hi,
          sum(1 for t in stamps if lo <= t <= hi))
    check(spark, path, everything, f"store_timestamp > timestamp'{iso(hi)}'", lambda t, q, o, ts, b: ms(ts) > hi,
          sum(1 for t in stamps if t > hi))
    check(spark, path, everything, f"store_timestamp < timestamp'{iso(lo)}'", lambda t, q, o, ts, b: ms(ts) < lo,
          sum(1 for t in stamps if t < lo))


def test_push_filters_returns_what_it_does_not_handle_exactly(store_dir):
    reader = PymqPushdownReader(parse_read_options({"path": store_dir}, streaming=False))
    ts = datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc)
    filters = [EqualTo(("topic",), "Orders"), In(("queue_id",), (0, 1)), GreaterThanOrEqual(("queue_offset",), 90),
               IsNotNull(("body",)), IsNotNull(("tags",)), GreaterThanOrEqual(("store_timestamp",), ts),
               StringStartsWith(("topic",), "Ord"), LessThan(("queue_offset",), "x")]
    left = list(reader.pushFilters(filters))
    assert left == [IsNotNull(("tags",)), GreaterThanOrEqual(("store_timestamp",), ts),
                    StringStartsWith(("topic",), "Ord"), LessThan(("queue_offset",), "x")]
    planned = reader.partitions()
    assert sorted((p.topic, p.queue_id, p.start, p.end) for p in planned) == [("Orders", 0, 90, 200),
                                                                            ("Orders", 1, 90, 100)]
    assert sum(p.end - p.start for p in planned) == 120          # of 440 without the filters


def test_without_the_option_nothing_is_pushed_and_a_dataframe_can_be_reused(spark, store_dir):
    df = scan(spark, store_dir, pushdown=False)
    rows, parts = read(df.filter("topic = 'Audit'"))
    assert (len(rows), parts) == (80, 44)
    assert df.count() == 440
