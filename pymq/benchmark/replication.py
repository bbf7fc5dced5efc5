"""Replication workload: what a slave costs a master's puts, and how fast a new slave
catches up (docs/replication.md).

``replication`` rows: ``put_message`` throughput of a master with one slave attached
(embedded, same process), as SYNC_MASTER (``pymq``: each put waits for the slave's
acknowledgement) and ASYNC_MASTER, next to a store without HA (``pymq-no-slave``).

Figures of the first row, measured once per repeat in the same run: the catch-up rate of
a slave started empty, in its own process, beside a master holding ``--replication-bytes``
of commit log (its segments 1 GiB, so the slave copies all of it), and the loopback
socket's bandwidth measured with a plain sender and receiver in two processes moving the
same bytes in the same chunk size (``ha_transfer_batch_size``, 32 KiB); their ratio is
the goal's figure (>= 0.5).
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import time

import pymq

from .base import TOPIC
from .figures import Figure
from .write import PymqPutMessage

CHUNK = 32 * 1024


def _receiver(port_q, total: int, done_q) -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port_q.put(srv.getsockname()[1])
    conn, _ = srv.accept()
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    got = 0
    while got < total:
        n = conn.recv_into(view)
        if not n:
            break
        got += n
    done_q.put(got)
    conn.close()


def loopback_bandwidth(total: int) -> float:
    """Bytes/s of a plain sender and receiver (two processes, 32 KiB chunks) over loopback."""
    ctx = multiprocessing.get_context("spawn")
    port_q, done_q = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=_receiver, args=(port_q, total, done_q))
    p.start()
    s = socket.create_connection(("127.0.0.1", port_q.get(timeout=60)))
    chunk = os.urandom(CHUNK)
    t0 = time.perf_counter()
    sent = 0
    while sent < total:
        s.sendall(chunk)
        sent += CHUNK
    got = done_q.get(timeout=600)
    took = time.perf_counter() - t0
    s.close()
    p.join(30)
    return got / took


def _slave(path: str, address: str, file_size: int, target: int, out_q) -> None:
    cfg = pymq.StoreConfig(broker_role="SLAVE", ha_master_address=address, commitlog_file_size=file_size)
    store = pymq.MessageStore(path, cfg).start()
    t0 = time.perf_counter()
    while store.get_max_phy_offset() < target:
        time.sleep(0.001)
    took = time.perf_counter() - t0
    out_q.put((store.get_max_phy_offset() - max(0, store.get_min_phy_offset()), took))
    store.shutdown()


def catch_up_rate(path: str, total: int) -> float:
    """Bytes/s at which an empty slave (own process) copies a master holding ``total``
    bytes in one segment."""
    size = max(1 << 30, total + (1 << 20))
    cfg = pymq.StoreConfig(ha_listen_port=0, commitlog_file_size=size)
    master = pymq.MessageStore(os.path.join(path, "catchup-master"), cfg).start()
    try:
        body = os.urandom(4000)
        while master.get_max_phy_offset() < total:
            master.put_messages([pymq.Message(TOPIC, body) for _ in range(100)])
        master.flush()
        target = master.get_max_phy_offset()
        ctx = multiprocessing.get_context("spawn")
        out_q = ctx.Queue()
        p = ctx.Process(target=_slave, args=(os.path.join(path, "catchup-slave"), master.ha.address, size,
                                              target, out_q))
        p.start()
        copied, took = out_q.get(timeout=900)
        p.join(60)
        return copied / took
    finally:
        master.shutdown()


class PymqSyncMasterPut(PymqPutMessage):
    """pymq: put_message on a SYNC_MASTER with a slave attached (each put acknowledged by it)."""

    group = "replication"
    role = "SYNC_MASTER"
    slave = True
    figures = (Figure("catch_up_mib_s", "catch-up MiB/s", "{:,.0f}", lower_is_better=False),
               Figure("loopback_mib_s", "loopback MiB/s", "{:,.0f}", lower_is_better=False),
               Figure("catch_up_ratio", "catch-up / loopback", "{:.2f}", lower_is_better=False))

    @property
    def operation(self) -> str:   # type: ignore[override]
        return (f"store.put_message(Message(...)), {self.role}"
                + (", one slave attached (same process)" if self.slave else ", no slave"))

    def message_count(self) -> int:
        return self.options.replication_messages

    def open(self, path: str) -> None:
        self.last, self.written = None, 0
        self.path = path
        self.overrides = {"broker_role": self.role, "ha_listen_port": 0 if self.slave else None}
        super().open(path)
        self.slave_store = None
        if self.slave:
            cfg = pymq.StoreConfig(broker_role="SLAVE", ha_master_address=self.store.ha.address,
                                   commitlog_file_size=self.store.config.commitlog_file_size)
            self.slave_store = pymq.MessageStore(os.path.join(path, "slave"), cfg).start()
            deadline = time.monotonic() + 30
            while not any(c.next_transfer_from >= 0 for c in self.store.ha.connections()):
                if time.monotonic() > deadline:
                    raise RuntimeError("the slave did not attach")
                time.sleep(0.005)

    def measure_figures(self) -> dict:
        if not self.figures:
            return {}
        total = self.options.replication_bytes
        catch = catch_up_rate(self.path, total)
        loop = loopback_bandwidth(total)
        return {"catch_up_mib_s": catch / (1 << 20), "loopback_mib_s": loop / (1 << 20),
                "catch_up_ratio": catch / loop}

    def close(self) -> None:
        slave, self.slave_store = getattr(self, "slave_store", None), None
        super().close()
        if slave is not None:
            slave.shutdown()


class PymqAsyncMasterPut(PymqSyncMasterPut):
    """pymq: put_message on an ASYNC_MASTER with a slave attached."""

    implementation = "pymq-async-master"
    role = "ASYNC_MASTER"
    figures = ()


class PymqNoSlavePut(PymqSyncMasterPut):
    """pymq: put_message on a store without HA (the reference)."""

    implementation = "pymq-no-slave"
    role = "ASYNC_MASTER"
    slave = False
    figures = ()


REPLICATION = (PymqSyncMasterPut, PymqAsyncMasterPut, PymqNoSlavePut)
