"""``RouteTable``: the name server's registry of brokers (RocketMQ's ``RouteInfoManager``).

What it keeps, as RocketMQ's name server keeps it:

* ``clusterAddrTable``: cluster name -> broker names;
* ``brokerAddrTable``: broker name -> ``{cluster, brokerName, brokerAddrs: {id: addr}}``,
  id 0 the master, 1.. its slaves (one address holds one id: an address registering under
  another id first leaves its old one, which is how a slave becomes a master);
* ``topicQueueTable``: topic -> broker name -> queue data, taken from a **master's**
  registrations only (a slave's topics are ignored), when its data version changed or it
  registered first; a broker name's queue data stays while any member of it is alive, so
  the route of a topic whose master is gone still names the slave (the clients' slave-read
  fallback), and goes with the broker name's last member;
* ``brokerLiveTable``: address -> last registration, data version, HA address, connection.
  A broker not heard from for :data:`BROKER_CHANNEL_EXPIRED_S` (120 s) is removed (the
  sweep runs every 10 s), and so is one whose registering connection closes.

A slave's registration is answered with its master's address and HA address (when its
master is registered), from which it learns where to replicate from.

The broker in the same process is a permanent member (:meth:`set_local`): it never
expires, no peer can unregister it or take its address, and its topics (when it is a
master, id 0) are read live from its topic table, so a topic it creates is routable at
once, as before there were other members.

Peers are not authenticated (RocketMQ's name server has no ACL), so what they can make the
table hold is bounded: at most ``max_brokers`` registered addresses besides the local one,
and at most ``max_queue_datas`` (topic, broker name) entries; a registration beyond either
is refused whole (``RouteTableFull``) and changes nothing. An address that registers under
another broker name or cluster leaves its old one first (RocketMQ would keep it in both),
so names cannot pile up beyond the addresses.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Optional

from .register_body import QueueData, RegisteredTopic

#: RocketMQ's BROKER_CHANNEL_EXPIRED_TIME: a broker silent this long is removed
BROKER_CHANNEL_EXPIRED_S = 120.0
#: registered broker addresses a name server keeps (the local broker aside)
MAX_BROKERS = 256
#: (topic, broker name) queue entries a name server keeps from registrations
MAX_QUEUE_DATAS = 200_000
MASTER_ID = 0


class RouteTableFull(Exception):
    """A registration beyond the table's bounds (nothing of it was taken)."""


@dataclasses.dataclass
class BrokerLive:
    """What a name server knows of one registered address (``BrokerLiveInfo``)."""

    cluster: str
    broker_name: str
    broker_id: int
    last_update: float
    data_version: Optional[dict]
    ha_server_addr: str
    conn: object = None
    permanent: bool = False


