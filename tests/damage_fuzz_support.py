"""Shared machinery of the damage fuzz acceptance tests of issue 22 ("No acknowledged
message is ever lost, altered or skipped"): ``test_damage_fuzz.py`` (random damage in the
commit log) and ``test_damage_fuzz_queues.py`` (consume-queue and index files).

A trial builds a small store (``conftest.small_config``: 64 KiB segments) holding a few
thousand messages of several topics and queues, with random bodies, tags, a unique key
and a property ``n`` (the message's number), either in this process with a clean
shutdown or in a writer subprocess that is SIGKILLed; damages it; reopens it as a
writer, puts more, shuts down and reopens it read-only; and judges every read path
against what was acknowledged. The message stream is a pure function of a seed
(:func:`specs`), so the writer subprocess and the judge agree on every body without
IPC: the writer reports only ``n, queue offset, commit-log offset, size, msg id`` of each
put it got PUT_OK for, one line each, line-buffered (a SIGKILL loses at most the line
being written).

Trials run in worker subprocesses (:func:`run_workers`, two at a time on two cores) so
that a crash of the store shows up as a failed trial with its seed instead of killing
pytest. Every finding names the trial, its seed and how to rerun it alone.

Environment: ``PYMQ_FUZZ_SEED`` (base seed; default: today's date, printed), and
``PYMQ_FUZZ_ONLY`` (run only that trial index, to reproduce one).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import textwrap
import time
import traceback
import zlib
from collections import Counter, defaultdict
from itertools import islice
from typing import Iterator, Optional

import rocketmq_decoder as rd
from conftest import small_config

import pymq
from pymq import testing

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))

# -- the message stream ---------------------------------------------------------------------

TOPICS = ("FuzzA", "FuzzB", "FuzzC")
QUEUES = 4                       # queue ids 0..3 of each topic
BODY_MIN, BODY_MAX = 8, 200      # random bytes; ~290-byte records, ~225 per 64 KiB segment
TAG_KINDS = 4
MESSAGES_MIN, MESSAGES_MAX = 1500, 3500     # acknowledged before the damage: 7-16 segments
NEW_PUTS = 200                   # put by the writer reopened after the damage
NEW_PUT_FIRST_N = 10_000_000     # message numbers of those puts (their own seed stream)
UNLOGGED_SLACK = 64              # puts a killed writer may have made after its last logged one
GROUP = "fuzz"
PAGE = 32                        # messages per get_message
CONSUMER_EMPTY_POLLS = 3         # a Consumer is drained after this many empty polls in a row

# -- the damage -----------------------------------------------------------------------------

DAMAGE_MIN, DAMAGE_MAX = 1, 64  # bytes
BYTE_DAMAGE_KINDS = ("flip", "garbage", "zero")
IN_DATA_SHARE = 0.9              # share of damage placed where records are (else anywhere)
CQ_UNIT = 20                     # bytes per consume-queue entry
INDEX_HEADER = 40                # bytes before an index file's slot table
INDEX_ENTRY = 20

# -- processes ------------------------------------------------------------------------------

CHECK_TIMEOUT_S = 120
WRITER_START_TIMEOUT_S = 60
WORKER_TIMEOUT_S = 3600
EXAMPLES_PER_CATEGORY = 6        # findings shown per category in a failure message


def base_seed() -> int:
    """``PYMQ_FUZZ_SEED`` or today's date (``YYYYMMDD``): a new piece of the fuzz every day,
    and any failing day can be rerun."""
    env = os.environ.get("PYMQ_FUZZ_SEED")
    return int(env) if env else int(time.strftime("%Y%m%d"))


def trial_indices(count: int) -> list[int]:
    only = os.environ.get("PYMQ_FUZZ_ONLY")
    return [int(only)] if only else list(range(count))


def trial_seed(kind: str, mode: str, base: int, index: int) -> int:
    return zlib.crc32(f"{kind}/{mode}/{base}/{index}".encode())


@dataclasses.dataclass(frozen=True)
class Spec:
    """One message of the stream, before it is put."""

    n: int
    topic: str
    queue_id: int
    body: bytes
    tags: str
    key: str

    def message(self) -> pymq.Message:
        return pymq.Message(topic=self.topic, body=self.body, tags=self.tags, keys=[self.key],
                            queue_id=self.queue_id, properties={"n": str(self.n)})


def specs(seed: int, first_n: int = 0) -> Iterator[Spec]:
    """The message stream of ``seed``: topic, queue, random body, tag and a key unique to
    the message (``key-<seed>-<n>``)."""
    rng = random.Random(seed)
    n = first_n
    while True:
        topic = TOPICS[rng.randrange(len(TOPICS))]
        queue_id = rng.randrange(QUEUES)
        body = rng.randbytes(rng.randint(BODY_MIN, BODY_MAX))
        tags = f"Tag{rng.randrange(TAG_KINDS)}"
        yield Spec(n, topic, queue_id, body, tags, f"key-{seed:x}-{n}")
        n += 1


@dataclasses.dataclass(frozen=True)
class Put:
    """An acknowledged put: the message and where the store said it went."""

    spec: Spec
    queue_offset: int
    offset: int
    size: int
    msg_id: str

    @property
    def end(self) -> int:
        return self.offset + self.size

    @property
    def where(self) -> tuple[str, int, int]:
        return (self.spec.topic, self.spec.queue_id, self.queue_offset)

    def describe(self) -> str:
        t, q, o = self.where
        return f"{t}/{q}@{o} (log {self.offset}..{self.end})"


def put_all(store, stream: Iterator[Spec], count: int) -> tuple[list[Put], str]:
    """Put ``count`` messages of ``stream``; the acknowledged ones, and what stopped the
    run early ("" when none did)."""
    out = []
    for spec in islice(stream, count):
        r = store.put_message(spec.message())
        if r.status is not pymq.PutMessageStatus.PUT_OK:
            return out, f"put {spec.n} ({spec.topic}/{spec.queue_id}) returned {r.status.name} after {len(out)} PUT_OK"
        out.append(Put(spec, r.queue_offset, r.commitlog_offset, r.wrote_bytes, r.msg_id))
    return out, ""


def build_clean(root: str, seed: int, count: int) -> list[Put]:
    """``count`` messages put in this process, then a clean shutdown."""
    with pymq.MessageStore(root, small_config()) as s:
        puts, error = put_all(s, specs(seed), count)
    if error:
        raise AssertionError(f"building the store: {error}")
    if os.path.exists(os.path.join(root, "abort")):
        raise AssertionError("a clean shutdown left the abort marker")
    return puts


_WRITER = textwrap.dedent(r"""
    import json, sys
    sys.path[:0] = json.loads(sys.argv[1])
    import pymq
    from conftest import small_config
    import damage_fuzz_support as sup
    root, seed, ack_path, cap = sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
    store = pymq.MessageStore(root, small_config()).start()
    log = open(ack_path, "w", buffering=1)
    for spec in sup.specs(seed):
        if spec.n >= cap:
            break
        r = store.put_message(spec.message())
        if r.status is pymq.PutMessageStatus.PUT_OK:
            log.write(f"{spec.n} {r.queue_offset} {r.commitlog_offset} {r.wrote_bytes} {r.msg_id}\n")
    import time
    time.sleep(3600)        # never exits by itself: the test kills it
