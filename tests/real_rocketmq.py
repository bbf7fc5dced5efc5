"""A real Apache RocketMQ 4.9.7 (name server + broker) for tests, the Java probe, and other
Java programs (tests/java sources, the distribution's own tools) run against a name server.

The distribution is found through ``PYMQ_ROCKETMQ_HOME``, else ``<repo>/../shared/rocketmq-4.9.7``
(where CI has it), else ``/work/shared/rocketmq-4.9.7``; the tests that need it are skipped,
saying so, when none of these holds one. Its ``bin/run.sh`` starts and stops the JVMs; the
probe (``tests/java/RmqProbe.java``) is the official Java client and mqadmin in one JVM,
compiled once per session with ``javac`` against ``lib/*``.

The fixtures are in ``tests/conftest.py``: ``rocketmq_home``, ``rocketmq_probe`` (session)
and ``real_broker`` (a factory; every broker it started is stopped after the test, passed
or failed).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import socket
import signal
import subprocess
import time
from typing import Optional

ENV = "PYMQ_ROCKETMQ_HOME"
REPO = pathlib.Path(__file__).resolve().parent.parent
PROBE_SOURCE = pathlib.Path(__file__).resolve().parent / "java" / "RmqProbe.java"
JDK17_OPENS = ["--add-opens", "java.base/java.nio=ALL-UNNAMED", "--add-opens", "java.base/jdk.internal.ref=ALL-UNNAMED",
               "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED", "--add-exports", "java.base/sun.nio.ch=ALL-UNNAMED"]


def find_rocketmq_home() -> tuple[Optional[pathlib.Path], str]:
    """(the distribution, "") or (None, why not): ``$PYMQ_ROCKETMQ_HOME`` when set (and then
    only it), else the shared folder beside the repository, else /work/shared's."""
    env = os.environ.get(ENV)
    candidates = [pathlib.Path(env)] if env else [REPO.parent / "shared" / "rocketmq-4.9.7",
                                                  pathlib.Path("/work/shared/rocketmq-4.9.7")]
    for c in candidates:
        if (c / "lib" / "rocketmq-broker.jar").is_file() and (c / "bin" / "run.sh").is_file():
            missing = [tool for tool in ("java", "javac") if shutil.which(tool) is None]
            if missing:
                return None, f"RocketMQ found in {c} but no {' or '.join(missing)} on PATH (a JDK 17 runs it)"
            return c.resolve(), ""
    if env:
        return None, f"{ENV}={env} holds no RocketMQ distribution (lib/rocketmq-broker.jar, bin/run.sh)"
    return None, (f"no Apache RocketMQ 4.9.7 distribution: set {ENV} to one "
                  f"(looked in {', '.join(str(c) for c in candidates)})")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def free_ports() -> tuple[int, int]:
    """(name server port, broker port) free on 127.0.0.1, with the broker's port-2 (VIP
    channel) and port+1 (HA) free too."""
    def one() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    for _ in range(100):
        ns, br = one(), one()
        if len({ns, br - 2, br, br + 1}) == 4 and br > 1026 and all(_free(p) for p in (ns, br - 2, br, br + 1)):
            return ns, br
    raise RuntimeError("no free ports for a name server and a broker")


