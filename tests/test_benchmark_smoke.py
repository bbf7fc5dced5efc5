"""``pymq bench --full`` at tiny sizes, through the CLI, so the benchmark does not rot
(the default run: ``test_benchmark_default.py``)."""

import contextlib
import importlib.util
import io
import json
import subprocess
import sys

import pytest

from pymq import benchmark, cli
from pymq.benchmark.figures import Figure, best_figures
from pymq.benchmark.many_queues import disk_bytes, mapped_regions, queue_names

TINY = ["--messages", "2000", "--batch-messages", "2000", "--batch", "100",
        "--repeat", "1", "--warmup", "100", "--commitlog-file-size", str(16 << 20),
        "--lookups", "500", "--lookup-queue-size", "5000", "--queries", "500", "--query-store-size", "5000",
        "--delivery-messages", "50", "--delivery-window-ms", "200", "--pending-timers", "1000",
        "--put-with-timers-messages", "2000", "--cleaning-segments", "2", "--cleaning-messages", "2000",
        "--real-messages", "3000", "--real-queries", "500", "--pending-halves", "100",
        "--commits", "2000", "--durable-commits", "20",
        "--many-queues", "200", "--many-queue-messages", "2",
        "--replication-messages", "200", "--replication-bytes", str(1 << 20)]
FIGURE_KEYS = {"dispatch_wait_s", "close_s", "reopen_s", "read_only_open_s", "disk_mib", "commitlog_disk_mib",
               "queue_disk_mib", "index_disk_mib", "maps"}


def expected_rows():
    """(workload, implementation) of every workload that must run here: those needing no
    package (pymq's and in-memory references) and installed peers'."""
    return {(w.group, w.implementation) for w in benchmark.WORKLOADS
            if not w.requires or importlib.util.find_spec(w.requires) is not None}


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory):
    """Run the tiny benchmark once; returns (exit code, stdout, JSON report, parent dir)."""
    tmp_path = tmp_path_factory.mktemp("bench")
    parent = tmp_path / "stores"
    parent.mkdir()
    out = tmp_path / "bench.json"
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = cli.main(["bench", "--full", *TINY, "--dir", str(parent), "--json", str(out),
                         "--plot", str(tmp_path / "bench.png")])
    report = json.loads(out.read_text()) if out.exists() else None
    return code, stdout.getvalue(), report, parent


def test_bench_exits_zero_with_all_rows_in_json(bench_run):
    code, _, report, _ = bench_run
    assert code == 0
    rows = {(row["workload"], row["implementation"]) for row in report["rows"]}
    assert rows == expected_rows()
    assert {("put_message", "pymq"), ("put_messages", "pymq")} <= rows
    assert all(row["msgs_per_s"] > 0 and row["ratio"] > 0 for row in report["rows"])
    assert report["environment"]["python"]


def test_bench_table_has_a_line_per_row(bench_run):
    _, stdout, report, _ = bench_run
    lines = stdout.splitlines()
    for row in report["rows"]:
        assert any(line.split()[:2] == [row["workload"], row["implementation"]] for line in lines)
    groups = {row["workload"] for row in report["rows"]}
    pymq_lines = [line for line in lines if line.split()[1:2] == ["pymq"] and line.split()[0] in groups]
    assert pymq_lines and all(line.split()[-2:] == ["-", "-"] for line in pymq_lines)   # no ratio to itself
    peer = next(line for line in lines if line.split()[:2] == ["put_message", "pymq-no-record-crc"])
    assert peer.split()[-1].count("-") == 1       # min-max of the ratio
    assert max(map(len, lines)) <= 80


def test_bench_leaves_no_files_behind(bench_run):
    *_, parent = bench_run
    assert list(parent.iterdir()) == []


def test_bench_reports_pymq_errors_without_traceback(tmp_path, capfd):
    code = cli.main(["bench", *TINY, "--commitlog-file-size", "100", "--dir", str(tmp_path)])
    err = capfd.readouterr().err
    assert code == 2
    assert err.startswith("pymq bench: error:") and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_bench_reports_missing_dir(tmp_path, capfd):
    code = cli.main(["bench", *TINY, "--dir", str(tmp_path / "missing")])
    assert code == 2
    assert "pymq bench: error:" in capfd.readouterr().err


