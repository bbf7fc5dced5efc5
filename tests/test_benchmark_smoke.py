"""``pymq bench`` at tiny sizes, through the CLI, so the benchmark does not rot."""

import contextlib
import importlib.util
import io
import json
import subprocess
import sys

import pytest

from pymq import benchmark, cli

TINY = ["--messages", "2000", "--batch-messages", "2000", "--batch", "100",
        "--repeat", "1", "--warmup", "100", "--commitlog-file-size", str(16 << 20),
        "--lookups", "500", "--lookup-queue-size", "5000", "--queries", "500", "--query-store-size", "5000",
        "--delivery-messages", "50", "--delivery-window-ms", "200", "--pending-timers", "1000",
        "--put-with-timers-messages", "2000", "--cleaning-segments", "2", "--cleaning-messages", "2000",
        "--real-messages", "3000", "--real-queries", "500", "--pending-halves", "100",
        "--commits", "2000", "--durable-commits", "20"]


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
        code = cli.main(["bench", *TINY, "--dir", str(parent), "--json", str(out),
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
    pymq_lines = [line for line in lines if line.split()[1:2] == ["pymq"]]
    assert pymq_lines and all("1.00" in line.split() for line in pymq_lines)


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
