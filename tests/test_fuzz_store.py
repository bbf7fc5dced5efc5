"""Fuzzing: random byte damage anywhere in a small store never crashes the process (issue 6).

A template store (three 4 KiB commit-log segments, six consume queues in two topics, a
delay-level message and its schedule queue, index files, checkpoint, consumer and delay
offsets, config JSON) is copied for every case and damaged by Hypothesis: bytes flipped,
zeroed or overwritten with random data at any position, a file truncated, extended or
deleted, sometimes in two files, with or without an ``abort`` marker, opened with an
explicit config or with the sizes recorded in ``config/storeSizes.json``. Then:

* ``StoreChecker`` runs on the damaged copy (it must not change a byte) and reports, or
  raises a ``PymqError``;
* opening either succeeds or raises a ``PymqError`` / ``OSError`` with a message;
* if it succeeds: every queue is pulled from its min to its max offset, the template's keys
  are queried, every offset the template acknowledged is looked up, ``StoreChecker`` runs
  again, the store is started, a new message is put and shut down: nothing may raise
  anything but ``PymqError``.

The cases run in subprocesses (two at a time, one per core), so that a segfault or a
SIGBUS shows up as a negative return code instead of killing pytest; each subprocess logs
the case it is about to run, so a crash names it. ``PYMQ_FUZZ_EXAMPLES`` sets the number
of examples per subprocess (default 500, i.e. 2,000 cases in four subprocesses). The cases
run in a directory under ``/dev/shm`` when there is one (six times faster than a disk:
every case copies, opens, msyncs and deletes a store).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

EXAMPLES = int(os.environ.get("PYMQ_FUZZ_EXAMPLES", "500"))
HANG_S = 240                 # a subprocess normally needs 10-20 s

_FUZZER = textwrap.dedent(r'''
    import hashlib, json, os, random, shutil, sys, time, traceback
    sys.path[:0] = json.loads(sys.argv[1])
    work, seed, examples, flavour = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]

    import pymq
    from pymq.checker import StoreChecker
    from hypothesis import HealthCheck, Phase, given, settings, strategies as st
    import hypothesis

    CFG = dict(commitlog_file_size=4096, consume_queue_entries=8, index_hash_slots=8, index_max_entries=24,
               flush_interval_commitlog=20, warm_mapped_file_enable=False, message_delay_level="1s 2s")

    def cfg(**kw):
        return pymq.StoreConfig(**dict(CFG, **kw))

    # -- the template -------------------------------------------------------------------
    template = os.path.join(work, "template")
    keys, acked = [], []
    with pymq.MessageStore(template, cfg()) as s:
        for i in range(56):
            r = s.put_message(pymq.Message(topic="F%d" % (i % 2), body=b"body-%d" % i * (1 + i % 3),
                                           keys=["key%d" % i, "both"], tags="Tag%d" % (i % 4), queue_id=i % 3))
            assert r.status is pymq.PutMessageStatus.PUT_OK, r
            keys.append(("F%d" % (i % 2), "key%d" % i))
            acked.append(r.commitlog_offset)
        r = s.put_message(pymq.Message(topic="F0", body=b"later", delay_level=2))
        acked.append(r.commitlog_offset)
        s.commit_offset("group", "F0", 0, 3)
        deadline = time.monotonic() + 5
        while s.dispatch_behind_bytes() and time.monotonic() < deadline:
            time.sleep(0.002)
    if flavour == "crashed":
        with open(os.path.join(template, "abort"), "wb"):
            pass
    FILES = sorted(os.path.relpath(os.path.join(dp, n), template)
                   for dp, _dn, fn in os.walk(template) for n in fn if n != "lock")
    assert len(FILES) > 15, FILES
    log = open(os.path.join(work, "cases.log"), "w", buffering=1)
    stats = {"cases": 0, "refused": 0, "opened": 0, "checker_problems": 0}
    failures = []

    def snapshot(root):
        out = {}
        for dp, _dn, fn in os.walk(root):
            for n in fn:
                with open(os.path.join(dp, n), "rb") as f:
                    out[os.path.join(dp, n)] = hashlib.md5(f.read()).digest()
        return out

    SEGMENTS = [f for f in FILES if f.startswith("commitlog")]

    def pick(d):
        files = SEGMENTS if d["area"] == "commitlog" else FILES
        return files[d["file"] % len(files)]

    def damage(root, d):
        path = os.path.join(root, pick(d))
        if not os.path.exists(path):          # the first damage deleted it
            return
        size = os.path.getsize(path)
        rng = random.Random(d["seed"])
        kind = d["kind"]
        pos = d["pos"] % max(size, 1)
        if kind == "delete":
            os.remove(path)
            return
        if kind == "truncate":
            os.truncate(path, pos)
            return
        if kind == "extend":
            with open(path, "ab") as f:
                f.write(rng.randbytes(d["length"]) if d["seed"] % 2 else bytes(d["length"]))
            return
        with open(path, "r+b") as f:
            f.seek(pos)
            old = f.read(d["length"])
            if kind == "flip":
                new = bytes(b ^ rng.randrange(1, 256) for b in old)
            elif kind == "zero":
                new = bytes(len(old))
            elif kind == "ones":
                new = b"\xff" * len(old)
            else:
                new = rng.randbytes(len(old))
            f.seek(pos)
            f.write(new)

    ALLOWED_OPEN = (pymq.PymqError, OSError)

    def exercise(root, c, findings):
        """One case: checker on the damaged copy, open, read everything, check, write."""
        config = cfg(check_crc_on_recover=c["crc"]) if c["explicit_config"] else None
        before = snapshot(root)
        try:
            StoreChecker(root, config).run()
        except pymq.PymqError as e:
            assert str(e), "an empty error message"
        after = snapshot(root)
        if after != before:
            changed = sorted(os.path.relpath(p, root) for p in set(before) | set(after) if before.get(p) != after.get(p))
            findings.append(("checker-changed-files", "StoreChecker changed " + ", ".join(changed)))
        try:
            store = pymq.MessageStore(root, config)
        except ALLOWED_OPEN as e:
            assert str(e), "an empty error message"
            stats["refused"] += 1
            return
        stats["opened"] += 1
        try:
            for topic, qids in store.get_topics().items():
                for q in qids:
                    lo, hi = store.get_min_offset_in_queue(topic, q), store.get_max_offset_in_queue(topic, q)
                    off, steps = lo, 0
                    while off < hi and steps < 200:
                        steps += 1
                        try:
                            g = store.get_message("g", topic, q, off, 16, tags=None if steps % 2 else "Tag1 || Tag2")
                        except pymq.PymqError:
                            break
                        if g.next_begin_offset <= off:
                            break
                        off = g.next_begin_offset
                    for fn in (lambda: store.get_offset_in_queue_by_time(topic, q, int(time.time() * 1000)),
                               lambda: store.get_message_store_timestamp(topic, q, lo),
                               lambda: store.get_earliest_message_time(topic, q)):
                        try:
                            fn()
                        except pymq.PymqError:
                            pass
            for topic, key in keys[::5] + [("F0", "both"), ("F1", "both")]:
                try:
                    store.query_message(topic, key)
                except pymq.PymqError:
                    pass
            for off in acked:
                try:
                    store.look_message_by_offset(off)
                except pymq.PymqError:
                    pass
            try:
                rep = StoreChecker(root, config).run()
                stats["checker_problems"] += not rep.ok
            except pymq.PymqError:
                pass
            try:
                store.start()
                r = store.put_message(pymq.Message(topic="F0", body=b"after", keys=["after"]))
                assert isinstance(r.status, pymq.PutMessageStatus)
                store.put_messages([pymq.Message(topic="F1", body=b"b1"), pymq.Message(topic="F1", body=b"b2")])
            except pymq.PymqError:
                pass
        finally:
            try:
                store.shutdown()
            except pymq.PymqError:
                pass

    damage_st = st.fixed_dictionaries({
        "area": st.sampled_from(["commitlog", "any", "any"]),
        "file": st.integers(0, 10 ** 6),
        "kind": st.sampled_from(["flip", "flip", "zero", "random", "ones", "truncate", "extend", "delete"]),
        "pos": st.integers(0, 1 << 20) | st.integers(0, 64),       # anywhere, or in a header
        "length": st.integers(1, 48) | st.just(1),
        "seed": st.integers(0, 1 << 32),
    })
    case_st = st.fixed_dictionaries({
        "damage": st.lists(damage_st, min_size=1, max_size=2),
        "abort": st.sampled_from([None, True, False]),          # leave, create, remove the marker
        "explicit_config": st.booleans() | st.just(True),
        "crc": st.booleans(),
    })

    n = [0]

    @hypothesis.seed(seed)
    @settings(max_examples=examples, deadline=None, database=None, derandomize=False,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(case_st)
    def fuzz(c):
        n[0] += 1
        root = os.path.join(work, "case")
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(template, root, symlinks=True)
        for d in c["damage"]:
            damage(root, d)
        if c["abort"] is True:
            open(os.path.join(root, "abort"), "wb").close()
        elif c["abort"] is False and os.path.exists(os.path.join(root, "abort")):
            os.remove(os.path.join(root, "abort"))
        described = dict(c, files=[pick(d) for d in c["damage"]])
        log.write(json.dumps(described) + "\n")
        stats["cases"] += 1
        findings = []
        try:
            exercise(root, c, findings)
        except Exception as e:
            findings.append(("exception", "%s: %s" % (type(e).__name__, e), traceback.format_exc()[-2500:]))
        for f in findings:
            failures.append({"case": described, "kind": f[0], "error": f[1], "trace": f[2] if len(f) > 2 else ""})

    fuzz()
    kinds = {}
    for f in failures:
        kinds[f["kind"]] = kinds.get(f["kind"], 0) + 1
    shown, seen = [], {}
    for f in failures:                       # a few examples of each kind
        if seen.get(f["kind"], 0) < 5:
            seen[f["kind"]] = seen.get(f["kind"], 0) + 1
            shown.append(f)
    print(json.dumps({"stats": stats, "kinds": kinds, "failures": shown}))
''')



def _run(tmp_path, seed: int, flavour: str):
    work = tmp_path / f"fuzz-{seed}"
    work.mkdir()
    paths = [p for p in sys.path if p]
    # output to files: a full pipe would stall the subprocess that is not being read yet
    with open(work / "stdout.txt", "w") as out, open(work / "stderr.txt", "w") as err:
        return subprocess.Popen([sys.executable, "-c", _FUZZER, json.dumps(paths), str(work), str(seed),
                                 str(EXAMPLES), flavour], stdout=out, stderr=err), work


def _finish(proc, work, seed) -> dict:
    def last_case() -> str:
        log = work / "cases.log"
        lines = log.read_text().splitlines() if log.exists() else []
        return lines[-1] if lines else "(none)"

    try:
        proc.wait(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"fuzz subprocess (seed {seed}) still running after {HANG_S} s: a case hangs? "
                    f"last case: {last_case()}")
    out = (work / "stdout.txt").read_text()
    err = (work / "stderr.txt").read_text()
    assert proc.returncode == 0, (
        f"fuzz subprocess (seed {seed}) ended with {proc.returncode}"
        + (f" (signal {-proc.returncode})" if proc.returncode < 0 else "")
        + f"; last case: {last_case()}\nstderr: {err[-3000:]}")
    result = json.loads(out.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("seeds", [(1, 2), (3, 4)], ids=["clean-template", "crashed-template"])
def test_random_damage_never_crashes(scratch, seeds):
    flavour = "clean" if seeds[0] == 1 else "crashed"
    procs = [(_run(scratch, s, flavour), s) for s in seeds]
    results = [_finish(p, w, s) for (p, w), s in procs]
    cases = sum(r["stats"]["cases"] for r in results)
    print(f"{flavour}: " + "; ".join(json.dumps(r["stats"]) for r in results))
    assert cases >= 2 * EXAMPLES * 0.9
    # the cases did reach both outcomes
    assert all(r["stats"]["opened"] for r in results) and sum(r["stats"]["refused"] for r in results)

    def report(kind: str) -> tuple[int, str]:
        n = sum(r["kinds"].get(kind, 0) for r in results)
        shown = [f for r in results for f in r["failures"] if f["kind"] == kind][:4]
        return n, "\n".join(f"  {f['case']}\n    {f['error']}\n{f['trace']}" for f in shown)

    n, text = report("exception")
    assert n == 0, f"{n} of {cases} cases raised something other than PymqError (OSError at open):\n{text}"
    n, text = report("checker-changed-files")
    assert n == 0, f"in {n} of {cases} cases StoreChecker (read-only) changed the damaged store's files:\n{text}"
