"""SlaveSynchronize: a slave keeps its master's broker tables.

Every ``slave_sync_interval_s`` (10 s, as RocketMQ's ``BrokerController`` schedules
``syncAll``) a slave asks its master's broker (remoting) port, one after the other:

* ``GET_ALL_TOPIC_CONFIG`` (21): when the answer's ``dataVersion`` differs from the slave's,
  the slave's topic table becomes the master's (version included) and is written;
* ``GET_ALL_CONSUMER_OFFSET`` (43): each ``topic@group`` entry replaces the slave's entry of
  that key; entries only the slave has stay (offsets committed on the slave itself);
* ``GET_ALL_DELAY_OFFSET`` (45): the text becomes the slave's ``delayOffset.json``;
* ``GET_ALL_SUBSCRIPTIONGROUP_CONFIG`` (201): as the topics, by ``dataVersion``.

Each table is synced on its own; one that fails does not keep the others from syncing. A
master that cannot be reached is logged once per episode (and when it answers again), and
the next attempt waits longer, up to two intervals. No master address (the name server has not
named it yet), or the slave's own address: nothing is asked.
"""

from __future__ import annotations

import logging
import threading
from typing import Optional

from pymq.store.episode_log import EpisodeLog

from .client import RemotingClient, RemotingClientError
from .codes import RequestCode, ResponseCode, code_name

log = logging.getLogger("pymq")

#: the longest wait between attempts while the master fails, in sync intervals: a master
#: that returns after an outage is synced from within two intervals (RocketMQ retries at
#: its fixed 10 s), and a dead one is asked at most every 20 s by default
MAX_BACKOFF_INTERVALS = 2.0


class SyncError(Exception):
    """The master answered a sync request with something other than SUCCESS."""


class SlaveSynchronize:
    """The metadata sync of a slave :class:`pymq.Broker` from ``master_address`` (the
    master's broker address, ``host:port``)."""

    def __init__(self, broker, master_address: Optional[str], own_address: Optional[str] = None,
                 interval_s: Optional[float] = None) -> None:
        self.broker = broker
        self.master_address = master_address
        self.own_address = own_address
        self.interval_s = interval_s if interval_s is not None else broker.broker_config.slave_sync_interval_s
        self.client = RemotingClient()
        self.failures = EpisodeLog(log, "slave sync from the master")
        #: completed sync rounds in which every table synced
        self.rounds = 0
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()

    def set_master_address(self, address: Optional[str]) -> None:
        """The master's broker address, as the name server's answer to a registration
        names it (RocketMQ: ``slaveSynchronize.setMasterAddr``); a change syncs at once."""
        if address != self.master_address:
            self.master_address = address
            self._wake.set()

    # -- one round ---------------------------------------------------------------------------

    def _ask(self, addr: str, code: int) -> bytes:
        r = self.client.invoke(addr, code)
        if r.code != ResponseCode.SUCCESS:
            raise SyncError(f"{code_name(RequestCode, code)}: {code_name(ResponseCode, r.code)} {r.remark or ''}")
        return bytes(r.body or b"")

    def sync_all(self) -> bool:
        """One round of the four syncs; True when every one succeeded (also when there is
        no master to ask)."""
        addr = self.master_address
        if not addr or addr == self.own_address:
            return True
        with self._lock:
            errors = []
            for step in (self.sync_topic_config, self.sync_consumer_offset, self.sync_delay_offset,
                         self.sync_subscription_group_config):
                try:
                    step(addr)
                except (RemotingClientError, SyncError, ValueError, OSError) as e:
                    errors.append(f"{step.__name__}: {e}")
            if errors:
                self.failures.failed(f"{addr}: " + "; ".join(errors))
                return False
            self.failures.succeeded()
            self.rounds += 1
            return True

    def sync_topic_config(self, addr: str) -> None:
        tcm = self.broker.topic_config_manager
        body = self._ask(addr, RequestCode.GET_ALL_TOPIC_CONFIG)
        self._take_versioned(tcm, body, addr, "topic config")

    def sync_subscription_group_config(self, addr: str) -> None:
        sgm = self.broker.subscription_group_manager
        body = self._ask(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        self._take_versioned(sgm, body, addr, "subscription groups")

    @staticmethod
    def _take_versioned(table, body: bytes, addr: str, what: str) -> None:
        text = body.decode("utf-8")
        _, version = table._parse(text)
        theirs = {"timestamp": int(version.get("timestamp", 0)), "counter": int(version.get("counter", 0))}
        if theirs == table.data_version:
            return
        table.decode(text)
        table.persist()
        log.info("slave sync: %s updated from the master %s", what, addr)

    def sync_consumer_offset(self, addr: str) -> None:
        offsets = self.broker.consumer_offsets
        offsets.put_all(self._ask(addr, RequestCode.GET_ALL_CONSUMER_OFFSET).decode("utf-8"))
        offsets.persist()

    def sync_delay_offset(self, addr: str) -> None:
        body = self._ask(addr, RequestCode.GET_ALL_DELAY_OFFSET)
        if body:
            offsets = self.broker.schedule_service.offsets
            offsets.decode(body.decode("utf-8"))
            offsets.persist()

    # -- the service -------------------------------------------------------------------------

    def start(self) -> "SlaveSynchronize":
        """Sync now, then every ``interval_s`` in a thread."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="pymq-SlaveSynchronize", daemon=True)
            self._thread.start()
        return self

    def _loop(self) -> None:
        wait = self.interval_s
        while not self._stop.is_set():
            try:
                ok = self.sync_all()
            except Exception as e:          # never let the thread die: log, back off, go on
                self.failures.failed(e, exc_info=True)
                ok = False
            wait = self.interval_s if ok else min(max(wait * 2, self.interval_s), MAX_BACKOFF_INTERVALS * self.interval_s)
            self._wake.wait(wait)
            self._wake.clear()

    def shutdown(self) -> None:
        """Stop the thread and close the connection."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None
        self.client.close()
