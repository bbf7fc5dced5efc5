"""Helpers of the replication tests: waiting, comparing two commit logs byte for byte, and
a scripted HA master (raw frames on a socket) for the slave's edge cases."""

from __future__ import annotations

import socket
import struct
import threading
import time


def wait_until(pred, timeout_s: float = 10.0, step_s: float = 0.01) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step_s)
    return pred()


def log_bytes(store, start: int, end: int) -> bytes:
    """The commit-log bytes ``[start, end)`` of ``store`` (visible or not)."""
    out = bytearray()
    mfq = store.commit_log.mapped_file_queue
    fs = mfq.file_size
    pos = start
    while pos < end:
        mf = mfq.find_mapped_file_by_offset(pos)
        assert mf is not None, f"no segment holds offset {pos}"
        n = min(end - pos, fs - (pos - mf.file_from_offset))
        out += mf.read(pos - mf.file_from_offset, n)
        pos += n
    return bytes(out)


def record_bounds(store, start: int, end: int) -> list[int]:
    """Offsets where the records of ``store`` in ``[start, end)`` start (and end)."""
    bounds = [start]
    pos = start
    while pos < end:
        m = store.look_message_by_offset(pos)
        if m is None:                           # the END_FILE blank: the next segment
            fs = store.commit_log.file_size
            pos = pos - pos % fs + fs
        else:
            pos += m.store_size
        bounds.append(pos)
    return bounds


class ScriptedMaster:
    """A listening socket that plays the master: ``script(conn)`` gets each connection."""

    def __init__(self, script) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.connections = 0
        self.errors: list[BaseException] = []
        self._script = script
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            try:
                self._script(conn, self.connections)
            except OSError:
                pass
            except BaseException as e:  # noqa: BLE001 - reported by the test
                self.errors.append(e)
            finally:
                conn.close()

    def close(self) -> None:
        self.sock.close()


def read_report(conn: socket.socket) -> int:
    data = b""
    while len(data) < 8:
        chunk = conn.recv(8 - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return struct.unpack(">q", data)[0]


def frame(offset: int, body: bytes) -> bytes:
    return struct.pack(">qi", offset, len(body)) + body
