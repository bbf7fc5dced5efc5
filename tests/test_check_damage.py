"""``pymq check`` never aborts on damage and reports every hole (issue 22, items 1 and 8).

Damage is made with :mod:`pymq.testing` on a cleanly shut down store of small segments
(real files, real bytes). For every case ``pymq check`` must finish, print its report and
exit 1, ``--json`` must parse, the store must not change, and every hole (a stretch with
no valid record, valid records after it) must be reported with its commit-log offsets and
the records it took: exactly the written records that start inside it, by their queues
and queue offsets. A run of random damage (1-64 bytes anywhere in a random segment) checks
the same invariants: every written record is either walked or counted in a hole or in
the torn tail at the end of the log.
"""

from __future__ import annotations

import json
import os
import random
import struct

import pytest
from conftest import small_config, snapshot

import pymq
from pymq import cli, testing
from pymq.checker import StoreChecker

SEG = 8 * 1024
N = 300
QUEUES = 2


def cfg() -> pymq.StoreConfig:
    return small_config(commitlog_file_size=SEG)


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> tuple[str, list[tuple[int, int, int, int]]]:
    """A store of ``N`` messages over ``QUEUES`` queues; (offset, size, queue, queue offset)
    of each record, in log order."""
    path = str(tmp_path_factory.mktemp("check") / "template")
    written = []
    with pymq.MessageStore(path, cfg()) as s:
        for i in range(N):
            r = s.put_message(pymq.Message("T", b"body-%04d" % i, keys=[f"k{i}"], tags="A", queue_id=i % QUEUES))
            assert r.is_ok()
            written.append((r.commitlog_offset, r.wrote_bytes, i % QUEUES, r.queue_offset))
    assert len(testing.segments(path)) >= 5
    return path, written


def copy(template, tmp_path) -> tuple[str, list]:
    import shutil
    path = str(tmp_path / "s")
    shutil.copytree(template[0], path)
    return path, template[1]


def run_check(path: str, capfd) -> tuple[int, dict, str]:
    """``pymq check --json`` and ``pymq check``: the exit code, the parsed JSON, the text."""
    capfd.readouterr()
    code = cli.main(["--store", path, "check", "--json"])
    out = capfd.readouterr().out
    doc = json.loads(out)
    assert cli.main(["--store", path, "check"]) == code
    text = capfd.readouterr().out
    assert "result" in text
    return code, doc, text


def segment_of(path: str, offset: int) -> tuple[str, int]:
    seg = offset // SEG * SEG
    return os.path.join(path, "commitlog", "%020d" % seg), offset - seg


def expected_hole(written, start: int, end: int) -> dict:
    """The records of ``written`` starting in ``[start, end)``, as the report's queues."""
    queues: dict[str, list[int]] = {}
    for off, _size, q, qo in written:
        if start <= off < end:
            a = queues.setdefault(f"T/{q}", [qo, qo, 0])
            a[0], a[1], a[2] = min(a[0], qo), max(a[1], qo), a[2] + 1
    return queues


def assert_one_hole(doc: dict, written, start: int, end: int) -> None:
    assert doc["ok"] is False
    assert [(h["start"], h["end"]) for h in doc["holes"]] == [(start, end)], doc["holes"]
    hole = doc["holes"][0]
    want = expected_hole(written, start, end)
    assert hole["queues"] == want and hole["records"] == sum(n for _, _, n in want.values()), hole
    assert doc["records"] == N - hole["records"]
    # the hole is the only problem: no entry into it is reported a second time
    assert [p["kind"] for p in doc["problems"]] == ["commitlog"], doc["problems"]
    assert str(start) in doc["problems"][0]["detail"]


def test_damaged_record_header_in_a_middle_segment(template, tmp_path, capfd):
    """The audit's case: a bad magic code in a middle segment made check exit 2 with
    ``error: bad magic code``, no report, no JSON."""
    path, written = copy(template, tmp_path)
    mid = [w for w in written if 2 * SEG <= w[0] < 3 * SEG]
    off, size, _, _ = mid[3]
    seg, pos = segment_of(path, off)
    with open(seg, "r+b") as f:
        f.seek(pos + 4)
        f.write(b"\x00\x11\x22\x33")
    before = snapshot(path)
    code, doc, text = run_check(path, capfd)
    assert code == 1
    assert_one_hole(doc, written, off, off + size)
    assert "hole" in text and f"{off:,}..{off + size:,}" in text, text
    assert snapshot(path) == before


