"""Retention (issue 11): commit-log cleaning by age, hour, disk ratio and on request;
queues, index and readers following the log's new minimum; topic deletion.

Ages are made real: segments are written, then the test waits out a reserved time of a
fraction of a second (``file_reserved_time`` is a float of hours). The disk's fullness is
simulated through the guard's ``usage_fn`` here; a real full tmpfs is in
``test_disk_full.py``.
"""

from __future__ import annotations

import logging
import os
import time

import pytest
from conftest import small_config

import pymq
from pymq import GetMessageStatus, PutMessageStatus
from pymq.checker import StoreChecker
from pymq.store.disk_guard import DiskUsage

RESERVED_S = 0.3
OTHER_HOUR = "%02d" % ((time.localtime().tm_hour + 12) % 24)


def cfg(**kw):
    values = dict(file_reserved_time=RESERVED_S / 3600, delete_when=OTHER_HOUR,
                  clean_resource_interval=60_000, delete_commitlog_files_interval=0,
                  delete_consume_queue_files_interval=0, delete_files_batch_max=1000)
    values.update(kw)
    return small_config(**values)


def fill(store, n, topic="T", queues=2, body=b"x" * 200):
    out = []
    for i in range(n):
        r = store.put_message(pymq.Message(topic=topic, body=body, keys=[f"k{i}"], queue_id=i % queues))
        assert r.status is PutMessageStatus.PUT_OK, r
        out.append(r)
    wait_dispatched(store)
    return out


def wait_dispatched(store, timeout=10.0):
    deadline = time.monotonic() + timeout
    while store.dispatch_behind_bytes() and time.monotonic() < deadline:
        time.sleep(0.002)
    assert store.dispatch_behind_bytes() == 0


def segment_count(store):
    """Segments of the log (the file allocated ahead for the next roll is not one yet)."""
    return len(store.commit_log.mapped_file_queue.mapped_files)


def fake_usage(ratio):
    total = 1 << 30
    return lambda path: DiskUsage(path, total, int(total * (1 - ratio)))


def test_nothing_is_deleted_outside_the_delete_hours(tmp_path):
    with pymq.MessageStore(tmp_path / "s", cfg()) as s:
        fill(s, 2000)
        before = segment_count(s)
        time.sleep(RESERVED_S + 0.1)
        out = s.clean_service.run_pass()
        assert out["commitlog"] == 0 and segment_count(s) == before
        assert s.get_min_phy_offset() == 0


def test_expired_segments_go_in_a_delete_hour_and_the_written_one_stays(tmp_path):
    hour = "%02d" % time.localtime().tm_hour
    with pymq.MessageStore(tmp_path / "s", cfg(delete_when=f"{OTHER_HOUR};{hour}")) as s:
        fill(s, 2000)
        n = segment_count(s)
        assert n > 4
        time.sleep(RESERVED_S + 0.1)
        out = s.clean_service.run_pass()
        assert out["commitlog"] == n - 1 and segment_count(s) == 1
        last = s.commit_log.mapped_file_queue.get_last_mapped_file()
        on_disk = sorted(int(n) for n in os.listdir(os.path.join(s.store_path, "commitlog")) if n.isdigit())
        assert on_disk[0] == last.file_from_offset
        assert s.get_min_phy_offset() == last.file_from_offset
        r = s.put_message(pymq.Message(topic="T", body=b"after"))
        assert r.status is PutMessageStatus.PUT_OK


def test_young_segments_stay_until_their_time(tmp_path):
    with pymq.MessageStore(tmp_path / "s", cfg(file_reserved_time=1.0)) as s:  # an hour
        fill(s, 2000)
        n = segment_count(s)
        assert s.delete_expired_files()["commitlog"] == 0 and segment_count(s) == n


def test_manual_deletion_removes_only_expired_segments_oldest_first(tmp_path):
    with pymq.MessageStore(tmp_path / "s", cfg()) as s:
        fill(s, 1500)
        time.sleep(RESERVED_S + 0.1)
        old = segment_count(s)
        fill(s, 1500)                             # young segments after the old ones
        out = s.delete_expired_files()
        # the old ones went (the last of them may have been finished by the second fill)
        assert old - 1 <= out["commitlog"] <= old
        assert segment_count(s) >= 2
        assert out["consume_queue"] >= 1 and out["index"] >= 1


