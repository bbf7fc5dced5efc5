"""A process that opens stores, forks, and reports what the child could do with them.

Run as ``python fork_scenario.py MODE WORKDIR`` by tests/test_fork_safety.py; prints one
JSON document on its last line. MODE is how the child is made and how it ends:

* ``exit``: ``os.fork()``; the child ends with ``sys.exit(0)``, unwinding the ``with``
  block the parent opened the writer in and running the ``atexit`` handlers it inherited
  (one of them shuts the writer down);
* ``os_exit``: ``os.fork()``; the child ends with ``os._exit(0)``;
* ``mp_fork``: a ``multiprocessing`` process of the ``fork`` context.

The parent holds a writer ``MessageStore`` (in a ``with`` block, with
``atexit.register(store.shutdown)``), a read-only store on the same directory and a
``Broker`` on another. While the child tries every kind of call on them (and keeps
trying to put), the parent puts more. Once the parent is idle it snapshots both
directories, lets the child end, and snapshots again. The report has the child's
outcome of each call, both snapshots, whether the ``abort`` marker is still there,
what a second process opening the writer's directory got, and every acknowledged put
of the parent read back by queue offset.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import multiprocessing
import os
import subprocess
import sys
import time

import pymq
import pymq.aio

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import small_config, snapshot  # noqa: E402

TOPIC = "Forked"
FIRST = 150          # acknowledged puts before the fork
DURING = 150         # acknowledged puts while the child lives and tries to put


def outcome(fn) -> str:
    """What one call did: the error class and message, or what it returned."""
    try:
        r = fn()
    except pymq.StoreStateError as e:
        return f"StoreStateError: {e}"
    except BaseException as e:      # noqa: BLE001 - reported to the test
        return f"{type(e).__name__}: {e}"
    status = getattr(r, "status", None)
    return f"returned {status.name if status is not None else type(r).__name__}"


def child_calls(writer, reader, broker) -> dict:
    """Every kind of call a child could make on the stores it inherited."""
    msg = lambda: pymq.Message(TOPIC, b"from the child")        # noqa: E731
    out = {}
    for name, store in (("writer", writer), ("reader", reader), ("broker", broker)):
        calls = {
            "put_message": lambda s=store: s.put_message(msg()),
            "put_messages": lambda s=store: s.put_messages([msg()]),
            "async_put_message": lambda s=store: s.async_put_message(msg()),
            "get_message": lambda s=store: s.get_message("g", TOPIC, 0, 0),
            "get_message_raw": lambda s=store: s.get_message_raw("g", TOPIC, 0, 0),
            "get_offset_in_queue_by_time": lambda s=store: s.get_offset_in_queue_by_time(TOPIC, 0, 0),
            "query_message": lambda s=store: s.query_message(TOPIC, "k0"),
            "look_message_by_offset": lambda s=store: s.look_message_by_offset(0),
            "get_max_offset_in_queue": lambda s=store: s.get_max_offset_in_queue(TOPIC, 0),
            "wait_message": lambda s=store: s.wait_message(TOPIC, 0, 10 ** 6, 0.2),
            "wait_messages": lambda s=store: s.wait_messages(TOPIC, {0: 10 ** 6}, 0.2),
            "commit_offset": lambda s=store: s.commit_offset("g", TOPIC, 0, 1),
            "query_offset": lambda s=store: s.query_offset("g", TOPIC, 0),
            "flush": lambda s=store: s.flush(),
            "stats": lambda s=store: s.stats(),
            "start": lambda s=store: s.start(),
            "refresh": lambda s=store: s.refresh(),
            "delete_expired_files": lambda s=store: s.delete_expired_files(),
            "consumer_poll": lambda s=store: pymq.Consumer(s, "g", TOPIC).poll(0.2),
            "aio_put": lambda s=store: asyncio.run(pymq.aio.AsyncStore(s).put_message(msg())),
            "aio_wait": lambda s=store: asyncio.run(pymq.aio.AsyncStore(s).wait_message(TOPIC, 0, 10 ** 6, 0.2)),
            "aio_consumer_poll": lambda s=store: asyncio.run(_aio_poll(s)),
        }
        if name == "broker":
            calls["pop_message"] = lambda s=store: s.pop_message("g", TOPIC, 1, 1000, timeout_s=0.2)
            calls["simple_consumer"] = lambda s=store: pymq.SimpleConsumer(s, "g", TOPIC, await_duration=0.2
                                                                           ).receive(1, 10)
        out[name] = {call: outcome(fn) for call, fn in calls.items()}
        # methods bound before the fork bypass the rebinding: the compiled appender and
        # reader refuse on their own
        out[name]["prebound_put"] = outcome(lambda: PREBOUND[name][0](msg()))
        out[name]["prebound_get"] = outcome(lambda: PREBOUND[name][1]("g", TOPIC, 0, 0))
        out[name]["appender_put"] = outcome(lambda s=store: s.commit_log.appender.put(msg()))
        # shutting down in the child does nothing, and raises nothing
        out[name]["shutdown"] = outcome(store.shutdown)
        out[name]["close"] = outcome(store.close)
        out[name]["__exit__"] = outcome(lambda s=store: s.__exit__(None, None, None))
    return out


PREBOUND: dict = {}      # store name -> (put_message, get_message) as bound before the fork


async def _aio_poll(store):
    return await pymq.aio.Consumer(store, "g", TOPIC).poll(0.2)


def child_main(writer, reader, broker, report_w: int, go_r: int) -> None:
    """The child: try everything, keep trying to put while the parent puts, report,
    wait for the parent's word to end."""
    report = {"pid": os.getpid(), "calls": child_calls(writer, reader, broker)}
    tried = refused = 0
    t_end = time.monotonic() + 0.5
    while time.monotonic() < t_end:
        tried += 1
        try:
            writer.put_message(pymq.Message(TOPIC, b"child-%d" % tried))
        except pymq.StoreStateError:
            refused += 1
    report["loop_puts"] = [tried, refused]
    os.write(report_w, json.dumps(report).encode() + b"\n")
    os.close(report_w)
    os.read(go_r, 1)            # the parent has taken its snapshot


