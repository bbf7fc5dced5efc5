"""Fork safety (issue 22, item 5): a store used in a forked child raises, writes nothing,
and leaves the parent unaffected.

The scenario (tests/fork_scenario.py) runs in a process of its own, so that its child
can end as a real program does: ``sys.exit`` through a ``with`` block and the inherited
``atexit`` handlers, ``os._exit``, or the end of a multiprocessing ``fork`` process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import pymq

from conftest import small_config

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(pymq.__file__)))

SHUTDOWN_LIKE = ("shutdown", "close", "__exit__")
# methods bound before the fork: the compiled appender and reader refuse on their own
PREBOUND_PUT, PREBOUND_GET = "prebound_put", "prebound_get"


def run_scenario(mode: str, work) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, os.path.join(HERE, "fork_scenario.py"), mode, str(work)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mode", ["exit", "os_exit", "mp_fork"])
def test_a_forked_child_cannot_use_the_parents_stores(tmp_path, mode):
    r = run_scenario(mode, tmp_path)
    assert r["exitcode"] == 0
    child = r["child"]
    assert child["pid"] == r["child_pid"] != r["parent_pid"]

    # every call on every store (writer, read-only, Broker; through Consumer, SimpleConsumer,
    # pymq.aio) raised StoreStateError naming the parent; shutting down did nothing
    expected = f"was opened in process {r['parent_pid']} before a fork; open it again in the child"
    for store, calls in child["calls"].items():
        assert len(calls) > 20, calls
        for call, outcome in calls.items():
            if call in SHUTDOWN_LIKE:
                assert outcome == "returned NoneType", (store, call, outcome)
            elif call in (PREBOUND_PUT, "appender_put"):
                assert outcome == "returned SERVICE_NOT_AVAILABLE", (store, call, outcome)
            elif call == PREBOUND_GET:
                assert outcome.startswith("StoreStateError"), (store, call, outcome)
            else:
                assert outcome.startswith("StoreStateError") and expected in outcome, (store, call, outcome)
    tried, refused = child["loop_puts"]
    assert tried > 0 and refused == tried            # the child's puts while the parent put

    # the child's whole life and end changed nothing of the parent's stores
    assert r["unchanged"], r["changed_files"]
    assert r["abort_kept"]
    # the lock is still the parent's
    assert r["second_writer"] == ["StoreLockedError", "StoreLockedError"]

    # the parent went on: every acknowledged put reads back at its own queue offset
    acked = r["acked"]
    assert sorted(q for q, _body in acked) == list(range(len(acked)))
    assert [[q, q, body] for q, body in acked] == r["read_back"]
    assert r["reopened_ok"] and r["max_offset"] == len(acked)
    assert r["committed"] == 5 and r["broker_after"]


def test_a_child_opens_the_store_again(tmp_path):
    """What the error says to do: a read-only store opened in the child reads everything,
    while a second writer is refused as long as the parent holds the store."""
    path = str(tmp_path / "s")
    with pymq.MessageStore(path, small_config()) as store:
        for i in range(20):
            assert store.put_message(pymq.Message("T", b"m%d" % i)).is_ok()
        store.flush()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:         # the child: never return into pytest
            code = 1
            try:
                try:
                    pymq.MessageStore(path, small_config())
                    code = 2
                except pymq.StoreLockedError:
                    ro = pymq.MessageStore(path, read_only=True)
                    g = ro.get_message("g", "T", 0, 0, 32)
                    os.write(w, b",".join(m.body for m in g.messages))
                    ro.shutdown()
                    code = 0
            finally:
                os._exit(code)
        os.close(w)
        bodies = b""
        while chunk := os.read(r, 4096):
            bodies += chunk
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
        assert bodies.split(b",") == [b"m%d" % i for i in range(20)]
        assert store.put_message(pymq.Message("T", b"after")).queue_offset == 20
