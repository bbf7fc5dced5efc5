"""RocketMQ 4.x master/slave replication (HA) of the commit log (docs/replication.md).

``protocol`` (the bytes), ``channel`` (a bounded non-blocking socket), the master's
``ha_service`` / ``ha_connection`` / ``group_transfer``, the slave's ``ha_client`` /
``frame_reader`` / ``replica_log``, and ``sync_master`` (what a SYNC_MASTER put waits
for). The bytes themselves move in ``pymq._core.ha_wire``, without the GIL. ``build_ha``
makes what a store's config asks for.
"""

from __future__ import annotations

from typing import Optional

from .ha_client import HAClient
from .ha_service import HAService
from .replica_log import ReplicaLog

SLAVE_MODE = "message store is in slave mode"


def build_ha(commit_log, config, on_applied=None) -> Optional[object]:
    """The store's HA side: an ``HAClient`` for a SLAVE, an ``HAService`` for a master
    with ``ha_listen_port`` set, else None. Not started."""
    if config.broker_role == "SLAVE":
        replica = ReplicaLog(commit_log, config.check_crc_on_recover, on_applied)
        return HAClient(replica, config.ha_master_address, config.ha_send_heartbeat_interval,
                        config.ha_housekeeping_interval)
    if config.ha_listen_port is not None:
        return HAService(commit_log, config)
    return None


__all__ = ["HAClient", "HAService", "ReplicaLog", "SLAVE_MODE", "build_ha"]