def test_batch_max_limits_one_pass(tmp_path):
    with pymq.MessageStore(tmp_path / "s", cfg(delete_files_batch_max=2)) as s:
        fill(s, 2000)
        time.sleep(RESERVED_S + 0.1)
        assert s.delete_expired_files()["commitlog"] == 2
        assert s.delete_expired_files()["commitlog"] == 2


def test_disk_over_max_ratio_deletes_expired_without_a_delete_hour(tmp_path):
    with pymq.MessageStore(tmp_path / "s", cfg()) as s:
        fill(s, 2000)
        n = segment_count(s)
        s.disk_guard.usage_fn = fake_usage(0.80)     # > 75 %, < 85 %: age still counts
        assert s.clean_service.run_pass()["commitlog"] == 0
        time.sleep(RESERVED_S + 0.1)
        assert s.clean_service.run_pass()["commitlog"] == n - 1


def test_past_the_forced_ratio_age_is_ignored(tmp_path):
    with pymq.MessageStore(tmp_path / "s", cfg(file_reserved_time=1.0)) as s:
        fill(s, 2000)
        n = segment_count(s)
        s.disk_guard.usage_fn = fake_usage(0.86)
        assert s.clean_service.run_pass()["commitlog"] == n - 1
        assert segment_count(s) == 1
        # forced cleaning off: age counts again
    with pymq.MessageStore(tmp_path / "t", cfg(file_reserved_time=1.0, clean_file_forcibly_enable=False)) as s:
        fill(s, 2000)
        s.disk_guard.usage_fn = fake_usage(0.86)
        assert s.clean_service.run_pass()["commitlog"] == 0


def test_readers_get_offset_too_small_and_the_consumer_moves_on(tmp_path):
    with pymq.MessageStore(tmp_path / "s", cfg()) as s:
        results = fill(s, 3000)
        consumer = pymq.Consumer(s, "g", "T")
        assert consumer.poll(0.5)                    # positions at the start of each queue
        time.sleep(RESERVED_S + 0.1)
        s.delete_expired_files()
        min_phy = s.get_min_phy_offset()
        alive = [r for r in results if r.commitlog_offset >= min_phy]
        for q in (0, 1):
            lo = s.get_min_offset_in_queue("T", q)
            assert lo > 0
            g = s.get_message("g", "T", q, 0)
            assert g.status is GetMessageStatus.OFFSET_TOO_SMALL and g.next_begin_offset == lo
            g = s.get_message("g", "T", q, lo, 1)
            assert g.status is GetMessageStatus.FOUND
            assert g.messages[0].commitlog_offset >= min_phy
            assert s.look_message_by_offset(g.messages[0].commitlog_offset - g.messages[0].store_size) is None \
                or g.messages[0].commitlog_offset - g.messages[0].store_size >= min_phy
        got = []
        while True:
            batch = consumer.poll(0.2)
            if not batch:
                break
            got.extend(m.commitlog_offset for m in batch)
        assert sorted(got) == sorted(r.commitlog_offset for r in alive)   # exactly what is left
        # key lookups find only what is stored
        assert s.query_message("T", "k0") == []
        assert s.query_message("T", "k2999")[0].commitlog_offset == results[-1].commitlog_offset


def test_cleaning_leaves_a_consistent_store_that_reopens(tmp_path):
    path = tmp_path / "s"
    with pymq.MessageStore(path, cfg()) as s:
        fill(s, 3000)
        time.sleep(RESERVED_S + 0.1)
        s.delete_expired_files()
        mins = {q: s.get_min_offset_in_queue("T", q) for q in (0, 1)}
        maxs = {q: s.get_max_offset_in_queue("T", q) for q in (0, 1)}
    report = StoreChecker(str(path)).run()
    assert report.ok, report
    with pymq.MessageStore(path, cfg()) as s:
        for q in (0, 1):
            assert s.get_min_offset_in_queue("T", q) == mins[q]
            assert s.get_max_offset_in_queue("T", q) == maxs[q]
            g = s.get_message("g", "T", q, mins[q])
            assert g.status is GetMessageStatus.FOUND
        assert s.put_message(pymq.Message(topic="T", body=b"z", queue_id=1)).queue_offset == maxs[1]


