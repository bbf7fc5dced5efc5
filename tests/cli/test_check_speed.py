"""``pymq check`` on a small store with RocketMQ's default file sizes (a 1 GiB commit-log
segment, a 420 MB index file, 6 MB consume queues, all sparse) reads what was written,
not the files' unwritten rest: it used to map and read all of it (1.5 GB resident, seconds).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import pymq
from cli_support import child_env, make_store, pymq_command

MiB = 1024 * 1024


def test_check_of_a_default_sized_store_reads_only_the_data(tmp_path):
    path = str(tmp_path / "store")
    make_store(path, pymq.StoreConfig(), messages=1005)
    segment = os.path.join(path, "commitlog", "0" * 20)
    st = os.stat(segment)
    if st.st_blocks * 512 >= st.st_size // 2:
        pytest.skip("this file system allocates segments whole (tmpfs): there is no unwritten rest to skip")
    out_path = tmp_path / "report.json"
    with open(out_path, "wb") as out:
        # through a small launcher: Linux counts the RSS a process had when it was forked
        # in its child's ru_maxrss (the forked copy's high-water mark survives the exec), so
        # a check forked by this test process would report at least pytest's own size
        launcher = subprocess.run([sys.executable, "-c", _LAUNCHER, *pymq_command("--store", path, "check", "--json")],
                                  stdout=out, stderr=subprocess.PIPE, env=child_env(), text=True)
    text = out_path.read_text()
    assert launcher.returncode == 0, text + launcher.stderr
    report = json.loads(text)
    assert report["ok"] and report["records"] == 1006 and report["index_entries"] == 2 * 1005 + 1, report
    # ru_maxrss is in KiB on Linux: reading the segment and the index file whole took ~1.5 GB
    maxrss_kib = int(launcher.stderr.split()[-1])
    assert maxrss_kib * 1024 < 400 * MiB, f"check peaked at {maxrss_kib // 1024} MiB resident"


#: runs its arguments as a child and writes the child's ru_maxrss (KiB) last on stderr
_LAUNCHER = """
import os, subprocess, sys
child = subprocess.Popen(sys.argv[1:])
_, status, usage = os.wait4(child.pid, 0)
print(usage.ru_maxrss, file=sys.stderr)
sys.exit(os.waitstatus_to_exitcode(status))
"""