@pytest.mark.parametrize("how", ["body-byte", "zeroed-records", "total-size", "physical-offset"])
def test_hole_is_exactly_the_damaged_records(template, tmp_path, capfd, how):
    path, written = copy(template, tmp_path)
    mid = [w for w in written if SEG <= w[0] < 2 * SEG]
    off, size, _, _ = mid[5]
    seg, pos = segment_of(path, off)
    end = off + size
    if how == "body-byte":                       # the body CRC fails
        testing.flip_bytes(seg, testing.topic_length_position(seg, pos) - 1, 1, random.Random(1))
    elif how == "zeroed-records":                # three records and a bit of the fourth
        end = mid[9][0]
        testing.zero_bytes(seg, pos, mid[8][0] - off + 10)
    elif how == "total-size":
        with open(seg, "r+b") as f:
            f.seek(pos)
            f.write(struct.pack(">i", size + 20))
    else:
        with open(seg, "r+b") as f:
            f.seek(pos + 28)
            f.write(struct.pack(">q", off + 1))
    code, doc, _ = run_check(path, capfd)
    assert code == 1
    assert_one_hole(doc, written, off, end)


def test_damaged_blank_makes_a_hole_to_the_segment_end(template, tmp_path, capfd):
    """The end-of-file blank of a middle segment destroyed: the hole runs to the segment's
    end (the next segment starts with a valid record) and took no record."""
    path, written = copy(template, tmp_path)
    last_in_seg = max(w for w in written if w[0] < SEG)
    blank_at = last_in_seg[0] + last_in_seg[1]
    seg, pos = segment_of(path, blank_at)
    testing.write_garbage(seg, pos, 8, random.Random(3))
    code, doc, _ = run_check(path, capfd)
    assert code == 1
    assert_one_hole(doc, written, blank_at, SEG)
    assert doc["holes"][0]["records"] == 0


def test_damage_over_a_segment_boundary_is_one_hole(template, tmp_path, capfd):
    path, written = copy(template, tmp_path)
    last_in_seg = max(w for w in written if w[0] < 2 * SEG)
    first_next = min(w for w in written if w[0] >= 2 * SEG)
    second_next = min(w for w in written if w[0] > first_next[0])
    seg, pos = segment_of(path, last_in_seg[0])
    testing.zero_bytes(seg, pos, SEG - pos)
    seg, pos = segment_of(path, first_next[0])
    testing.zero_bytes(seg, pos, 50)
    code, doc, _ = run_check(path, capfd)
    assert code == 1
    assert_one_hole(doc, written, last_in_seg[0], second_next[0])
    assert doc["holes"][0]["records"] == 2


def test_hole_in_the_last_segment_and_a_torn_tail(template, tmp_path, capfd):
    """Damage in the last segment with valid records after it is a hole; damage at its
    end with nothing valid after it is a damaged tail after a clean exit (an open fences
    it) and a torn tail after a crash (an open cuts it): a problem, not a hole, and the
    queue entries of the torn record point past the end of the log."""
    path, written = copy(template, tmp_path)
    last_seg = written[-1][0] // SEG * SEG
    in_last = [w for w in written if w[0] >= last_seg]
    assert len(in_last) >= 4
    off, size, _, _ = in_last[1]
    seg, pos = segment_of(path, off)
    testing.flip_bytes(seg, testing.topic_length_position(seg, pos) - 2, 1, random.Random(5))
    code, doc, _ = run_check(path, capfd)
    assert code == 1
    assert_one_hole(doc, written, off, off + size)

    t_off, t_size, t_q, t_qo = in_last[-1]
    seg, pos = segment_of(path, t_off)
    testing.write_garbage(seg, pos + 8, 30, random.Random(6))
    for kind in ("damaged tail", "torn tail"):
        if kind == "torn tail":
            testing.create_abort(path)
        code, doc, text = run_check(path, capfd)
        assert code == 1
        assert len(doc["holes"]) == 1 and doc["log_end"] == t_off
        tail = doc["torn_tail"]
        assert (tail["start"], tail["kind"], tail["records"], tail["queues"]) == \
            (t_off, kind, 1, {f"T/{t_q}": [t_qo, t_qo, 1]}), tail
        assert tail["end"] == t_off + t_size          # its last non-zero byte: the rest of the record
        assert [p["kind"] for p in doc["problems"]] == ["commitlog", "commitlog"], doc["problems"]
        assert kind in doc["problems"][1]["detail"] and kind not in doc["problems"][0]["detail"]


def test_check_of_a_missing_store_is_still_json(tmp_path, capfd):
    capfd.readouterr()
    assert cli.main(["--store", str(tmp_path / "nothing"), "check", "--json"]) == 2
    captured = capfd.readouterr()
    doc = json.loads(captured.out)
    assert doc["ok"] is False and "no store" in doc["error"]
    assert cli.main(["--store", str(tmp_path / "nothing"), "check"]) == 2


