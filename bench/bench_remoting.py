"""RocketMQ 4 remoting through ``pymq serve``, measured in one run.

    python bench/bench_remoting.py [--producers 2] [--messages 20000] [--pull-mib 512] [--json out.json]

1. **ali-ons producers**: N Node processes of RocketMQ 4's JavaScript client send M messages
   each (100-byte bodies, sends in flight), messages/s over all of them.
2. **ali-ons consumer**: one push consumer of a new group reads them all from the first
   offset, messages/s.
3. **pull path**: a minimal client (this script, raw sockets) pulls a topic of large
   records (``--body-size``, 16 KiB by default) with one PULL_MESSAGE in flight per queue,
   reading only the response headers; bytes/s of records received.
4. **loopback limit**: the same client reading the same amount from a server that does
   nothing but write 256 KiB buffers to the socket; bytes/s. Step 3 over step 4 is how
   close the pull path comes to the machine's loopback bandwidth for this client.

Needs node with tests/remoting/js installed (``npm ci`` there; ci/test.sh does it).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
JS = os.path.join(HERE, "..", "tests", "remoting", "js")


def frame(code: int, ext: dict, opaque: int, body: bytes = b"") -> bytes:
    h = json.dumps({"code": code, "language": "PYTHON", "version": 437, "opaque": opaque, "flag": 0,
                    "extFields": ext}).encode()
    return struct.pack(">ii", 4 + len(h) + len(body), len(h)) + h + body


class Reader:
    """Frames from a socket, read with ``recv_into`` into one large buffer; bodies are
    counted, not copied out."""

    def __init__(self, sock: socket.socket, size: int = 8 << 20) -> None:
        self.sock = sock
        self.buf = bytearray(size)
        self.view = memoryview(self.buf)
        self.start = self.end = 0

    def _fill(self) -> None:
        if self.start and self.end == len(self.buf):
            n = self.end - self.start
            self.buf[:n] = self.buf[self.start:self.end]
            self.start, self.end = 0, n
        got = self.sock.recv_into(self.view[self.end:])
        if not got:
            raise ConnectionError("closed")
        self.end += got

    def frame(self) -> tuple[dict, int]:
        """The next frame's header and its body length."""
        while self.end - self.start < 8:
            self._fill()
        total, word = struct.unpack_from(">ii", self.buf, self.start)
        hlen = word & 0xFFFFFF
        while self.end - self.start < 8 + hlen:
            self._fill()
        head = json.loads(bytes(self.buf[self.start + 8:self.start + 8 + hlen]))
        body = total - 4 - hlen
        self.start += 8 + hlen
        while body:            # skip the body
            take = min(body, self.end - self.start)
            self.start += take
            body -= take
            if body:
                self.start = self.end = 0
                self._fill()
        return head, total - 4 - hlen

    def drain(self, n: int) -> None:
        while n > 0:
            got = self.sock.recv_into(self.view)
            if not got:
                raise ConnectionError("closed")
            n -= got


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node(opts: dict) -> subprocess.Popen:
    return subprocess.Popen(["node", os.path.join(JS, "client.js"), json.dumps(opts)], cwd=JS,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def produce_with_alions(ns: str, procs: int, messages: int) -> float:
    t0 = time.perf_counter()
    ps = [node({"mode": "produce", "nameSrv": ns, "topic": "BenchTopic", "count": messages, "start": i * messages,
                "concurrent": 64, "keys": False, "group": f"BPG{i}"}) for i in range(procs)]
    ok, errors = 0, []
    for p in ps:
        out, _ = p.communicate()
        ok += sum(1 for line in out.splitlines() if '"SEND_OK"' in line)
        errors += [line for line in out.splitlines() if '"SEND_OK"' not in line][:3]
    elapsed = time.perf_counter() - t0
    if ok != procs * messages:
        raise RuntimeError(f"only {ok} of {procs * messages} sends succeeded: {errors}")
    return ok / elapsed


def consume_with_alions(ns: str, total: int) -> float:
    p = node({"mode": "consume", "nameSrv": ns, "group": "BenchCG", "topic": "BenchTopic"})
    count, t0 = 0, None
    for line in p.stdout:
        if '"ready"' in line:
            t0 = time.perf_counter()
        elif '"msgId"' in line:
            count += 1
            if count == total:
                break
    elapsed = time.perf_counter() - t0
    p.terminate()
    p.wait()
    return total / elapsed


def fill(broker: tuple, queues: int, body_size: int, total_bytes: int) -> int:
    """Put ``total_bytes`` of records into topic PullBench with batch sends; returns the
    number of messages."""
    body = os.urandom(body_size)
    entry = struct.pack(">iiiii", 20 + body_size + 2, 0, 0, 0, body_size) + body + struct.pack(">h", 0)
    per_batch = max(1, (1 << 20) // len(entry))
    n, opaque = 0, 0
    with socket.create_connection(broker) as s:
        r = Reader(s, 1 << 20)
        s.sendall(frame(17, {"topic": "PullBench", "readQueueNums": queues, "writeQueueNums": queues, "perm": 6}, 0))
        if r.frame()[0]["code"] != 0:
            raise RuntimeError("cannot create PullBench")
        while n * body_size < total_bytes:
            opaque += 1
            s.sendall(frame(320, {"a": "FILL", "b": "PullBench", "c": "TBW102", "d": queues, "e": opaque % queues,
                                  "f": 0, "g": 0, "h": 0, "i": "", "j": 0}, opaque, entry * per_batch))
            head, _ = r.frame()
            if head["code"] != 0:
                raise RuntimeError(head)
            n += per_batch
    return n


def pull_all(broker: tuple, queues: int, messages: int) -> tuple[float, int]:
    """Pull every record of PullBench, one request in flight per queue; (bytes/s, bytes)."""
    nxt = [0] * queues
    got_bytes = 0
    with socket.create_connection(broker) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        r = Reader(s)

        def ask(q: int) -> None:
            s.sendall(frame(11, {"consumerGroup": "BenchPull", "topic": "PullBench", "queueId": q,
                                 "queueOffset": nxt[q], "maxMsgNums": 32, "sysFlag": 0}, q))
        t0 = time.perf_counter()
        for q in range(queues):
            ask(q)
        live = queues
        while live:
            head, body = r.frame()
            q = head["opaque"]
            ext = head.get("extFields") or {}
            if head["code"] == 0:
                got_bytes += body
                nxt[q] = int(ext["nextBeginOffset"])
            if nxt[q] < int(ext.get("maxOffset", 0)):
                ask(q)
            else:
                live -= 1
        elapsed = time.perf_counter() - t0
    return got_bytes / elapsed, got_bytes


def loopback_limit(nbytes: int) -> float:
    """Bytes/s of the same reading loop from a server that only writes."""
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    chunk = os.urandom(256 << 10)

    def serve() -> None:
        c, _ = srv.accept()
        with c:
            sent = 0
            while sent < nbytes:
                c.sendall(chunk)
                sent += len(chunk)
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    with socket.create_connection(("127.0.0.1", port)) as s:
        r = Reader(s)
        t0 = time.perf_counter()
        r.drain((nbytes // len(chunk)) * len(chunk))
        elapsed = time.perf_counter() - t0
    t.join()
    srv.close()
    return nbytes / elapsed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--producers", type=int, default=2)
    ap.add_argument("--messages", type=int, default=20_000, help="per producer process")
    ap.add_argument("--body-size", type=int, default=16 << 10, help="record body size for the pull path")
    ap.add_argument("--pull-mib", type=int, default=512, help="MiB of records pulled")
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3, help="pull and loopback runs (best of)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    import pymq
    rows = {}
    with tempfile.TemporaryDirectory() as store:
        pymq.MessageStore(store, pymq.StoreConfig(commitlog_file_size=256 << 20, warm_mapped_file_enable=False)).shutdown()
        ns_port, br_port = free_port(), free_port()
        proc = subprocess.Popen([sys.executable, "-m", "pymq", "serve", "--store", store, "--port", "off",
                                 "--namesrv-port", str(ns_port), "--broker-port", str(br_port),
                                 "--vip-port", "off", "--ha-port", "off"],
                                stdout=subprocess.PIPE, text=True)
        try:
            for line in proc.stdout:
                if "ready" in line:
                    break
            ns, broker = f"127.0.0.1:{ns_port}", ("127.0.0.1", br_port)
            total = args.producers * args.messages
            print("ali-ons producers...", file=sys.stderr, flush=True)
            c0 = cpu_seconds(proc.pid)
            rows["alions_produce_msgs_per_s"] = produce_with_alions(ns, args.producers, args.messages)
            c1 = cpu_seconds(proc.pid)
            print("ali-ons consumer...", file=sys.stderr, flush=True)
            rows["alions_consume_msgs_per_s"] = consume_with_alions(ns, total)
            c2 = cpu_seconds(proc.pid)
            # how busy the server was: its CPU time per message, and the share of a core it used
            rows["server_cpu_us_per_send"] = 1e6 * (c1 - c0) / total
            rows["server_cpu_us_per_consumed"] = 1e6 * (c2 - c1) / total
            rows["server_core_share_produce"] = (c1 - c0) * rows["alions_produce_msgs_per_s"] / total
            rows["server_core_share_consume"] = (c2 - c1) * rows["alions_consume_msgs_per_s"] / total
            print("filling the pull topic...", file=sys.stderr, flush=True)
            n = fill(broker, args.queues, args.body_size, args.pull_mib << 20)
            pulls, limits = [], []
            for _ in range(args.repeat):
                print("pulling, then the loopback limit...", file=sys.stderr, flush=True)
                rate, nbytes = pull_all(broker, args.queues, n)
                pulls.append(rate)
                limits.append(loopback_limit(nbytes))
            rows["pull_bytes_per_s"] = max(pulls)
            rows["loopback_bytes_per_s"] = max(limits)
            rows["pull_over_loopback"] = rows["pull_bytes_per_s"] / rows["loopback_bytes_per_s"]
            rows["pull_body_size"] = args.body_size
        finally:
            proc.terminate()
            proc.wait(30)
    print(f"ali-ons producers ({args.producers} x {args.messages:,}): {rows['alions_produce_msgs_per_s']:,.0f} msg/s")
    print(f"   server CPU per send {rows['server_cpu_us_per_send']:.0f} us, "
          f"{rows['server_core_share_produce']:.0%} of a core")
    print(f"ali-ons push consumer:                  {rows['alions_consume_msgs_per_s']:,.0f} msg/s")
    print(f"   server CPU per message {rows['server_cpu_us_per_consumed']:.0f} us, "
          f"{rows['server_core_share_consume']:.0%} of a core")
    print(f"pull path ({args.body_size // 1024} KiB records):          "
          f"{rows['pull_bytes_per_s'] / 1e6:,.0f} MB/s")
    print(f"loopback limit (same reader):           {rows['loopback_bytes_per_s'] / 1e6:,.0f} MB/s")
    print(f"pull / loopback:                        {rows['pull_over_loopback']:.0%}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
