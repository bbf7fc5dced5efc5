"""Timer messages on a full disk (issue 22, item 7): no PUT_OK for what cannot be delivered.

While the timer wheel or the timer log cannot be created, timer puts are refused with
WHEEL_TIMER_NOT_ENABLE and a reason, logged once per episode; plain and delay-level
puts go on (delay levels do not use the wheel); once space returns timer puts work
again without a restart, and every timer message accepted is delivered.

A real tmpfs, filled with a ballast file (mounting needs root; skipped elsewhere).
"""

from __future__ import annotations

import logging
import os
import time

import pytest
from conftest import mounted_tmpfs, small_config

import pymq
from pymq import GetMessageStatus, PutMessageStatus

MiB = 1024 * 1024
MOUNT_SIZE = 32 * MiB
WHEEL_BYTES = 2 * 86400 * 32          # timer_wheel_days=1: two days of 32-byte slots (5.3 MiB)


@pytest.fixture
def tmpfs(tmp_path):
    yield from mounted_tmpfs(tmp_path, MOUNT_SIZE)


def cfg(**kw) -> pymq.StoreConfig:
    """A one-day wheel, 64 KiB timer-log files (2,048 units), a delay level of 1 s, and no
    cleaning: the store keeps everything it has."""
    values = dict(timer_wheel_days=1, timer_max_delay_sec=3600, timer_log_file_size=64 * 1024,
                  message_delay_level="1s 2s", consume_queue_entries=4096, clean_resource_interval=100,
                  file_reserved_time=1.0, clean_file_forcibly_enable=False,
                  delete_when="%02d" % ((time.localtime().tm_hour + 12) % 24))
    values.update(kw)
    return small_config(**values)


def leave_free(mnt, nbytes: int) -> str:
    """Write a ballast file so that ``nbytes`` stay free on the mount (0: write until
    ENOSPC, the disk is then 100 % full); returns its path."""
    path = os.path.join(mnt, "ballast")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        if nbytes:
            st = os.statvfs(mnt)
            free = st.f_bfree * st.f_frsize
            assert free > nbytes, (free, nbytes)
            os.write(fd, b"\0" * (free - nbytes))
        else:
            while True:
                os.write(fd, b"\0" * 4096)
    except OSError:
        assert not nbytes
    finally:
        os.close(fd)
    return path


def bodies(store, topic: str) -> list[bytes]:
    out, off = [], 0
    while True:
        g = store.get_message("g", topic, 0, off)
        if g.status is not GetMessageStatus.FOUND:
            return out
        out += [m.body for m in g.messages]
        off = g.next_begin_offset


def wait_bodies(store, topic: str, n: int, timeout_s: float) -> list[bytes]:
    deadline = time.monotonic() + timeout_s
    got = bodies(store, topic)
    while len(got) < n and time.monotonic() < deadline:
        time.sleep(0.05)
        got = bodies(store, topic)
    return got


def timer(body: bytes, due_ms: int) -> pymq.Message:
    return pymq.Message("Later", body, deliver_time_ms=due_ms)


def refusal_lines(caplog) -> list[str]:
    """The log lines that start an episode of refused timer puts."""
    return [r.getMessage() for r in caplog.records if "timer messages are refused" in r.getMessage()
            and "recovered" not in r.getMessage()]


def test_no_room_for_the_wheel_refuses_timer_puts_until_space_returns(tmpfs, caplog):
    path = tmpfs / "store"
    store = pymq.MessageStore(path, cfg()).start()
    try:
        assert store.put_message(pymq.Message("Plain", b"before")).is_ok()
        ballast = leave_free(tmpfs, 4 * MiB)         # 87.5 % used: puts go on, a 5.3 MiB wheel does not fit
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="pymq"):
            now = int(time.time() * 1000)
            refused = [store.put_message(timer(b"t%d" % i, now + 1000)) for i in range(50)]
            assert {r.status for r in refused} == {PutMessageStatus.WHEEL_TIMER_NOT_ENABLE}
            why = refused[0].error
            assert "timer wheel" in why and "no room" in why and str(tmpfs) in why, why
            mark = pymq.Message("Later", b"", deliver_time_ms=now + 1000,
                                properties={"TIMER_DEL_UNIQKEY": "Later+X"})     # a recall's mark too
            assert store.put_message(mark).status is PutMessageStatus.WHEEL_TIMER_NOT_ENABLE
            # everything else goes on: plain puts, and delay levels (no wheel involved)
            assert store.put_message(pymq.Message("Plain", b"during")).is_ok()
            assert store.put_message(pymq.Message("Delayed", b"level 1", delay_level=1)).is_ok()
            assert wait_bodies(store, "Delayed", 1, 5.0) == [b"level 1"]
            assert not os.path.exists(path / "timerwheel")
            assert len(refusal_lines(caplog)) == 1, refusal_lines(caplog)      # once per episode
            stats = store.stats()
            row = next(s for s in stats["services"] if s["name"] == "timer wheel and log")
            assert row["failing"] >= 1 and row["episodes"] == 1
            assert stats["timer"]["refused_total"] == 51 and "no room" in stats["timer"]["refusing"]
            # space returns: timer puts work again, without a restart
            os.remove(ballast)
            back_at = time.monotonic()
            deadline = back_at + 5.0
            while True:
                r = store.put_message(timer(b"after", int(time.time() * 1000) + 500))
                if r.is_ok() or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert r.is_ok(), r
            assert time.monotonic() - back_at < 2.0
            assert any("timer wheel and log recovered" in rec.getMessage() for rec in caplog.records)
            assert len(refusal_lines(caplog)) == 1
        assert wait_bodies(store, "Later", 1, 5.0) == [b"after"]
        assert store.stats()["timer"]["refusing"] is None
        assert bodies(store, "Plain") == [b"before", b"during"]
        time.sleep(0.3)
        assert bodies(store, "Later") == [b"after"]          # the refused ones were never stored
    finally:
        store.shutdown()


