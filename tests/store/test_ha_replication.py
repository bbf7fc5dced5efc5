"""pymq master -> pymq slave, embedded in one process: the slave's commit log is the
master's byte for byte, its queues and index are dispatched, it serves reads and long
polls, and a restarted slave continues where it stopped (docs/replication.md)."""

from __future__ import annotations

import os
import threading

import pytest

import pymq
from pymq import Message, MessageStore
from pymq.store.ha import frame_reader

from ha_support import log_bytes, record_bounds, wait_until

FS = 64 * 1024


def master_config(config_factory, **kw):
    # an odd batch size: frames end inside records
    return config_factory(broker_role=kw.pop("broker_role", "ASYNC_MASTER"), ha_listen_port=0,
                          ha_transfer_batch_size=kw.pop("batch", 777), **kw)


def slave_config(config_factory, address, **kw):
    return config_factory(broker_role="SLAVE", ha_master_address=address, **kw)


def put_many(store, n, start=0, topic="HaTopic"):
    results = []
    for i in range(start, start + n):
        body = os.urandom(50 + (i * 37) % 900)
        r = store.put_message(Message(topic, body, tags=f"t{i % 3}", keys=f"key-{i}", queue_id=i % 2))
        assert r.status is pymq.PutMessageStatus.PUT_OK, r
        results.append(r)
    return results


def attached(master):
    """A slave is connected and the master knows where to send from."""
    return wait_until(lambda: any(c.next_transfer_from >= 0 for c in master.ha.connections()))


def caught_up(master, slave):
    return lambda: slave.get_max_phy_offset() == master.get_max_phy_offset()


@pytest.fixture
def pair(tmp_path, config_factory):
    master = MessageStore(tmp_path / "master", master_config(config_factory)).start()
    slave = MessageStore(tmp_path / "slave", slave_config(config_factory, master.ha.address)).start()
    assert attached(master)
    yield master, slave
    slave.shutdown()
    master.shutdown()


def test_every_byte_across_segment_rolls_and_dispatched(pair):
    master, slave = pair
    put_many(master, 400)                       # ~200 KiB: several 64 KiB segments
    assert len(master.commit_log.mapped_file_queue.mapped_files) >= 3
    assert wait_until(caught_up(master, slave))
    end = master.get_max_phy_offset()
    assert slave.get_min_phy_offset() == 0
    assert log_bytes(slave, 0, end) == log_bytes(master, 0, end)
    for qid in (0, 1):
        assert wait_until(lambda: slave.get_max_offset_in_queue("HaTopic", qid)
                          == master.get_max_offset_in_queue("HaTopic", qid))
        got = slave.get_message("g", "HaTopic", qid, 0, 32)
        want = master.get_message("g", "HaTopic", qid, 0, 32)
        assert [m.body for m in got.messages] == [m.body for m in want.messages]
    assert wait_until(lambda: len(slave.query_message("HaTopic", "key-123")) == 1)
    assert slave.query_message("HaTopic", "key-123")[0].body == master.query_message("HaTopic", "key-123")[0].body
    stats = slave.stats()["replication"]
    assert stats["role"] == "SLAVE" and stats["lag_bytes"] == 0 and stats["applied_offset"] == end
    mstats = master.stats()["replication"]
    assert mstats["slaves_connected"] == 1
    assert wait_until(lambda: master.stats()["replication"]["slaves"][0]["ack_offset"] == end)


def test_visible_end_only_at_record_boundaries(tmp_path, config_factory, monkeypatch):
    """Frames of 97 bytes cut almost every record, and the slave's reads of at most 150
    bytes end a burst each (so it applies and reports after each): each offset the slave
    reports (its visible end) is a record boundary of the master's log."""
    monkeypatch.setattr(frame_reader, "BUFFER_SIZE", 150)
    monkeypatch.setattr(frame_reader, "BURST_BYTES", 100)
    master = MessageStore(tmp_path / "m", master_config(config_factory, batch=97)).start()
    put_many(master, 90)                        # within the first segment
    reports = []
    slave = MessageStore(tmp_path / "s", slave_config(config_factory, master.ha.address))
    try:
        orig = slave.ha._report
        slave.ha._report = lambda ch, off: (reports.append(off), orig(ch, off))
        slave.start()
        assert wait_until(caught_up(master, slave))
        bounds = set(record_bounds(master, 0, master.get_max_phy_offset()))
        assert len(reports) > 40
        assert set(reports) <= bounds, sorted(set(reports) - bounds)[:5]
    finally:
        slave.shutdown()
        master.shutdown()