def _alive(pid: int) -> bool:
    """The process runs (run.sh started it in the background: reaped by init, not us, so a
    zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


class RealBroker:
    """A name server and one broker of the distribution, on ``store`` (storePathRootDir, the
    commit log in ``store/commitlog``), run from ``run_dir`` (pid files, logs in
    ``run_dir/home/logs/rocketmqlogs``). ``conf`` adds broker.conf lines (RocketMQ's
    MessageStoreConfig / BrokerConfig names). The ports are picked at construction, so a
    store can be written for the broker's address before it starts."""

    def __init__(self, home: pathlib.Path, run_dir: pathlib.Path, store: pathlib.Path,
                 conf: Optional[dict] = None, heap: str = "384m") -> None:
        self.home, self.run_dir, self.store = home, pathlib.Path(run_dir), pathlib.Path(store)
        self.namesrv_port, self.port = free_ports()
        self.conf = {"storePathRootDir": str(self.store), "storePathCommitLog": str(self.store / "commitlog"),
                     **(conf or {})}
        self.heap = heap
        self.running = False

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _run_sh(self, *args: str, timeout: float) -> subprocess.CompletedProcess:
        cmd = [str(self.home / "bin" / "run.sh"), *args, "--dir", str(self.run_dir),
               "--namesrv-port", str(self.namesrv_port), "--broker-port", str(self.port), "--heap", self.heap]
        for k, v in self.conf.items():
            cmd += ["--conf", f"{k}={v}"]
        # TLS off: in its default (permissive) mode the broker makes a self-signed RSA key at
        # every start, seconds of CPU on a busy machine; the clients here speak plain TCP
        opts = (os.environ.get("JAVA_TOOL_OPTIONS", "") + " -Dtls.server.mode=disabled").strip()
        env = dict(os.environ, RMQ_HOME=str(self.home), JAVA_TOOL_OPTIONS=opts)
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)

    def start(self) -> "RealBroker":
        self.running = True          # stop() runs whatever start() got to (the name server alone)
        p = self._run_sh("start", timeout=240)
        if p.returncode != 0:
            raise RuntimeError(f"run.sh start failed ({p.returncode}):\n{p.stdout}\n{p.stderr}\n"
                               f"--- broker.log ---\n{self.log_tail()}")
        # the broker logs every setting it took; a key it has no setter for is silently
        # ignored (4.9.7 spells it mappedFileSizeCommitLog, not mapedFileSizeCommitLog)
        log = self.log()
        ignored = [k for k, v in self.conf.items() if f" - {k}={v}\n" not in log]
        if ignored:
            raise RuntimeError(f"the broker did not take {ignored} (not a BrokerConfig/MessageStoreConfig name?)")
        return self

    def _stop_process(self, name: str, signals: tuple) -> None:
        """Stop ``name`` (broker, namesrv) by the pid run.sh recorded: each (signal, seconds
        to wait) in turn until it is gone; its pid file removed."""
        pid_file = self.run_dir / f"{name}.pid"
        if not pid_file.exists():
            return
        pid = int(pid_file.read_text())
        for sig, wait in signals:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if not _alive(pid):
                break
        if _alive(pid):
            raise RuntimeError(f"the {name} (pid {pid}) did not stop")
        pid_file.unlink()

    def stop(self) -> None:
        """Stop broker then name server, each by the pid run.sh recorded, and remove the pid
        files (all ``run.sh stop`` would do, without its second-long polls): the broker by
        TERM (its shutdown hook flushes, writes its tables and deletes ``abort``; KILL after
        30 s), the name server by KILL at once (it holds routes in memory only, and its TERM
        shutdown takes seconds)."""
        if not self.running:
            return
        self.running = False
        self._stop_process("broker", ((signal.SIGTERM, 30), (signal.SIGKILL, 10)))
        self._stop_process("namesrv", ((signal.SIGKILL, 10),))

    def stop_broker(self, sig: int = signal.SIGTERM) -> None:
        """Stop the broker alone (its name server keeps running): by ``sig`` (TERM: it
        unregisters from the name server and shuts down cleanly; KILL: as a crash), KILL
        after 30 s. ``stop`` later stops the name server."""
        self._stop_process("broker", ((sig, 30), (signal.SIGKILL, 10)))

    def kill(self) -> None:
        """Stop both at once by KILL (``abort`` stays: the store is left as after a crash),
        for a test done with the broker that needs no clean shutdown (that takes ~6 s)."""
        if not self.running:
            return
        self.running = False
        for name in ("broker", "namesrv"):
            pid_file = self.run_dir / f"{name}.pid"
            if pid_file.exists():
                pid = int(pid_file.read_text())
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                deadline = time.monotonic() + 10
                while _alive(pid) and time.monotonic() < deadline:
                    time.sleep(0.05)
                pid_file.unlink()

    def log(self, name: str = "broker.log") -> str:
        path = self.run_dir / "home" / "logs" / "rocketmqlogs" / name
        return path.read_text(errors="replace") if path.exists() else ""

    def log_tail(self, name: str = "broker.log", lines: int = 40) -> str:
        out = (self.run_dir / "broker.out")
        text = self.log(name) or (out.read_text(errors="replace") if out.exists() else "")
        return "\n".join(text.splitlines()[-lines:])


