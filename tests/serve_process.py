"""``pymq serve`` in a subprocess, for the server tests (gRPC and remoting)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prepare_store(path: str) -> None:
    """Create the store with test-sized files (16 MiB commit-log segments, small queue and
    index files) unless it exists; ``pymq serve`` keeps the sizes recorded in
    ``config/storeSizes.json`` (the defaults would allocate 1 GiB segments per test)."""
    if os.path.exists(os.path.join(path, "config", "storeSizes.json")):
        return
    import pymq
    cfg = pymq.StoreConfig(commitlog_file_size=16 * 1024 * 1024, consume_queue_entries=20_000,
                           index_hash_slots=20_000, index_max_entries=400_000, warm_mapped_file_enable=False)
    pymq.MessageStore(path, cfg).shutdown()


class ServeProcess:
    """``pymq serve --store STORE ARGS...``; ``start`` returns once it printed ``ready``,
    with the addresses it listens on in ``listening`` (``grpc``, ``namesrv``, ``broker``)."""

    def __init__(self, store: str, *args: str) -> None:
        self.store = store
        self.args = list(args)
        self.proc: subprocess.Popen | None = None
        self.output: list[str] = []
        self.listening: dict[str, str] = {}

    def start(self, timeout: float = 30.0) -> "ServeProcess":
        prepare_store(self.store)
        cmd = [sys.executable, "-m", "pymq", "serve", "--store", self.store, *self.args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.output.append(line)
            m = re.search(r"(name server |broker |VIP channel |HA )?listening on ([\w.:-]+:\d+)", line)
            if m:
                role = {"name server ": "namesrv", "broker ": "broker", "VIP channel ": "vip",
                        "HA ": "ha"}.get(m.group(1) or "", "grpc")
                self.listening[role] = m.group(2)
            if "pymq serve: ready" in line:
                return self
        self.proc.kill()
        raise RuntimeError("pymq serve did not start:\n" + "".join(self.output) + (self.proc.stdout.read() or ""))

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """Send ``sig``, wait for the exit; returns the exit code."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
        self.output.append(out or "")
        code = self.proc.returncode
        self.proc = None
        return code

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None
