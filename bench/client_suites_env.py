"""What ``bench/client_suites.py`` runs the clients' suites in: the servers (``pymq serve``
and Apache RocketMQ 4.9.7), topics and groups made as mqadmin makes them, a name-server
address service, the sources (git and npm), and the reading of mocha's report."""

from __future__ import annotations

import http.server
import json
import os
import pathlib
import re
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from typing import Optional

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests"))      # the real broker's harness and the test store sizes
sys.path.insert(0, str(REPO))                # this checkout's pymq, as `pymq serve` (run from REPO) uses

from real_rocketmq import RealBroker, find_rocketmq_home, free_ports  # noqa: E402,F401
from serve_process import free_port, prepare_store  # noqa: E402


def run(cmd: list, cwd=None, env=None, timeout: float = 1800, log: Optional[pathlib.Path] = None) -> str:
    """``cmd``'s output (stdout and stderr together; also written to ``log``); raises when it
    fails to start, never for its exit code (a failing suite exits non-zero)."""
    p = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       stdin=subprocess.DEVNULL, timeout=timeout)
    out = p.stdout.decode("utf-8", "replace")
    if log is not None:
        log.write_text(out)
    return out


def check(cmd: list, cwd=None) -> None:
    p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if p.returncode:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed:\n{p.stdout.decode(errors='replace')[-3000:]}")


# -- sources -----------------------------------------------------------------------------------

def git_checkout(url: str, ref: str, dest: pathlib.Path) -> str:
    """``url`` (a git URL or a local repository) cloned to ``dest`` once, its work tree
    reset to ``ref`` each time; returns the commit."""
    if not (dest / ".git").exists():
        check(["git", "clone", "--quiet", "--no-checkout", url, str(dest)])
    check(["git", "-C", str(dest), "checkout", "--quiet", "--force", ref])
    check(["git", "-C", str(dest), "clean", "-q", "-fdx", "-e", "node_modules"])
    return subprocess.run(["git", "-C", str(dest), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()


def npm_version(package_json: pathlib.Path, name: str) -> str:
    """The version of ``name`` a package.json of this repository pins."""
    return json.loads(package_json.read_text())["dependencies"][name]


def npm_install(folder: pathlib.Path, *extra: str) -> None:
    if not (folder / "node_modules").is_dir():
        check(["npm", "install", "--no-audit", "--no-fund", *extra], cwd=folder)


# -- servers -----------------------------------------------------------------------------------

class PymqServe:
    """``pymq serve`` on a fresh store (test-sized files): gRPC, name server and broker on
    free ports; its output goes to ``serve.log``."""

    kind = "pymq"

    def __init__(self, run_dir: pathlib.Path, *extra: str) -> None:
        self.run_dir, self.extra = run_dir, extra
        self.grpc_port, self.namesrv_port, self.broker_port = free_port(), *free_ports()
        self.proc: Optional[subprocess.Popen] = None

    namesrv = property(lambda self: f"127.0.0.1:{self.namesrv_port}")
    address = property(lambda self: f"127.0.0.1:{self.broker_port}")
    endpoint = property(lambda self: f"127.0.0.1:{self.grpc_port}")

    def start(self) -> "PymqServe":
        shutil.rmtree(self.run_dir, ignore_errors=True)
        self.run_dir.mkdir(parents=True)
        store = self.run_dir / "store"
        prepare_store(str(store))
        log = self.run_dir / "serve.log"
        self.proc = subprocess.Popen([sys.executable, "-m", "pymq", "serve", "--store", str(store),
                                      "--port", str(self.grpc_port), "--namesrv-port", str(self.namesrv_port),
                                      "--broker-port", str(self.broker_port), "--vip-port", "off",
                                      "--ha-port", "off", *self.extra],
                                     stdout=open(log, "w"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     cwd=REPO)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.proc.poll() is None:
            if "pymq serve: ready" in log.read_text():
                return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("pymq serve did not start:\n" + log.read_text()[-3000:])

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def rocketmq_server(home: pathlib.Path, run_dir: pathlib.Path) -> RealBroker:
    """Apache RocketMQ's name server and broker (``bin/run.sh``) on a fresh store."""
    shutil.rmtree(run_dir, ignore_errors=True)
    server = RealBroker(home, run_dir / "run", run_dir / "store")
    server.kind = "rocketmq"
    return server


# -- admin on the wire, as mqadmin sends it ----------------------------------------------------

def _invoke(addr: str, code: int, ext: dict, body: bytes = b"") -> dict:
    header = json.dumps({"code": code, "language": "JAVA", "version": 407, "opaque": 1, "flag": 0,
                         "extFields": {k: str(v) for k, v in ext.items()}}).encode()
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body)
        data = b""
        while len(data) < 8 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
            chunk = s.recv(65536)
            if not chunk:
                raise RuntimeError(f"{addr} closed the connection")
            data += chunk
    hlen = struct.unpack(">i", data[4:8])[0] & 0xFFFFFF
    return json.loads(data[8:8 + hlen])


def create_topic(server, topic: str, queues: int = 8, attributes: Optional[str] = None) -> None:
    """``mqadmin updateTopic -t TOPIC -r/-w QUEUES [-a ATTRIBUTES]`` (5.x's ``-a``, e.g.
    ``+message.type=FIFO``): the request it sends to the broker."""
    ext = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": queues, "writeQueueNums": queues,
           "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"}
    if attributes:
        ext["attributes"] = attributes
    head = _invoke(server.address, 17, ext)
    if head["code"] != 0:
        raise RuntimeError(f"updateTopic {topic} {attributes or ''}: {head}")
    _wait_route(server, topic)


def create_group(server, group: str, attributes: Optional[dict] = None) -> None:
    """``mqadmin updateSubGroup -g GROUP [-a +k=v,...]`` (5.x): the request it sends."""
    body = {"groupName": group, "consumeEnable": True, "consumeFromMinEnable": True, "consumeBroadcastEnable": True,
            "retryQueueNums": 1, "retryMaxTimes": 16, "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1,
            "notifyConsumerIdsChangedEnable": True, "consumeMessageOrderly": False}
    if attributes:
        body["attributes"] = {f"+{k}": v for k, v in attributes.items()}
    head = _invoke(server.address, 200, {}, json.dumps(body).encode())
    if head["code"] != 0:
        raise RuntimeError(f"updateSubGroup {group}: {head}")


def _wait_route(server, topic: str, timeout: float = 60) -> None:
    """A real broker registers a new topic with its name server within a few seconds."""
    deadline = time.monotonic() + timeout
    while _invoke(server.namesrv, 105, {"topic": topic})["code"] != 0:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no route for {topic} after {timeout} s")
        time.sleep(0.5)


class AddressServer:
    """The HTTP name-server address service a 4.x client may fetch its name servers from
    (RocketMQ's ``rocketmq.namesrv.addr`` web service, ali-ons' ``onsAddr``): every GET is
    answered with ``addresses`` (``host:port;host:port``)."""

    def __init__(self, addresses: str) -> None:
        body = addresses.encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/rocketmq/nsaddr4client-internet"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# -- mocha's report ------------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def mocha_report(output: str) -> dict:
    """``{"passed", "failed", "pending", "failures": [title, ...]}`` from mocha's spec
    report (egg-bin test): the counts of its summary and the titles of its failure list."""
    text = _ANSI.sub("", output)
    counts = {k: int(m.group(1)) if (m := re.search(rf"^\s+(\d+) {k}", text, re.M)) else 0
              for k in ("passing", "failing", "pending")}
    failures = []
    summary = text[text.find(f"{counts['failing']} failing"):] if counts["failing"] else ""
    lines = summary.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^  (\d+)\) (.*)$", line)
        if not m:
            continue
        parts = [m.group(2).strip()]
        for follow in lines[i + 1:]:
            if not follow.startswith("     ") or re.match(r"^  \d+\) ", follow):
                break
            parts.append(follow.strip())
            if follow.rstrip().endswith(":"):
                break
        failures.append(" / ".join(parts).rstrip(":"))
    return {"passed": counts["passing"], "failed": counts["failing"], "pending": counts["pending"],
            "failures": failures}


