"""Random damage in consume-queue and index files skips, loses and reuses nothing
(issue 22, "How we will know", second point): the queues and the index are derived data,
rebuilt from the commit log, which is not damaged here.

Each trial builds a small store as ``test_damage_fuzz`` does (1,500-3,500 messages of three
topics and four queues, random bodies, a unique key each; a clean exit or a real SIGKILL
of a writer subprocess) and damages one random consume-queue file or one random index
file, either

* 1-64 bytes flipped, randomised or zeroed at a random position (mostly among the written
  entries), or
* 1-3 whole 20-byte entries overwritten with plausible but wrong values ("same-length
  garbage"): another entry's bytes, a real record's offset and size from another queue
  (with its tags hash), random positive offsets and sizes, an entry pointing a few bytes
  into its own record; in an index file also an entry with a real key's hash and a real
  record's offset, a random chain link, or a hash slot pointing at a random entry.

Then the store is reopened as a writer (and started). Asserted, on the writer, again after
200 more puts, and again on a ``read_only=True`` reopen after a clean shutdown:

* every acknowledged message is readable in order by ``get_message`` and by
  ``pymq.Consumer`` at its original queue offset with its body;
* every queue reads from 0 to its max offset with a message at every position (nothing
  skipped: the queue was rebuilt from the log) and every message returned is the one put
  at that position, of that queue (no garbage entry leads to another record);
* ``query_message`` by key finds every acknowledged message (and every message a queue
  returns), and never returns an altered one;
* the puts after the reopen get the next queue offsets of their queues: above every
  acknowledged one, with no gap.

``PYMQ_FUZZ_QUEUE_TRIALS`` trials in all (default 40, a quarter per test), seeded as in
``test_damage_fuzz`` (``PYMQ_FUZZ_SEED``, ``PYMQ_FUZZ_ONLY``).
"""

from __future__ import annotations

import os
import random
import struct
import time
from collections import Counter, defaultdict

import pytest
import rocketmq_decoder as rd
from conftest import small_config

import damage_fuzz_support as sup
import pymq

TRIALS = int(os.environ.get("PYMQ_FUZZ_QUEUE_TRIALS", "40"))     # in all, the four tests
NEW_STREAM_SALT = 0x0CEA
DISPATCH_TIMEOUT_S = 30
ENTRY_DAMAGE_MAX = 3
ENTRY_GARBAGE_SHARE = 0.5
TOTAL_KEYS = ["trials", "acknowledged", "unchanged", "entries_overwritten", "verified_readable",
              "keys_found", "new_puts"]
CQ_VALUE_KINDS = ("copy", "foreign", "random", "shift")
INDEX_VALUE_KINDS = ("copy", "foreign", "random", "link", "slot")



# -- damage -------------------------------------------------------------------------------------


def _files(root: str, sub: str) -> list[str]:
    out = []
    for dp, _dn, fn in os.walk(os.path.join(root, sub)):
        out += [os.path.join(dp, n) for n in fn if n.isdigit()]
    return sorted(out)


def _cq_written(data: bytes) -> int:
    """Entries of a consume-queue file up to the last one that is not all zeros."""
    n = len(data) // sup.CQ_UNIT
    while n and data[(n - 1) * sup.CQ_UNIT:n * sup.CQ_UNIT] == bytes(sup.CQ_UNIT):
        n -= 1
    return n


def _cq_value(kind: str, rng: random.Random, root: str, own: bytes, acked: list[sup.Put], max_phy: int) -> bytes:
    if kind == "copy":                     # another entry of any queue
        other = sup._read(rng.choice(_files(root, "consumequeue")))
        n = _cq_written(other)
        if n:
            i = rng.randrange(n)
            return other[i * sup.CQ_UNIT:(i + 1) * sup.CQ_UNIT]
    if kind in ("copy", "foreign"):        # a real record, probably of another queue
        p = rng.choice(acked)
        return struct.pack(">qiq", p.offset, p.size, rd.java_hash(p.spec.tags))
    if kind == "shift":                    # a few bytes into (or before) its own record
        phy, size, tags = struct.unpack(">qiq", own)
        return struct.pack(">qiq", max(0, phy + rng.choice((-1, 1)) * rng.randint(1, 300)), size, tags)
    return struct.pack(">qiq", rng.randrange(max(max_phy, 1)), rng.randint(91, 500),
                       rng.randrange(-(1 << 31), 1 << 31))


