"""Helpers of the attack tests: the server's memory read from /proc, signed remoting
requests (RocketMQ 4's ``AclClientRPCHook``, written here from its description), and
peers that send part of a large frame and stall."""

from __future__ import annotations

import base64
import hashlib
import hmac
import socket
import threading
import time
from typing import Callable, Optional

from .hostile_support import SEND_MESSAGE_V2, frame, read_frame

AK, SK = "attackAK", "attackSK-secret"


def memory_mib(pid: int) -> tuple[float, float]:
    """``(VmRSS, VmHWM)`` of process ``pid`` in MiB: now, and the peak so far."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0]) / 1024
    return fields["VmRSS"], fields["VmHWM"]


def signed(ext: dict, body: bytes = b"", access_key: str = AK, secret_key: str = SK) -> dict:
    """``ext`` with ``AccessKey`` and the ``Signature`` RocketMQ 4 clients compute: HMAC-SHA1
    over the values of the fields in the order of their names, then the body, base64."""
    out = {k: str(v) for k, v in ext.items()}
    out["AccessKey"] = access_key
    content = "".join(out[k] for k in sorted(out)).encode() + body
    out["Signature"] = base64.b64encode(hmac.new(secret_key.encode(), content, hashlib.sha1).digest()).decode()
    return out


def signed_call(addr: tuple[str, int], code: int, ext: dict, body: bytes = b"") -> tuple[dict, bytes]:
    with socket.create_connection(addr, timeout=5) as s:
        s.sendall(frame(code, signed(ext, body), body))
        return read_frame(s)


def stalled_frames(addr: tuple[str, int], count: int, ext: dict, frame_bytes: int = 16 << 20,
                   sent_bytes: int = 1 << 20) -> list[socket.socket]:
    """``count`` connections, each beginning a ``frame_bytes`` frame (a send whose header is
    ``ext``) and sending up to ``sent_bytes`` of it, as much as the kernel takes without
    blocking; then they stall. The sockets, still open."""
    head = frame(SEND_MESSAGE_V2, ext)
    header_len = len(head) - 8
    total = frame_bytes - 4
    prefix = total.to_bytes(4, "big") + head[4:]
    assert len(prefix) == 8 + header_len
    chunk = prefix + b"x" * (sent_bytes - len(prefix))
    socks = []
    for _ in range(count):
        s = socket.create_connection(addr, timeout=5)
        s.setblocking(False)
        view = memoryview(chunk)
        deadline = time.monotonic() + 2
        while view and time.monotonic() < deadline:
            try:
                view = view[s.send(view):]
            except BlockingIOError:
                time.sleep(0.001)
        socks.append(s)
    return socks


def is_closed(s: socket.socket) -> bool:
    """True when the server has closed ``s`` (reset or end of stream; what it wrote before
    is read and dropped)."""
    s.setblocking(False)
    try:
        while s.recv(65536):
            pass
        return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def wait_closed(socks: list[socket.socket], seconds: float) -> int:
    """How many of ``socks`` the server closes within ``seconds``."""
    open_ = list(socks)
    deadline = time.monotonic() + seconds
    while True:
        open_ = [s for s in open_ if not is_closed(s)]
        if not open_ or time.monotonic() >= deadline:
            return len(socks) - len(open_)
        time.sleep(0.25)


def probe_thread(probe: Callable[[], float], *, seconds: Optional[float] = None,
                 until: Optional[threading.Event] = None, pause: float = 0.5) -> tuple[threading.Thread, list]:
    """A thread that runs ``probe()`` every ``pause`` s, for ``seconds`` or until ``until``
    is set; the seconds each took (or the exception) go into the list returned with it."""
    out: list = []
    end = None if seconds is None else time.monotonic() + seconds

    def run() -> None:
        while not (until is not None and until.is_set()) and (end is None or time.monotonic() < end):
            try:
                out.append(probe())
            except Exception as e:            # reported by the test
                out.append(e)
            time.sleep(pause)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out
