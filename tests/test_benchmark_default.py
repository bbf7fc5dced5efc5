"""The default ``pymq bench`` (headline workloads, interleaved rounds) at tiny sizes, piped
like a CI log: its chart, its JSON and one progress line per step; and the pieces it is
made of (rounds, ratios, options, output paths, progress) on made-up figures. Speed is
never asserted here: the benchmark measures it side by side in one run."""

import datetime
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from pymq import benchmark
from pymq.benchmark.base import BenchOptions
from pymq.benchmark.headline import HEADLINE, HEADLINE_ROUNDS, HEADLINE_SIZES, FULL_ROUNDS, select_workloads
from pymq.benchmark.measure import Repeat
from pymq.benchmark.output import output_paths
from pymq.benchmark.progress import Progress
from pymq.benchmark.rounds import plan
from pymq.benchmark.rows import build_rows

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROUNDS = 2
TINY = ["--messages", "2000", "--batch-messages", "2000", "--batch", "100", "--warmup", "100",
        "--commitlog-file-size", str(16 << 20), "--queries", "300", "--query-store-size", "3000",
        "--real-messages", "2000", "--durable-commits", "10", "--repeat", str(ROUNDS)]


def installed_headline():
    """The headline comparisons whose peer can run here (sqlite3 and pymq's own variants
    always can)."""
    return [h for h in HEADLINE if h.peer == "sqlite3" or h.peer.startswith("pymq-")
            or importlib.util.find_spec(h.peer) is not None]


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    """``python -m pymq bench`` (the default set) at tiny sizes, stdout and stderr piped;
    returns (completed process, output directory)."""
    tmp = tmp_path_factory.mktemp("bench-default")
    stores = tmp / "stores"
    stores.mkdir()
    out = tmp / "out"
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-m", "pymq", "bench", *TINY, "--dir", str(stores), "--out", str(out)],
                          capture_output=True, text=True, timeout=120, cwd=str(tmp), env=env)
    assert proc.returncode == 0, proc.stderr
    assert list(stores.iterdir()) == []            # every temporary store deleted
    return proc, out