def test_a_timer_log_that_cannot_grow_refuses_timer_puts_and_delivers_every_accepted_one(tmpfs, caplog):
    """The wheel exists and the timer-log file fills up on a disk too full for the next
    one (the disk guard's warning ratio is set at 99.9 % so plain puts go on meanwhile):
    timer puts are refused from then on; after space returns they work again, and every
    timer message acknowledged before, during and after is delivered, once."""
    path = tmpfs / "store"
    store = pymq.MessageStore(path, cfg(disk_space_warning_level_ratio=0.999, message_index_enable=False)).start()
    try:
        due = int(time.time() * 1000) + 8000
        accepted = []
        for i in range(2040):                         # 8 of the file's 2,048 units left
            assert store.put_message(timer(b"%05d" % i, due)).is_ok()
            accepted.append(b"%05d" % i)
        deadline = time.monotonic() + 10
        while store.timer_service.checkpoint.enqueue_offset < 2040 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert store.timer_service.checkpoint.enqueue_offset == 2040
        # 300 KiB free: puts go on (below 99.9 %, room for two 64 KiB segments), but a new
        # 64 KiB timer-log file would leave less than 1 % of the disk free
        ballast = leave_free(tmpfs, 300 * 1024)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="pymq"):
            refused = None
            for i in range(2040, 2400):
                r = store.put_message(timer(b"%05d" % i, due))
                if not r.is_ok():
                    refused = r
                    break
                accepted.append(b"%05d" % i)
                time.sleep(0.005)
            assert refused is not None and refused.status is PutMessageStatus.WHEEL_TIMER_NOT_ENABLE, refused
            assert "timer-log file" in refused.error, refused.error
            assert 2048 <= len(accepted) <= 2060, len(accepted)
            for _ in range(20):
                assert store.put_message(timer(b"no", due)).status is PutMessageStatus.WHEEL_TIMER_NOT_ENABLE
            assert store.put_message(pymq.Message("Plain", b"still")).is_ok()
            assert len(refusal_lines(caplog)) == 1, refusal_lines(caplog)
            os.remove(ballast)
            deadline = time.monotonic() + 5.0
            while True:
                r = store.put_message(timer(b"back", due))
                if r.is_ok() or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert r.is_ok(), r
            accepted.append(b"back")
        assert time.time() * 1000 < due, "the test ran past the due time: deliveries were not checked after space returned"
        got = wait_bodies(store, "Later", len(accepted), 15.0)
        assert sorted(got) == sorted(accepted)          # each accepted one, once; no refused one
    finally:
        store.shutdown()


def test_on_a_disk_with_no_space_left_no_timer_put_is_acknowledged(tmpfs):
    """100 % full: whichever refuses first (the disk guard or the timer gate), no timer
    put gets PUT_OK, each refusal says why; with space back they are delivered."""
    path = tmpfs / "store"
    store = pymq.MessageStore(path, cfg()).start()
    try:
        assert store.put_message(pymq.Message("Plain", b"before")).is_ok()
        ballast = leave_free(tmpfs, 0)
        assert os.statvfs(tmpfs).f_bfree == 0
        now = int(time.time() * 1000)
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            r = store.put_message(timer(b"full", now + 1000))
            assert r.status in (PutMessageStatus.WHEEL_TIMER_NOT_ENABLE, PutMessageStatus.SERVICE_NOT_AVAILABLE), r
            assert r.error
            time.sleep(0.02)
        os.remove(ballast)
        deadline = time.monotonic() + 5.0
        while not (r := store.put_message(timer(b"after", int(time.time() * 1000) + 300))).is_ok():
            assert time.monotonic() < deadline, r
            time.sleep(0.05)
        assert wait_bodies(store, "Later", 1, 5.0) == [b"after"]
    finally:
        store.shutdown()
