"""Random damage in the commit log loses, alters and skips no acknowledged message
(issue 22, "How we will know", first point).

Each trial (``damage_fuzz_support`` has the machinery):

1. a small store (64 KiB segments) gets 1,500-3,500 messages of three topics and four
   queues, random bodies, tags and a unique key each, recording (topic, queue id, queue
   offset, commit-log offset, body, size) of each acknowledged put; then either a clean
   shutdown or, in a writer subprocess, a real SIGKILL (the acknowledged set is what the
   subprocess reported as put);
2. 1-64 bytes are flipped, randomised or zeroed at a random position of a random segment
   (``pymq.testing``); the range of bytes that really changed is recorded, and each
   acknowledged record overlapping it is classified, with ``struct`` only, as destroyed
   (it no longer passes the issue's acceptance rule: magic, total size, PHYSICALOFFSET,
   body CRC, its topic/queue/queue offset) or intact;
3. ``pymq check --json`` runs on the damaged store, then it is reopened as a writer, 200
   more messages are put, it is shut down and reopened ``read_only=True``, and ``check``
   runs again.

Asserted, per trial:

(a) every acknowledged record whose bytes do not overlap the damaged range (and every put
    after the reopen) comes back from ``get_message`` and from ``pymq.Consumer`` at its
    original queue offset with its original body, and ``look_message_by_offset``,
    ``view_message_by_id`` and ``query_message`` (by key) find it;
(b) no read path (those five) ever returns a body other than the one put at that offset;
(c) no (topic, queue id, queue offset) is handed out twice: every put after the reopen
    gets a queue offset above every acknowledged one of its queue, and a commit-log offset
    past every acknowledged record (recovery overwrote no acknowledged bytes);
(d) ``pymq check --json`` never aborts (exit 0 or 1, valid JSON, no traceback), before and
    after the reopen; when the damage destroyed an acknowledged record it exits 1 and some
    finding names an offset of the damaged region (absolute, or within its segment); after
    a clean exit with damage that changed no byte it exits 0.

Totals are printed (``pytest -s``) and summed up in one line. CI runs a lean piece:
``PYMQ_FUZZ_TRIALS`` trials in all (default 30, half clean, half SIGKILL), seeded by the
date (``PYMQ_FUZZ_SEED`` overrides; ``PYMQ_FUZZ_ONLY=i`` reruns trial ``i``). The full
size is ``PYMQ_FUZZ_TRIALS=1000``.
"""

from __future__ import annotations

import os
import random
from collections import Counter, defaultdict

import pytest
from conftest import small_config

import damage_fuzz_support as sup
import pymq

TRIALS = int(os.environ.get("PYMQ_FUZZ_TRIALS", "30"))       # in all, both modes
NEW_STREAM_SALT = 0x5EED                                      # the puts after the reopen
TOTAL_KEYS = ["trials", "acknowledged", "overlapping", "destroyed", "verified_readable",
              "overlapping_intact_readable", "new_puts", "unchanged", "holes", "holes_reported"]



