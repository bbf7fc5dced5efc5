"""``pymq serve`` with a port that is taken: one line naming the port, a non-zero exit, no
"listening" line, and no store directory left behind (the ports are checked before the
store opens). It used to print the remoting listeners, then die in gRPC with a traceback."""

from __future__ import annotations

import os
import socket
from concurrent.futures import ThreadPoolExecutor

from cli_support import run_pymq

FLAGS = ("--port", "--namesrv-port", "--broker-port", "--metrics-port")


def test_a_busy_port_is_named_and_nothing_is_created(tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = str(busy.getsockname()[1])

        def serve(flag: str):
            ports = {"--port": "0", "--namesrv-port": "0", "--broker-port": "0", flag: port}
            store = tmp_path / flag.strip("-") / "store"
            argv = ["serve", "--store", str(store), "--host", "127.0.0.1"]
            for name, value in ports.items():
                argv += [name, value]
            return run_pymq(*argv, timeout=60), store

        with ThreadPoolExecutor(len(FLAGS)) as pool:
            results = list(pool.map(serve, FLAGS))
    for flag, (p, store) in zip(FLAGS, results):
        assert p.returncode == 2, (flag, p.stdout, p.stderr)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and port in lines[0] and flag in lines[0] and "in use" in lines[0], (flag, p.stderr)
        assert "listening" not in p.stdout and "Traceback" not in p.stderr, (flag, p.stdout)
        assert not os.path.exists(store.parent), flag


def test_one_port_for_two_listeners_is_refused(tmp_path):
    p = run_pymq("serve", "--store", str(tmp_path / "store"), "--port", "0", "--namesrv-port", "45678",
                 "--broker-port", "45678")
    assert p.returncode == 2 and "45678" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "listening" not in p.stdout and not os.path.exists(tmp_path / "store")
