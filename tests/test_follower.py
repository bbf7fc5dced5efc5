"""A follower never skips (issue 22, "How we will know", third point; "What it must do" 4).

A writer subprocess puts at full speed into several queues of one topic for
``PYMQ_FOLLOWER_SECONDS`` (default 8; the issue's run is 30) while this process follows
it on ``MessageStore(path, read_only=True)`` with two readers at once:

* a ``pymq.Consumer`` (a new group, from the earliest offset), and
* ``get_message`` called directly, keeping its own position per queue: a result that
  returns fewer messages than asked but moves ``next_begin_offset`` past what it
  returned (``NO_MATCHED_MESSAGE``, a short page, ...) is a skip a consumer following it
  would make; the reader records it and stays where it was.

Each body is a function of (queue, queue offset) (:func:`body_of`), so every message is
checked without IPC; the writer checks that the store gave each put the queue offset it
expected. When the writer has shut down and reported how many messages each queue got,
both readers must have received every (queue, offset) below that exactly once, in order
per queue, with the right body, and ``get_message`` must never have signalled a skip.

Small files (256 KiB segments, 1,024-entry consume-queue files) so that the writer opens
new ones all the time: the moments a follower has not mapped or scanned yet.
"""

from __future__ import annotations

import json
import logging
import os
import select
import subprocess
import sys
import textwrap
import threading
import time

import pymq
from pymq import GetMessageStatus

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))

SECONDS = float(os.environ.get("PYMQ_FOLLOWER_SECONDS", "8"))
MAX_MESSAGES = int(os.environ.get("PYMQ_FOLLOWER_MAX_MESSAGES", "4000000"))   # a bound on disk use
TOPIC = "Follow"
QUEUES = 4
CONFIG = dict(commitlog_file_size=256 * 1024, consume_queue_entries=1024, index_hash_slots=8192,
              index_max_entries=65536)
PAD = bytes(range(256))
BODY_PAD_MAX = 64
PAGE = 32
WRITER_START_TIMEOUT_S = 60
CATCH_UP_S = 180             # after the writer ended, for the readers to reach its counts
POLL_S = 0.2
EXAMPLES = 8


def queue_of(i: int) -> int:
    """The queue of the writer's ``i``-th put: uneven rates (queue 0 gets the most)."""
    return (i % 7) % QUEUES


def body_of(queue_id: int, offset: int) -> bytes:
    """The body of the message at ``offset`` of ``queue_id``."""
    return b"%d:%d:" % (queue_id, offset) + PAD[:(offset * 31 + queue_id * 7) % BODY_PAD_MAX]


_WRITER = textwrap.dedent(r"""
    import json, sys, time
    sys.path[:0] = json.loads(sys.argv[1])
    import pymq
    from conftest import small_config
    from test_follower import TOPIC, QUEUES, queue_of, body_of
    root, seconds, cap, cfg = sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), json.loads(sys.argv[5])
    store = pymq.MessageStore(root, small_config(**cfg)).start()
    print(json.dumps({"started": True}), flush=True)
    nxt = [0] * QUEUES
    deadline = time.monotonic() + seconds
    i = 0
    OK = pymq.PutMessageStatus.PUT_OK
    Message = pymq.Message
    while i < cap:
        if not i & 1023 and time.monotonic() > deadline:
            break
        q = queue_of(i)
        o = nxt[q]
        r = store.put_message(Message(topic=TOPIC, body=body_of(q, o), queue_id=q))
        if r.status is not OK or r.queue_offset != o:
            print(json.dumps({"error": f"put {i} to queue {q}: {r.status.name}, queue offset {r.queue_offset}, "
                                       f"expected {o}"}), flush=True)
            sys.exit(3)
        nxt[q] = o + 1
        i += 1
    elapsed = seconds - (deadline - time.monotonic())
    store.shutdown()
    print(json.dumps({"counts": nxt, "elapsed": elapsed}), flush=True)
""")