def commitlog_trial(root: str, mode: str, seed: int, f: sup.Findings, totals: Counter) -> str:
    """One trial (see the module docstring); findings go to ``f``, counts to ``totals``;
    returns a line of context for the findings."""
    rng = random.Random(seed)
    acked, written, stream = sup.build_trial_store(root, rng, mode == "sigkill")
    d = sup.damage_commitlog(root, rng)
    seg = sup._read(os.path.join(root, d.file))
    overlapping = [p for p in acked if d.changed and p.offset < d.abs_hi and d.abs_lo < p.end]
    destroyed = [p for p in overlapping if not sup.record_intact(seg, p.offset - d.base, p)]
    over_ids = {p.offset for p in overlapping}
    totals["acknowledged"] += len(acked)
    totals["overlapping"] += len(overlapping)
    totals["destroyed"] += len(destroyed)
    totals["unchanged"] += not d.changed
    context = (f"{mode}: {len(acked)} acknowledged in {len(sup.testing.segments(root))} segments; damage: "
               f"{d.describe()}; {len(overlapping)} acknowledged records overlap it, {len(destroyed)} destroyed "
               f"({', '.join(p.describe() for p in destroyed[:3])})")

    pre = sup.run_check(root)

    # reopen as a writer and put more
    try:
        store = pymq.MessageStore(root, small_config())
    except Exception as e:           # noqa: BLE001
        f.add("writer-reopen-raised", f"{type(e).__name__}: {e}")
        return context
    context += f"; writer open_report: {store.open_report[:3]}"
    new_stream = sup.specs(stream ^ NEW_STREAM_SALT, sup.NEW_PUT_FIRST_N)
    try:
        store.start()
        new, error = sup.put_all(store, new_stream, sup.NEW_PUTS)
        if error:
            f.add("new-put-refused", error)
    finally:
        store.shutdown()
    totals["new_puts"] += len(new)

    # (c) no offset handed out twice, no acknowledged byte overwritten
    max_acked: dict = defaultdict(lambda: -1)
    for p in acked:
        key = (p.spec.topic, p.spec.queue_id)
        max_acked[key] = max(max_acked[key], p.queue_offset)
    acked_where = {p.where: p for p in acked}
    acked_end = max((p.end for p in acked), default=0)
    for p in new:
        key = (p.spec.topic, p.spec.queue_id)
        if p.queue_offset <= max_acked[key]:
            before = acked_where.get(p.where)
            f.add("offset-reused", f"new put {p.describe()} got queue offset {p.queue_offset}; {max_acked[key]} was "
                                   f"acknowledged before in {key[0]}/{key[1]}"
                                   + (f", and {p.queue_offset} was {before.describe()}"
                                      + (" (overlapping the damage)" if before.offset in over_ids else "")
                                      if before else ""))
        if p.offset < acked_end:
            f.add("log-overwritten", f"new put {p.describe()} was written below the end of the acknowledged "
                                     f"records ({acked_end}): recovery cut acknowledged bytes")
    for where, n in Counter(p.where for p in new).items():
        if n > 1:
            f.add("offset-reused", f"{n} new puts got {where}")

    # (a), (b): read everything back read-only
    window = (acked_end, min((p.offset for p in new), default=1 << 62)) if mode == "sigkill" else None
    possible = sup.possible_bodies(stream, written) if mode == "sigkill" else {p.spec.body: p.spec.n for p in acked}
    oracle = sup.Oracle(acked, new, possible, window)
    try:
        ro = pymq.MessageStore(root, small_config(), read_only=True)
    except Exception as e:           # noqa: BLE001
        f.add("read-only-open-raised", f"{type(e).__name__}: {e}")
        return context
    try:
        view = sup.read_everything(ro, oracle, f)
        sup.check_lookups(ro, oracle, oracle.all, lambda p: p.offset not in over_ids, f)
    finally:
        ro.shutdown()
    acked_ids = {p.offset for p in acked}
    lost_get, lost_consumer = [], []
    for p in oracle.all:
        by_get, by_consumer = sup.readable(view, p)
        if p.offset in over_ids:
            totals["overlapping_intact_readable"] += by_get and by_consumer
            continue
        if not by_get:
            lost_get.append(p)
        if not by_consumer:
            lost_consumer.append(p)
        if p.offset in acked_ids and by_get and by_consumer:
            totals["verified_readable"] += 1
    for label, lost in (("lost", lost_get), ("lost-by-consumer", lost_consumer)):
        for p in lost:
            t, q, o = p.where
            m = view.by_queue.get((t, q), {}).get(o) if label == "lost" else view.consumed.get(p.where)
            there = ("nothing" if m is None else
                     f"the record at {m.commitlog_offset} with a {'different' if m.body != p.spec.body else 'same'} body")
            f.add(label, f"{'acknowledged' if p.offset in acked_ids else 'new put'} {p.describe()} not overlapping the damage: "
                         f"{'get_message' if label == 'lost' else 'Consumer'} gives {there} "
                         f"(of {len(lost)} such records)")

    # (d) pymq check
    post = sup.run_check(root)
    for label, run in (("before the reopen", pre), ("after the reopen", post)):
        if run.aborted:
            f.add("check-aborted", f"{label}: {run.summary()}")
    if not d.changed and mode == "clean" and not post.aborted and post.rc != 0:
        f.add("check-false-damage", f"no byte changed, yet after the reopen: {post.summary()}")
    if destroyed:
        totals["holes"] += 1
        lo = min([d.abs_lo] + [p.offset for p in destroyed])
        hi = max([d.abs_hi] + [p.end for p in destroyed])
        reported = True
        for label, run in (("before the reopen", pre), ("after the reopen", post)):
            if run.aborted:
                reported = False
                continue
            if run.rc != 1:
                reported = False
                f.add("check-missed-hole", f"{label}: exit {run.rc} although {len(destroyed)} acknowledged "
                                           f"record(s) in {lo}..{hi} were destroyed")
            elif not sup.mentions(run.doc, lo, hi, d.base):
                reported = False
                f.add("check-hole-unlocated", f"{label}: exit 1 but no finding names an offset in {lo}..{hi} "
                                              f"(segment {d.base}): {run.stdout[:600]}")
        totals["holes_reported"] += reported
    return context


@pytest.mark.parametrize("mode", ["clean", "sigkill"])
def test_commitlog_damage_fuzz(mode, scratch, request):
    """Random 1-64 byte damage in a random commit-log segment, after a clean exit or a
    SIGKILL: (a) every acknowledged record not overlapping it stays readable at its queue
    offset with its body (get_message, Consumer, by offset, id and key), (b) no read path
    returns an altered body, (c) no queue offset is handed out twice and no acknowledged
    byte is overwritten, (d) ``pymq check --json`` never aborts and reports every
    destroyed record with its offsets."""
    trials = (TRIALS + 1) // 2
    result = sup.run_workers("commitlog", mode, trials, str(scratch))
    line = sup.report(request, f"commit-log damage fuzz ({mode})", result, TOTAL_KEYS)
    failures = result["failures"]
    assert not failures, line + "\n" + sup.format_failures(failures)
    t = result["totals"]
    assert t["trials"] == len(sup.trial_indices(trials)), line
    if t["trials"] >= 10:
        assert t["holes"] > 0, f"no trial destroyed an acknowledged record: the fuzz tests nothing. {line}"
