"""Read-only opening by a second process (issue 6): ``MessageStore(path, read_only=True)``.

The writer runs in this process (a started store); the reader is a subprocess driven over
a line protocol (one JSON command in, one JSON answer out). The reader takes no lock
(the writer keeps working, a second writer still gets ``StoreLockedError``), runs no
recovery (files stay byte-identical, an ``abort`` marker stays), follows the writer (a
long poll wakes within ~100 ms of a put; pulls, key queries, new segments, new queues and
topics all appear) and refuses writes. Opening a directory that holds no store is a clear
error.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from conftest import small_config

import pymq
from pymq import testing

SEG = 8 * 1024


def cfg(**kw) -> pymq.StoreConfig:
    return small_config(commitlog_file_size=SEG, consume_queue_entries=16, index_hash_slots=16,
                        index_max_entries=64, **kw)


_READER = textwrap.dedent(r"""
    import json, os, sys, time, traceback
    sys.path[:0] = json.loads(sys.argv[1])
    import pymq

    store = None

    def msg(m):
        return {"topic": m.topic, "queue_id": m.queue_id, "queue_offset": m.queue_offset,
                "offset": m.commitlog_offset, "body": m.body.decode("latin-1"), "keys": m.keys}

    def handle(c):
        global store
        op = c["op"]
        if op == "open":
            t0 = time.monotonic()
            store = pymq.MessageStore(c["path"], read_only=True)
            if c.get("start", True):
                store.start()
            return {"open_s": time.monotonic() - t0}
        if op == "wait":
            print(json.dumps({"waiting": True}), flush=True)
            woke = store.wait_message(c["topic"], c["queue_id"], c["offset"], c["timeout"])
            return {"woke": woke, "t": time.time()}
        if op == "get":
            g = store.get_message("g", c["topic"], c["queue_id"], c["offset"], c.get("max", 32))
            return {"status": g.status.name, "next": g.next_begin_offset, "messages": [msg(m) for m in g.messages]}
        if op == "max":
            return {"max": store.get_max_offset_in_queue(c["topic"], c["queue_id"])}
        if op == "query":
            return {"offsets": [m.commitlog_offset for m in store.query_message(c["topic"], c["key"])]}
        if op == "look":
            m = store.look_message_by_offset(c["offset"])
            return {"message": msg(m) if m is not None else None}
        if op == "topics":
            return {"topics": store.get_topics()}
        if op == "max_phy":
            return {"max_phy": store.get_max_phy_offset(), "min_phy": store.get_min_phy_offset()}
        if op == "put":
            r = store.put_message(pymq.Message(topic=c["topic"], body=b"nope"))
            rb = store.put_messages([pymq.Message(topic=c["topic"], body=b"nope")])
            return {"status": r.status.name, "batch_status": rb.status.name}
        if op == "commit":
            try:
                store.commit_offset("g", c["topic"], 0, 1)
            except Exception as e:
                return {"error": type(e).__name__, "is_pymq": isinstance(e, pymq.PymqError), "message": str(e)}
            return {"error": None}
        if op == "close":
            if store is not None:
                store.shutdown()
            return {}
        raise ValueError(op)

    for line in sys.stdin:
        c = json.loads(line)
        try:
            out = handle(c)
        except Exception as e:
            out = {"exception": type(e).__name__, "message": str(e), "trace": traceback.format_exc()}
        print(json.dumps(out), flush=True)
        if c["op"] == "close":
            break