def test_python_dash_m_pymq_help():
    proc = subprocess.run([sys.executable, "-m", "pymq", "bench", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert "--batch-messages" in proc.stdout


def test_bench_draws_a_png_chart(bench_run):
    *_, parent = bench_run
    png = parent.parent / "bench.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def _check_many_queues_rows(rows, queues):
    """The many_queues rows: pymq's (and lmdb's where installed), each with sane figures."""
    mq = {row["implementation"]: row for row in rows if row["workload"] == "many_queues"}
    want = {"pymq"} | ({"lmdb"} if importlib.util.find_spec("lmdb") is not None else set())
    assert set(mq) == want
    for row in mq.values():
        figures = row["figures"]
        assert set(figures) == FIGURE_KEYS
        assert row["msgs_per_s"] > 0 and row["ratio"] > 0 and row["messages"] == queues * 2
        assert figures["reopen_s"] > 0 and figures["read_only_open_s"] > 0 and figures["close_s"] > 0
        assert figures["disk_mib"] > 0 and figures["maps"] >= 1
    pymq_figures = mq["pymq"]["figures"]
    assert pymq_figures["maps"] >= queues          # every queue's file stays mapped
    assert 0 < pymq_figures["queue_disk_mib"] < pymq_figures["disk_mib"]
    assert pymq_figures["commitlog_disk_mib"] > 0
    assert 0 <= pymq_figures["dispatch_wait_s"] <= mq["pymq"]["seconds"]
    if "lmdb" in mq:
        assert mq["lmdb"]["figures"]["queue_disk_mib"] is None and mq["lmdb"]["figures"]["dispatch_wait_s"] is None


def test_bench_many_queues_rows_carry_figures(bench_run):
    _, stdout, report, _ = bench_run
    _check_many_queues_rows(report["rows"], 200)
    assert all("figures" not in row for row in report["rows"] if row["workload"] not in ("many_queues", "dispatch_load", "replication"))
    lines = stdout.splitlines()
    caption = lines.index("many_queues: msgs/s the median, others the best of 1 round(s) or as named")
    assert lines[caption + 1].split()[:2] == ["figure", "pymq"]       # a column per implementation
    assert lines[caption + 2].split()[0] == "msgs/s"
    assert any(line.split()[0] == "maps" for line in lines[caption + 3:caption + 13])


def test_bench_workload_many_queues_writes_json(tmp_path):
    out = tmp_path / "many.json"
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = cli.main(["bench", "--workload", "many_queues", "--many-queues", "120", "--many-queue-messages",
                         "2", "--repeat", "2", "--commitlog-file-size", str(16 << 20), "--dir", str(tmp_path),
                         "--json", str(out)])
    assert code == 0
    rows = json.loads(out.read_text())["rows"]
    assert {row["workload"] for row in rows} == {"many_queues"}
    _check_many_queues_rows(rows, 120)
    assert "writer reopen s" in stdout.getvalue()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["many.json", "many.png"]   # the chart beside


def test_best_figures_takes_each_figures_best_repeat():
    specs = (Figure("open_s", "open s"), Figure("hits", "hits", lower_is_better=False), Figure("gone", "gone"))
    repeats = [{"open_s": 2.0, "hits": 5, "gone": None}, {"open_s": 1.0, "hits": 3, "gone": None}]
    assert best_figures(repeats, specs) == {"open_s": 1.0, "hits": 5, "gone": None}
    ratio = (Figure("ratio", "ratio, median of rounds", median=True),)
    assert best_figures([{"ratio": 0.3}, {"ratio": 0.9}, {"ratio": 0.5}], ratio) == {"ratio": 0.5}


def test_many_queues_helpers(tmp_path):
    assert queue_names(12)[:2] == [("T0000", 0), ("T0000", 1)] and queue_names(12)[-1] == ("T0001", 1)
    sparse = tmp_path / "sparse"
    with open(sparse, "wb") as f:
        f.truncate(64 << 20)                 # 64 MiB long, no blocks
        f.write(b"x" * 4096)
    assert 4096 <= disk_bytes(str(tmp_path)) < (1 << 20)   # blocks, as du counts them: not the length
    import mmap
    with open(sparse, "rb") as f, mmap.mmap(f.fileno(), 4096, access=mmap.ACCESS_READ):
        assert mapped_regions(str(tmp_path)) == 1
    assert mapped_regions(str(tmp_path)) == 0


def test_bench_dispatch_load_rows_say_where_the_writer_waited(bench_run):
    """The three rows of ``dispatch_load`` (a backlog being filed, the dispatcher idle, the
    dispatcher held) carry the writer's CPU, runnable and sleeping times per message and
    what the dispatcher filed meanwhile: nothing while it was held."""
    _, _stdout, report, _ = bench_run
    rows = {row["implementation"]: row for row in report["rows"] if row["workload"] == "dispatch_load"}
    assert set(rows) == {"pymq", "pymq-idle", "pymq-alone"}
    for row in rows.values():
        figures = row["figures"]
        assert set(figures) == {"writer_cpu_ns", "writer_runnable_ns", "writer_sleeping_ns", "dispatched"}
        assert figures["writer_cpu_ns"] > 0
        assert figures["writer_sleeping_ns"] is None or figures["writer_sleeping_ns"] >= 0
    assert rows["pymq-alone"]["figures"]["dispatched"] == 0
    assert rows["pymq-idle"]["ratio"] is not None and rows["pymq-alone"]["ratio"] is not None