def test_a_read_only_follower_drops_deleted_files(tmp_path):
    path = tmp_path / "s"
    with pymq.MessageStore(path, cfg()) as s:
        fill(s, 3000)
        reader = pymq.MessageStore(path, read_only=True).start()
        try:
            assert reader.get_message("g", "T", 0, 0).status is GetMessageStatus.FOUND
            time.sleep(RESERVED_S + 0.1)
            s.delete_expired_files()
            deadline = time.monotonic() + 5
            while reader.get_min_phy_offset() != s.get_min_phy_offset() and time.monotonic() < deadline:
                time.sleep(0.01)
            assert reader.get_min_phy_offset() == s.get_min_phy_offset()
            lo = s.get_min_offset_in_queue("T", 0)
            g = reader.get_message("g", "T", 0, 0)
            assert g.status in (GetMessageStatus.OFFSET_TOO_SMALL, GetMessageStatus.MESSAGE_WAS_REMOVING)
            assert reader.get_message("g", "T", 0, lo).status is GetMessageStatus.FOUND
            fill(s, 100)
            reader.refresh()
            assert reader.get_max_offset_in_queue("T", 0) == s.get_max_offset_in_queue("T", 0)
        finally:
            reader.shutdown()


def test_delete_topic_then_recreate_starts_at_zero_and_reads_nothing_old(tmp_path):
    path = tmp_path / "s"
    with pymq.MessageStore(path, cfg()) as s:
        fill(s, 500, topic="Gone")
        fill(s, 50, topic="Kept")
        s.commit_offset("g", "Gone", 0, 100)
        assert s.delete_topic("Gone") is True
        assert s.delete_topic("Gone") is False
        assert "Gone" not in s.get_topics()
        assert s.query_offset("g", "Gone", 0) == -1
        assert not os.path.exists(os.path.join(path, "consumequeue", "Gone"))
        assert s.get_max_offset_in_queue("Gone", 0) == 0
        r = s.put_message(pymq.Message(topic="Gone", body=b"new", keys=["k1"]))
        assert r.queue_offset == 0
        wait_dispatched(s)
        g = s.get_message("g", "Gone", 0, 0)
        assert [m.body for m in g.messages] == [b"new"]
        assert [m.body for m in s.query_message("Gone", "k1")] == [b"new"]
        assert s.get_max_offset_in_queue("Kept", 0) == 25
    # a crash replays the whole log: the old records must stay out
    os.remove(path / "consumequeue" / "Gone" / "0" / "00000000000000000000")
    with open(path / "abort", "wb"):
        pass
    with pymq.MessageStore(path, cfg()) as s:
        wait_dispatched(s)
        assert s.get_max_offset_in_queue("Gone", 0) == 1
        assert [m.body for m in s.get_message("g", "Gone", 0, 0).messages] == [b"new"]
        assert s.get_max_offset_in_queue("Gone", 1) == 0
        assert s.get_max_offset_in_queue("Kept", 1) == 25


def test_topic_deletion_marks_are_pruned_by_cleaning(tmp_path):
    with pymq.MessageStore(tmp_path / "s", cfg()) as s:
        fill(s, 1000, topic="Gone")
        s.delete_topic("Gone")
        assert s.topic_deletions.floor("Gone") > 0
        fill(s, 2000, topic="Other")
        time.sleep(RESERVED_S + 0.1)
        s.delete_expired_files()
        assert s.topic_deletions.floor("Gone") == -1