""")


class Reader:
    """The read-only store in a subprocess."""

    def __init__(self) -> None:
        self.closed = False
        self.proc = subprocess.Popen([sys.executable, "-c", _READER, json.dumps([p for p in sys.path if p])],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)

    def send(self, **c) -> None:
        self.proc.stdin.write(json.dumps(c) + "\n")
        self.proc.stdin.flush()

    def recv(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"the reader died: {self.proc.stderr.read()[-3000:]}")
        out = json.loads(line)
        assert "exception" not in out, out.get("trace") or out
        return out

    def call(self, **c) -> dict:
        self.send(**c)
        out = self.recv()
        if c["op"] == "close":
            self.closed = True
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        return out

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                self.call(op="close")
            finally:
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
        assert self.proc.returncode == 0, self.proc.stderr.read()[-3000:]


@pytest.fixture
def reader():
    r = Reader()
    yield r
    r.close()


def snapshot(root: str) -> dict:
    out = {}
    for dp, _dn, fn in os.walk(root):
        for name in fn:
            p = os.path.join(dp, name)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = hashlib.sha256(f.read()).hexdigest()
    return out


def wait_dispatched(store, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while store.dispatch_behind_bytes():
        assert time.monotonic() < deadline
        time.sleep(0.002)


def eventually(fn, timeout: float = 3.0, what: str = ""):
    """Poll ``fn`` until it returns something truthy (the reader follows asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        assert time.monotonic() < deadline, f"not seen within {timeout} s: {what}"
        time.sleep(0.02)


def put(store, topic="RO", body=b"x", key=None, queue_id=0):
    r = store.put_message(pymq.Message(topic=topic, body=body, keys=[key] if key else None, queue_id=queue_id))
    assert r.status is pymq.PutMessageStatus.PUT_OK
    return r


# -- the tests --------------------------------------------------------------------------------


def test_reader_takes_no_lock(tmp_path, reader):
    root = str(tmp_path / "s")
    with pymq.MessageStore(root, cfg()) as w:
        for i in range(10):
            put(w, body=b"a%d" % i)
        wait_dispatched(w)
        lock_path = os.path.join(root, "lock")
        with open(lock_path, "rb") as fh:
            lock_before = fh.read()
        reader.call(op="open", path=root)
        assert reader.call(op="max", topic="RO", queue_id=0)["max"] == 10
        # the writer keeps working while the reader has the store open
        for i in range(10):
            put(w, body=b"b%d" % i)
        wait_dispatched(w)
        eventually(lambda: reader.call(op="max", topic="RO", queue_id=0)["max"] == 20, what="20 messages")
        # and a second writer is still refused, in this process and in another one
        with pytest.raises(pymq.StoreLockedError):
            pymq.MessageStore(root, cfg())
        script = ("import sys, pymq\ntry:\n pymq.MessageStore(sys.argv[1])\n"
                  "except pymq.StoreLockedError:\n sys.exit(3)\n")
        proc = subprocess.run([sys.executable, "-c", script, root], capture_output=True, text=True,
                              timeout=60, check=False)
        assert proc.returncode == 3, proc.stderr
        with open(lock_path, "rb") as fh:
            assert fh.read() == lock_before
    # the writer shut down cleanly although a reader still has everything mapped
    assert not os.path.exists(os.path.join(root, "abort"))
    assert reader.call(op="get", topic="RO", queue_id=0, offset=0)["status"] == "FOUND"


def test_reader_runs_no_recovery(tmp_path, reader):
    """A crashed store (abort marker, torn last record, queue entries past the log end)
    is read as it is: nothing changes on disk, the abort marker stays, and reading stops
    at the last whole record."""
    root = str(tmp_path / "s")
    with pymq.MessageStore(root, cfg()) as w:
        rs = [put(w, body=b"m%03d" % i, key=f"k{i}", queue_id=i % 2) for i in range(120)]
        wait_dispatched(w)
    path, pos, _size = testing.last_record(root)
    testing.zero_bytes(path, testing.topic_length_position(path, pos), 16)
    testing.create_abort(root)
    before = snapshot(root)
    mtimes = {p: os.stat(os.path.join(root, p)).st_mtime_ns for p in before}
    reader.call(op="open", path=root)
    assert reader.call(op="max_phy")["max_phy"] == rs[-1].commitlog_offset
    assert reader.call(op="look", offset=rs[-2].commitlog_offset)["message"]["body"] == "m118"
    assert reader.call(op="look", offset=rs[-1].commitlog_offset)["message"] is None
    g = reader.call(op="get", topic="RO", queue_id=0, offset=58, max=32)
    assert [m["body"] for m in g["messages"]] == ["m116", "m118"]
    assert reader.call(op="query", topic="RO", key="k7")["offsets"] == [rs[7].commitlog_offset]
    reader.call(op="close")
    assert snapshot(root) == before, "a read-only open changed files"
    assert {p: os.stat(os.path.join(root, p)).st_mtime_ns for p in before} == mtimes
    assert os.path.exists(os.path.join(root, "abort"))
    assert not os.path.exists(os.path.join(root, "checkpoint")) or "checkpoint" in before


def test_reader_follows_the_writer(tmp_path, reader):
    """Long polls wake within ~100 ms of a put; pulls, key queries, look-ups by offset,
    new segments and new queues and topics all appear."""
    root = str(tmp_path / "s")
    with pymq.MessageStore(root, cfg()) as w:
        put(w, body=b"first", key="first")
        wait_dispatched(w)
        reader.call(op="open", path=root)
        assert reader.call(op="max", topic="RO", queue_id=0)["max"] == 1

        # long polling: the reader waits on the next offset, the writer puts
        latencies = []
        for i in range(8):
            reader.send(op="wait", topic="RO", queue_id=0, offset=1 + i, timeout=5.0)
            assert reader.recv() == {"waiting": True}
            time.sleep(0.03)                      # the reader is inside wait_message now
            put(w, body=b"w%d" % i, key=f"w{i}")
            t_put = time.time()
            woke = reader.recv()
            assert woke["woke"] is True
            latencies.append(woke["t"] - t_put)
        assert statistics.median(latencies) < 0.1, latencies
        assert max(latencies) < 0.3, latencies
        # a wait that nothing ends times out
        t0 = time.monotonic()
        reader.send(op="wait", topic="RO", queue_id=0, offset=9, timeout=0.2)
        assert reader.recv() == {"waiting": True}
        assert reader.recv()["woke"] is False
        assert 0.15 < time.monotonic() - t0 < 2

        g = reader.call(op="get", topic="RO", queue_id=0, offset=0)
        assert [m["body"] for m in g["messages"]] == ["first"] + [f"w{i}" for i in range(8)]
        assert g["next"] == 9
        for i in range(8):
            assert reader.call(op="query", topic="RO", key=f"w{i}")["offsets"] == [g["messages"][1 + i]["offset"]]

        # new segments: write a few segments' worth
        segs = len(testing.segments(root))
        rs = [put(w, body=bytes(300) + b"%04d" % i, key=f"big{i}") for i in range(80)]
        assert len(testing.segments(root)) >= segs + 2
        wait_dispatched(w)
        eventually(lambda: reader.call(op="max_phy")["max_phy"] == w.get_max_phy_offset(), what="the log end")
        last = reader.call(op="look", offset=rs[-1].commitlog_offset)["message"]
        assert last is not None and last["body"].endswith("0079")
        eventually(lambda: reader.call(op="query", topic="RO", key="big79")["offsets"] == [rs[-1].commitlog_offset],
                   what="a key in a new index file")
        # the follower refreshes each queue's end on its own walk, apart from the index: wait for it
        eventually(lambda: reader.call(op="max", topic="RO", queue_id=0)["max"] == 89, what="the queue's end")
        off, bodies = 9, []
        while off < 89:
            g = reader.call(op="get", topic="RO", queue_id=0, offset=off)
            assert g["status"] == "FOUND", g
            bodies += [m["body"] for m in g["messages"]]
            off = g["next"]
        assert len(bodies) == 80 and bodies[-1].endswith("0079")

        # new queues and topics
        put(w, topic="RO", body=b"q3", queue_id=3)
        put(w, topic="Other", body=b"other", key="other")
        wait_dispatched(w)
        topics = eventually(lambda: (t := reader.call(op="topics")["topics"]).get("Other") and t,
                            what="a new topic")
        assert topics["RO"] == [0, 3] and topics["Other"] == [0]
        g = reader.call(op="get", topic="RO", queue_id=3, offset=0)
        assert [m["body"] for m in g["messages"]] == ["q3"]
        eventually(lambda: reader.call(op="query", topic="Other", key="other")["offsets"], what="the new topic's key")
        # a long poll on a queue that does not exist yet wakes when it appears
        reader.send(op="wait", topic="Fresh", queue_id=0, offset=0, timeout=5.0)
        assert reader.recv() == {"waiting": True}
        time.sleep(0.03)
        put(w, topic="Fresh", body=b"fresh")
        t_put = time.time()
        woke = reader.recv()
        assert woke.get("woke") is True and woke["t"] - t_put < 0.3, woke


def test_reader_refuses_writes(tmp_path, reader):
    root = str(tmp_path / "s")
    with pymq.MessageStore(root, cfg()) as w:
        put(w)
        wait_dispatched(w)
        reader.call(op="open", path=root)
        r = reader.call(op="put", topic="RO")
        assert r == {"status": "SERVICE_NOT_AVAILABLE", "batch_status": "SERVICE_NOT_AVAILABLE"}
        c = reader.call(op="commit", topic="RO")
        assert c["error"] == "StoreStateError" and c["is_pymq"], c
        assert w.get_max_offset_in_queue("RO", 0) == 1
    assert reader.call(op="max", topic="RO", queue_id=0)["max"] == 1


def test_reader_of_a_store_that_starts_empty(tmp_path, reader):
    """A reader that opens a store before anything was written sees the first messages."""
    root = str(tmp_path / "s")
    with pymq.MessageStore(root, cfg()) as w:
        reader.call(op="open", path=root)
        assert reader.call(op="max_phy")["max_phy"] == 0
        r = put(w, body=b"one", key="one")
        wait_dispatched(w)
        eventually(lambda: reader.call(op="max", topic="RO", queue_id=0)["max"] == 1, what="the first message")
        assert reader.call(op="query", topic="RO", key="one")["offsets"] == [r.commitlog_offset]


@pytest.mark.parametrize("kind", ["empty-dir", "missing", "a-file", "other-files"])
def test_opening_a_non_store_is_a_clear_error(tmp_path, kind):
    path = tmp_path / "x"
    if kind == "empty-dir":
        path.mkdir()
    elif kind == "a-file":
        path.write_bytes(b"hello")
    elif kind == "other-files":
        path.mkdir()
        (path / "README").write_text("not a store")
        (path / "index").mkdir()
    with pytest.raises(pymq.PymqError) as info:
        pymq.MessageStore(path, read_only=True)
    assert str(path) in str(info.value)
    assert not path.exists() or kind != "missing"
    if kind == "empty-dir":
        assert os.listdir(path) == [], "a read-only open created files"


def test_long_poll_on_a_queue_the_writer_creates_later(tmp_path):
    """A reader waiting on a queue that does not exist yet holds an empty queue in memory;
    its refresh forgets queues with no directory (deleted topics) and loads the writer's
    once it appears. The wait must follow the queue, not the object it started with."""
    root = str(tmp_path / "store")
    with pymq.MessageStore(root, cfg()) as w:
        put(w, body=b"first")
        r = pymq.MessageStore(root, read_only=True).start()
        try:
            out = {}
            t = threading.Thread(target=lambda: out.update(woke=r.wait_message("Later", 0, 0, 5.0)))
            t.start()
            time.sleep(0.2)                          # several refresh passes, queues with no directory dropped
            t0 = time.monotonic()
            put(w, topic="Later", body=b"later")
            t.join(6)
            assert out.get("woke") is True and time.monotonic() - t0 < 1.0
        finally:
            r.shutdown()


@pytest.mark.parametrize("gone", [1, 2])
def test_reader_opens_while_cleaning_deletes_the_segments_it_listed(tmp_path, monkeypatch, gone):
    """A reader lists the commit log, then the writer's cleaning deletes the oldest
    segments before the reader maps them (seen in a CI run of the retention long run as
    FileNotFoundError out of the open). The reader opens from the first segment still
    there and reads everything the log still holds."""
    import pymq.store.mapped_file_queue as mfq_module

    path = str(tmp_path / "s")
    with pymq.MessageStore(path, small_config(commitlog_file_size=SEG)) as s:
        for i in range(40):
            assert s.put_message(pymq.Message("T", b"%04d" % i + b"x" * 1000, queue_id=0)).is_ok()
    log_dir = os.path.join(path, "commitlog")
    segments = sorted(os.listdir(log_dir))
    assert len(segments) >= 4
    real_listdir = os.listdir
    deleted = segments[:gone]                   # listed, then unlinked before the reader maps them
    first_left = int(segments[gone])

    def listing_before_the_deletion(p):
        names = real_listdir(p)
        if os.path.abspath(p) == os.path.abspath(log_dir):
            for n in deleted:
                if os.path.exists(os.path.join(log_dir, n)):
                    os.remove(os.path.join(log_dir, n))
            return names
        return names

    monkeypatch.setattr(mfq_module.os, "listdir", listing_before_the_deletion)
    ro = pymq.MessageStore(path, read_only=True)
    try:
        assert ro.get_min_phy_offset() == first_left
        off, got = ro.get_min_offset_in_queue("T", 0), []
        assert off > 0
        while True:
            r = ro.get_message("g", "T", 0, off)
            if not r.messages:
                break
            got += [int(m.body[:4]) for m in r.messages]
            off = r.next_begin_offset
        assert got == list(range(got[0], 40))
    finally:
        ro.shutdown()
