"""Spark throughput of the pymq data source, next to Parquet, in one run.

    pip install -e ".[spark]"
    python bench/bench_spark.py                       # 2,000,000 messages, local[2]
    python bench/bench_spark.py --messages 200000 --repeat 2 --master "local[2]"

Workloads (rows per second, best of ``--repeat``; the JVM is warmed up first):

    read pymq      spark.read.format("pymq").load(store) into the noop sink
    read parquet   the same rows (every column of the pymq schema), written once to
                   Parquet by Spark, read with spark.read.parquet into the noop sink
    write pymq     topic, body, tags, keys, properties read from that Parquet and written
                   with df.write.format("pymq") to a new store (staging + the driver's
                   commit included)
    write parquet  the same columns written to Parquet

The store is built with pymq directly (``put_messages``, 100-byte bodies, tags, two keys
and two user properties per message, ``--queues`` queues of one topic).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)                    # run from a checkout without installing

def build_store(path: str, messages: int, queues: int, body_size: int) -> None:
    import pymq

    cfg = pymq.StoreConfig(commitlog_file_size=256 << 20, consume_queue_entries=300_000)
    body = b"x" * body_size
    with pymq.MessageStore(path, cfg) as store:
        batch = 500
        for start in range(0, messages, batch):
            q = (start // batch) % queues
            msgs = [pymq.Message("BenchTopic", body, tags=f"tag{i % 8}", keys=[f"order-{i}", f"user-{i % 1000}"],
                                 properties={"source": "bench", "seq": str(i)}, queue_id=q)
                    for i in range(start, min(start + batch, messages))]
            r = store.put_messages(msgs)
            assert r.status is pymq.PutMessageStatus.PUT_OK, r.status


def session(master: str):
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(master).appName("pymq-bench")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "2g")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.python.filterPushdown.enabled", "true")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    import pymq.spark

    pymq.spark.register(spark)
    return spark


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=2_000_000)
    ap.add_argument("--queues", type=int, default=4)
    ap.add_argument("--body-size", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    args = ap.parse_args(argv)

    work = args.dir or tempfile.mkdtemp(prefix="pymq-spark-bench-")
    os.makedirs(work, exist_ok=True)
    store, parquet = os.path.join(work, "store"), os.path.join(work, "parquet")
    try:
        t = time.perf_counter()
        build_store(store, args.messages, args.queues, args.body_size)
        print(f"built a store of {args.messages:,} messages in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        spark = session(args.master)
        n = args.messages
        df = spark.read.format("pymq").load(store)
        df.write.mode("overwrite").parquet(parquet)
        assert spark.read.parquet(parquet).count() == n

        def read_pymq():
            spark.read.format("pymq").load(store).write.format("noop").mode("overwrite").save()

        def read_parquet():
            spark.read.parquet(parquet).write.format("noop").mode("overwrite").save()

        read_pymq()                                            # warm-up: JVM, Python workers
        read_parquet()
        results = [("read into noop", best(read_pymq, args.repeat), best(read_parquet, args.repeat))]

        cols = ["topic", "body", "tags", "keys", "properties"]
        counter = iter(range(1_000_000))

        def write_pymq():
            out = os.path.join(work, f"out-store-{next(counter)}")
            (spark.read.parquet(parquet).select(*cols).write.format("pymq").mode("append")
             .option("store.commitlog_file_size", str(256 << 20)).save(out))
            shutil.rmtree(out, ignore_errors=True)

        def write_parquet():
            out = os.path.join(work, f"out-parquet-{next(counter)}")
            spark.read.parquet(parquet).select(*cols).write.mode("overwrite").parquet(out)
            shutil.rmtree(out, ignore_errors=True)

        write_repeat = max(1, args.repeat - 1)
        results.append(("write", best(write_pymq, write_repeat), best(write_parquet, write_repeat)))
        spark.stop()
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)

    print(f"\nSpark {args.master}, {n:,} messages, {args.body_size}-byte bodies, {args.queues} queues, "
          f"best of {args.repeat}")
    print(f"{'workload':<16}{'pymq rows/s':>14}{'parquet rows/s':>17}{'pymq/parquet':>15}")
    for name, tp, tq in results:
        print(f"{name:<16}{n / tp:>14,.0f}{n / tq:>17,.0f}{tq / tp:>15.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