class Reader:
    """What one reader received, per queue, and what went wrong."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.next = [0] * QUEUES          # next expected offset per queue
        self.received = 0
        self.problems: dict[str, list[str]] = {}
        self.counts: dict[str, int] = {}
        self.error: str = ""
        self.missing = 0                  # messages jumped over
        self._seen: set = set()

    def problem(self, kind: str, detail: str, once=None) -> None:
        if once is not None:              # the same signal at the same place counts once
            if once in self._seen:
                return
            self._seen.add(once)
        self.counts[kind] = self.counts.get(kind, 0) + 1
        ex = self.problems.setdefault(kind, [])
        if len(ex) < EXAMPLES:
            ex.append(detail)

    def take(self, m) -> None:
        q, o = m.queue_id, m.queue_offset
        if m.topic != TOPIC or not 0 <= q < QUEUES:
            self.problem("foreign", f"{m.topic}/{q}@{o}")
            return
        want = self.next[q]
        if o > want:
            self.missing += o - want
            self.problem("skipped", f"queue {q}: offsets {want}..{o - 1} never delivered ({o - want}), "
                                    f"then {o}")
        elif o < want:
            self.problem("duplicate-or-order", f"queue {q}: offset {o} delivered after {want - 1}")
        if m.body != body_of(q, o):
            self.problem("altered-body", f"queue {q}@{o}: body {m.body[:24]!r}, expected {body_of(q, o)[:24]!r}")
        self.next[q] = max(want, o + 1)
        self.received += 1

    def done(self, final) -> bool:
        return final is not None and all(self.next[q] >= final[q] for q in range(QUEUES))

    def summary(self) -> str:
        lines = [f"{self.name}: received {self.received:,}, reached {self.next}, jumped over {self.missing:,}"
                 + (f"; raised {self.error}" if self.error else "")]
        for kind, ex in self.problems.items():
            lines.append(f"  [{kind}] x{self.counts[kind]:,}")
            lines += [f"    - {e}" for e in ex]
        return "\n".join(lines)


def _consume(store, r: Reader, state: dict) -> None:
    try:
        c = pymq.Consumer(store, "follower", TOPIC)
        while not state["stop"]:
            for m in c.poll(timeout_s=POLL_S):
                r.take(m)
            if r.done(state["final"]) or time.monotonic() > state["deadline"]:
                return
    except Exception as e:                   # noqa: BLE001 - reported by the test
        r.error = f"{type(e).__name__}: {e}"


def _get_directly(store, r: Reader, state: dict) -> None:
    try:
        while not state["stop"]:
            progressed = False
            for q in range(QUEUES):
                cur = r.next[q]
                g = store.get_message("follower-get", TOPIC, q, cur, PAGE)
                msgs = g.messages
                for m in msgs:
                    r.take(m)
                if msgs:
                    progressed = True
                end = cur + len(msgs)
                if g.next_begin_offset > end:
                    r.problem("skip-signalled",
                              f"get_message queue {q}@{cur}: {g.status.name}, {len(msgs)} message(s), "
                              f"next_begin_offset {g.next_begin_offset} (max offset now "
                              f"{store.get_max_offset_in_queue(TOPIC, q)})", once=(q, cur, g.status, g.next_begin_offset))
                if g.status is GetMessageStatus.FOUND and not msgs:
                    r.problem("skip-signalled", f"get_message queue {q}@{cur}: FOUND without messages")
            if r.done(state["final"]) or time.monotonic() > state["deadline"]:
                return
            if not progressed:
                time.sleep(0.001)
    except Exception as e:                   # noqa: BLE001
        r.error = f"{type(e).__name__}: {e}"


def _read_line(proc, timeout_s: float) -> dict:
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    if not ready:
        raise AssertionError(f"the writer said nothing in {timeout_s} s")
    line = proc.stdout.readline()
    if not line:
        raise AssertionError(f"the writer ended ({proc.wait()}): {proc.stderr.read()[-2000:]}")
    return json.loads(line)


def test_follower_receives_every_message_once_in_order(tmp_path, request, caplog):
    """A Consumer and direct get_message on a read-only store beside a writer at full
    speed receive every (queue, offset) exactly once, in order per queue, with its body,
    get_message never moves next_begin_offset past a message it did not return, and the
    follower reports no damage (nothing is damaged: what it has not seen yet is "not yet")."""
    caplog.set_level(logging.WARNING, logger="pymq")
    root = str(tmp_path / "store")
    paths = json.dumps([TESTS_DIR] + [p for p in sys.path if p])
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, paths, root, str(SECONDS), str(MAX_MESSAGES),
                             json.dumps(CONFIG)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    consumer, getter = Reader("Consumer"), Reader("get_message")
    state = {"stop": False, "final": None, "deadline": time.monotonic() + SECONDS + WRITER_START_TIMEOUT_S + CATCH_UP_S}
    threads = []
    store = None
    try:
        assert _read_line(proc, WRITER_START_TIMEOUT_S).get("started")
        store = pymq.MessageStore(root, read_only=True).start()
        threads = [threading.Thread(target=_consume, args=(store, consumer, state), daemon=True),
                   threading.Thread(target=_get_directly, args=(store, getter, state), daemon=True)]
        for t in threads:
            t.start()
        end = _read_line(proc, SECONDS + WRITER_START_TIMEOUT_S)
        assert proc.wait(timeout=60) == 0 and "counts" in end, f"writer: {end} {proc.stderr.read()[-2000:]}"
        final = end["counts"]
        state["deadline"] = time.monotonic() + CATCH_UP_S
        state["final"] = final
        caught_up_at = time.monotonic()
        for t in threads:
            t.join(CATCH_UP_S + 10)
        catch_up_s = time.monotonic() - caught_up_at
    finally:
        state["stop"] = True
        for t in threads:
            t.join(10)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if store is not None:
            store.shutdown()
    total = sum(final)
    line = (f"follower: writer put {total:,} messages in {end['elapsed']:.1f} s ({final} per queue); "
            f"Consumer received {consumer.received:,}, get_message {getter.received:,}; "
            f"readers finished {catch_up_s:.1f} s after the writer")
    damage = [r.getMessage() for r in caplog.records if r.name.startswith("pymq") and r.levelno >= logging.ERROR]
    report = (line + "\n" + consumer.summary() + "\n" + getter.summary()
              + f"\nerrors logged by the follower: {len(damage):,}" + "".join(f"\n  {m}" for m in damage[:EXAMPLES]))
    print("\n" + report)
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    if tr is not None:
        tr.write_line(line)
    assert total > 0, report
    for r in (consumer, getter):
        assert not r.error, report
        assert not r.problems, report
        assert r.next == final, report
        assert r.received == total, report
    assert not damage, report
