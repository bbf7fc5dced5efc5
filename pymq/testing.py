"""Fault injection for testing applications (and pymq itself) against damaged stores.

Everything here works on a closed store directory (or a copy of a live one) and is meant
for tests: it damages files the way crashes, bad disks and operators do, so that recovery
and ``pymq check`` can be exercised. Nothing in pymq imports this module.

    from pymq import testing
    testing.zero_bytes(testing.last_record_path(store)[0], offset_of_topic_length, 16)
    testing.remove_abort(store)
    with testing.WriterProcess(store, config) as w:
        w.wait_for(1000)
        w.kill()                      # SIGKILL at a moment of the test's choosing
        acknowledged = w.acknowledged()
"""

from __future__ import annotations

import json
import os
import random
import signal
import struct
import subprocess
import sys
import time
from typing import Optional

__all__ = [
    "segments", "records", "last_record", "truncate_tail", "truncate_to", "flip_bytes", "zero_bytes",
    "write_garbage", "remove_abort", "create_abort", "remove_checkpoint", "WriterProcess",
]

_MAGIC = 0xDAA320A7
_BLANK = 0xCBD43194


def segments(store: str, kind: str = "commitlog") -> list[str]:
    """Paths of the segment files of ``commitlog`` (or a ``consumequeue/T/Q`` path), in order."""
    d = os.path.join(store, kind)
    if not os.path.isdir(d):
        return []
    return [os.path.join(d, n) for n in sorted(os.listdir(d)) if n.isdigit()]


def records(store: str) -> list[tuple[str, int, int]]:
    """(segment path, position, size) of every whole record in the commit log, walked with
    ``struct`` from the start of each segment (no pymq code involved)."""
    out = []
    for path in segments(store):
        with open(path, "rb") as f:
            data = f.read()
        pos = 0
        while pos + 8 <= len(data):
            size, magic = struct.unpack_from(">iI", data, pos)
            if magic != _MAGIC or size < 91 or pos + size > len(data):
                break
            out.append((path, pos, size))
            pos += size
    return out


def last_record(store: str) -> tuple[str, int, int]:
    """(segment path, position, size) of the last whole record of the commit log."""
    recs = records(store)
    if not recs:
        raise ValueError(f"{store} holds no record")
    return recs[-1]


def topic_length_position(path: str, pos: int) -> int:
    """Absolute file position of a record's topic-length byte (RocketMQ's damage point)."""
    with open(path, "rb") as f:
        f.seek(pos)
        head = f.read(100)
    sys_flag = struct.unpack_from(">i", head, 36)[0]
    p = 48 + (20 if sys_flag & 0x10 else 8) + 8 + (20 if sys_flag & 0x20 else 8) + 12
    body_len = struct.unpack_from(">i", head, p)[0]
    return pos + p + 4 + body_len


def truncate_tail(path: str, nbytes: int) -> None:
    """Cut ``nbytes`` off the end of a file."""
    truncate_to(path, max(0, os.path.getsize(path) - nbytes))


def truncate_to(path: str, size: int) -> None:
    """Make a file ``size`` bytes long."""
    os.truncate(path, size)


def flip_bytes(path: str, offset: int, count: int = 1, rng: Optional[random.Random] = None) -> list[int]:
    """XOR ``count`` bytes from ``offset`` with random non-zero values; returns them."""
    rng = rng or random.Random()
    with open(path, "r+b") as f:
        f.seek(offset)
        old = f.read(count)
        masks = [rng.randrange(1, 256) for _ in old]
        f.seek(offset)
        f.write(bytes(b ^ m for b, m in zip(old, masks)))
    return masks


def zero_bytes(path: str, offset: int, count: int) -> None:
    """Overwrite ``count`` bytes at ``offset`` with zeros."""
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(bytes(count))


def write_garbage(path: str, offset: int, count: int, rng: Optional[random.Random] = None) -> None:
    """Overwrite ``count`` bytes at ``offset`` with random bytes."""
    rng = rng or random.Random()
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(rng.randbytes(count))


def remove_abort(store: str) -> None:
    """Delete the ``abort`` marker (a crashed store then looks cleanly shut down)."""
    try:
        os.remove(os.path.join(store, "abort"))
    except FileNotFoundError:
        pass


def create_abort(store: str) -> None:
    """Create a stray ``abort`` marker (a clean store then looks crashed)."""
    with open(os.path.join(store, "abort"), "wb"):
        pass


def remove_checkpoint(store: str) -> None:
    try:
        os.remove(os.path.join(store, "checkpoint"))
    except FileNotFoundError:
        pass


_WRITER = r"""
import json, os, sys, time
sys.path[:0] = json.loads(sys.argv[3])
import pymq
store, cfg = sys.argv[1], json.loads(sys.argv[2])
s = pymq.MessageStore(store, pymq.StoreConfig(**cfg)).start()
log = open(os.path.join(store, "..", os.path.basename(store) + ".acked"), "a", buffering=1)
i = int(sys.argv[4])
batch = int(sys.argv[5])
bodies = sys.argv[6] == "1"
while True:
    if batch > 1:
        msgs = [pymq.Message(topic="KillTest", body=b"m%d" % (i + k), keys=["k%d" % (i + k)],
                             queue_id=(i + k) % 3) for k in range(batch)]
        msgs = [m for m in msgs if m.queue_id == msgs[0].queue_id]
        if bodies:
            r = s.put_bodies("KillTest", [m.body for m in msgs], keys=[m.keys[0] for m in msgs],
                             queue_id=msgs[0].queue_id)
        else:
            r = s.put_messages(msgs)
        n = r.msg_num
    else:
        r = s.put_message(pymq.Message(topic="KillTest", body=b"m%d" % i, keys=["k%d" % i], queue_id=i % 3))
        n = 1
    if r.status is pymq.PutMessageStatus.PUT_OK:
        for off in r.commitlog_offsets:
            log.write(f"{off}\n")
    i += n
"""


class WriterProcess:
    """A subprocess that puts messages into ``store`` as fast as it can and appends the
    commit-log offset of every put acknowledged PUT_OK to ``<store>.acked`` (line
    buffered, so a SIGKILL loses at most the line being written). ``kill()`` sends
    SIGKILL; ``acknowledged()`` reads the offsets back. ``batch`` > 1 puts batches
    (``put_messages``, or ``put_bodies`` with ``bodies``)."""

    def __init__(self, store: str, config: dict, start_index: int = 0, batch: int = 1,
                 bodies: bool = False) -> None:
        self.store = os.path.abspath(store)
        self.config = config
        self.ack_path = os.path.join(os.path.dirname(self.store), os.path.basename(self.store) + ".acked")
        paths = [p for p in sys.path if p]
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WRITER, self.store, json.dumps(config), json.dumps(paths),
             str(start_index), str(batch), "1" if bodies else "0"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def __enter__(self) -> "WriterProcess":
        return self

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.kill()

    def wait_for(self, n: int, timeout_s: float = 30.0) -> None:
        """Block until at least ``n`` puts were acknowledged."""
        deadline = time.monotonic() + timeout_s
        while len(self.acknowledged()) < n:
            if self.proc.poll() is not None:
                raise RuntimeError(f"writer exited: {self.proc.stderr.read().decode()[-2000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"writer acknowledged fewer than {n} puts")
            time.sleep(0.005)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def acknowledged(self) -> list[int]:
        """Commit-log offsets of the puts acknowledged so far (a torn last line dropped)."""
        try:
            with open(self.ack_path) as f:
                lines = f.read().split("\n")
        except FileNotFoundError:
            return []
        return [int(x) for x in lines[:-1] if x.strip().isdigit()]