def test_new_slave_starts_at_the_masters_last_segment(tmp_path, config_factory):
    master = MessageStore(tmp_path / "m", master_config(config_factory)).start()
    put_many(master, 300)
    last = master.commit_log.mapped_file_queue.mapped_files[-1].file_from_offset
    assert last > 0
    slave = MessageStore(tmp_path / "s", slave_config(config_factory, master.ha.address)).start()
    try:
        assert wait_until(caught_up(master, slave))
        end = master.get_max_phy_offset()
        assert slave.get_min_phy_offset() == last
        assert log_bytes(slave, last, end) == log_bytes(master, last, end)
        # its queues start where its log does; what it has is readable
        assert wait_until(lambda: slave.get_max_offset_in_queue("HaTopic", 0)
                          == master.get_max_offset_in_queue("HaTopic", 0))
        first = slave.get_min_offset_in_queue("HaTopic", 0)
        assert first > 0
        got = slave.get_message("g", "HaTopic", 0, first, 8)
        assert got.messages and got.messages[0].commitlog_offset >= last
        put_many(master, 50, start=300)
        assert wait_until(caught_up(master, slave))
        slave.shutdown()
        # a slave whose log starts at a non-zero segment reopens and recovers
        slave = MessageStore(tmp_path / "s", slave_config(config_factory, master.ha.address)).start()
        assert slave.get_min_phy_offset() == last
        assert slave.get_max_phy_offset() == master.get_max_phy_offset()
    finally:
        slave.shutdown()
        master.shutdown()


def test_restarted_slave_continues(tmp_path, config_factory):
    master = MessageStore(tmp_path / "m", master_config(config_factory)).start()
    slave = MessageStore(tmp_path / "s", slave_config(config_factory, master.ha.address)).start()
    try:
        assert attached(master)
        put_many(master, 100)
        assert wait_until(caught_up(master, slave))
        slave.shutdown()
        put_many(master, 150, start=100)
        slave = MessageStore(tmp_path / "s", slave_config(config_factory, master.ha.address)).start()
        assert wait_until(caught_up(master, slave))
        end = master.get_max_phy_offset()
        assert log_bytes(slave, 0, end) == log_bytes(master, 0, end)
        assert wait_until(lambda: slave.get_max_offset_in_queue("HaTopic", 1)
                          == master.get_max_offset_in_queue("HaTopic", 1))
    finally:
        slave.shutdown()
        master.shutdown()


def test_long_poll_on_the_slave_wakes(pair):
    master, slave = pair
    woke = []
    t = threading.Thread(target=lambda: woke.append(slave.wait_message("HaTopic", 0, 0, 10.0)))
    t.start()
    put_many(master, 1)
    t.join(10)
    assert woke == [True]


def test_update_master_address(tmp_path, config_factory):
    master = MessageStore(tmp_path / "m", master_config(config_factory)).start()
    slave = MessageStore(tmp_path / "s", slave_config(config_factory, None)).start()
    try:
        put_many(master, 20)
        assert not wait_until(lambda: slave.get_max_phy_offset() > 0, 0.3)
        slave.ha.update_master_address(master.ha.address)
        assert wait_until(caught_up(master, slave))
        with pytest.raises(ValueError):
            slave.ha.update_master_address("no-port")
    finally:
        slave.shutdown()
        master.shutdown()


def test_catch_up_in_large_frames_across_reservations_and_segments(tmp_path, config_factory):
    """A slave that was away catches up 20 MiB in the default 1 MiB frames: sparse 8 MiB
    segments whose blocks are reserved 1 MiB at a time (frames end past a reservation,
    so the receive loop hands back to the replica log mid-segment), three segment rolls;
    every byte is the master's, every record dispatched, and the slave reports in bursts,
    not once per frame."""
    kw = dict(commitlog_file_size=8 << 20, commitlog_reserve_bytes=1 << 20)
    master = MessageStore(tmp_path / "m", config_factory(broker_role="ASYNC_MASTER", ha_listen_port=0,
                                                         **kw)).start()
    assert master.config.ha_transfer_batch_size == 1 << 20
    slave = MessageStore(tmp_path / "s", slave_config(config_factory, master.ha.address, **kw)).start()
    try:
        put_many(master, 10)
        assert wait_until(caught_up(master, slave))
        slave.shutdown()
        body = os.urandom(4000)
        while master.get_max_phy_offset() < 20 << 20:
            master.put_messages([Message("Bulk", body, queue_id=0) for _ in range(100)])
        end = master.get_max_phy_offset()
        slave = MessageStore(tmp_path / "s", slave_config(config_factory, master.ha.address, **kw))
        reports = []
        orig = slave.ha._report
        slave.ha._report = lambda ch, off: (reports.append(off), orig(ch, off))
        slave.start()
        assert wait_until(caught_up(master, slave), 30)
        assert log_bytes(slave, 0, end) == log_bytes(master, 0, end)
        assert len(slave.commit_log.mapped_file_queue.mapped_files) == 3
        assert wait_until(lambda: slave.get_max_offset_in_queue("Bulk", 0)
                          == master.get_max_offset_in_queue("Bulk", 0))
        assert len(reports) < 20                # 20 frames or more, a report per burst
        assert set(reports) <= set(record_bounds(master, 0, end))
    finally:
        slave.shutdown()
        master.shutdown()
