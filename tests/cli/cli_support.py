"""Helpers of the command-line tests: ``python -m pymq`` as a child process of this
checkout, and a small real store to run it on."""

from __future__ import annotations

import os
import subprocess
import sys

import pymq

#: the directory holding the ``pymq`` package under test
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(pymq.__file__)))


def child_env(**extra: str) -> dict:
    """The environment of a ``python -m pymq`` child: this checkout first on the path,
    no ``PYMQ_STORE`` unless given."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYMQ_STORE", "COLUMNS")}
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra)
    return env


def pymq_command(*argv) -> list:
    """The argv of ``python -m pymq ARGV`` (items may be ``bytes``: argv that is not UTF-8)."""
    return [sys.executable, "-m", "pymq", *argv]


def run_pymq(*argv, timeout: float = 60, **env: str) -> subprocess.CompletedProcess:
    """Run ``python -m pymq ARGV`` to its end; stdout and stderr as text (undecodable
    bytes escaped)."""
    return subprocess.run(pymq_command(*argv), capture_output=True, timeout=timeout, env=child_env(**env),
                          stdin=subprocess.DEVNULL, text=True, errors="backslashreplace")


def make_store(path: str, config: pymq.StoreConfig, messages: int = 14) -> list:
    """``messages`` messages in 4 queues of TopicTest (keys ``order-N``), one in Other,
    group g1's offset 2 on queue 0; the put results of TopicTest's."""
    with pymq.MessageStore(path, config) as s:
        rs = [s.put_message(pymq.Message("TopicTest", b"hello %d" % i, tags="TagA" if i % 2 else "TagB",
                                         keys=[f"order-{i}"], queue_id=i % 4)) for i in range(messages)]
        s.put_message(pymq.Message("Other", b"x"))
        s.commit_offset("g1", "TopicTest", 0, 2)
    return rs
