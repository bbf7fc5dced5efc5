"""``BrokerRegistration``: a pymq broker registering itself with name servers.

What a RocketMQ 4.9.7 broker does (``BrokerController.registerBrokerAll``,
``BrokerOuterAPI``), with the same settings (:class:`pymq.BrokerConfig`):

* ``namesrv_addr`` ("host:port;host:port", RocketMQ's ``namesrvAddr``): every name server
  gets ``REGISTER_BROKER`` (103) with ``brokerAddr`` (the advertised host and broker port),
  ``brokerName``, ``brokerId`` (0 master, >0 slave), ``clusterName``, ``haServerAddr``
  (the store's HA address: advertised host and ``ha_listen_port``), ``compressed`` and
  ``bodyCrc32`` (the body's CRC32 masked to 31 bits, as ``UtilAll.crc32``); the body
  carries the broker's topic table and its data version, plain JSON by default or deflated with ``compressed_register`` (:mod:`.register_body`);
* at start, then every ``register_name_server_period`` ms (30 s; RocketMQ holds it within
  10..60 s), always sent in full (4.9.7's ``forceRegister`` default), and within a second
  of a change of the topic table (a topic created, updated or deleted);
* ``UNREGISTER_BROKER`` (104) to each at shutdown.

With the server's access key set, the requests are signed with it (a pymq name server
with the same keys then accepts them; RocketMQ's name server ignores the fields). Each
name server has its own kept connection (:class:`.namesrv_client.NamesrvClient`); one
that is down does not delay the others, and a failure is logged once per episode.

A slave (``broker_id`` > 0) learns its master from the answers: ``masterAddr`` (the
master's broker address) and ``haServerAddr`` (its HA address). When they change,
``on_master_changed(master_broker_addr, ha_addr)`` is called; by default it hands the HA
address to the store's replication (``store.ha.update_master_address``), unless the
store's ``ha_master_address`` is set (as RocketMQ: a configured ``haMasterAddress`` is not
replaced by the name server's answer).
"""

from __future__ import annotations

import asyncio
import json
import logging
import zlib
from typing import Callable, Optional

from pymq.store.episode_log import EpisodeLog

from .codec import RemotingCommand
from .auth import sign
from .codes import RequestCode, ResponseCode
from .namesrv_client import NamesrvClient, NamesrvError
from .register_body import RegisterBrokerBody, RegisteredTopic

log = logging.getLogger("pymq.server.remoting")

#: how often the topic table is looked at for changes (a change is registered within this)
CHANGE_POLL_S = 1.0


def parse_namesrv_addr(text: str) -> list[str]:
    """RocketMQ's ``namesrvAddr``: addresses separated by ``;`` (empty parts ignored)."""
    out = [a.strip() for a in (text or "").split(";") if a.strip()]
    for a in out:
        host, _, port = a.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"name server address {a!r} is not host:port")
    return out