def damage_consume_queue(root: str, rng: random.Random, acked: list[sup.Put]) -> tuple[sup.Damage, int]:
    """Bytes or whole entries of a random consume-queue file; returns the damage and how
    many entries were overwritten."""
    path = rng.choice(_files(root, "consumequeue"))
    data = sup._read(path)
    written = _cq_written(data)
    rel = os.path.relpath(path, root)
    if rng.random() >= ENTRY_GARBAGE_SHARE:
        return sup.random_byte_damage(root, path, written * sup.CQ_UNIT, rng), 0
    max_phy = max(p.end for p in acked)
    entries = len(data) // sup.CQ_UNIT
    k = rng.randint(1, ENTRY_DAMAGE_MAX)
    pool = range(written) if written and rng.random() < sup.IN_DATA_SHARE else range(entries)
    which = sorted(rng.sample(list(pool), min(k, len(pool))))
    kinds = []
    lo = hi = None
    for i in which:
        kind = rng.choice(CQ_VALUE_KINDS)
        kinds.append(f"{i}:{kind}")
        own = sup._read(path)[i * sup.CQ_UNIT:(i + 1) * sup.CQ_UNIT]
        a, b = sup.overwrite(path, i * sup.CQ_UNIT, _cq_value(kind, rng, root, own, acked, max_phy))
        if a is not None:
            lo = a if lo is None else min(lo, a)
            hi = b if hi is None else max(hi, b)
    d = sup.Damage(rel, "entries", which[0] * sup.CQ_UNIT, len(which), lo, hi,
                   note=f" (entries {', '.join(kinds)} of {written} written)")
    return d, len(which)


def damage_index(root: str, rng: random.Random, acked: list[sup.Put]) -> tuple[sup.Damage, int]:
    """Bytes, whole entries or hash slots of a random index file."""
    cfg = small_config()
    slots = cfg.index_hash_slots
    path = rng.choice(_files(root, "index"))
    data = sup._read(path)
    count = max(1, min(struct.unpack_from(">i", data, 36)[0], cfg.index_max_entries))
    base = sup.INDEX_HEADER + slots * 4
    rel = os.path.relpath(path, root)
    if rng.random() >= ENTRY_GARBAGE_SHARE:
        return sup.random_byte_damage(root, path, base + count * sup.INDEX_ENTRY, rng), 0
    max_phy = max(p.end for p in acked)
    kinds = []
    lo = hi = None
    first = None
    for _ in range(rng.randint(1, ENTRY_DAMAGE_MAX)):
        kind = rng.choice(INDEX_VALUE_KINDS)
        if kind == "slot":
            s = rng.randrange(slots)
            pos, value = sup.INDEX_HEADER + s * 4, struct.pack(">i", rng.randrange(count + 1))
        else:
            i = rng.randrange(1, count) if count > 1 else 1
            pos = base + i * sup.INDEX_ENTRY
            if kind == "copy" and count > 1:
                j = rng.randrange(1, count)
                value = data[base + j * sup.INDEX_ENTRY:base + (j + 1) * sup.INDEX_ENTRY]
            elif kind in ("copy", "foreign"):
                p = rng.choice(acked)
                value = struct.pack(">iqii", rd.index_hash(f"{p.spec.topic}#{p.spec.key}"), rng.choice(acked).offset,
                                    rng.randint(0, 1000), rng.randrange(max(i, 1)))
            elif kind == "link":
                h, phy, diff, _prev = struct.unpack_from(">iqii", data, pos)
                value = struct.pack(">iqii", h, phy, diff, rng.randrange(max(i, 1)))
            else:
                value = struct.pack(">iqii", rng.randrange(1 << 31), rng.randrange(max(max_phy, 1)),
                                    rng.randint(0, 1 << 20), rng.randrange(max(i, 1)))
        kinds.append(f"{pos}:{kind}")
        first = pos if first is None else min(first, pos)
        a, b = sup.overwrite(path, pos, value)
        if a is not None:
            lo = a if lo is None else min(lo, a)
            hi = b if hi is None else max(hi, b)
    d = sup.Damage(rel, "entries", first, len(kinds), lo, hi,
                   note=f" (at file positions {', '.join(kinds)}; {count} entries written)")
    return d, len(kinds)


# -- the trial --------------------------------------------------------------------------------


def _wait_dispatched(store) -> bool:
    deadline = time.monotonic() + DISPATCH_TIMEOUT_S
    while store.dispatch_behind_bytes():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


def _verify(store, oracle: sup.Oracle, f: sup.Findings, stage: str, totals: Counter, count: bool) -> None:
    """Everything in order, nothing skipped, every key found, on ``store`` at ``stage``."""
    sf = sup.Findings(f.trial)
    view = sup.read_everything(store, oracle, sf, contiguous=True)
    sup.check_lookups(store, oracle, oracle.all, lambda p: True, sf)
    for p in oracle.all:
        by_get, by_consumer = sup.readable(view, p)
        if not by_get:
            sf.add("lost", f"{p.describe()}: get_message does not return it")
        if not by_consumer:
            sf.add("lost-by-consumer", f"{p.describe()}: the Consumer does not deliver it")
        if count and by_get and by_consumer:
            totals["verified_readable"] += 1
    # messages the queues return that no report named (a killed writer's last puts)
    for (t, q), got in view.by_queue.items():
        for o, m in got.items():
            if m.commitlog_offset in oracle.by_offset or not m.keys:
                continue
            hits = store.query_message(t, m.keys[0])
            if not any(h.commitlog_offset == m.commitlog_offset for h in hits):
                sf.add("lost-by-key", f"query_message({t}, {m.keys[0]}) does not find {t}/{q}@{o} "
                                      f"(log {m.commitlog_offset}), which the queue returns")
    if count:
        totals["keys_found"] += len(oracle.all) - sf.counts.get("lost-by-key", 0)
    for cat, n in sf.counts.items():         # one category per stage: where a problem lasts
        for e in sf.examples[cat]:
            f.add(f"{cat} ({stage})", e)
        f.counts[f"{cat} ({stage})"] += n - len(sf.examples[cat])