def test_a_failing_service_logs_once_per_episode(tmp_path, caplog):
    from pymq.store.service_thread import ServiceThread

    class Flaky(ServiceThread):
        name = "Flaky"
        fail = True
        calls = 0

        def run_once(self):
            self.calls += 1
            if self.fail:
                raise OSError(28, "No space left on device")

    svc = Flaky(0.001)
    with caplog.at_level(logging.INFO, logger="pymq"):
        svc.start()
        time.sleep(0.5)
        calls_failing = svc.calls
        svc.fail = False
        time.sleep(1.5)
        svc.shutdown()
    records = [r for r in caplog.records if "Flaky" in r.getMessage()]
    assert calls_failing >= 3                       # it kept trying ...
    assert calls_failing < 60                       # ... with back-off, not every millisecond
    assert len(records) == 2, [r.getMessage() for r in records]
    assert "failed" in records[0].getMessage() and "recovered" in records[1].getMessage()
    assert svc.failing == 0 and svc.episodes == 1


def test_config_rejects_bad_cleaning_values():
    for bad in (dict(file_reserved_time=0), dict(delete_when="25"), dict(delete_when="4;x"),
                dict(disk_max_used_space_ratio=99), dict(disk_space_clean_forcibly_ratio=0.95),
                dict(delete_files_batch_max=0)):
        with pytest.raises(pymq.PymqError):
            pymq.StoreConfig(**bad)
    assert pymq.StoreConfig(delete_when="04;10").delete_when == "04;10"


def test_pending_delayed_and_timer_messages_of_a_deleted_topic_are_dropped(tmp_path):
    with pymq.MessageStore(tmp_path / "s", cfg(message_delay_level="1s")) as s:
        now = int(time.time() * 1000)
        assert s.put_message(pymq.Message(topic="Gone", body=b"late", delay_level=1)).is_ok()
        assert s.put_message(pymq.Message(topic="Gone", body=b"timed", deliver_time_ms=now + 800)).is_ok()
        assert s.put_message(pymq.Message(topic="Kept", body=b"kept", delay_level=1)).is_ok()
        wait_dispatched(s)
        s.put_message(pymq.Message(topic="Gone", body=b"first"))
        wait_dispatched(s)
        assert s.delete_topic("Gone")
        assert s.put_message(pymq.Message(topic="Gone", body=b"new")).queue_offset == 0
        deadline = time.monotonic() + 5
        while s.get_max_offset_in_queue("Kept", 0) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)                              # the timer's second is over too
        assert s.get_max_offset_in_queue("Kept", 0) == 1       # delivery works ...
        assert [m.body for m in s.get_message("g", "Gone", 0, 0).messages] == [b"new"]   # ... not for Gone


def test_timer_log_files_of_delivered_timers_are_deleted_pending_ones_kept(tmp_path):
    path = tmp_path / "s"
    config = cfg(timer_log_file_size=4096)              # 128 timer units per file
    with pymq.MessageStore(path, config) as s:
        now = int(time.time() * 1000)
        for i in range(300):
            assert s.put_message(pymq.Message("Soon", b"s%d" % i, deliver_time_ms=now + 300)).is_ok()
        deadline = time.monotonic() + 10
        while s.get_max_offset_in_queue("Soon", 0) < 300 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert s.get_max_offset_in_queue("Soon", 0) == 300
        far = now + 3_600_000
        for i in range(200):
            assert s.put_message(pymq.Message("Later", b"l%d" % i, deliver_time_ms=far)).is_ok()
        deadline = time.monotonic() + 10
        while s.timer_service.checkpoint.enqueue_offset < 500 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(1.1)                                   # the delivered seconds are closed
        before = len(s.timer_service.timer_log.mapped_files)
        deleted = s.delete_expired_files()["timer_log"]
        assert deleted >= 1 and len(s.timer_service.timer_log.mapped_files) == before - deleted
        # every file left holds a pending unit (or is the one appended to)
        assert s.timer_service.delete_unneeded_files() == 0
    with pymq.MessageStore(path, config) as s:            # the pending timers survive
        assert s.open_report == []
        units = s.timer_service._units(far // 1000)
        assert len(units) == 200
