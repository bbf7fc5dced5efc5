"""Fixtures for the remoting tests: a ``pymq serve`` subprocess with the 4.x name server and
broker on free loopback ports, and the real 4.x clients pointed at it: ali-ons (Node,
installed by ci/test.sh under tests/remoting/js) and rocketmq-client-cpp (the ``rocketmq``
wheel on PyPI, installed by ci/test.sh under tests/remoting/.deps, run in subprocesses
because its module name clashes with the 5.x client's)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from serve_process import ServeProcess      # tests/ is on sys.path

HERE = os.path.dirname(os.path.abspath(__file__))
JS_CLIENT = os.path.join(HERE, "js", "client.js")
CPP_DEPS = os.path.join(HERE, ".deps", "rocketmq4")


class Server(ServeProcess):
    """``pymq serve`` with the 4.x name server and broker on free ports (or the ports
    given), gRPC off; ``namesrv`` and ``broker`` are their addresses."""

    def __init__(self, store: str, *extra: str) -> None:
        super().__init__(store)
        self.extra = list(extra)

    def start(self, timeout: float = 30.0, namesrv_port: int = 0, broker_port: int = 0) -> "Server":
        # no VIP channel or HA port: beside a fixed broker port they would take port - 2 and + 1
        self.args = ["--port", "off", "--namesrv-port", str(namesrv_port), "--broker-port", str(broker_port),
                     "--vip-port", "off", "--ha-port", "off", *self.extra]
        super().start(timeout)
        self.namesrv, self.broker = self.listening["namesrv"], self.listening["broker"]
        return self

    def port(self, role: str) -> int:
        return int(getattr(self, role).rsplit(":", 1)[1])

    def create_topics(self, *topics: str, queues: int = 4, **auth: str) -> None:
        """Create topics with mqadmin's request (UPDATE_AND_CREATE_TOPIC), as a user of
        RocketMQ does before an ali-ons client sends to them or subscribes: like
        RocketMQ's name server, pymq's gives no route for a topic that does not exist,
        and ali-ons does not fall back to ``TBW102``'s route as the Java client does.
        ``auth``: ``accessKey`` and ``secretKey`` to sign with."""
        header = {"defaultTopic": "TBW102", "readQueueNums": queues, "writeQueueNums": queues, "perm": 6,
                  "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"}
        answers = run_node({"mode": "invoke", "addr": self.broker, **auth,
                            "requests": [{"code": 17, "header": dict(header, topic=t)} for t in topics]})
        assert all(a.get("code") == 0 for a in answers), answers


@pytest.fixture
def remoting_server(tmp_path):
    """``make(*extra, store=..., topics=(...))`` starts a server (and creates those topics);
    all are stopped at the end."""
    servers = []

    def make(*extra: str, store: str | None = None, topics: tuple = (), **ports) -> Server:
        s = Server(store or str(tmp_path / "store"), *extra)
        servers.append(s)
        s.start(**ports)
        if topics:
            s.create_topics(*topics)
        return s

    yield make
    for s in servers:
        s.stop()


@pytest.fixture(scope="module")
def remoting_server_module(tmp_path_factory):
    """One server for a whole module."""
    s = Server(str(tmp_path_factory.mktemp("store") / "store")).start()
    yield s
    s.stop()


# -- ali-ons ----------------------------------------------------------------------------------

def _node_ready() -> None:
    if shutil.which("node") is None:
        pytest.fail("node is not installed (ci/test.sh expects it)")
    if not os.path.isdir(os.path.join(HERE, "js", "node_modules", "ali-ons")):
        pytest.fail("ali-ons is not installed: run ci/test.sh (npm ci in tests/remoting/js)")


class NodeClient:
    """One ``node client.js`` process; its JSON lines are collected as they come."""

    def __init__(self, opts: dict) -> None:
        _node_ready()
        self.proc = subprocess.Popen(["node", JS_CLIENT, json.dumps(opts)], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, cwd=os.path.join(HERE, "js"))
        self.lines: list[dict] = []
        import threading
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            line = line.strip()
            if line:
                try:
                    self.lines.append(json.loads(line))
                except ValueError:
                    self.lines.append({"raw": line})

    def wait_for(self, pred, timeout: float, what: str = "condition"):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred(self.lines):
                return self.lines
            if self.proc.poll() is not None and not pred(self.lines):
                self._thread.join(2)
                if pred(self.lines):
                    return self.lines
                raise AssertionError(f"client exited ({self.proc.returncode}) before {what}: "
                                     f"{self.lines[-5:]} {self.proc.stderr.read()[-2000:]}")
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}; last lines: {self.lines[-5:]}")

    def messages(self) -> list[dict]:
        return [x for x in self.lines if "msgId" in x and "failed" not in x and "queueOffset" in x
                and "status" not in x]

    def errors(self) -> list[dict]:
        return [x for x in self.lines if "error" in x or "fatal" in x]

    def stop(self, timeout: float = 20.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._thread.join(5)
        return self.proc.returncode

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self._thread.join(5)


def run_node(opts: dict, timeout: float = 120.0) -> list[dict]:
    """Run a produce or invoke script to its end; its JSON lines."""
    _node_ready()
    p = subprocess.run(["node", JS_CLIENT, json.dumps(opts)], capture_output=True, text=True, timeout=timeout,
                       cwd=os.path.join(HERE, "js"))
    lines = [json.loads(x) for x in p.stdout.splitlines() if x.strip()]
    if p.returncode != 0:
        raise AssertionError(f"node exited {p.returncode}: {lines[-3:]} {p.stderr[-2000:]}")
    return lines


# -- rocketmq-client-cpp --------------------------------------------------------------------------

def run_cpp(script: str, timeout: float = 120.0, **env) -> list[dict]:
    """Run ``script`` (Python using the 4.x ``rocketmq`` wheel) in a subprocess; the JSON
    lines it prints."""
    if not os.path.isdir(os.path.join(CPP_DEPS, "rocketmq")):
        pytest.fail("the rocketmq 4.x client is not installed: run ci/test.sh")
    environ = dict(os.environ, PYTHONPATH=CPP_DEPS, **{k: str(v) for k, v in env.items()})
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout, env=environ,
                       cwd=HERE)
    lines = []
    for x in p.stdout.splitlines():
        try:
            lines.append(json.loads(x))
        except ValueError:
            pass
    if p.returncode != 0:
        raise AssertionError(f"cpp client exited {p.returncode}: {lines[-3:]} {p.stderr[-2000:]}")
    return lines
