"""What the replication workload measures beside its put rates: how fast an empty slave
catches up, against the loopback socket, and what that costs the master's producers.

* ``catch_up``: a master (this process) holding ``total`` bytes of commit log in one
  segment; a slave started empty in its own process copies all of it (its segments as
  large, so it starts at the master's first byte). The rate is the slave's: bytes it made
  visible over the time from its store's start until it has them all. With
  ``producer=True`` a thread of the master puts 100-byte messages (``put_message``) for
  the whole time, and again alone for as long before it: the two put rates are what
  "the master keeps serving producers meanwhile" means in figures.
* ``loopback_bandwidth``: a plain sender (this process) and receiver (its own process)
  moving ``total`` bytes in ``chunk``-byte ``send``/``recv_into`` calls: what the machine's
  loopback socket gives two processes, the catch-up's yardstick. It is measured with the
  chunk the master's frames use (``ha_transfer_batch_size``) and with RocketMQ's 32 KiB;
  with ``source``, the sender writes a file's bytes from its mapping (stored bytes, as the
  master sends them) instead of one buffer the cache keeps.
* ``fresh_file_write``: ``total`` bytes ``pwrite``n into a new file in ``chunk`` calls, no
  flush: what the slave's own copy into its page cache costs at the least.
"""

from __future__ import annotations

import mmap
import multiprocessing
import os
import shutil
import socket
import threading
import time

import pymq

from .base import TOPIC


def _receiver(port_q, total: int, chunk: int, done_q) -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port_q.put(srv.getsockname()[1])
    conn, _ = srv.accept()
    view = memoryview(bytearray(chunk))
    got = 0
    while got < total:
        n = conn.recv_into(view)
        if not n:
            break
        got += n
    done_q.put(got)
    conn.close()


def loopback_bandwidth(total: int, chunk: int = 32 * 1024, source: str | None = None) -> float:
    """Bytes/s of a plain sender and receiver (two processes, ``chunk``-byte calls) over
    loopback; the sender writes ``source``'s bytes from its mapping when given (a file of
    at least ``total`` bytes), else one random buffer over and over."""
    ctx = multiprocessing.get_context("spawn")
    port_q, done_q = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=_receiver, args=(port_q, total, chunk, done_q))
    p.start()
    s = socket.create_connection(("127.0.0.1", port_q.get(timeout=60)))
    mapped = None
    if source is not None:
        with open(source, "rb") as f:
            mapped = mmap.mmap(f.fileno(), total, prot=mmap.PROT_READ)
        view = memoryview(mapped)
    else:
        data = os.urandom(chunk)
    t0 = time.perf_counter()
    sent = 0
    while sent < total:
        s.sendall(data if mapped is None else view[sent:sent + chunk])
        sent += chunk
    got = done_q.get(timeout=600)
    took = time.perf_counter() - t0
    s.close()
    p.join(30)
    if mapped is not None:
        view.release()
        mapped.close()
    return got / took


def fresh_file_write(path: str, total: int, chunk: int = 1 << 20) -> float:
    """Bytes/s of ``pwrite`` of ``total`` bytes into a new file at ``path`` in ``chunk``
    calls (page cache only, no flush); the file is left for ``loopback_bandwidth``'s
    ``source``."""
    data = os.urandom(chunk)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        t0 = time.perf_counter()
        pos = 0
        while pos < total:
            pos += os.pwrite(fd, data, pos)
        took = time.perf_counter() - t0
    finally:
        os.close(fd)
    return pos / took


def _slave(path: str, address: str, file_size: int, target: int, out_q) -> None:
    cfg = pymq.StoreConfig(broker_role="SLAVE", ha_master_address=address, commitlog_file_size=file_size)
    w0 = time.time()
    t0 = time.perf_counter()
    store = pymq.MessageStore(path, cfg).start()
    while store.get_max_phy_offset() < target:
        time.sleep(0.001)
    took = time.perf_counter() - t0
    out_q.put((store.get_max_phy_offset() - max(0, store.get_min_phy_offset()), took, w0, w0 + took))
    store.shutdown()


class _Producer(threading.Thread):
    """Puts 100-byte messages on ``store`` until stopped; ``rate(t0, t1)`` is its puts/s
    between two ``time.time()`` instants."""

    def __init__(self, store) -> None:
        super().__init__(name="bench-catch-up-producer", daemon=True)
        self.store = store
        self.stop = threading.Event()
        self.marks: list[tuple[float, int]] = []
        self.failed = 0

    def run(self) -> None:
        body = b"x" * 100
        n = 0
        self.marks.append((time.time(), 0))
        while not self.stop.is_set():
            for _ in range(256):
                if not self.store.put_message(pymq.Message(TOPIC, body)).is_ok():
                    self.failed += 1
            n += 256
            self.marks.append((time.time(), n))

    def rate(self, t0: float, t1: float) -> float:
        inside = [(t, n) for t, n in self.marks if t0 <= t <= t1]
        if len(inside) < 2:
            return 0.0
        (a, na), (b, nb) = inside[0], inside[-1]
        return (nb - na) / (b - a) if b > a else 0.0


def catch_up(path: str, total: int, producer: bool = False) -> dict:
    """``{"rate": bytes/s}`` of an empty slave (own process) copying a master holding
    ``total`` bytes in one segment, with ``{"put_alone", "put_during"}`` (puts/s) when a
    ``producer`` thread keeps putting on the master meanwhile."""
    # one sparse segment with room for the producer's puts after ``total`` (at most 2 GiB)
    size = min(total + (1 << 30), (1 << 31) - (1 << 20))
    cfg = pymq.StoreConfig(ha_listen_port=0, commitlog_file_size=size)
    master = pymq.MessageStore(os.path.join(path, "catchup-master"), cfg).start()
    prod = None
    try:
        body = os.urandom(4000)
        while master.get_max_phy_offset() < total:
            master.put_messages([pymq.Message(TOPIC, body) for _ in range(100)])
        master.flush()
        target = master.get_max_phy_offset()
        out: dict = {}
        if producer:
            prod = _Producer(master)
            alone0 = time.time()
            prod.start()
        ctx = multiprocessing.get_context("spawn")
        out_q = ctx.Queue()
        p = ctx.Process(target=_slave, args=(os.path.join(path, "catchup-slave"), master.ha.address, size,
                                              target, out_q))
        if prod is not None:          # the producer alone first, for about as long as a catch-up
            time.sleep(max(0.5, total / (1 << 30)))
            alone1 = time.time()
        p.start()
        copied, took, w0, w1 = out_q.get(timeout=900)
        if prod is not None:
            prod.stop.set()
            prod.join(30)
            out["put_alone"] = prod.rate(alone0, alone1)
            out["put_during"] = prod.rate(w0, w1)
            if prod.failed:
                raise RuntimeError(f"{prod.failed} puts failed during the catch-up")
        p.join(60)
        out["rate"] = copied / took
        return out
    finally:
        if prod is not None:
            prod.stop.set()
        master.shutdown()
        shutil.rmtree(path, ignore_errors=True)     # a GiB or two: not kept till the row's teardown