def test_default_run_writes_ratios_with_spread_and_the_machine(default_run):
    proc, out = default_run
    report = json.loads((out / "bench.json").read_text())
    assert report["headline"] is True and report["rounds"] == ROUNDS and report["wall_s"] > 0
    expected = [(h.group, h.peer) for h in installed_headline()]
    assert [(r["workload"], r["peer"]) for r in report["ratios"]] == expected
    for ratio in report["ratios"]:
        assert len(ratio["rounds"]) == ROUNDS and all(v > 0 for v in ratio["rounds"])
        assert ratio["min"] == min(ratio["rounds"]) and ratio["max"] == max(ratio["rounds"])
        assert ratio["min"] <= ratio["median"] <= ratio["max"]
        assert ratio["basis"] in ("msgs/s", "p50")
    bases = {r["workload"]: r["basis"] for r in report["ratios"]}
    assert bases["query_message"] == "p50" and bases["put_message"] == "msgs/s"
    rows = {(row["workload"], row["implementation"]) for row in report["rows"]}
    assert rows == {(g, impl) for g, peer in expected for impl in ("pymq", peer)}
    assert all(len(row["rounds"]) == ROUNDS for row in report["rows"])
    machine = report["environment"]
    assert machine["cpu_model"] and int(machine["cores"]) >= 1 and machine["python"] and machine["filesystem"]
    assert report["command"].startswith("pymq bench --repeat 2")
    png = (out / "bench.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_default_run_pipes_one_line_per_step_and_fits_80_columns(default_run):
    proc, out = default_run
    steps = [line for line in proc.stderr.splitlines() if line.startswith("[")]
    total = ROUNDS * 2 * len(installed_headline())
    assert len(steps) == total and "\r" not in proc.stderr
    assert steps[0].startswith(f"[ 1/{total} ") and steps[-1].startswith(f"[{total}/{total} ")
    assert "round 1/2 put_message/pymq:" in steps[0]
    assert all(len(line) <= 80 for line in proc.stdout.splitlines())
    assert f"chart:   {out / 'bench.png'}" in proc.stdout and f"figures: {out / 'bench.json'}" in proc.stdout


def test_rounds_alternate_pymq_and_its_peer():
    workloads = select_workloads(BenchOptions())
    steps = plan(workloads, 3)
    assert len(steps) == 3 * len(workloads)
    first = [s.workload.implementation for s in steps if s.workload.group == "put_message"]
    assert first == ["pymq", "queuelib", "queuelib", "pymq", "pymq", "queuelib"]
    assert [s.round for s in steps[:len(workloads)]] == [0] * len(workloads)


def test_ratios_are_taken_round_by_round():
    options = BenchOptions()
    pymq, peer = [w for w in select_workloads(options) if w.group == "put_message"]
    lookup, lookup_peer = [w for w in select_workloads(options) if w.group == "query_message"]
    n = pymq.message_count()
    repeats = {   # pymq twice as fast in round 1, as fast in round 2, 4x in round 3
        pymq.name: [Repeat(1_000, [], {}), Repeat(2_000, [], {}), Repeat(1_000, [], {})],
        peer.name: [Repeat(2_000, [], {}), Repeat(2_000, [], {}), Repeat(4_000, [], {})],
        lookup.name: [Repeat(5, [1, 2, 3], {}), Repeat(5, [2, 2, 2], {})],
        lookup_peer.name: [Repeat(9, [3, 3, 3], {}), Repeat(1, [3, 3, 3], {})],
    }
    rows = {(r.workload, r.implementation): r for r in build_rows([pymq, peer, lookup, lookup_peer], repeats)}
    row = rows[("put_message", "queuelib")]
    assert [r["ratio"] for r in row.rounds] == [2.0, 1.0, 4.0]
    assert (row.ratio, row.ratio_min, row.ratio_max, row.ratio_basis) == (2.0, 1.0, 4.0, "msgs/s")
    assert row.msgs_per_s == n / 2e-6
    query = rows[("query_message", "lmdb")]            # latency: the peer's p50 over pymq's
    assert [r["ratio"] for r in query.rounds] == [1.5, 1.5] and query.ratio_basis == "p50"
    assert rows[("put_message", "pymq")].ratio == 1.0


def test_default_sizes_unless_full_workload_or_given():
    default = benchmark.parse_args([])
    assert default.repeat == HEADLINE_ROUNDS and default.messages == HEADLINE_SIZES["messages"]
    assert not default.full and [w.name for w in select_workloads(default)][:2] == ["put_message/pymq",
                                                                                    "put_message/queuelib"]
    full = benchmark.parse_args(["--full"])
    assert full.repeat == FULL_ROUNDS and full.messages == BenchOptions().messages
    assert len(select_workloads(full)) == len(benchmark.WORKLOADS)
    one = benchmark.parse_args(["--workload", "many_queues", "--repeat", "2", "--messages", "7"])
    assert one.repeat == 2 and one.messages == 7 and one.queries == BenchOptions().queries
    assert {w.group for w in select_workloads(one)} == {"many_queues"}


def test_output_paths(tmp_path, monkeypatch):
    when = datetime.datetime(2026, 1, 2, 3, 4, 5)
    monkeypatch.chdir(tmp_path)
    assert output_paths(BenchOptions(), when) == (str(tmp_path / "pymq-bench-20260102-030405" / "bench.json"),
                                                  str(tmp_path / "pymq-bench-20260102-030405" / "bench.png"))
    assert output_paths(BenchOptions(out_dir="o"), when) == (str(tmp_path / "o/bench.json"),
                                                             str(tmp_path / "o/bench.png"))
    assert output_paths(BenchOptions(json_path="r.json"), when) == (str(tmp_path / "r.json"), str(tmp_path / "r.png"))
    assert output_paths(BenchOptions(plot_path="c.png"), when) == (str(tmp_path / "c.json"), str(tmp_path / "c.png"))


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_progress_eta_uses_each_steps_earlier_rounds():
    clock = _Clock()
    lines = []

    class Stream:
        def isatty(self):
            return False

        def write(self, text):
            lines.append(text)

        def flush(self):
            pass

    progress = Progress(["a", "b", "a", "b"], Stream(), clock=clock)
    assert progress.eta() is None
    for label, took in (("a", 1.0), ("b", 3.0)):
        progress.begin(label)
        clock.now += took
        progress.end(label, "ok")
    assert progress.eta() == 4.0                        # a (1 s) + b (3 s) left
    printed = [line for line in "".join(lines).splitlines() if line]
    assert printed == ["[1/4 0:01, ~0:03 left] a: ok", "[2/4 0:04, ~0:04 left] b: ok"]
