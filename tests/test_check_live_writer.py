"""``pymq check`` beside a running writer reports no false damage (issue 22, item 8).

The audit found 89,660 false problems ("no record there") and exit 1 when ``pymq check``
ran while another process put messages at full speed: queue and index entries whose
records the check had not read yet were taken for damage. A real writer subprocess
(:class:`pymq.testing.WriterProcess`, small segments so that it rolls segments, queue
files and index files all the time) puts messages while the check runs several times,
in-process and through the CLI: every run reports no problem, no hole and no torn tail,
sees the log grow, and counts entries written after its walk of the log as "not yet".
"""

from __future__ import annotations

import json

from pymq import cli, testing
from pymq.checker import StoreChecker

CONFIG = dict(commitlog_file_size=256 * 1024, consume_queue_entries=1000, index_hash_slots=500,
              index_max_entries=2000, flush_interval_commitlog=50, warm_mapped_file_enable=False)
RUNS = 4


def test_check_beside_a_running_writer_finds_nothing(tmp_path, capfd):
    path = str(tmp_path / "s")
    seen = {"records": [], "not_yet": 0}
    with testing.WriterProcess(path, CONFIG) as writer:
        writer.wait_for(3000)
        # the writer puts tens of thousands of messages a second: each run reads a store
        # about three times larger than the one before, so the runs stay few
        for run in range(RUNS):
            if run % 2 == 0:
                report = StoreChecker(path).run()
                problems = [(p.kind, p.where, p.detail) for p in report.problems]
                assert report.writer_running and not report.holes and report.torn_tail is None
                records, not_yet = report.records, report.not_yet_entries + report.not_yet_index_entries
                assert report.queue_entries > 0 and report.index_entries > 0
            else:
                capfd.readouterr()
                code = cli.main(["--store", path, "check", "--json"])
                doc = json.loads(capfd.readouterr().out)
                problems = [(p["kind"], p["where"], p["detail"]) for p in doc["problems"]]
                assert doc["writer_running"] and not doc["holes"] and doc["torn_tail"] is None
                assert code == (1 if problems else 0)
                records, not_yet = doc["records"], doc["not_yet_entries"] + doc["not_yet_index_entries"]
            assert writer.proc.poll() is None, "the writer died"
            assert not problems, (run, problems[:10])
            seen["records"].append(records)
            seen["not_yet"] += not_yet
        acked = len(writer.acknowledged())
    assert seen["records"] == sorted(seen["records"]) and seen["records"][-1] > seen["records"][0], seen
    print(f"\ncheck beside a writer: {RUNS} runs, records seen {seen['records']}, {seen['not_yet']} "
          f"entries not yet, {acked} puts acknowledged meanwhile")


def test_a_hole_stays_reported_beside_a_writer_and_after_it(tmp_path):
    """A damaged record header in a middle segment: the check reports the hole (with the
    record it took) before any writer opened, beside the writer that fenced it and put
    more, and after that writer was killed; never any other problem."""
    import pymq
    config = dict(CONFIG, commitlog_file_size=64 * 1024)
    path = str(tmp_path / "s")
    written = []
    with pymq.MessageStore(path, pymq.StoreConfig(**config)) as s:
        for i in range(2000):
            r = s.put_message(pymq.Message("KillTest", b"m%d" % i, keys=[f"k{i}"], queue_id=i % 3))
            written.append((r.commitlog_offset, r.wrote_bytes, i % 3, r.queue_offset))
    off, size, q, qo = [w for w in written if 64 * 1024 <= w[0] < 128 * 1024][10]
    with open(testing.segments(path)[1], "r+b") as f:
        f.seek(off - 64 * 1024 + 4)
        f.write(bytes(4))                       # the magic code
    want = [(off, off + size, 1, {f"KillTest/{q}": [qo, qo, 1]})]

    def holes_only(report, killed: bool = False) -> None:
        assert [(h.start, h.end, h.records, h.queues) for h in report.holes] == want
        torn = []
        if killed and report.torn_tail is not None:
            # a kill in the middle of a put leaves its record torn at the end of the log:
            # the torn tail (a writer's open cuts it), after everything acknowledged
            assert report.torn_tail.start > want[0][1], report.torn_tail
            torn = ["commitlog"]
        assert [p.kind for p in report.problems] == ["commitlog"] + torn, report.problems
        assert not report.ok

    holes_only(StoreChecker(path).run())
    with testing.WriterProcess(path, config, start_index=2000) as writer:
        writer.wait_for(2000)
        for _ in range(3):
            report = StoreChecker(path).run()
            assert report.writer_running and writer.proc.poll() is None
            holes_only(report)
    holes_only(StoreChecker(path).run(), killed=True)   # killed: the abort marker stays, the hole too
