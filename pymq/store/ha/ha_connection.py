"""HAConnection: one slave connected to this master (RocketMQ's ``HAConnection``).

Two threads per slave. The reader takes the slave's 8-byte reports: the first is where the
transfer starts (``protocol.start_offset``), every one is the slave's acknowledged offset
(SYNC_MASTER puts wait for it); a report past this log's end, or a negative one, closes
the connection (RocketMQ: "slave request offset greater than local commitLog offset").
The writer sends frames of at most ``ha_transfer_batch_size`` bytes, never across a
segment end, written from the segment's mapping (pinned meanwhile, as RocketMQ writes
the mapped buffer's slice), many frames per call without the GIL (``Channel.send_frames``: a busy producer
thread holding the GIL does not hold up a catch-up), and a heartbeat frame after
``ha_send_heartbeat_interval`` of nothing to send. It sleeps on the service's condition,
woken when the log grows.

Bounds: the reader keeps fewer than 8 bytes between reads and reads 4 KiB at most at a
time, whatever a peer sends; a peer that sends nothing for ``ha_housekeeping_interval``,
or does not read what the writer sends for as long, is disconnected. The threads touch
the store only to read its segment list and positions: a stalled slave never blocks a put.
"""

from __future__ import annotations

import logging
import socket
import threading
import time

from pymq.errors import StoreStateError

from .channel import Channel, ChannelClosed
from .protocol import encode_frame_header, last_report, start_offset

log = logging.getLogger("pymq")

READ_LIMIT = 4096
#: bytes one send call moves at most (frames of ha_transfer_batch_size, without the GIL)
#: before the writer looks at the log and its stop again
CALL_BYTES = 8 << 20


class HAConnection:
    """The master's end of one slave's connection."""

    def __init__(self, service, sock: socket.socket, address: str) -> None:
        self.service = service
        self.address = address
        self.stop = threading.Event()
        cfg = service.config
        self.channel = Channel(sock, cfg.ha_housekeeping_interval / 1000.0, self.stop)
        self.heartbeat_s = cfg.ha_send_heartbeat_interval / 1000.0
        self.batch = cfg.ha_transfer_batch_size
        self.slave_request_offset = -1
        self.slave_ack_offset = -1
        self.next_transfer_from = -1        # RocketMQ's nextTransferFromWhere: pushed so far
        self.connected_at = time.time()
        self.last_ack_time = 0.0
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for target, name in ((self._read_loop, "reader"), (self._write_loop, "writer")):
            t = threading.Thread(target=target, name=f"pymq-HAConnection-{name}-{self.address}", daemon=True)
            self._threads.append(t)
            t.start()

    def close(self) -> None:
        """Stop both threads and close the socket (either thread may call it)."""
        if not self.stop.is_set():
            self.stop.set()
            self.channel.close()
            self.service.remove_connection(self)

    def join(self, timeout_s: float = 5.0) -> None:
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout_s)

    # -- the slave's reports ---------------------------------------------------------------

    def _read_loop(self) -> None:
        buf = bytearray(READ_LIMIT)
        view = memoryview(buf)
        kept = b""
        try:
            while not self.stop.is_set():
                n = self.channel.recv_some(view, 1.0)
                if not n:
                    continue
                offset, kept = last_report(kept + bytes(view[:n]))
                if offset is not None:
                    self._on_report(offset)
        except ChannelClosed as e:
            if not self.stop.is_set():
                log.info("HA: slave %s disconnected (%s)", self.address, e)
        except Exception:
            log.exception("HA: reading slave %s failed", self.address)
        finally:
            self.close()

    def _on_report(self, offset: int) -> None:
        master_max = self.service.max_offset()
        if offset < 0 or offset > master_max:
            raise ChannelClosed(f"slave reported offset {offset}, this log ends at {master_max}")
        self.slave_ack_offset = offset
        self.last_ack_time = time.time()
        if self.slave_request_offset < 0:
            self.slave_request_offset = offset
            log.info("HA: slave %s requests offset %d", self.address, offset)
            self.service.wakeup_writers()
        self.service.notify_transfer(offset)

    # -- the commit log to the slave -------------------------------------------------------

    def _write_loop(self) -> None:
        try:
            while not self.stop.is_set() and self.slave_request_offset < 0:
                self.service.wait_for_data(0.01)
            if self.stop.is_set():
                return
            cl = self.service.commit_log
            self.next_transfer_from = start_offset(self.slave_request_offset, cl.get_max_offset(), cl.file_size)
            log.info("HA: sending to slave %s from offset %d (it requested %d)", self.address,
                     self.next_transfer_from, self.slave_request_offset)
            ch = self.channel
            while not self.stop.is_set():
                sent = self._transfer_some()
                if sent:
                    continue
                idle = time.monotonic() - ch.last_write
                if idle >= self.heartbeat_s:
                    ch.send_all(encode_frame_header(self.next_transfer_from, 0))
                    continue
                self.service.wait_for_data(min(0.1, self.heartbeat_s - idle))
        except ChannelClosed as e:
            if not self.stop.is_set():
                log.info("HA: slave %s disconnected (%s)", self.address, e)
        except Exception:
            log.exception("HA: sending to slave %s failed", self.address)
        finally:
            self.close()

    def _transfer_some(self) -> int:
        """Send what the log holds past ``next_transfer_from`` in this segment, up to
        ``CALL_BYTES``, as frames of at most ``ha_transfer_batch_size``; the bytes sent (0:
        nothing to send: the offset is at the log's end, or in a segment cleaning
        deleted)."""
        cl = self.service.commit_log
        offset = self.next_transfer_from
        mf = cl.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mf is None:
            return 0
        pos = offset - mf.file_from_offset
        size = min(mf.read_position - pos, max(CALL_BYTES, self.batch))
        if size <= 0:
            return 0
        try:
            self.channel.send_frames(mf, offset, pos, size, self.batch)
        except StoreStateError:           # the segment was closed (cleaned) meanwhile
            return 0
        self.next_transfer_from = offset + size
        return size

    def stats(self) -> dict:
        """This slave as the master sees it: pushed and acknowledged offsets, lag."""
        master_max = self.service.max_offset()
        ack = self.slave_ack_offset
        return {
            "address": self.address,
            "request_offset": self.slave_request_offset,
            "push_offset": self.next_transfer_from,
            "ack_offset": ack,
            "lag_bytes": max(0, master_max - ack) if ack >= 0 else None,
            "seconds_since_ack": round(time.time() - self.last_ack_time, 3) if self.last_ack_time else None,
            "connected_for_s": round(time.time() - self.connected_at, 3),
        }
