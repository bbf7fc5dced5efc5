"""HAClient: the slave's side of replication (RocketMQ's ``HAService.HAClient``).

One thread: connect to the master's HA address, report the commit log's visible end, then
read frames into the log in bursts (``FrameReader`` into ``ReplicaLog``), reporting the
new end after each burst that made records visible, and again every
``ha_send_heartbeat_interval`` when nothing moved.
A frame at an offset that does not continue the log, bytes that are not records, or
``ha_housekeeping_interval`` without a byte from the master close the connection; the
client connects again after a back-off (0.1 s doubling to 5 s), logging once per episode
of failures, not once per attempt. ``update_master_address`` points it elsewhere (the
broker learns the address from the name server): the current connection is closed.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Optional

from .channel import Channel, ChannelClosed
from .frame_reader import FrameReader
from .protocol import encode_report, parse_address
from .replica_log import ReplicaLog, ReplicaMismatch

log = logging.getLogger("pymq")

BACKOFF_FIRST_S = 0.1
BACKOFF_MAX_S = 5.0


class HAClient:
    """Replicates a master's commit log into this store's."""

    def __init__(self, replica: ReplicaLog, master_address: Optional[str], heartbeat_ms: int,
                 housekeeping_ms: int) -> None:
        self.replica = replica
        self.master_address = master_address
        self.heartbeat_s = heartbeat_ms / 1000.0
        self.housekeeping_s = housekeeping_ms / 1000.0
        self._stop = threading.Event()
        self._changed = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._channel: Optional[Channel] = None
        # what the stats show
        self.connected = False
        self.master_offset_seen = -1        # the newest frame's end (or heartbeat offset)
        self.last_master_byte = 0.0         # time.time() of the master's last byte
        self.caught_up_at = 0.0             # time.time() when applied last reached the master's offset seen
        self.reported_offset = -1
        self.connects = 0
        self.disconnects = 0
        self.last_error: Optional[str] = None
        self._failing = False

    # -- control ---------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="pymq-HAClient", daemon=True)
            self._thread.start()

    def update_master_address(self, address: Optional[str]) -> None:
        """Replicate from ``address`` ("host:port", None: stop replicating) from now on."""
        if address is not None:
            parse_address(address)
        if address != self.master_address:
            log.info("HA master address: %s -> %s", self.master_address, address)
            self.master_address = address
            self._changed.set()
            ch = self._channel
            if ch is not None:
                ch.close()

    def shutdown(self) -> None:
        self._stop.set()
        self._changed.set()
        ch = self._channel
        if ch is not None:
            ch.close()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None

    # -- the loop --------------------------------------------------------------------------

    def _run(self) -> None:
        backoff = BACKOFF_FIRST_S
        while not self._stop.is_set():
            address = self.master_address
            if address is None:
                self._changed.wait(0.5)
                self._changed.clear()
                continue
            self._changed.clear()
            try:
                self._session(address)
                backoff = BACKOFF_FIRST_S
            except (OSError, ChannelClosed, ReplicaMismatch) as e:
                self._failed(address, e)
            except Exception as e:          # the loop must not die; a disk error, a bug
                log.exception("HA client to %s failed", address)
                self._failed(address, e)
            finally:
                self.connected = False
                self._channel = None
            if self._stop.is_set():
                break
            if self._changed.wait(backoff):
                backoff = BACKOFF_FIRST_S
            else:
                backoff = min(backoff * 2, BACKOFF_MAX_S)

    def _failed(self, address: str, error: Exception) -> None:
        self.last_error = f"{type(error).__name__}: {error}"
        if self._stop.is_set():
            return
        if not self._failing:
            self._failing = True
            log.warning("HA client: replication from %s interrupted (%s); reconnecting", address,
                        self.last_error)

    def _session(self, address: str) -> None:
        host, port = parse_address(address)
        sock = socket.create_connection((host, port), timeout=self.housekeeping_s)
        ch = Channel(sock, self.housekeeping_s, self._stop)
        self._channel = ch
        reader = None
        try:
            self.connected = True
            self.connects += 1
            if self._failing:
                log.warning("HA client: connected to %s again", address)
                self._failing = False
            self._report(ch, self.replica.reset())
            reader = FrameReader(self.replica)
            while True:
                got = reader.read_burst(ch, self.heartbeat_s)
                if got:
                    self.last_master_byte = time.time()
                    self.master_offset_seen = max(self.master_offset_seen, reader.master_offset_seen)
                    self.replica.apply()
                end = self.replica.applied_end
                if got and end >= self.master_offset_seen:
                    self.caught_up_at = time.time()
                # a report per burst that made records visible; when idle, a heartbeat
                idle = time.monotonic() - ch.last_write > self.heartbeat_s
                if not got or end > self.reported_offset or idle:
                    self._report(ch, end)
        finally:
            self.disconnects += 1
            if reader is not None:
                reader.close()
            self.replica.close()
            ch.close()

    def _report(self, ch: Channel, offset: int) -> None:
        ch.send_all(encode_report(offset))
        self.reported_offset = offset

    # -- metrics ---------------------------------------------------------------------------

    def stats(self) -> dict:
        """The slave's view: the master's offset seen vs applied, seconds since its last byte.
        ``lag_seconds`` bounds the age of what the slave lacks: 0 when it holds all the master
        announced, else the seconds since it last did (every record it lacks was written
        after that); None before it ever caught up."""
        applied = self.replica.applied_end
        seen = self.master_offset_seen
        lag_bytes = max(0, seen - applied) if seen >= 0 else None
        if lag_bytes == 0:
            lag_seconds: Optional[float] = 0.0
        else:
            lag_seconds = round(time.time() - self.caught_up_at, 3) if self.caught_up_at else None
        return {
            "role": "SLAVE",
            "master_address": self.master_address,
            "connected": self.connected,
            "applied_offset": applied,
            "received_offset": self.replica.received_end,
            "master_offset_seen": seen,
            "lag_bytes": lag_bytes,
            "lag_seconds": lag_seconds,
            "seconds_since_master_byte": (round(time.time() - self.last_master_byte, 3)
                                          if self.last_master_byte else None),
            "reported_offset": self.reported_offset,
            "connects": self.connects,
            "disconnects": self.disconnects,
            "last_error": self.last_error,
        }