def queue_trial(root: str, mode: str, seed: int, f: sup.Findings, totals: Counter) -> str:
    """One trial: build, damage a consume-queue (``mode`` ``cq-*``) or an index file
    (``index-*``), reopen as a writer, verify, put more, verify, reopen read-only, verify."""
    target, exit_kind = mode.split("-")
    rng = random.Random(seed)
    acked, written, stream = sup.build_trial_store(root, rng, exit_kind == "sigkill")
    totals["acknowledged"] += len(acked)
    if target == "cq":
        d, entries = damage_consume_queue(root, rng, acked)
    else:
        d, entries = damage_index(root, rng, acked)
    totals["unchanged"] += not d.changed
    totals["entries_overwritten"] += entries
    context = f"{mode}: {len(acked)} acknowledged; damage: {d.describe()}"
    acked_end = max(p.end for p in acked)
    possible = sup.possible_bodies(stream, written)

    try:
        store = pymq.MessageStore(root, small_config())
    except Exception as e:           # noqa: BLE001
        f.add("writer-reopen-raised", f"{type(e).__name__}: {e}")
        return context
    context += f"; writer open_report: {store.open_report[:3]}"
    new: list[sup.Put] = []
    try:
        store.start()
        if not _wait_dispatched(store):
            f.add("dispatch-stuck", f"{store.dispatch_behind_bytes()} bytes not dispatched after {DISPATCH_TIMEOUT_S} s")
        before = {(t, q): store.get_max_offset_in_queue(t, q) for t in sup.TOPICS for q in range(sup.QUEUES)}
        _verify(store, sup.Oracle(acked, [], possible, (acked_end, 1 << 62)), f, "writer after the reopen",
                totals, False)
        new, error = sup.put_all(store, sup.specs(stream ^ NEW_STREAM_SALT, sup.NEW_PUT_FIRST_N), sup.NEW_PUTS)
        if error:
            f.add("new-put-refused", error)
        _wait_dispatched(store)
        totals["new_puts"] += len(new)
        max_acked: dict = defaultdict(lambda: -1)
        for p in acked:
            key = (p.spec.topic, p.spec.queue_id)
            max_acked[key] = max(max_acked[key], p.queue_offset)
        nxt = dict(before)
        for p in new:
            key = (p.spec.topic, p.spec.queue_id)
            if p.queue_offset <= max_acked[key]:
                f.add("offset-reused", f"new put {p.describe()}: {max_acked[key]} was acknowledged in "
                                       f"{key[0]}/{key[1]} before the damage")
            elif p.queue_offset != nxt[key]:
                f.add("skipped", f"new put {p.describe()}: the queue's next offset was {nxt[key]}")
            nxt[key] = p.queue_offset + 1
        window = (acked_end, min((p.offset for p in new), default=1 << 62))
        oracle = sup.Oracle(acked, new, possible, window)
        _verify(store, oracle, f, "writer after more puts", totals, False)
    finally:
        store.shutdown()
    try:
        ro = pymq.MessageStore(root, small_config(), read_only=True)
    except Exception as e:           # noqa: BLE001
        f.add("read-only-open-raised", f"{type(e).__name__}: {e}")
        return context
    try:
        _verify(ro, oracle, f, "read-only reopen", totals, True)
    finally:
        ro.shutdown()
    return context


@pytest.mark.parametrize("exit_kind", ["clean", "sigkill"])
@pytest.mark.parametrize("target", ["cq", "index"])
def test_queue_and_index_damage_fuzz(target, exit_kind, scratch, request):
    """Random bytes or plausible same-length garbage entries in one consume-queue file
    (``cq``) or index file (``index``) after a clean exit or a SIGKILL: reopened as a
    writer, every acknowledged message is read in order at its queue offset (get_message
    and Consumer), no queue position is skipped or leads to another record, every key is
    found, and new puts take the next offsets; the same after a read-only reopen."""
    trials = max(1, TRIALS // 4)
    result = sup.run_workers("queues", f"{target}-{exit_kind}", trials, str(scratch))
    line = sup.report(request, f"{'consume-queue' if target == 'cq' else 'index'} damage fuzz ({exit_kind})",
                      result, TOTAL_KEYS)
    failures = result["failures"]
    assert not failures, line + "\n" + sup.format_failures(failures)
    assert result["totals"]["trials"] == len(sup.trial_indices(trials)), line