""")


def _child_path() -> str:
    return json.dumps([TESTS_DIR] + [p for p in sys.path if p])


def build_killed(root: str, seed: int, count: int) -> tuple[list[Put], int]:
    """A writer subprocess puts the stream of ``seed`` at full speed and is SIGKILLed as
    soon as it has reported ``count`` acknowledged puts. Returns the acknowledged puts (what
    it reported) and the number of messages it may have put (logged or not)."""
    ack_path = root + ".acked"
    cap = count * 20          # a runaway writer stops by itself
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, _child_path(), root, str(seed), ack_path, str(cap)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + WRITER_START_TIMEOUT_S
        while True:
            try:
                with open(ack_path, "rb") as f:
                    lines = f.read().count(b"\n")
            except FileNotFoundError:
                lines = 0
            if lines >= count:
                break
            if proc.poll() is not None:
                raise AssertionError(f"writer exited with {proc.returncode}: {proc.stderr.read().decode()[-2000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"writer acknowledged {lines} of {count} puts in {WRITER_START_TIMEOUT_S} s")
            time.sleep(0.002)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stderr.close()
    with open(ack_path) as f:
        text = f.read()
    os.remove(ack_path)
    lines = text.split("\n")[:-1]            # a torn last line has no newline
    stream = {}
    gen = specs(seed)
    puts = []
    for line in lines:
        parts = line.split()
        if len(parts) != 5:
            continue
        n, qoff, off, size, msg_id = int(parts[0]), int(parts[1]), int(parts[2]), int(parts[3]), parts[4]
        while n not in stream:
            s = next(gen)
            stream[s.n] = s
        puts.append(Put(stream[n], qoff, off, size, msg_id))
    last_n = max((p.spec.n for p in puts), default=-1)
    return puts, last_n + 1 + UNLOGGED_SLACK


def possible_bodies(seed: int, count: int) -> dict[bytes, int]:
    """Body -> message number of the first ``count`` messages of the stream."""
    return {s.body: s.n for s in islice(specs(seed), count)}


# -- damage -----------------------------------------------------------------------------------


@dataclasses.dataclass
class Damage:
    """What a trial did to one file: ``lo``/``hi`` bound the bytes that really changed
    (file positions; ``base`` is the file's commit-log offset for a segment)."""

    file: str
    kind: str
    pos: int
    count: int
    lo: Optional[int] = None
    hi: Optional[int] = None
    base: int = 0
    note: str = ""

    @property
    def changed(self) -> bool:
        return self.lo is not None

    @property
    def abs_lo(self) -> int:
        return self.base + self.lo

    @property
    def abs_hi(self) -> int:
        return self.base + self.hi

    def describe(self) -> str:
        what = (f"bytes {self.lo}..{self.hi} of the file changed" if self.changed else "no byte changed")
        at = f", log offsets {self.abs_lo}..{self.abs_hi}" if self.changed and self.base else ""
        how = (f"{self.count} entries overwritten" if self.kind == "entries"
               else f"{self.kind} of {self.count} bytes at {self.pos}")
        return f"{how} in {self.file}{self.note}: {what}{at}"


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _changed_range(before: bytes, after: bytes) -> tuple[Optional[int], Optional[int]]:
    diff = [i for i, (a, b) in enumerate(zip(before, after)) if a != b]
    return (diff[0], diff[-1] + 1) if diff else (None, None)


def damage_bytes(path: str, pos: int, count: int, kind: str, rng: random.Random) -> tuple[Optional[int], Optional[int]]:
    """Flip, randomise or zero ``count`` bytes at ``pos`` with ``pymq.testing``; returns the
    range of bytes that changed."""
    before = _read(path)
    if kind == "flip":
        testing.flip_bytes(path, pos, count, rng)
    elif kind == "garbage":
        testing.write_garbage(path, pos, count, rng)
    elif kind == "zero":
        testing.zero_bytes(path, pos, count)
    else:
        raise ValueError(kind)
    return _changed_range(before, _read(path))


def overwrite(path: str, pos: int, data: bytes) -> tuple[Optional[int], Optional[int]]:
    """Write ``data`` at ``pos`` (same length, the file does not grow); returns the range of
    bytes that changed."""
    before = _read(path)
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)
    return _changed_range(before, _read(path))


