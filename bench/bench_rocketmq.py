"""RocketMQ's own benchmark against Apache RocketMQ 4.9.7 and ``pymq serve``, in one run.

    python bench/bench_rocketmq.py [--rounds 3] [--msgs 100000] [--size 128] [--threads 32]
                                   [--modes sync,async] [--json out.json]

Each round runs every mode against both servers, in alternating order (the first server
of a round is the second of the next). One measurement:

1. a fresh server on a fresh store: the real broker (name server + broker, ``bin/run.sh``
   of ``$PYMQ_ROCKETMQ_HOME``, else ``../shared/rocketmq-4.9.7``) or ``pymq serve`` (its
   name server and broker in one process);
2. ``mqadmin updateTopic`` makes the topic (8 queues), RocketMQ's benchmark ``Consumer``
   subscribes to it (20 threads), and is given 8 s to take its queues;
3. RocketMQ's benchmark ``Producer`` sends ``--msgs`` messages of ``--size`` bytes: sync
   with ``--threads`` threads, or async (the tool's async mode: one thread submitting
   sends, throttled only by the client's own queue of 10,000);
4. when the producer exits, the messages the server stored are counted (``topicStatus``).

Reported per run: the tool's ``Send TPS`` (acknowledged sends per second over its last ten
one-second snapshots), the messages stored per second of the producer's run (its JVM's
start included, the same on both), its failed sends (``Send Failed``: the send threw or its callback
got an exception, after the client's own retries; ``Response Failed``), the messages
stored, and the server's CPU seconds per 1,000 stored messages (``utime + stime`` of the
server's processes from ``/proc``, between the producer's start and the count). The
summary is pymq over RocketMQ per round, as the median with the range.

The async tool stops its producer as soon as its thread has submitted the last send;
sends still in flight then are neither counted as sent nor as failed, so ``stored`` may
be below ``--msgs`` on either server without a failure: the rate is what compares.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))      # the real broker's harness, shared with the tests

from real_rocketmq import JDK17_OPENS, RealBroker, find_rocketmq_home, free_ports  # noqa: E402

CLIENT_JVM = ["-Xms256m", "-Xmx1g", *JDK17_OPENS]


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of these processes (and their threads), in seconds."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total / tick


class PymqServer:
    """``pymq serve`` on a fresh store, name server and broker on free ports, gRPC off;
    its output goes to a file (a pipe nobody reads would stall it)."""

    kind = "pymq"

    def __init__(self, run_dir: pathlib.Path) -> None:
        self.run_dir = run_dir
        self.namesrv_port, self.port = free_ports()
        self.proc: subprocess.Popen | None = None

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    def start(self) -> "PymqServer":
        self.run_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.run_dir / "serve.log", "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "pymq", "serve", "--store", str(self.run_dir / "store"),
                                      "--port", "off", "--namesrv-port", str(self.namesrv_port),
                                      "--broker-port", str(self.port), "--vip-port", "off", "--ha-port", "off"],
                                     stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if "pymq serve: ready" in (self.run_dir / "serve.log").read_text():
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError("pymq serve did not start:\n" + (self.run_dir / "serve.log").read_text()[-3000:])

    def pids(self) -> list[int]:
        return [self.proc.pid] if self.proc else []

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


class RocketmqServer(RealBroker):
    """The distribution's name server and broker (``bin/run.sh``)."""

    kind = "rocketmq"

    def __init__(self, home: pathlib.Path, run_dir: pathlib.Path) -> None:
        super().__init__(home, run_dir / "run", run_dir / "store", heap="1g")

    def pids(self) -> list[int]:
        out = []
        for name in ("broker", "namesrv"):
            f = self.run_dir / f"{name}.pid"
            if f.exists():
                out.append(int(f.read_text()))
        return out


