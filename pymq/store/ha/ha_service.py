"""HAService: a master's HA port (RocketMQ's ``HAService`` on a master).

Listens on ``ha_listen_host:ha_listen_port`` (0: any free port; ``port`` tells which),
gives each slave that connects an ``HAConnection`` (at most ``MAX_CONNECTIONS`` at once;
more are closed at once), keeps the highest offset any slave acknowledged
(``push2SlaveMaxOffset``) and lets SYNC_MASTER puts wait for it (``GroupTransferService``).

``is_slave_ok(offset)`` is RocketMQ's ``isSlaveOK``: a slave is connected and the highest
acknowledged offset is less than ``ha_max_gap_not_in_sync`` behind ``offset``.
"""

from __future__ import annotations

import logging
import select
import socket
import threading
import time
from typing import Optional

from pymq.store.flush_service import GroupCommitRequest

from .group_transfer import GroupTransferService
from .ha_connection import HAConnection

log = logging.getLogger("pymq")

MAX_CONNECTIONS = 16


class HAService:
    """The master side: accepts slaves and streams the commit log to them."""

    role = "MASTER"

    def __init__(self, commit_log, config) -> None:
        self.commit_log = commit_log
        self.config = config
        self.host = config.ha_listen_host
        self.port: Optional[int] = None
        self.group_transfer = GroupTransferService()
        self._connections: list[HAConnection] = []
        self._lock = threading.Lock()
        self._data = threading.Condition()
        self._stop = threading.Event()
        self._listener: Optional[socket.socket] = None
        self._thread: Optional[threading.Thread] = None
        self.accepted = 0
        self.refused = 0

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Bind the HA port and start accepting slaves."""
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.config.ha_listen_port))
        sock.listen(16)
        sock.setblocking(False)
        self._listener = sock
        self.port = sock.getsockname()[1]
        self.group_transfer.start()
        self._thread = threading.Thread(target=self._accept_loop, name="pymq-HAService-accept", daemon=True)
        self._thread.start()
        log.info("HA: master listening on %s:%d", self.host, self.port)

    @property
    def address(self) -> Optional[str]:
        """``host:port`` slaves connect to (None before ``start``)."""
        return None if self.port is None else f"{self.host}:{self.port}"

    def shutdown(self) -> None:
        """Close the port and every connection; waiting SYNC puts fail."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        for conn in self.connections():
            conn.close()
            conn.join()
        self.wakeup_writers()
        self.group_transfer.shutdown()

    def _accept_loop(self) -> None:
        p = select.poll()
        p.register(self._listener.fileno(), select.POLLIN)
        while not self._stop.is_set():
            if not p.poll(200):
                continue
            try:
                sock, addr = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                continue
            except OSError as e:
                if self._stop.is_set():
                    return
                log.warning("HA: accept failed: %s", e)
                time.sleep(0.1)
                continue
            address = f"{addr[0]}:{addr[1]}"
            with self._lock:
                full = len(self._connections) >= MAX_CONNECTIONS
                if not full:
                    conn = HAConnection(self, sock, address)
                    self._connections.append(conn)
            if full:
                self.refused += 1
                log.warning("HA: refusing %s: %d slaves connected already", address, MAX_CONNECTIONS)
                sock.close()
                continue
            self.accepted += 1
            log.info("HA: slave connected from %s", address)
            conn.start()

    def remove_connection(self, conn: HAConnection) -> None:
        with self._lock:
            if conn in self._connections:
                self._connections.remove(conn)

    def connections(self) -> list[HAConnection]:
        with self._lock:
            return list(self._connections)

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    # -- the log growing, the slaves acknowledging -----------------------------------------

    def max_offset(self) -> int:
        return self.commit_log.get_max_offset()

    def wakeup_writers(self) -> None:
        """The log grew: the connections' writers send it now, not at their next look."""
        with self._data:
            self._data.notify_all()

    def wait_for_data(self, timeout_s: float) -> None:
        with self._data:
            self._data.wait(timeout_s)

    def notify_transfer(self, offset: int) -> None:
        self.group_transfer.notify_transfer(offset)

    @property
    def push_to_slave_max_offset(self) -> int:
        """The highest offset a slave acknowledged (RocketMQ's push2SlaveMaxOffset)."""
        return self.group_transfer.acked

    def is_slave_ok(self, master_put_where: int) -> bool:
        """A slave is connected and less than ``ha_max_gap_not_in_sync`` behind."""
        return (self.connection_count > 0
                and master_put_where - self.push_to_slave_max_offset < self.config.ha_max_gap_not_in_sync)

    def put_request(self, request: GroupCommitRequest, timeout_s: float) -> None:
        """Complete ``request`` when a slave acknowledged its offset (failed after ``timeout_s``)."""
        self.group_transfer.put_request(request, timeout_s)
        self.wakeup_writers()

    def wait_for_slave(self, offset: int, timeout_s: float) -> bool:
        """Block until a slave acknowledged ``offset`` (True) or ``timeout_s`` passed (False)."""
        req = GroupCommitRequest(offset)
        self.put_request(req, timeout_s)
        return req.wait(timeout_s)

    # -- metrics ---------------------------------------------------------------------------

    def stats(self) -> dict:
        """Per slave push and ack offsets, lag in bytes and seconds (the age of the oldest
        record a slave has not acknowledged)."""
        master_max = self.max_offset()
        slaves = []
        for conn in self.connections():
            s = conn.stats()
            s["lag_seconds"] = self._lag_seconds(conn.slave_ack_offset, master_max)
            slaves.append(s)
        acked = self.push_to_slave_max_offset
        return {
            "role": self.config.broker_role,
            "listen_address": self.address,
            "slaves_connected": len(slaves),
            "master_offset": master_max,
            "push_to_slave_max_offset": acked,
            "lag_bytes": max(0, master_max - acked) if slaves else None,
            # what a failover to the most advanced slave loses: bytes, and the age of the
            # oldest record it has not acknowledged
            "lag_seconds": self._lag_seconds(acked, master_max) if slaves else None,
            "sync_requests_waiting": self.group_transfer.pending(),
            "accepted": self.accepted,
            "refused": self.refused,
            "slaves": slaves,
        }

    def _lag_seconds(self, ack: int, master_max: int) -> Optional[float]:
        if ack < 0:
            return None
        if ack >= master_max:
            return 0.0
        msg = self.commit_log.look_message_by_offset(ack)
        if msg is None:
            return None
        return round(max(0.0, time.time() - msg.store_timestamp / 1000.0), 3)

    def update_master_address(self, address: Optional[str]) -> None:
        """A master replicates from nobody: ignored (RocketMQ's HAService forwards it to
        its HA client, which a master never starts)."""