class RouteTable:
    """Clusters, brokers, topic queues and liveness; every method runs on the server's loop."""

    def __init__(self, max_brokers: int = MAX_BROKERS, max_queue_datas: int = MAX_QUEUE_DATAS,
                 expiry_s: float = BROKER_CHANNEL_EXPIRED_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_brokers = max_brokers
        self.max_queue_datas = max_queue_datas
        self.expiry_s = expiry_s
        self.clock = clock
        self.cluster_addr: dict[str, set[str]] = {}
        self.broker_addr: dict[str, dict] = {}           # name -> {"cluster", "brokerName", "brokerAddrs"}
        self.topic_queue: dict[str, dict[str, QueueData]] = {}
        self.live: dict[str, BrokerLive] = {}
        self.queue_datas = 0
        self.local = None
        self.refused = 0                                 # registrations refused (bounds, bad input)

    # -- the broker in this process --------------------------------------------------------

    def set_local(self, local) -> None:
        """Make ``local`` a permanent member: it has ``cluster_name``, ``broker_name``,
        ``broker_id``, ``address``, ``ha_server_addr`` and ``topics()`` (name -> TopicConfig)."""
        self.local = local
        self._join(local.cluster_name, local.broker_name, local.broker_id, local.address)
        self.live[local.address] = BrokerLive(local.cluster_name, local.broker_name, local.broker_id, self.clock(),
                                              None, local.ha_server_addr or "", None, True)

    def _local_master_topics(self) -> dict:
        loc = self.local
        return loc.topics() if loc is not None and loc.broker_id == MASTER_ID else {}

    # -- registration ----------------------------------------------------------------------

    def register(self, cluster: str, addr: str, name: str, broker_id: int, ha_addr: str, data_version: dict,
                 topics: Optional[dict], conn=None) -> tuple[Optional[str], Optional[str]]:
        """A broker's registration; returns ``(master_addr, master_ha_addr)`` for a slave
        whose master is registered, else ``(None, None)``. Raises :class:`RouteTableFull`."""
        known = self.live.get(addr)
        if known is not None and known.permanent:
            if (cluster, name, broker_id) != (known.cluster, known.broker_name, known.broker_id):
                raise RouteTableFull(f"{addr} is this name server's own broker")
            known.last_update = self.clock()             # the local broker registering with itself
            return self._master_of(name, broker_id)
        loc = self.local
        if loc is not None and (name, broker_id) == (loc.broker_name, loc.broker_id):
            raise RouteTableFull(f"broker {name} id {broker_id} is this name server's own broker")
        if known is None and len(self.live) - (loc is not None) >= self.max_brokers:
            raise RouteTableFull(f"the name server keeps at most {self.max_brokers} brokers")
        first = known is None or known.broker_name != name or known.cluster != cluster
        data = self.broker_addr.get(name)
        first = first or data is None or data["brokerAddrs"].get(broker_id) != addr
        take_topics = (broker_id == MASTER_ID and topics is not None
                       and (first or known.data_version != data_version))
        if take_topics:
            grow = sum(1 for t in topics if name not in self.topic_queue.get(t, {}))
            if self.queue_datas + grow > self.max_queue_datas:
                raise RouteTableFull(f"the name server keeps at most {self.max_queue_datas} topic routes")
        if known is not None and (known.broker_name != name or known.cluster != cluster):
            self._leave(addr)
        self._join(cluster, name, broker_id, addr)
        if take_topics:
            for t in topics.values():
                self._put_queue_data(t, name)
        self.live[addr] = BrokerLive(cluster, name, broker_id, self.clock(), dict(data_version), ha_addr or "", conn)
        return self._master_of(name, broker_id)

    def _join(self, cluster: str, name: str, broker_id: int, addr: str) -> None:
        self.cluster_addr.setdefault(cluster, set()).add(name)
        data = self.broker_addr.setdefault(name, {"cluster": cluster, "brokerName": name, "brokerAddrs": {}})
        addrs = data["brokerAddrs"]
        for other_id in [i for i, a in addrs.items() if a == addr and i != broker_id]:
            del addrs[other_id]                          # one address, one id (slave -> master)
        addrs[broker_id] = addr

    def _put_queue_data(self, t: RegisteredTopic, name: str) -> None:
        by_name = self.topic_queue.setdefault(t.name, {})
        if name not in by_name:
            self.queue_datas += 1
        by_name[name] = QueueData(name, t.read_queue_nums, t.write_queue_nums, t.perm, t.topic_sys_flag)

    def _master_of(self, name: str, broker_id: int) -> tuple[Optional[str], Optional[str]]:
        if broker_id == MASTER_ID:
            return None, None
        master = self.broker_addr.get(name, {}).get("brokerAddrs", {}).get(MASTER_ID)
        info = self.live.get(master) if master else None
        return (master, info.ha_server_addr) if info is not None else (None, None)

    def is_changed(self, addr: str, data_version: dict) -> bool:
        """True when ``addr`` is unknown or registered another data version (QUERY_DATA_VERSION)."""
        info = self.live.get(addr)
        return info is None or info.data_version != data_version

    def data_version(self, addr: str) -> Optional[dict]:
        info = self.live.get(addr)
        return info.data_version if info is not None else None

    def touch(self, addr: str) -> None:
        """A broker whose data did not change is still alive."""
        info = self.live.get(addr)
        if info is not None:
            info.last_update = self.clock()

    # -- leaving -------------------------------------------------------------------------

    def unregister(self, cluster: str, addr: str, name: str, broker_id: int) -> None:
        """``UNREGISTER_BROKER``: the address leaves its broker name (and the name, with its
        topic queues, goes when it was the last member)."""
        info = self.live.get(addr)
        if info is None or info.permanent or info.broker_name != name or info.broker_id != broker_id:
            return
        self._leave(addr)

    def _leave(self, addr: str) -> None:
        info = self.live.pop(addr, None)
        if info is None:
            return
        data = self.broker_addr.get(info.broker_name)
        if data is None:
            return
        addrs = data["brokerAddrs"]
        for i in [i for i, a in addrs.items() if a == addr]:
            del addrs[i]
        if addrs:
            return
        del self.broker_addr[info.broker_name]
        for cluster, names in list(self.cluster_addr.items()):
            names.discard(info.broker_name)
            if not names:
                del self.cluster_addr[cluster]
        for topic, by_name in list(self.topic_queue.items()):
            if by_name.pop(info.broker_name, None) is not None:
                self.queue_datas -= 1
            if not by_name:
                del self.topic_queue[topic]

    def scan_not_active(self) -> list[str]:
        """Remove brokers not heard from for ``expiry_s``; returns their addresses."""
        deadline = self.clock() - self.expiry_s
        gone = [a for a, info in self.live.items() if not info.permanent and info.last_update < deadline]
        for addr in gone:
            conn = self.live[addr].conn
            self._leave(addr)
            if conn is not None and hasattr(conn, "close"):
                conn.close()
        return gone

    def connection_closed(self, conn) -> list[str]:
        """A registering connection closed: its brokers leave (``onChannelDestroy``)."""
        gone = [a for a, info in self.live.items() if info.conn is conn and not info.permanent]
        for addr in gone:
            self._leave(addr)
        return gone

    def delete_topic(self, topic: str, cluster: Optional[str] = None) -> None:
        """``DELETE_TOPIC_IN_NAMESRV``: the topic's queues (of the cluster's brokers, when given)."""
        by_name = self.topic_queue.get(topic)
        if by_name is None:
            return
        names = list(by_name) if cluster is None else [n for n in self.cluster_addr.get(cluster, ()) if n in by_name]
        for n in names:
            del by_name[n]
            self.queue_datas -= 1
        if not by_name:
            del self.topic_queue[topic]

    # -- answers -------------------------------------------------------------------------

    def _queue_datas(self, topic: str) -> dict[str, QueueData]:
        out = dict(self.topic_queue.get(topic, {}))
        tc = self._local_master_topics().get(topic)
        if tc is not None:
            name = self.local.broker_name
            out[name] = QueueData(name, tc.read_queue_nums, tc.write_queue_nums, tc.perm, tc.topic_sys_flag)
        return out

    def route(self, topic: str) -> Optional[dict]:
        """``TopicRouteData`` of ``topic``, or None when no live broker name serves it."""
        qds = self._queue_datas(topic)
        brokers = [self._broker_data_json(self.broker_addr[n]) for n in qds if n in self.broker_addr]
        if not qds or not brokers:
            return None
        return {"orderTopicConf": None, "queueDatas": [q.to_json() for q in qds.values()],
                "brokerDatas": brokers, "filterServerTable": {}}

    @staticmethod
    def _broker_data_json(data: dict) -> dict:
        return {"cluster": data["cluster"], "brokerName": data["brokerName"],
                "brokerAddrs": {str(i): a for i, a in sorted(data["brokerAddrs"].items())}}

    def cluster_info(self) -> dict:
        """``ClusterInfo``: ``brokerAddrTable`` and ``clusterAddrTable``."""
        return {"brokerAddrTable": {n: self._broker_data_json(d) for n, d in sorted(self.broker_addr.items())},
                "clusterAddrTable": {c: sorted(names) for c, names in sorted(self.cluster_addr.items())}}

    def topics(self) -> list[str]:
        return sorted(set(self.topic_queue) | set(self._local_master_topics()))

    def topics_of_cluster(self, cluster: str) -> list[str]:
        names = self.cluster_addr.get(cluster, set())
        out = {t for t, by_name in self.topic_queue.items() if names & by_name.keys()}
        if self.local is not None and self.local.broker_name in names:
            out |= set(self._local_master_topics())
        return sorted(out)

    def system_topics(self) -> dict:
        """``GET_SYSTEM_TOPIC_LIST_FROM_NS``: cluster and broker names, and a broker's address."""
        names = set(self.cluster_addr)
        for ns in self.cluster_addr.values():
            names |= ns
        addr = self.local.address if self.local is not None else next(
            (a for d in self.broker_addr.values() for a in d["brokerAddrs"].values()), None)
        out: dict = {"topicList": sorted(names)}
        if addr:
            out["brokerAddr"] = addr
        return out
