"""Roles in the put path: a SLAVE refuses every put and stores nothing; a SYNC_MASTER
acknowledges a put only once a slave has its bytes (SLAVE_NOT_AVAILABLE without one,
FLUSH_SLAVE_TIMEOUT when the slave does not acknowledge in time, the message stored
either way); the HA port bounds what a garbage or stalled peer holds."""

from __future__ import annotations

import socket
import struct
import time

import numpy as np
import pytest

import pymq
from pymq import Message, MessageStore, PutMessageStatus as S

from ha_support import ScriptedMaster, frame, read_report, wait_until


def test_slave_refuses_every_put_and_stores_nothing(tmp_path, config_factory):
    slave = MessageStore(tmp_path / "s", config_factory(broker_role="SLAVE")).start()
    try:
        results = [
            slave.put_message(Message("T", b"a")),
            slave.put_messages([Message("T", b"a"), Message("T", b"b")]),
            slave.put_bodies("T", [b"a", b"b"]),
            slave.put_bodies("T", np.zeros((3, 8), dtype=np.uint8)),
            slave.async_put_message(Message("T", b"a")).result(5),
            slave.async_put_messages([Message("T", b"a")]).result(5),
            slave.put_message(Message("T", b"delayed", delay_level=2)),
            slave.put_message(Message("T", b"timer", deliver_time_ms=int(time.time() * 1000) + 5000)),
        ]
        for r in results:
            assert r.status is S.SERVICE_NOT_AVAILABLE, r
        assert "slave mode" in (results[0].error or "")
        assert slave.get_max_phy_offset() == 0
        assert not slave.commit_log.mapped_file_queue.mapped_files
        # the delivery services do not run on a slave (they would write)
        assert slave.schedule_service._thread is None and slave.timer_service._thread is None
        assert slave.stats()["replication"]["role"] == "SLAVE"
    finally:
        slave.shutdown()


@pytest.fixture
def sync_master(tmp_path, config_factory):
    m = MessageStore(tmp_path / "m", config_factory(broker_role="SYNC_MASTER", ha_listen_port=0,
                                                    sync_flush_timeout=600)).start()
    yield m
    m.shutdown()


def test_sync_master_without_slave(sync_master):
    before = sync_master.get_max_phy_offset()
    r = sync_master.put_message(Message("T", b"x"))
    assert r.status is S.SLAVE_NOT_AVAILABLE
    # stored, so ok as RocketMQ's isOk (its append succeeded), with the record's ids
    assert r.is_ok() and r.msg_id and sync_master.look_message_by_offset(r.commitlog_offset).body == b"x"
    assert sync_master.put_bodies("T", [b"a", b"b"]).status is S.SLAVE_NOT_AVAILABLE
    assert sync_master.async_put_message(Message("T", b"y")).result(5).status is S.SLAVE_NOT_AVAILABLE
    assert sync_master.get_max_phy_offset() > before            # stored all the same


def test_sync_master_without_ha_port(tmp_path, config_factory):
    with MessageStore(tmp_path / "m", config_factory(broker_role="SYNC_MASTER")) as m:
        assert m.ha is None
        assert m.put_message(Message("T", b"x")).status is S.SLAVE_NOT_AVAILABLE


def test_sync_master_with_slave_acknowledges_what_the_slave_has(sync_master, tmp_path, config_factory):
    slave = MessageStore(tmp_path / "s", config_factory(broker_role="SLAVE",
                                                         ha_master_address=sync_master.ha.address)).start()
    try:
        assert wait_until(lambda: sync_master.ha.connection_count == 1)
        assert wait_until(lambda: sync_master.ha.push_to_slave_max_offset >= 0
                          and any(c.slave_request_offset >= 0 for c in sync_master.ha.connections()))
        for i in range(50):
            r = sync_master.put_message(Message("T", b"m%d" % i, keys=f"k{i}"))
            assert r.status is S.PUT_OK, r
            assert slave.get_max_phy_offset() >= r.commitlog_offset + r.wrote_bytes
        r = sync_master.put_messages([Message("T", b"a"), Message("T", b"b")])
        assert r.status is S.PUT_OK and slave.get_max_phy_offset() >= r.commitlog_offset + r.wrote_bytes
        r = sync_master.put_bodies("T", [b"c", b"d"], keys=["kc", "kd"])
        assert r.status is S.PUT_OK and slave.get_max_phy_offset() >= r.commitlog_offset + r.wrote_bytes
        fut = sync_master.async_put_message(Message("T", b"async"))
        r = fut.result(5)
        assert r.status is S.PUT_OK and slave.get_max_phy_offset() >= r.commitlog_offset + r.wrote_bytes
        assert sync_master.ha.wait_for_slave(sync_master.get_max_phy_offset(), 1.0)
    finally:
        slave.shutdown()


def _stalled_slave(address: str) -> socket.socket:
    """A peer that reports offset 0 once, then neither reports nor reads."""
    host, port = address.rsplit(":", 1)
    s = socket.create_connection((host, int(port)))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.sendall(struct.pack(">q", 0))
    return s