class BrokerRegistration:
    """Registers ``server``'s broker (a started :class:`~.server.RemotingServer` with a
    broker port) with the name servers of its ``BrokerConfig.namesrv_addr``."""

    def __init__(self, server, on_master_changed: Optional[Callable[[str, str], None]] = None) -> None:
        self.server = server
        self.broker = server.broker
        bc = self.broker.broker_config
        self.clients = [NamesrvClient(a) for a in parse_namesrv_addr(bc.namesrv_addr)]
        self.period_s = max(10.0, min(bc.register_name_server_period, 60_000) / 1000)
        self.timeout_s = bc.register_broker_timeout_mills / 1000
        self.on_master_changed = on_master_changed or self.update_store_master
        self.master_addr: Optional[str] = None         # a slave's master, from the last answer
        self.master_ha_addr: Optional[str] = None
        self.registrations = 0                         # answered SUCCESS, all name servers
        self.failures = EpisodeLog(log, "registering with the name servers")
        self._task: Optional[asyncio.Task] = None
        self._lock = asyncio.Lock()

    # -- what is sent -----------------------------------------------------------------------

    def _header(self) -> dict:
        bc = self.broker.broker_config
        return {"brokerName": bc.broker_name, "brokerAddr": self.server.broker_address,
                "clusterName": bc.cluster_name, "brokerId": str(bc.broker_id)}

    def body(self) -> RegisterBrokerBody:
        """The topic table and its data version, as one snapshot."""
        doc = json.loads(self.broker.topic_config_manager.encode(False))
        topics = {}
        for name, tc in doc.get("topicConfigTable", {}).items():
            topics[name] = RegisteredTopic(name, tc["readQueueNums"], tc["writeQueueNums"], tc["perm"],
                                           tc.get("topicFilterType", "SINGLE_TAG"), tc.get("topicSysFlag", 0),
                                           tc.get("order", False))
        version = doc.get("dataVersion", {})
        return RegisterBrokerBody(topics, {"counter": int(version.get("counter", 0)),
                                           "timestamp": int(version.get("timestamp", 0))})

    # -- registering ------------------------------------------------------------------------

    async def register_all(self) -> list:
        """One registration with every name server at once; returns the SUCCESS answers."""
        async with self._lock:
            compressed = self.broker.broker_config.compressed_register
            body = self.body().encode(compressed)
            ext = dict(self._header(), haServerAddr=self.server.ha_server_addr or "",
                       compressed="true" if compressed else "false", bodyCrc32=str(zlib.crc32(body) & 0x7FFFFFFF))
            answers = await asyncio.gather(*(self._call(c, RequestCode.REGISTER_BROKER, dict(ext), body)
                                             for c in self.clients))
            ok = [a for a in answers if a is not None]
            self.registrations += len(ok)
            if len(ok) == len(self.clients):
                self.failures.succeeded()
            if ok and self.broker.broker_config.broker_id != 0:
                self._learn_master(ok[0].ext_fields)
            return ok

    async def _call(self, client: NamesrvClient, code: int, ext: dict, body: bytes = b"") -> Optional[RemotingCommand]:
        cfg = self.server.config
        if cfg.access_key:              # signed as a 4.x client signs (AclClientRPCHook)
            ext["AccessKey"] = cfg.access_key
            ext["Signature"] = sign(cfg.secret_key, ext, body)
        try:
            answer = await client.call(RemotingCommand(code, ext_fields=ext, body=body), self.timeout_s)
        except NamesrvError as e:
            self.failures.failed(e)
            return None
        if answer.code != ResponseCode.SUCCESS:
            self.failures.failed(RuntimeError(f"name server {client.addr} answered {answer.code}: {answer.remark}"))
            return None
        return answer

    def _learn_master(self, fields: dict) -> None:
        master = fields.get("masterAddr") or None
        ha_addr = fields.get("haServerAddr") or None
        if (master, ha_addr) == (self.master_addr, self.master_ha_addr):
            return
        self.master_addr, self.master_ha_addr = master, ha_addr
        if master is not None:
            log.info("name servers give master %s (HA %s)", master, ha_addr)
            try:
                self.on_master_changed(master, ha_addr)
            except Exception as e:      # a hook must not stop the registrations
                log.exception("on_master_changed(%s, %s) failed: %s", master, ha_addr, e)

    def update_store_master(self, master_addr: str, ha_addr: Optional[str]) -> None:
        """The default ``on_master_changed``: point the store's replication at ``ha_addr``
        (``store.ha.update_master_address``), unless ``ha_master_address`` is configured or
        the store has no replication (then nothing; the address stays in ``master_ha_addr``)."""
        ha = getattr(self.broker, "ha", None)
        update = getattr(ha, "update_master_address", None)
        if ha_addr and update is not None and not getattr(self.broker.config, "ha_master_address", None):
            update(ha_addr)

    async def unregister_all(self) -> None:
        """``UNREGISTER_BROKER`` to every name server (at shutdown)."""
        await asyncio.gather(*(self._call(c, RequestCode.UNREGISTER_BROKER, self._header()) for c in self.clients))

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Register now and keep registering (on the running loop)."""
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        tcm = self.broker.topic_config_manager
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        seen = None
        while True:
            writes = tcm.persists
            if loop.time() >= next_at or writes != seen:
                seen = writes
                next_at = loop.time() + self.period_s
                try:
                    await self.register_all()
                except Exception as e:              # never let the schedule die
                    self.failures.failed(e)
            await asyncio.sleep(CHANGE_POLL_S)

    async def stop(self) -> None:
        """Stop the schedule, unregister, close the connections."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
            self._task = None
        try:
            await asyncio.wait_for(self.unregister_all(), self.timeout_s + 1)
        except asyncio.TimeoutError:
            pass
        for c in self.clients:
            await c.close()