def records_end(data: bytes) -> int:
    """End of the whole records at the start of a segment (struct walk, no pymq code)."""
    pos = 0
    while pos + 8 <= len(data):
        size, magic = struct.unpack_from(">iI", data, pos)
        if magic != rd.MESSAGE_MAGIC_CODE or size < 91 or pos + size > len(data):
            break
        pos += size
    return pos


def build_trial_store(root: str, rng: random.Random, killed: bool) -> tuple[list[Put], int, int]:
    """A trial's store: a message count and a body stream drawn from ``rng``, written
    with a clean exit or by a writer killed with SIGKILL. Returns (acknowledged puts,
    messages written, the stream's seed)."""
    count = rng.randint(MESSAGES_MIN, MESSAGES_MAX)
    stream = rng.getrandbits(32)
    if killed:
        acked, written = build_killed(root, stream, count)
        return acked, written, stream
    return build_clean(root, stream, count), count, stream


def random_byte_damage(root: str, path: str, extent: int, rng: random.Random, base: int = 0) -> Damage:
    """1-64 bytes of ``path`` flipped, randomised or zeroed: mostly within its first
    ``extent`` bytes (where the data is), sometimes anywhere in the file."""
    size = os.path.getsize(path)
    if extent > 0 and rng.random() < IN_DATA_SHARE:
        pos = rng.randrange(extent)
    else:
        pos = rng.randrange(size)
    count = min(rng.randint(DAMAGE_MIN, DAMAGE_MAX), size - pos)
    kind = rng.choice(BYTE_DAMAGE_KINDS)
    d = Damage(os.path.relpath(path, root), kind, pos, count, base=base)
    d.lo, d.hi = damage_bytes(path, pos, count, kind, rng)
    return d