def test_random_damage_never_aborts_and_every_hole_is_counted(template, tmp_path, capfd):
    """40 trials: 1-64 random bytes at a random position of a random segment."""
    rng = random.Random(22)
    totals = {"holes": 0, "records_in_holes": 0, "torn_tails": 0, "exit_1": 0, "exit_0": 0}
    for trial in range(40):
        path = str(tmp_path / f"t{trial}")
        import shutil
        shutil.copytree(template[0], path)
        written = template[1]
        segs = testing.segments(path)
        seg = rng.choice(segs)
        start = int(os.path.basename(seg))
        used = [w for w in written if start <= w[0] < start + SEG]
        end_used = max(w[0] + w[1] for w in used) - start
        pos = rng.randrange(0, end_used)
        n = rng.randint(1, 64)
        testing.write_garbage(seg, pos, n, rng)
        before = snapshot(path)
        code, doc, _ = run_check(path, capfd)
        assert snapshot(path) == before
        assert code in (0, 1), doc
        totals[f"exit_{code}"] += 1
        report = StoreChecker(path).run()
        assert [(h.start, h.end, h.records) for h in report.holes] == \
               [(h["start"], h["end"], h["records"]) for h in doc["holes"]]
        damaged = (start + pos, start + pos + n)
        for h in report.holes:
            inside = [w for w in written if h.start <= w[0] < h.end]
            # every record of a hole overlaps the damaged bytes, and is counted with it
            assert all(w[0] < damaged[1] and damaged[0] < w[0] + w[1] for w in inside), (trial, h, damaged)
            assert h.queues == expected_hole(written, h.start, h.end), (trial, h)
            totals["holes"] += 1
            totals["records_in_holes"] += h.records
        tail = report.torn_tail.records if report.torn_tail else 0
        assert report.records + sum(h.records for h in report.holes) + tail == N, (trial, report.problems)
        totals["torn_tails"] += report.torn_tail is not None
        assert not any(p.kind == "store" for p in report.problems), report.problems
        shutil.rmtree(path)
    print(f"\nrandom damage: {totals}")
    assert totals["holes"] > 0


def test_lost_markers_are_counted_with_the_hole_they_lay_in(template, tmp_path, capfd):
    """A queue rebuilt over a hole holds lost markers (RocketMQ's blank entry) at the queue
    offsets of the hole's records: they are the records the hole took, counted with it."""
    path, written = copy(template, tmp_path)
    mid = [w for w in written if 3 * SEG <= w[0] < 4 * SEG]
    first, second = mid[4], mid[5]
    seg, pos = segment_of(path, first[0])
    testing.zero_bytes(seg, pos, first[1] + 20)       # two records of two queues
    # the entry of the first becomes a lost marker, as a rebuild of its queue writes it
    q, qo = first[2], first[3]
    files = testing.segments(path, f"consumequeue/T/{q}")
    per_file = 64                                     # small_config's consume_queue_entries
    with open(files[qo // per_file], "r+b") as f:
        f.seek(qo % per_file * 20)
        f.write(struct.pack(">qiq", 0, 0x7FFFFFFF, 0))
    code, doc, _ = run_check(path, capfd)
    assert code == 1
    assert_one_hole(doc, written, first[0], mid[6][0])
    assert doc["holes"][0]["queues"] == {f"T/{first[2]}": [first[3], first[3], 1],
                                         f"T/{second[2]}": [second[3], second[3], 1]}
    assert doc["lost_entries"] == 1 and any("lost markers" in n for n in doc["notes"])


@pytest.mark.parametrize("target", ["consumequeue/T/0", "index", "checkpoint", "config/consumerOffset.json",
                                    "config/storeSizes.json"])
def test_damage_anywhere_gives_a_report_and_valid_json(template, tmp_path, capfd, target):
    """Random bytes over the middle of a queue file, an index file or a side file: the
    check finishes, exit 1, one JSON object that names the damaged part."""
    path, _written = copy(template, tmp_path)
    full = os.path.join(path, target)
    if os.path.isdir(full):
        full = os.path.join(full, sorted(os.listdir(full))[0])
    if not os.path.exists(full):                # no group committed: write the file first
        with open(full, "w") as f:
            f.write('{"offsetTable":{"T@g":{0:5}}}')
    size = os.path.getsize(full)
    at = 0 if target == "checkpoint" else size // 4          # the checkpoint's times are its first 24 bytes
    testing.write_garbage(full, at, max(8, min(64, size // 2)), random.Random(9))
    before = snapshot(path)
    code, doc, _ = run_check(path, capfd)
    assert code == 1 and not doc["ok"] and doc["problems"], doc
    assert not any(p["kind"] == "store" for p in doc["problems"]), doc["problems"]
    assert snapshot(path) == before
