"""Batch reads: every message once, offsets, timestamps, subscriptions, partitions,
multi-store layouts, data loss, and a store another process is appending to."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

import pymq
from pymq.spark import ARROW_SCHEMA, READ_SCHEMA

from .helpers import body_of, fill_store, row_key, spark_config, store_messages

LAYOUT = {("Orders", 0): 300, ("Orders", 1): 120, ("Orders", 2): 0, ("Audit", 0): 90, ("Audit", 3): 40}


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("read") / "store"
    fill_store(path, {k: v for k, v in LAYOUT.items() if v})
    return str(path)


def load(spark, path, **options):
    reader = spark.read.format("pymq")
    for k, v in options.items():
        reader = reader.option(k, v if isinstance(v, str) else json.dumps(v))
    return reader.load(path)


def keys_of(df):
    return sorted(row_key(r) for r in df.select("topic", "queue_id", "queue_offset").collect())


def test_arrow_schema_is_pysparks_own_conversion():
    from pyspark.sql.pandas.types import to_arrow_schema

    assert to_arrow_schema(READ_SCHEMA, timezone="UTC").equals(ARROW_SCHEMA)


def test_a_read_returns_exactly_the_stores_messages(spark, store_dir):
    want = store_messages(store_dir)
    rows = load(spark, store_dir).collect()
    assert len(rows) == len(want) == sum(LAYOUT.values())
    got = {row_key(r): r for r in rows}
    assert len(got) == len(rows)                                   # no duplicates
    for m in want:
        r = got[(m.topic, m.queue_id, m.queue_offset)]
        assert r.body == m.body
        assert r.commitlog_offset == m.commitlog_offset
        assert r.tags == m.tags
        assert r.keys == m.keys
        system = {k: m.properties[k] for k in ("TAGS", "KEYS", "UNIQ_KEY") if k in m.properties}
        assert dict(r.properties) == {k: v for k, v in m.properties.items() if k not in system}
        assert (r.tags, " ".join(r.keys) if r.keys else None, r.uniq_key) == (
            system.get("TAGS"), system.get("KEYS"), system.get("UNIQ_KEY"))
        assert r.msg_id == m.msg_id
        assert r.uniq_key == m.uniq_key
        assert (r.born_host, r.store_host) == (m.born_host, m.store_host)
        assert (r.flag, r.sys_flag, r.reconsume_times, r.store_size) == (
            m.flag, m.sys_flag, m.reconsume_times, m.store_size)
        assert int(r.store_timestamp.timestamp() * 1000) == m.store_timestamp
        assert int(r.born_timestamp.timestamp() * 1000) == m.born_timestamp
        assert r.store == os.path.abspath(store_dir)


def test_one_partition_per_queue_and_splitting(spark, store_dir):
    assert load(spark, store_dir).rdd.getNumPartitions() == 4          # the empty queue has none
    assert load(spark, store_dir, maxRecordsPerPartition=50).rdd.getNumPartitions() == 6 + 3 + 2 + 1
    df = load(spark, store_dir, minPartitions=11)
    assert df.rdd.getNumPartitions() >= 11
    assert keys_of(df) == keys_of(load(spark, store_dir))


def test_topics_and_topic_pattern(spark, store_dir):
    assert load(spark, store_dir, topics="Audit").count() == 130
    assert load(spark, store_dir, topics="Audit, Orders").count() == 550
    assert load(spark, store_dir, topicPattern="Ord.*").count() == 420
    assert load(spark, store_dir, topics="Nope").count() == 0


def test_starting_and_ending_offsets(spark, store_dir):
    df = load(spark, store_dir, topics="Orders", startingOffsets={"Orders": {"0": 250, "1": -1}},
              endingOffsets={"Orders": {"0": 260}})
    assert keys_of(df) == [("Orders", 0, i) for i in range(250, 260)]
    df = load(spark, store_dir, topics="Audit", startingOffsets="latest")
    assert df.count() == 0
    df = load(spark, store_dir, topics="Audit", startingOffsets={"Audit": {"0": -2, "3": 39}},
              endingOffsets={"Audit": {"0": 5, "3": -1}})
    assert keys_of(df) == [("Audit", 0, i) for i in range(5)] + [("Audit", 3, 39)]


def test_starting_and_ending_timestamps(spark, tmp_path):
    path = str(tmp_path / "timed")
    with pymq.MessageStore(path, spark_config()) as store:
        stamps = []
        for i in range(30):
            r = store.put_message(pymq.Message("T", b"%d" % i, queue_id=i % 2))
            stamps.append((r.store_timestamp, i % 2, r.queue_offset))
            time.sleep(0.004)
    t0 = stamps[10][0]
    t1 = stamps[20][0]
    want = sorted(("T", q, o) for ts, q, o in stamps if t0 <= ts < t1)
    assert keys_of(load(spark, path, startingTimestamp=str(t0), endingTimestamp=str(t1))) == want
    by_ts = {"T": {"0": t0, "1": t1}}
    want = sorted(("T", q, o) for ts, q, o in stamps if (q == 0 and ts >= t0) or (q == 1 and ts >= t1))
    assert keys_of(load(spark, path, startingOffsetsByTimestamp=by_ts)) == want


def test_a_directory_of_stores_is_one_source(spark, tmp_path):
    root = tmp_path / "cluster"
    fill_store(root / "broker-a", {("T", 0): 20, ("T", 1): 10})
    fill_store(root / "broker-b", {("T", 0): 7, ("U", 0): 3})
    (root / "not-a-store").mkdir()
    df = load(spark, str(root))
    rows = df.select("store", "topic", "queue_id", "queue_offset", "body").collect()
    assert len(rows) == 40
    assert {os.path.basename(r.store) for r in rows} == {"broker-a", "broker-b"}
    assert all(r.body == body_of(r.topic, r.queue_id, r.queue_offset) for r in rows)
    # offsets nested by store name
    df = load(spark, str(root), startingOffsets={"broker-b": {"T": {"0": 5}}, "broker-a": {"T": {"0": -1, "1": -1}}})
    assert sorted((os.path.basename(r.store), r.topic, r.queue_offset) for r in df.collect()) == [
        ("broker-b", "T", 5), ("broker-b", "T", 6), ("broker-b", "U", 0), ("broker-b", "U", 1), ("broker-b", "U", 2)]
    # a comma list of stores, and load() with a list of paths
    assert load(spark, f"{root}/broker-a,{root}/broker-b").count() == 40
    assert spark.read.format("pymq").load([f"{root}/broker-a", f"{root}/broker-b"]).count() == 40


def simulate_retention(path, segments: int) -> None:
    """Delete the first commit-log segments, as RocketMQ's cleaner does when they expire."""
    names = sorted(os.listdir(os.path.join(path, "commitlog")))
    for name in names[:segments]:
        os.remove(os.path.join(path, "commitlog", name))