def damage_commitlog(root: str, rng: random.Random) -> Damage:
    """1-64 bytes flipped, randomised or zeroed at a random position of a random segment:
    mostly where records are (the whole of a full segment, up to the last record of the
    last one), sometimes anywhere in the file."""
    segs = testing.segments(root)
    i = rng.randrange(len(segs))
    path = segs[i]
    extent = os.path.getsize(path) if i < len(segs) - 1 else records_end(_read(path))
    return random_byte_damage(root, path, extent, rng, base=int(os.path.basename(path)))


def record_intact(data: bytes, pos: int, put: Put) -> bool:
    """Whether the record ``put`` at ``pos`` of a segment's bytes still passes the issue's
    acceptance rule (magic, total size = the sum of its fields, PHYSICALOFFSET = its
    position, body CRC) and still names its topic, queue and queue offset. Parsed with
    ``struct`` only."""
    try:
        total, magic, crc, qid, _flag, qoff, phys, sysflag = struct.unpack_from(">iIiiiqqi", data, pos)
        if magic != rd.MESSAGE_MAGIC_CODE or total != put.size or phys != put.offset:
            return False
        p = pos + 48 + (20 if sysflag & rd.BORNHOST_V6_FLAG else 8) + 8 \
            + (20 if sysflag & rd.STOREHOSTADDRESS_V6_FLAG else 8) + 12
        (blen,) = struct.unpack_from(">i", data, p)
        if blen < 0 or p + 4 + blen > pos + total:
            return False
        body = data[p + 4:p + 4 + blen]
        p += 4 + blen
        tlen = data[p]
        topic = data[p + 1:p + 1 + tlen]
        p += 1 + tlen
        (plen,) = struct.unpack_from(">h", data, p)
        if rd.cal_msg_length(sysflag, blen, tlen, plen) != total:
            return False
        return ((zlib.crc32(body) & 0x7FFFFFFF) == crc and body == put.spec.body
                and (topic, qid, qoff) == (put.spec.topic.encode(), put.spec.queue_id, put.queue_offset))
    except (struct.error, IndexError):
        return False


# -- pymq check --------------------------------------------------------------------------------


@dataclasses.dataclass
class CheckRun:
    rc: int
    doc: object               # the parsed JSON, None when stdout was not JSON
    stdout: str
    stderr: str

    @property
    def aborted(self) -> bool:
        return self.rc not in (0, 1) or self.doc is None or "Traceback" in self.stderr

    def summary(self) -> str:
        return f"exit {self.rc}, stdout {self.stdout[:300]!r}, stderr {self.stderr[-600:]!r}"