def node_env(home: pathlib.Path, **extra: str) -> dict:
    """The environment of a suite's node process: its own HOME (ali-ons keeps local offsets
    there), no proxy, and ``extra``."""
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env.update(HOME=str(home), **extra)
    return env


def mqadmin_main(argv: list) -> int:
    """``updateTopic -t T [-n NAMESRV] [-b BROKER] [-c CLUSTER] [-a ATTRIBUTES]`` as mqadmin
    5.x runs it (the e2e suite shells out to mqadmin): the request to the broker given, or
    to the one broker of the name server's cluster; prints what mqadmin prints."""
    if not argv or argv[0] != "updateTopic":
        print(f"only updateTopic is served here, not {argv[:1]}")
        return 1
    opts = dict(zip(argv[1::2], argv[2::2]))

    class Target:
        namesrv = opts.get("-n", "127.0.0.1:9876")
        address = opts.get("-b") or _broker_of(opts.get("-n", "127.0.0.1:9876"))

    create_topic(Target, opts["-t"], queues=int(opts.get("-r", 8)), attributes=opts.get("-a"))
    print(f"create topic to {Target.address} success.")
    return 0


def _broker_of(namesrv: str) -> str:
    """The master address of the first broker the name server knows (GET_BROKER_CLUSTER_INFO)."""
    header = json.dumps({"code": 106, "language": "JAVA", "version": 407, "opaque": 1, "flag": 0}).encode()
    host, port = namesrv.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(struct.pack(">ii", 4 + len(header), len(header)) + header)
        data = b""
        while len(data) < 8 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
            data += s.recv(65536)
    hlen = struct.unpack(">i", data[4:8])[0] & 0xFFFFFF
    body = data[8 + hlen:].decode()
    return re.search(r'"0":"([^"]+)"', body).group(1)


if __name__ == "__main__" and sys.argv[1:2] == ["mqadmin"]:
    sys.exit(mqadmin_main(sys.argv[2:]))