def read_line(fd: int) -> dict:
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        buf += chunk
    return json.loads(buf) if buf else {}


def second_writer(path: str) -> str:
    code = ("import pymq\ntry:\n    pymq.MessageStore(%r)\nexcept pymq.StoreLockedError:\n"
            "    print('StoreLockedError')\nelse:\n    print('opened')\n" % path)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    return (p.stdout + p.stderr).strip()


def wait_quiet(*stores) -> None:
    for s in stores:
        deadline = time.monotonic() + 10
        while s.dispatch_behind_bytes() and time.monotonic() < deadline:
            time.sleep(0.002)
        s.flush()
    time.sleep(0.3)         # one more pass of the flush and persist services


def main(mode: str, work: str) -> dict:
    a, b = os.path.join(work, "a"), os.path.join(work, "b")
    cfg = small_config(flush_consumer_offset_interval=100)
    acked = []
    with pymq.MessageStore(a, cfg) as writer:
        atexit.register(writer.shutdown)
        broker = pymq.Broker(b, small_config()).start()
        atexit.register(broker.shutdown)
        for i in range(FIRST):
            r = writer.put_message(pymq.Message(TOPIC, b"parent-%d" % i, keys=["k%d" % i]))
            assert r.is_ok(), r
            acked.append((r.queue_offset, r.commitlog_offset, b"parent-%d" % i))
        broker.put_message(pymq.Message(TOPIC, b"broker"))
        writer.commit_offset("g", TOPIC, 0, 5)
        wait_quiet(writer, broker)
        reader = pymq.MessageStore(a, read_only=True).start()
        for name, s in (("writer", writer), ("reader", reader), ("broker", broker)):
            PREBOUND[name] = (s.put_message, s.get_message)
        report_r, report_w = os.pipe()
        go_r, go_w = os.pipe()
        if mode == "mp_fork":
            proc = multiprocessing.get_context("fork").Process(
                target=child_main, args=(writer, reader, broker, report_w, go_r))
            proc.start()
            child_pid = proc.pid
        else:
            child_pid = os.fork()
            if child_pid == 0:
                try:
                    child_main(writer, reader, broker, report_w, go_r)
                finally:
                    if mode == "os_exit":
                        os._exit(0)
                sys.exit(0)         # unwinds the with block, then atexit: the writer's shutdown
        os.close(report_w)
        # the parent puts while the child tries to
        for i in range(FIRST, FIRST + DURING):
            r = writer.put_message(pymq.Message(TOPIC, b"parent-%d" % i, keys=["k%d" % i]))
            assert r.is_ok(), r
            acked.append((r.queue_offset, r.commitlog_offset, b"parent-%d" % i))
        child = read_line(report_r)
        wait_quiet(writer, broker)
        before = {"a": snapshot(a), "b": snapshot(b)}
        os.write(go_w, b"x")
        if mode == "mp_fork":
            proc.join(30)
            exitcode = proc.exitcode
        else:
            exitcode = os.waitstatus_to_exitcode(os.waitpid(child_pid, 0)[1])
        time.sleep(0.2)
        after = {"a": snapshot(a), "b": snapshot(b)}
        abort_kept = os.path.exists(os.path.join(a, "abort")) and os.path.exists(os.path.join(b, "abort"))
        locked = [second_writer(a), second_writer(b)]
        # the parent goes on
        for i in range(FIRST + DURING, FIRST + DURING + 50):
            r = writer.put_message(pymq.Message(TOPIC, b"parent-%d" % i))
            assert r.is_ok(), r
            acked.append((r.queue_offset, r.commitlog_offset, b"parent-%d" % i))
        wait_quiet(writer)
        read_back = []
        for q_off, _cl_off, _body in acked:
            g = writer.get_message("g", TOPIC, 0, q_off, 1)
            m = g.messages[0] if g.messages else None
            read_back.append([q_off, m.queue_offset if m else None, m.body.decode() if m else None])
        broker_ok = broker.put_message(pymq.Message(TOPIC, b"broker after")).is_ok()
        reader.shutdown()
        broker.shutdown()
    # reopened: every acknowledged put, once, at its queue offset
    with pymq.MessageStore(a, cfg) as again:
        reopened = []
        for q_off, cl_off, body in acked:
            m = again.look_message_by_offset(cl_off)
            reopened.append(m is not None and m.body == body and m.queue_offset == q_off)
        max_offset = again.get_max_offset_in_queue(TOPIC, 0)
        committed = again.query_offset("g", TOPIC, 0)
    return {"parent_pid": os.getpid(), "child_pid": child_pid, "exitcode": exitcode, "child": child,
            "unchanged": before == after,
            "changed_files": sorted(f"{k}/{f}" for k in before for f in set(before[k]) | set(after[k])
                                    if before[k].get(f) != after[k].get(f)),
            "abort_kept": abort_kept, "second_writer": locked,
            "acked": [[q, body.decode()] for q, _c, body in acked], "read_back": read_back,
            "reopened_ok": all(reopened), "max_offset": max_offset, "committed": committed,
            "broker_after": broker_ok}


if __name__ == "__main__":
    result = main(sys.argv[1], sys.argv[2])
    print(json.dumps(result))