def run_check(root: str) -> CheckRun:
    """``python -m pymq --store ROOT check --json`` in a subprocess."""
    try:
        p = subprocess.run([sys.executable, "-m", "pymq", "--store", root, "check", "--json"],
                           capture_output=True, text=True, timeout=CHECK_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        return CheckRun(-999, None, str(e.stdout or ""), f"timed out after {CHECK_TIMEOUT_S} s")
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        doc = None
    return CheckRun(p.returncode, doc, p.stdout, p.stderr)


_NUMBER = re.compile(r"\d[\d,_]*")


def numbers_in(doc, top: bool = True) -> set[int]:
    """Every integer in a check report: numbers in nested values and in strings (``1,234``
    read as 1234); the report's own top-level counters and its path are left out, so
    that a mention is a finding's. Tolerant of how the report is shaped."""
    out: set[int] = set()
    if isinstance(doc, dict):
        for k, v in doc.items():
            if top and (k == "path" or isinstance(v, (int, float))):
                continue
            out |= numbers_in(v, False)
    elif isinstance(doc, list):
        for v in doc:
            out |= numbers_in(v, False)
    elif isinstance(doc, bool):
        pass
    elif isinstance(doc, int):
        out.add(doc)
    elif isinstance(doc, str) and not doc.startswith("/"):
        for m in _NUMBER.findall(doc):
            out.add(int(m.replace(",", "").replace("_", "")))
    return out


def mentions(doc, lo: int, hi: int, base: int) -> bool:
    """Whether a report names an offset in ``[lo, hi]`` (absolute, or relative to the
    segment starting at ``base``)."""
    nums = numbers_in(doc)
    return any(lo <= x <= hi or lo - base <= x <= hi - base for x in nums)


# -- findings ----------------------------------------------------------------------------------


class Findings:
    """Failures of one trial, by category, with a few examples each."""

    def __init__(self, trial: str) -> None:
        self.trial = trial
        self.counts: Counter = Counter()
        self.examples: dict[str, list[str]] = defaultdict(list)

    def add(self, category: str, detail: str) -> None:
        self.counts[category] += 1
        if len(self.examples[category]) < EXAMPLES_PER_CATEGORY:
            self.examples[category].append(detail)

    def to_list(self, context: str) -> list[dict]:
        return [{"trial": self.trial, "category": c, "count": n, "examples": self.examples[c], "context": context}
                for c, n in self.counts.items()]


# -- reading everything back -----------------------------------------------------------------


class Oracle:
    """What was put: acknowledged puts by commit-log offset and by queue position, and the
    bodies of every message a writer may have put (acknowledged or not)."""

    def __init__(self, acked: list[Put], new: list[Put], possible: dict[bytes, int],
                 unknown_window: Optional[tuple[int, int]]) -> None:
        self.acked = acked
        self.new = new
        self.all = acked + new
        self.by_offset = {p.offset: p for p in self.all}
        self.by_where = {p.where: p for p in self.all}
        self.possible = possible
        self.unknown_window = unknown_window     # log offsets where unlogged puts may lie

    def judge(self, m, path: str, f: Findings) -> Optional[Put]:
        """Finding when ``m`` (returned by ``path``) is not a message as it was put."""
        off = m.commitlog_offset
        p = self.by_offset.get(off)
        if p is not None:
            if m.body != p.spec.body:
                f.add("altered-body", f"{path} returned the record at {off} ({p.describe()}) with a "
                                      f"{len(m.body)}-byte body that is not the {len(p.spec.body)}-byte body put")
            return p
        w = self.unknown_window
        if m.body in self.possible and w is not None and w[0] <= off < w[1]:
            return None               # a put the killed writer made but had not reported yet
        what = ("a body never put" if m.body not in self.possible
                else f"the body of message {self.possible[m.body]} at an offset where no put went")
        f.add("altered-body", f"{path} returned {m.topic}/{m.queue_id}@{m.queue_offset} at log offset {off}: {what}")
        return None


@dataclasses.dataclass
class ReadView:
    by_queue: dict                 # (topic, queue_id) -> {queue offset: message} from get_message
    consumed: dict                 # (topic, queue_id, queue offset) -> message from Consumer


def queues_of(store) -> list[tuple[str, int]]:
    topics = store.get_topics()
    out = {(t, q) for t in TOPICS for q in range(QUEUES)}
    out |= {(t, q) for t, qs in topics.items() for q in qs}
    return sorted(out)


def read_queues(store, oracle: Oracle, f: Findings, contiguous: bool) -> dict:
    """Every queue pulled with ``get_message`` from its min to its max offset, moving past
    a position that raises. Each returned message is judged; it must be of the queue
    pulled and at the offset it says; with ``contiguous``, every position from 0 to the
    max offset must return a message (nothing skipped)."""
    out = {}
    for t, q in queues_of(store):
        got: dict[int, object] = {}
        lo, hi = store.get_min_offset_in_queue(t, q), store.get_max_offset_in_queue(t, q)
        if contiguous and lo != 0:
            f.add("skipped", f"{t}/{q}: min offset {lo}, not 0 (no message was cleaned)")
        off, raised = lo, 0
        while off < hi:
            try:
                g = store.get_message(GROUP, t, q, off, PAGE)
            except Exception as e:       # noqa: BLE001 - an error is one of the allowed reports
                raised += 1
                if raised <= 3:
                    f.add("get-raised", f"get_message {t}/{q}@{off} raised {type(e).__name__}: {e}")
                off += 1
                continue
            expect = off
            for m in g.messages:
                p = oracle.judge(m, f"get_message({t}/{q}@{off})", f)
                if p is not None and p.where != (t, q, m.queue_offset):
                    f.add("wrong-position", f"get_message {t}/{q}@{off} returned the record put as {p.describe()} "
                                            f"as {m.topic}/{m.queue_id}@{m.queue_offset}")
                if m.topic != t or m.queue_id != q:
                    f.add("wrong-queue", f"get_message {t}/{q}@{off} returned a message of {m.topic}/{m.queue_id}"
                                         f"@{m.queue_offset} (log offset {m.commitlog_offset})")
                    continue
                if m.queue_offset < expect or m.queue_offset in got:
                    f.add("order", f"get_message {t}/{q}@{off}: queue offset {m.queue_offset} after {expect - 1}")
                if contiguous and m.queue_offset != expect:
                    f.add("skipped", f"get_message {t}/{q}@{off}: the page jumps from {expect} to {m.queue_offset}")
                got[m.queue_offset] = m
                expect = m.queue_offset + 1
            nxt = max(g.next_begin_offset, expect)
            if contiguous and not g.messages and off < hi:
                f.add("skipped", f"get_message {t}/{q}@{off} (max {hi}): {g.status.name}, no message, "
                                 f"next_begin_offset {g.next_begin_offset}")
            if contiguous and g.messages and g.next_begin_offset > expect:
                f.add("skipped", f"get_message {t}/{q}@{off}: next_begin_offset {g.next_begin_offset} "
                                 f"past the last message returned ({expect - 1})")
            off = nxt if nxt > off else off + 1
        out[(t, q)] = got
    return out


def consume_all(store, oracle: Oracle, f: Findings) -> dict:
    """Every topic read with ``pymq.Consumer`` (a new group, from the earliest offset)
    until it returns nothing ``CONSUMER_EMPTY_POLLS`` times in a row."""
    out = {}
    topics = sorted({t for t, _q in queues_of(store)})
    for t in topics:
        c = pymq.Consumer(store, GROUP + "-consumer", t)
        last: dict[int, int] = {}
        empty = polls = 0
        while empty < CONSUMER_EMPTY_POLLS and polls < 100_000:
            polls += 1
            try:
                msgs = c.poll(timeout_s=0)
            except Exception as e:       # noqa: BLE001
                f.add("consumer-raised", f"Consumer({t}).poll raised {type(e).__name__}: {e} at positions {c.positions}")
                break
            empty = 0 if msgs else empty + 1
            for m in msgs:
                oracle.judge(m, f"Consumer({t})", f)
                key = (m.topic, m.queue_id, m.queue_offset)
                if key in out:
                    f.add("consumer-duplicate", f"Consumer({t}) delivered {key} twice")
                if m.queue_offset <= last.get(m.queue_id, -1):
                    f.add("order", f"Consumer({t}) delivered queue {m.queue_id} offset {m.queue_offset} after "
                                   f"{last[m.queue_id]}")
                last[m.queue_id] = m.queue_offset
                out[key] = m
    return out


def read_everything(store, oracle: Oracle, f: Findings, contiguous: bool = False) -> ReadView:
    return ReadView(read_queues(store, oracle, f, contiguous), consume_all(store, oracle, f))


def check_lookups(store, oracle: Oracle, puts: list[Put], must_find, f: Findings) -> None:
    """``look_message_by_offset``, ``view_message_by_id`` and ``query_message`` (by key)
    for every put: whatever they return is judged; for a put where ``must_find(put)`` the
    message must be found by each."""
    for p in puts:
        need = must_find(p)
        for path, call in (("look_message_by_offset", lambda: store.look_message_by_offset(p.offset)),
                           ("view_message_by_id", lambda: store.view_message_by_id(p.msg_id))):
            try:
                m = call()
            except Exception as e:       # noqa: BLE001
                m = None
                if need:
                    f.add(f"lost-by-{path}", f"{path} for {p.describe()} raised {type(e).__name__}: {e}")
                    continue
            if m is not None:
                oracle.judge(m, f"{path}({p.offset})", f)
            elif need:
                f.add(f"lost-by-{path}", f"{path} finds nothing for {p.describe()}")
        try:
            hits = store.query_message(p.spec.topic, p.spec.key)
        except Exception as e:           # noqa: BLE001
            hits = []
            if need:
                f.add("lost-by-key", f"query_message({p.spec.topic}, {p.spec.key}) raised {type(e).__name__}: {e}")
                continue
        for m in hits:
            oracle.judge(m, f"query_message({p.spec.key})", f)
        if need and not any(m.commitlog_offset == p.offset for m in hits):
            f.add("lost-by-key", f"query_message({p.spec.topic}, {p.spec.key}) does not find {p.describe()} "
                                 f"({len(hits)} hits)")


def readable(view: ReadView, p: Put) -> tuple[bool, bool]:
    """Whether ``p`` came back with its queue offset and body through get_message, and
    through the Consumer."""
    t, q, o = p.where
    m = view.by_queue.get((t, q), {}).get(o)
    by_get = m is not None and m.body == p.spec.body and m.commitlog_offset == p.offset
    c = view.consumed.get(p.where)
    by_consumer = c is not None and c.body == p.spec.body and c.commitlog_offset == p.offset
    return by_get, by_consumer


# -- workers -----------------------------------------------------------------------------------


_WORKER = textwrap.dedent(r"""
    import json, sys
    sys.path[:0] = json.loads(sys.argv[1])
    import damage_fuzz_support as sup
    sup.worker_main(sys.argv[2], sys.argv[3], int(sys.argv[4]), json.loads(sys.argv[5]), sys.argv[6])
""")


def worker_main(kind: str, mode: str, base: int, indices: list[int], work: str) -> None:
    """Run the trials ``indices`` of ``kind`` (``commitlog`` or ``queues``) in ``mode``
    (``clean`` or ``sigkill``) under ``work``; write ``result.json`` there. ``progress``
    names the trial running, so a crash can be pinned on it."""
    if kind == "commitlog":
        from test_damage_fuzz import commitlog_trial as trial
    else:
        from test_damage_fuzz_queues import queue_trial as trial
    totals: Counter = Counter()
    failures: list[dict] = []
    durations = []
    for index in indices:
        seed = trial_seed(kind, mode, base, index)
        name = f"{kind}/{mode} trial {index} (seed {seed}; rerun: PYMQ_FUZZ_SEED={base} PYMQ_FUZZ_ONLY={index})"
        with open(os.path.join(work, "progress"), "w") as pf:
            pf.write(name)
        root = os.path.join(work, f"trial-{index}", "store")
        os.makedirs(os.path.dirname(root), exist_ok=True)
        t0 = time.monotonic()
        f = Findings(name)
        context = ""
        try:
            context = trial(root, mode, seed, f, totals)
        except Exception:                # noqa: BLE001 - the harness reports, never dies
            f.add("trial-raised", traceback.format_exc()[-3000:])
        durations.append(time.monotonic() - t0)
        totals["trials"] += 1
        failures += f.to_list(context)
        shutil.rmtree(os.path.dirname(root), ignore_errors=True)
    with open(os.path.join(work, "result.json"), "w") as out:
        json.dump({"totals": dict(totals), "failures": failures, "durations": durations}, out)


def run_workers(kind: str, mode: str, count: int, scratch: str, workers: int = 2) -> dict:
    """Trials ``0..count-1`` of ``kind``/``mode`` spread over ``workers`` subprocesses;
    the merged totals and failures (a worker that died is a failure naming its trial)."""
    base = base_seed()
    indices = trial_indices(count)
    procs = []
    for w in range(min(workers, len(indices))):
        work = os.path.join(scratch, f"{kind}-{mode}-w{w}")
        os.makedirs(work, exist_ok=True)
        mine = indices[w::workers]
        err = open(os.path.join(work, "stderr.txt"), "w")
        p = subprocess.Popen([sys.executable, "-c", _WORKER, _child_path(), kind, mode, str(base),
                              json.dumps(mine), work], stdout=subprocess.DEVNULL, stderr=err)
        procs.append((p, work, err))
    totals: Counter = Counter()
    failures: list[dict] = []
    durations: list[float] = []
    for p, work, err in procs:
        try:
            p.wait(timeout=WORKER_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        err.close()
        result_path = os.path.join(work, "result.json")
        if p.returncode != 0 or not os.path.exists(result_path):
            progress = open(os.path.join(work, "progress")).read() if os.path.exists(os.path.join(work, "progress")) else "?"
            stderr = open(os.path.join(work, "stderr.txt")).read()[-3000:]
            failures.append({"trial": progress, "category": "worker-died", "count": 1,
                             "examples": [f"worker exited with {p.returncode}; stderr: {stderr}"], "context": ""})
            continue
        with open(result_path) as fh:
            r = json.load(fh)
        totals.update(r["totals"])
        failures += r["failures"]
        durations += r["durations"]
    return {"base": base, "totals": totals, "failures": failures, "durations": durations}


def format_failures(failures: list[dict]) -> str:
    """Failures grouped by category: how many trials and findings, then examples."""
    by_cat: dict[str, list[dict]] = defaultdict(list)
    for x in failures:
        by_cat[x["category"]].append(x)
    lines = []
    for cat, xs in sorted(by_cat.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"[{cat}] in {len(xs)} trial(s), {sum(x['count'] for x in xs)} finding(s):")
        for x in xs[:4]:
            lines.append(f"  {x['trial']}")
            if x["context"]:
                lines.append(f"    {x['context']}")
            for e in x["examples"][:3]:
                lines.append(f"    - {e}")
    return "\n".join(lines)


def report(request, title: str, result: dict, keys: list[str]) -> str:
    """Print the totals (``pytest -s`` shows them) and write one summary line to the
    terminal (shown without ``-s`` too); returns the line."""
    t = result["totals"]
    d = result["durations"]
    line = (f"{title}: seed {result['base']}, " + ", ".join(f"{k} {t.get(k, 0):,}" for k in keys)
            + (f"; {len(d)} trials in {sum(d):.1f} s of worker time (max {max(d):.2f} s)" if d else ""))
    print(f"\n{title} (seed {result['base']}):")
    for k in keys:
        print(f"  {k:<30} {t.get(k, 0):>10,}")
    print(f"  {'failing trials':<30} {len({x['trial'] for x in result['failures']}):>10,}")
    if result["failures"]:
        print(format_failures(result["failures"]))
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    if tr is not None:
        tr.write_line(line)
    else:
        print(line)
    return line