def test_fail_on_data_loss(spark, tmp_path):
    from pymq.spark import stores

    path = str(tmp_path / "retained")
    fill_store(path, {("T", 0): 1500})
    simulate_retention(path, 2)
    stores.close_all()
    with pytest.raises(Exception, match="failOnDataLoss"):
        load(spark, path, startingOffsets={"T": {"0": 0}}).count()
    rows = load(spark, path, startingOffsets={"T": {"0": 0}}, failOnDataLoss="false").collect()
    first = min(r.queue_offset for r in rows)
    assert first > 0 and len(rows) == 1500 - first
    assert load(spark, path).count() == 1500 - first            # earliest means what is left


@pytest.mark.parametrize("where", ["body", "queue-id"])
def test_a_damaged_record_is_never_returned(spark, tmp_path, where):
    """A record whose body or queue id was altered on disk fails its checksum: the read
    reports it as data loss (an error by default) and, with failOnDataLoss=false, returns
    every other record and never the altered one."""
    import struct

    from pymq import testing
    from pymq.spark import stores

    path = str(tmp_path / "damaged")
    fill_store(path, {("T", 0): 50})
    want = {m.queue_offset: m.body for m in store_messages(path)}
    victim = [m for m in store_messages(path) if m.queue_offset == 20][0]
    seg = [p for p in testing.segments(path) if int(os.path.basename(p)) <= victim.commitlog_offset][-1]
    at = victim.commitlog_offset - int(os.path.basename(seg))
    with open(seg, "r+b") as f:
        if where == "body":
            f.seek(at)
            rec = f.read(victim.store_size)
            body_at = rec.index(victim.body)
            f.seek(at + body_at)
            f.write(bytes([rec[body_at] ^ 0x20]))
        else:
            f.seek(at + 12)
            f.write(struct.pack(">i", 5))
    stores.close_all()
    with pytest.raises(Exception, match="failOnDataLoss"):
        load(spark, path).collect()
    rows = load(spark, path, failOnDataLoss="false").collect()
    assert sorted(r.queue_offset for r in rows) == [o for o in range(50) if o != 20]
    assert all(r.body == want[r.queue_offset] for r in rows)


def test_bad_options_fail_at_planning(spark, store_dir):
    for options, message in [({"startingOffsets": "soon"}, "startingOffsets"),
                             ({"minPartitions": "0"}, "minPartitions"),
                             ({"topicPattern": "("}, "topicPattern"),
                             ({"startingOfsets": "earliest"}, "unknown"),
                             ({"store.no_such_field": "1"}, "unknown store option")]:
        with pytest.raises(Exception, match=message):
            load(spark, store_dir, **options).count()
    with pytest.raises(Exception, match="fixed schema"):
        spark.read.format("pymq").schema("topic string").load(store_dir).count()


WRITER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    import pymq
    cfg = pymq.StoreConfig(commitlog_file_size=64 * 1024, consume_queue_entries=64, index_hash_slots=64,
                           index_max_entries=256)
    with pymq.MessageStore({path!r}, cfg) as store:
        print("ready", flush=True)
        i = 0
        deadline = time.time() + {seconds}
        while time.time() < deadline:
            msgs = [pymq.Message("Live", b"live/%d/%d" % (q, i + k), queue_id=q) for q in range(2) for k in range(50)]
            for q in range(2):
                store.put_messages([m for m in msgs if m.queue_id == q])
            i += 50
            time.sleep(0.01)
""")


def test_reading_a_live_store_while_another_process_appends(spark, tmp_path):
    path = str(tmp_path / "live")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.Popen([sys.executable, "-c", WRITER.format(root=root, path=path, seconds=4)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.3)
        counts = []
        for _ in range(3):
            rows = load(spark, path).select("queue_id", "queue_offset", "body").collect()
            per_queue = {}
            for r in rows:
                assert r.body == b"live/%d/%d" % (r.queue_id, r.queue_offset)
                per_queue.setdefault(r.queue_id, []).append(r.queue_offset)
            for offs in per_queue.values():                       # a gap-free prefix of each queue
                assert sorted(offs) == list(range(len(offs)))
            counts.append(len(rows))
            time.sleep(0.3)
        assert counts[0] > 0 and counts == sorted(counts) and counts[-1] > counts[0]
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == 0
    assert load(spark, path).count() == len(store_messages(path))
