"""Replication workload: what a slave costs a master's puts, and how fast a new slave
catches up (docs/replication.md).

``replication`` rows: ``put_message`` throughput of a master with one slave attached
(embedded, same process), as SYNC_MASTER (``pymq``: each put waits for the slave's
acknowledgement) and ASYNC_MASTER, next to a store without HA (``pymq-no-slave``).

Figures of the first row, measured once per repeat in the same run (``catch_up``): the
catch-up rate of a slave started empty, in its own process, beside a master holding
``--replication-bytes`` of commit log; the loopback socket's bandwidth with a plain
sender and receiver moving the same bytes in chunks of the master's frame size
(``ha_transfer_batch_size``) and of RocketMQ's 32 KiB, and the catch-up's ratio to each
(the goal: >= 0.5); then a second catch-up while a producer thread puts on the master,
with the producer's rate during it and alone. Two floors beside them: the same bytes
``pwrite``n into a fresh file (what the slave's copy into its page cache costs at the
least), and the loopback with the sender writing that file's bytes from its mapping (as
the master sends stored bytes) rather than one buffer the CPU cache keeps.
"""

from __future__ import annotations

import os
import time

import pymq

from .catch_up import catch_up, fresh_file_write, loopback_bandwidth
from .figures import Figure
from .write import PymqPutMessage

RMQ_BATCH = 32 * 1024


class PymqSyncMasterPut(PymqPutMessage):
    """pymq: put_message on a SYNC_MASTER with a slave attached (each put acknowledged by it)."""

    group = "replication"
    role = "SYNC_MASTER"
    slave = True
    figures = (Figure("catch_up_mib_s", "catch-up MiB/s", "{:,.0f}", lower_is_better=False),
               Figure("loopback_mib_s", "loopback MiB/s (frame-size chunks)", "{:,.0f}",
                      lower_is_better=False),
               Figure("catch_up_ratio", "catch-up / loopback, median of rounds", "{:.2f}", median=True),
               Figure("loopback_32k_mib_s", "loopback MiB/s (32 KiB chunks)", "{:,.0f}",
                      lower_is_better=False),
               Figure("catch_up_ratio_32k", "catch-up / loopback 32 KiB, median of rounds", "{:.2f}",
                      median=True),
               Figure("loopback_stored_mib_s", "loopback MiB/s, sent from a mapped file", "{:,.0f}",
                      lower_is_better=False),
               Figure("fresh_write_mib_s", "fresh-file pwrite MiB/s (page cache)", "{:,.0f}",
                      lower_is_better=False),
               Figure("catch_up_producing_mib_s", "catch-up MiB/s, producer on", "{:,.0f}",
                      lower_is_better=False),
               Figure("put_alone_msgs_s", "master puts/s alone", "{:,.0f}", lower_is_better=False),
               Figure("put_during_catch_up_msgs_s", "master puts/s during catch-up", "{:,.0f}",
                      lower_is_better=False))

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
        mib = 1 << 20
        catch = catch_up(os.path.join(self.path, "alone"), total)["rate"]
        loop = loopback_bandwidth(total, pymq.StoreConfig().ha_transfer_batch_size)
        loop_32k = loopback_bandwidth(total, RMQ_BATCH)
        scratch = os.path.join(self.path, "fresh-file")
        fresh = fresh_file_write(scratch, total)
        stored = loopback_bandwidth(total, pymq.StoreConfig().ha_transfer_batch_size, source=scratch)
        os.unlink(scratch)
        busy = catch_up(os.path.join(self.path, "producing"), total, producer=True)
        return {"catch_up_mib_s": catch / mib, "loopback_mib_s": loop / mib,
                "catch_up_ratio": catch / loop,
                "loopback_32k_mib_s": loop_32k / mib, "catch_up_ratio_32k": catch / loop_32k,
                "loopback_stored_mib_s": stored / mib, "fresh_write_mib_s": fresh / mib,
                "catch_up_producing_mib_s": busy["rate"] / mib, "put_alone_msgs_s": busy["put_alone"],
                "put_during_catch_up_msgs_s": busy["put_during"]}

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