def javac(home: pathlib.Path, out: pathlib.Path, *sources: pathlib.Path) -> None:
    """Compile sources of tests/java together against the distribution's ``lib/*`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    p = subprocess.run(["javac", "-nowarn", "-Xlint:none", "-encoding", "UTF-8", "-cp", f"{home}/lib/*",
                        "-d", str(out), *map(str, sources)], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"javac {' '.join(s.name for s in sources)} failed:\n{p.stdout}\n{p.stderr}")


class JavaProgram:
    """A Java main class run in its own JVM against a name server: a source of tests/java
    compiled once (``compile``), or a class of the distribution itself (classes None, e.g.
    RocketMQ's benchmark ``org.apache.rocketmq.example.benchmark.Producer``). Client logs
    go under ``run_dir/home``."""

    def __init__(self, home: pathlib.Path, main: str, classes: Optional[pathlib.Path] = None) -> None:
        self.home, self.main, self.classes = home, main, classes

    @classmethod
    def compile(cls, home: pathlib.Path, out: pathlib.Path, main: pathlib.Path, *more: pathlib.Path) -> "JavaProgram":
        """``main`` (its class named as the file) and the ``more`` sources it uses."""
        javac(home, out, main, *more)
        return cls(home, main.stem, out)

    def command(self, run_dir: pathlib.Path, *args: str, heap: str = "256m") -> list[str]:
        cp = f"{self.classes}:{self.home}/lib/*" if self.classes else f"{self.home}/lib/*"
        return ["java", "-Xms64m", f"-Xmx{heap}", *JDK17_OPENS, f"-Duser.home={run_dir / 'home'}",
                f"-Drocketmq.home.dir={self.home}", "-cp", cp, self.main, *args]

    def run(self, run_dir: pathlib.Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
        """Run to its end; its output (stdout and stderr together) in ``stdout``."""
        run_dir.mkdir(parents=True, exist_ok=True)
        return subprocess.run(self.command(run_dir, *args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=timeout)

    def start(self, run_dir: pathlib.Path, log: pathlib.Path, *args: str) -> subprocess.Popen:
        """Start it in the background, its output going to ``log``."""
        run_dir.mkdir(parents=True, exist_ok=True)
        with open(log, "w") as out:
            return subprocess.Popen(self.command(run_dir, *args), stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)


class Probe:
    """The compiled ``RmqProbe``: ``run(broker, plan)`` runs the plan's steps in one JVM and
    returns one result per step (``{"op", "result"}`` or ``{"op", "error"}``)."""

    def __init__(self, home: pathlib.Path, classes: pathlib.Path) -> None:
        self.home, self.classes = home, classes

    @classmethod
    def compile(cls, home: pathlib.Path, out: pathlib.Path) -> "Probe":
        javac(home, out, PROBE_SOURCE)
        return cls(home, out)

    def run(self, broker: RealBroker, plan: list[dict], timeout: float = 180, allow_errors: bool = False) -> list:
        """The plan's results in order; with ``allow_errors`` a failed step gives
        ``{"error": text}`` in its place, else any failed step fails the call."""
        work = broker.run_dir
        work.mkdir(parents=True, exist_ok=True)
        plan_file, out_file = work / "probe-plan.json", work / "probe-out.json"
        plan_file.write_text(json.dumps(plan))
        out_file.unlink(missing_ok=True)
        cmd = ["java", "-Xms128m", "-Xmx512m", *JDK17_OPENS, f"-Duser.home={work / 'home'}",
               f"-Drocketmq.home.dir={self.home}", "-cp", f"{self.classes}:{self.home}/lib/*",
               "RmqProbe", broker.namesrv, broker.address, str(plan_file), str(out_file)]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0 or not out_file.exists():
            raise RuntimeError(f"RmqProbe failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
        results = json.loads(out_file.read_text())
        if allow_errors:
            return [r["result"] if "error" not in r else {"error": r["error"]} for r in results]
        errors = [f"step {i} {r['op']}: {r['error']}" for i, r in enumerate(results) if "error" in r]
        assert not errors, "\n".join(errors) + "\n--- broker.log ---\n" + broker.log_tail()
        return [r["result"] for r in results]