def test_sync_master_with_stalled_slave_times_out(sync_master):
    peer = _stalled_slave(sync_master.ha.address)
    try:
        assert wait_until(lambda: any(c.slave_request_offset == 0 for c in sync_master.ha.connections()))
        t0 = time.monotonic()
        r = sync_master.put_message(Message("T", b"x" * 100))
        took = time.monotonic() - t0
        assert r.status is S.FLUSH_SLAVE_TIMEOUT and r.is_ok()
        assert 0.5 <= took < 2.0
        assert sync_master.look_message_by_offset(r.commitlog_offset).body == b"x" * 100
        fut = sync_master.async_put_message(Message("T", b"y"))
        assert fut.result(5).status is S.FLUSH_SLAVE_TIMEOUT
    finally:
        peer.close()


def test_a_peer_that_never_reads_does_not_block_puts(tmp_path, config_factory):
    """ASYNC_MASTER, a slave that never reads 2 MiB of log: puts keep their pace, and the
    connection is dropped after ha_housekeeping_interval without progress."""
    m = MessageStore(tmp_path / "m", config_factory(ha_listen_port=0, ha_housekeeping_interval=800,
                                                    commitlog_file_size=1 << 20)).start()
    peer = _stalled_slave(m.ha.address)
    try:
        assert wait_until(lambda: m.ha.connection_count == 1)
        t0 = time.monotonic()
        for i in range(2000):
            assert m.put_message(Message("T", bytes(1000))).status is S.PUT_OK
        assert time.monotonic() - t0 < 5
        assert wait_until(lambda: m.ha.connection_count == 0, 5)
    finally:
        peer.close()
        m.shutdown()


def test_garbage_peers_are_closed(tmp_path, config_factory):
    m = MessageStore(tmp_path / "m", config_factory(ha_listen_port=0, ha_housekeeping_interval=500)).start()
    try:
        m.put_message(Message("T", b"x"))
        host, port = m.ha.address.rsplit(":", 1)
        # an offset past the master's end (RocketMQ closes such a slave)
        a = socket.create_connection((host, int(port)))
        a.sendall(struct.pack(">q", 1 << 40))
        assert a.recv(100) == b""
        # a negative one
        b = socket.create_connection((host, int(port)))
        b.sendall(b"\xff" * 8)
        assert b.recv(100) == b""
        # one that says nothing: closed after ha_housekeeping_interval
        c = socket.create_connection((host, int(port)))
        c.settimeout(5)
        t0 = time.monotonic()
        assert c.recv(100) == b""
        assert time.monotonic() - t0 < 3
        for s in (a, b, c):
            s.close()
        assert wait_until(lambda: m.ha.connection_count == 0)
    finally:
        m.shutdown()


def test_slave_closes_on_a_frame_at_the_wrong_offset(tmp_path, config_factory):
    """The master's frame does not continue the slave's log: the slave closes and
    connects again (then gets the right bytes)."""
    src = MessageStore(tmp_path / "src", config_factory()).start()
    for i in range(5):
        src.put_message(Message("T", b"rec%d" % i))
    data = src.commit_log.mapped_file_queue.mapped_files[0].read(0, src.get_max_phy_offset())
    src.shutdown()

    def script(conn, n):
        start = read_report(conn)
        if n == 1:
            conn.sendall(frame(start + 100, data[:50]))       # not where the slave's log ends
            conn.recv(8)
            return
        conn.sendall(frame(start, data))
        while read_report(conn) < len(data):
            pass
        time.sleep(0.2)

    fake = ScriptedMaster(script)
    slave = MessageStore(tmp_path / "s", config_factory(broker_role="SLAVE", ha_master_address=fake.address)).start()
    try:
        assert wait_until(lambda: slave.get_max_phy_offset() == len(data))
        assert fake.connections >= 2
        assert slave.ha.stats()["last_error"].startswith("ReplicaMismatch")
        assert [slave.look_message_by_offset(0).body] == [b"rec0"]
        assert not fake.errors
    finally:
        slave.shutdown()
        fake.close()


def test_slave_rejects_bytes_that_are_not_records(tmp_path, config_factory):
    junk = bytes(range(256)) * 4

    def script(conn, n):
        read_report(conn)
        conn.sendall(frame(0, junk))
        time.sleep(0.5)

    fake = ScriptedMaster(script)
    slave = MessageStore(tmp_path / "s", config_factory(broker_role="SLAVE", ha_master_address=fake.address)).start()
    try:
        assert wait_until(lambda: slave.ha.stats()["last_error"] is not None)
        assert "not a record" in slave.ha.stats()["last_error"]
        assert slave.get_max_phy_offset() == 0
    finally:
        slave.shutdown()
        fake.close()


def test_config_refuses_what_cannot_replicate():
    """Settings under which replication could not work are refused when the config is made:
    a frame larger than a RocketMQ slave's 4 MiB read buffer (it would wait for it forever),
    an unknown role, an HA port out of range."""
    import pymq
    from pymq.errors import PymqError
    assert pymq.StoreConfig(ha_transfer_batch_size=4 * 1024 * 1024 - 12).ha_transfer_batch_size == 4 * 1024 * 1024 - 12
    for bad in (dict(ha_transfer_batch_size=4 * 1024 * 1024 - 11), dict(ha_transfer_batch_size=0),
                dict(broker_role="MASTER"), dict(ha_listen_port=70000)):
        with pytest.raises(PymqError):
            pymq.StoreConfig(**bad)