class Tools:
    """RocketMQ's benchmark Producer / Consumer and mqadmin, from the distribution."""

    def __init__(self, home: pathlib.Path, work: pathlib.Path) -> None:
        self.home, self.work = home, work

    def _java(self, *args: str) -> list[str]:
        return ["java", *CLIENT_JVM, f"-Duser.home={self.work / 'home'}", f"-Drocketmq.home.dir={self.home}",
                "-cp", f"{self.home}/lib/*", *args]

    def admin(self, namesrv: str, *args: str) -> str:
        p = subprocess.run(self._java("org.apache.rocketmq.tools.command.MQAdminStartup", *args, "-n", namesrv),
                           capture_output=True, text=True, timeout=120)
        return p.stdout + p.stderr

    def consumer(self, namesrv: str, topic: str, group: str, log: pathlib.Path) -> subprocess.Popen:
        return subprocess.Popen(self._java("org.apache.rocketmq.example.benchmark.Consumer", "-n", namesrv, "-t", topic,
                                           "-g", group, "-w", "20"),
                                stdout=open(log, "w"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def producer(self, namesrv: str, topic: str, msgs: int, size: int, threads: int, async_: bool,
                 log: pathlib.Path) -> subprocess.CompletedProcess:
        with open(log, "w") as out:
            return subprocess.run(self._java("org.apache.rocketmq.example.benchmark.Producer", "-n", namesrv,
                                             "-t", topic, "-w", str(threads), "-s", str(size), "-q", str(msgs),
                                             "-y", "true" if async_ else "false"),
                                  stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=900)


def stored_messages(topic_status: str) -> int:
    """Sum of the queues' max offsets in mqadmin's topicStatus output, whose rows are
    ``#Broker Name  #QID  #Min Offset  #Max Offset  #Last Updated``."""
    total = 0
    for line in topic_status.splitlines():
        cols = line.split()
        if len(cols) >= 4 and not cols[0].startswith("#") and cols[1].isdigit() and cols[3].isdigit():
            total += int(cols[3])
    return total


def wait_for(path: pathlib.Path, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        time.sleep(0.2)
    raise RuntimeError(f"no {text!r} in {path} after {timeout} s:\n" + path.read_text(errors="replace")[-2000:])


def measure(server, tools: Tools, work: pathlib.Path, mode: str, args) -> dict:
    topic, group = f"BenchT{int(time.time() * 1000)}", f"bench_c{int(time.time() * 1000)}"
    server.start()
    consumer = None
    try:
        out = tools.admin(server.namesrv, "updateTopic", "-c", "DefaultCluster", "-t", topic, "-r", "8", "-w", "8")
        if "success" not in out:
            raise RuntimeError(f"updateTopic failed on {server.kind}:\n{out[-2000:]}")
        consumer = tools.consumer(server.namesrv, topic, group, work / "consumer.out")
        wait_for(work / "consumer.out", "Consumer Started", 60)
        time.sleep(8)                              # the first rebalance gives it the queues
        cpu0, t0 = cpu_seconds(server.pids()), time.monotonic()
        tools.producer(server.namesrv, topic, args.msgs, args.size, args.threads, mode == "async",
                       work / "producer.out")
        wall = time.monotonic() - t0
        stored = stored_messages(tools.admin(server.namesrv, "topicStatus", "-t", topic))
        cpu = cpu_seconds(server.pids()) - cpu0
        text = (work / "producer.out").read_text(errors="replace")
        done = re.search(r"\[Complete\] Send Total: (\d+)(?: Send TPS: (\d+))?.*?Send Failed: (\d+) "
                         r"Response Failed: (\d+)", text)
        if done is None:
            raise RuntimeError(f"no [Complete] line from the producer on {server.kind}:\n{text[-3000:]}")
        errors = sorted(set(re.findall(r"(\w+(?:Exception|Error)[^\n]{0,120})", text)))[:5]
        return {"server": server.kind, "mode": mode, "send_tps": int(done.group(2) or 0),
                "sent": int(done.group(1)), "send_failed": int(done.group(3)), "response_failed": int(done.group(4)),
                "stored": stored, "producer_wall_s": round(wall, 2), "stored_per_s": round(stored / wall),
                "server_cpu_ms_per_1000": round(1000 * 1000 * cpu / max(stored, 1), 2), "errors": errors}
    finally:
        if consumer is not None:
            consumer.kill()
            consumer.wait()
        server.stop()


def summary(runs: list[dict], modes: list[str], rounds: int) -> list[str]:
    lines = []
    for mode in modes:
        def ratios(key: str, invert: bool = False) -> list[float]:
            out = []
            for r in range(rounds):
                got = {x["server"]: x for x in runs if x["mode"] == mode and x["round"] == r}
                if len(got) == 2 and got["rocketmq"][key] and got["pymq"][key]:
                    a, b = got["pymq"][key], got["rocketmq"][key]
                    out.append(b / a if invert else a / b)
            return out
        for label, key in (("send TPS", "send_tps"), ("stored / producer wall", "stored_per_s"),
                           ("server CPU per message", "server_cpu_ms_per_1000")):
            rs = ratios(key)
            if rs:
                lines.append(f"{mode:5} {label:24} pymq/rocketmq {statistics.median(rs):.2f}x "
                             f"[{min(rs):.2f}-{max(rs):.2f}] over {len(rs)} rounds")
        failed = {k: sum(x["send_failed"] + x["response_failed"] for x in runs if x["mode"] == mode
                         and x["server"] == k) for k in ("rocketmq", "pymq")}
        lines.append(f"{mode:5} failed sends: rocketmq {failed['rocketmq']}, pymq {failed['pymq']}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--msgs", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--threads", type=int, default=32, help="sync producer threads (the async tool uses one)")
    ap.add_argument("--modes", default="sync,async")
    ap.add_argument("--json", help="write every run and the summary here")
    args = ap.parse_args(argv)
    home, why = find_rocketmq_home()
    if home is None:
        print(f"bench_rocketmq: {why}", file=sys.stderr)
        return 2
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    base = pathlib.Path(tempfile.mkdtemp(prefix="bench-rocketmq-"))
    runs = []
    try:
        for rnd in range(args.rounds):
            order = ["rocketmq", "pymq"] if rnd % 2 == 0 else ["pymq", "rocketmq"]
            for mode in modes:
                for kind in order:
                    work = base / f"r{rnd}-{mode}-{kind}"
                    work.mkdir(parents=True)
                    server = RocketmqServer(home, work) if kind == "rocketmq" else PymqServer(work)
                    run = dict(measure(server, Tools(home, work), work, mode, args), round=rnd)
                    runs.append(run)
                    print(json.dumps(run), flush=True)
                    shutil.rmtree(work / "store", ignore_errors=True)
                    shutil.rmtree(work / "run" / "store", ignore_errors=True)
        lines = summary(runs, modes, args.rounds)
        print("\n".join(lines))
        if args.json:
            pathlib.Path(args.json).write_text(json.dumps({"args": vars(args), "runs": runs, "summary": lines},
                                                          indent=1))
    finally:
        print(f"logs in {base}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
