"""ConsumerOffsetManager and its persist service, after RocketMQ's ConsumerOffsetManager."""

from __future__ import annotations

import os
import threading
import time

import pytest

import pymq
from pymq.errors import CorruptStoreError
from pymq.store.fastjson import loads_fastjson
from pymq.store.consumer_offsets import ConsumerOffsetManager, ConsumerOffsetPersistService

REAL_FILE = (
    '{\n\t"offsetTable":{\n'
    '\t\t"TopicTest@please_rename_unique_group_name_4":{0:250,1:250,2:250,3:250},\n'
    '\t\t"%RETRY%please_rename_unique_group_name_4@please_rename_unique_group_name_4":{0:0}\n'
    '\t}\n}')
GROUP = "please_rename_unique_group_name_4"


@pytest.fixture
def manager(tmp_path):
    m = ConsumerOffsetManager(tmp_path)
    assert m.load()
    return m


def write_file(root, text, suffix=""):
    path = os.path.join(root, "config", "consumerOffset.json" + suffix)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def test_path_is_rocketmq_s(tmp_path):
    assert ConsumerOffsetManager(tmp_path).config_file_path() == \
        os.path.join(str(tmp_path), "config", "consumerOffset.json")


def test_never_committed_is_minus_one(manager):
    assert manager.query_offset("g", "t", 0) == -1
    manager.commit_offset("g", "t", 0, 5)
    assert manager.query_offset("g", "t", 1) == -1
    assert manager.query_offset("g2", "t", 0) == -1
    assert manager.query_offset("g", "t2", 0) == -1
    assert manager.query_offsets("g", "nope") == {}


def test_commit_is_an_unconditional_put(manager):
    manager.commit_offset("g", "t", 3, 100)
    assert manager.query_offset("g", "t", 3) == 100
    manager.commit_offset("g", "t", 3, 40)             # a reset moves the offset back
    assert manager.query_offset("g", "t", 3) == 40
    manager.commit_offset("g", "t", 3, 0)
    assert manager.query_offset("g", "t", 3) == 0


def test_query_offsets_returns_a_copy(manager):
    manager.commit_offset("g", "t", 0, 6)
    manager.commit_offset("g", "t", 1, 3)
    offsets = manager.query_offsets("g", "t")
    assert offsets == {0: 6, 1: 3}
    offsets[0] = 999
    assert manager.query_offset("g", "t", 0) == 6


def test_which_topic_and_which_group(manager):
    manager.commit_offset("g1", "t1", 0, 1)
    manager.commit_offset("g1", "t2", 0, 1)
    manager.commit_offset("g2", "t1", 0, 1)
    manager.commit_offset("g1", "%RETRY%g1", 0, 0)
    assert manager.which_topic_by_consumer("g1") == {"t1", "t2", "%RETRY%g1"}
    assert manager.which_topic_by_consumer("nobody") == set()
    assert manager.which_group_by_topic("t1") == {"g1", "g2"}
    assert manager.which_group_by_topic("t2") == {"g1"}


def test_remove_offset_drops_every_topic_of_the_group(manager):
    manager.commit_offset("g1", "t1", 0, 1)
    manager.commit_offset("g1", "t2", 0, 1)
    manager.commit_offset("g2", "t1", 0, 7)
    assert manager.remove_offset("g1") == 2
    assert manager.which_topic_by_consumer("g1") == set()
    assert manager.query_offset("g2", "t1", 0) == 7
    assert manager.remove_offset("g1") == 0


def test_clone_offset(manager):
    manager.commit_offset("src", "t", 0, 10)
    manager.commit_offset("src", "t", 1, 20)
    manager.commit_offset("dst", "t", 5, 1)
    assert manager.clone_offset("src", "dst", "t") is True
    assert manager.query_offsets("dst", "t") == {0: 10, 1: 20}
    manager.commit_offset("src", "t", 0, 11)           # an independent copy
    assert manager.query_offset("dst", "t", 0) == 10
    assert manager.clone_offset("missing", "dst", "t") is False
    assert manager.query_offsets("dst", "t") == {0: 10, 1: 20}


def test_query_min_offset_in_all_group(manager):
    manager.commit_offset("g1", "t", 0, 10)
    manager.commit_offset("g1", "t", 1, 50)
    manager.commit_offset("g2", "t", 0, 30)
    manager.commit_offset("g2", "t", 1, 5)
    manager.commit_offset("g3", "t", 2, 1)
    manager.commit_offset("g3", "other", 0, 0)
    assert manager.query_min_offset_in_all_group("t") == {0: 10, 1: 5, 2: 1}
    assert manager.query_min_offset_in_all_group("t", ["g2"]) == {0: 10, 1: 50, 2: 1}
    assert manager.query_min_offset_in_all_group("t", "g2,g3") == {0: 10, 1: 50}
    # RocketMQ 4.9.7 deletes excluded groups from the table here; pymq does not
    assert manager.query_offset("g2", "t", 1) == 5 and manager.query_offset("g3", "t", 2) == 1
    # offsets below the store's min offset of the queue are ignored
    store_min = {0: 20, 1: 0, 2: 0}
    assert manager.query_min_offset_in_all_group(
        "t", min_offset_in_queue=lambda topic, qid: store_min[qid]) == {0: 30, 1: 5, 2: 1}
    assert manager.query_min_offset_in_all_group("unknown") == {}


@pytest.mark.parametrize("group, topic", [("a@b", "t"), ("g", "t@x"), ("@", "t"), ("", "t"), ("g", "")])
def test_names_that_would_corrupt_the_key_are_rejected(manager, group, topic):
    with pytest.raises(ValueError):
        manager.commit_offset(group, topic, 0, 1)
    with pytest.raises(ValueError):
        manager.query_offset(group, topic, 0)
    assert manager.offset_table() == {}


@pytest.mark.parametrize("queue_id, offset, error", [
    (-1, 0, ValueError), (2 ** 31, 0, ValueError), (0, -1, ValueError), (0, 2 ** 63, ValueError),
    (True, 0, TypeError), (0, False, TypeError), ("0", 0, TypeError), (0, 1.0, TypeError),
])
def test_bad_queue_ids_and_offsets_are_rejected(manager, queue_id, offset, error):
    with pytest.raises(error):
        manager.commit_offset("g", "t", queue_id, offset)
    assert manager.offset_table() == {} and not manager.dirty


def test_names_must_be_strings(manager):
    with pytest.raises(TypeError):
        manager.commit_offset(b"g", "t", 0, 1)
    with pytest.raises(TypeError):
        manager.which_group_by_topic(None)


# -- the file ------------------------------------------------------------------------------

def test_loads_a_real_rocketmq_file(tmp_path):
    write_file(tmp_path, REAL_FILE)
    m = ConsumerOffsetManager(tmp_path)
    assert m.load() and not m.dirty
    assert m.query_offsets(GROUP, "TopicTest") == {0: 250, 1: 250, 2: 250, 3: 250}
    assert m.query_offset(GROUP, f"%RETRY%{GROUP}", 0) == 0
    assert m.which_group_by_topic("TopicTest") == {GROUP}


def test_writes_rocketmq_s_format(manager):
    manager.commit_offset("group", "TopicTest", 1, 3)
    manager.commit_offset("group", "TopicTest", 0, 6)
    manager.commit_offset("g", "%RETRY%g", 0, 0)
    manager.persist()
    with open(manager.config_file_path(), encoding="utf-8") as f:
        text = f.read()
    assert text == ('{\n\t"offsetTable":{\n'
                    '\t\t"%RETRY%g@g":{0:0\n\t\t},\n'
                    '\t\t"TopicTest@group":{0:6,1:3\n\t\t}\n'
                    '\t}\n}')
    assert manager.encode(pretty=False) == \
        '{"offsetTable":{"%RETRY%g@g":{0:0},"TopicTest@group":{0:6,1:3}}}'


def test_persist_load_round_trip(tmp_path, manager):
    for q in range(8):
        manager.commit_offset("g", "t", q, q * 1000 + 7)
    manager.commit_offset("g2", "t", 0, 2 ** 63 - 1)
    manager.commit_offset("消费组", "主题", 0, 1)
    manager.persist()
    fresh = ConsumerOffsetManager(tmp_path)
    assert fresh.load()
    assert fresh.offset_table() == manager.offset_table()
    assert fresh.query_offset("g2", "t", 0) == 2 ** 63 - 1
    assert fresh.query_offset("消费组", "主题", 0) == 1


def test_standard_json_with_quoted_queue_ids_and_5x_data_version(tmp_path):
    write_file(tmp_path, '{"dataVersion":{"counter":2,"stateVersion":0,"timestamp":1700000000000},'
                         '"offsetTable":{"t@g":{"0":5,"12":9}}}')
    m = ConsumerOffsetManager(tmp_path)
    m.load()
    assert m.query_offsets("g", "t") == {0: 5, 12: 9}
    m.commit_offset("g", "t", 0, 6)
    m.persist()
    doc = loads_fastjson(open(m.config_file_path()).read())
    assert doc["offsetTable"] == {"t@g": {0: 6, 12: 9}}
    assert doc["dataVersion"] == {"counter": 2, "stateVersion": 0, "timestamp": 1700000000000}


@pytest.mark.parametrize("bad", [
    "", "garbage", '{"offsetTable":{"t@g":{0:', '{"offsetTable":[]}', '{"offsetTable":{"nosep":{0:1}}}',
    '{"offsetTable":{"a@b@c":{0:1}}}', '{"offsetTable":{"t@g":{0:"1"}}}', '{"offsetTable":{"t@g":{-1:1}}}',
    '{"offsetTable":{"t@g":{0:1.5}}}', '{"offsetTable":{"t@g":5}}', "[1]",
])
def test_damaged_file_falls_back_to_bak(tmp_path, bad):
    m = ConsumerOffsetManager(tmp_path)
    m.commit_offset("g", "t", 0, 1)
    m.persist()
    m.commit_offset("g", "t", 0, 2)
    m.persist()
    path = write_file(tmp_path, bad)
    fresh = ConsumerOffsetManager(tmp_path)
    assert fresh.load()
    assert fresh.query_offset("g", "t", 0) == 1
    assert fresh.dirty
    fresh.persist()                                    # repairs the main file, keeps the good .bak
    assert ConsumerOffsetManager(tmp_path).load()
    assert loads_fastjson(open(path + ".bak").read()) == {"offsetTable": {"t@g": {0: 1}}}


def test_both_files_damaged_raises(tmp_path):
    write_file(tmp_path, '{"offsetTable":{"t@g":{0:')
    write_file(tmp_path, "\x00" * 16, ".bak")
    with pytest.raises(CorruptStoreError, match="consumerOffset.json"):
        ConsumerOffsetManager(tmp_path).load()


def test_an_empty_object_is_an_empty_table(tmp_path):
    write_file(tmp_path, "{}")
    m = ConsumerOffsetManager(tmp_path)
    assert m.load() and m.offset_table() == {}


# -- threads ------------------------------------------------------------------------------

def test_concurrent_commits(tmp_path, manager):
    threads, rounds = 8, 1500
    errors = []
    start = threading.Barrier(threads + 1)

    def worker(n):
        try:
            start.wait()
            for i in range(rounds):
                manager.commit_offset(f"g{n}", "shared", n % 4, i)      # own (group, queue)
                manager.commit_offset("common", f"t{n % 3}", n, i)      # shared key, own queue
                manager.commit_offset("race", "t", 0, i)                 # everyone, same slot
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    def persister():
        start.wait()
        for _ in range(5):
            manager.persist()

    pool = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    pool.append(threading.Thread(target=persister))
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert not errors
    for n in range(threads):
        assert manager.query_offset(f"g{n}", "shared", n % 4) == rounds - 1
        assert manager.query_offset("common", f"t{n % 3}", n) == rounds - 1
    assert manager.query_offset("race", "t", 0) == rounds - 1
    assert manager.which_group_by_topic("shared") == {f"g{n}" for n in range(threads)}
    manager.persist()
    fresh = ConsumerOffsetManager(tmp_path)
    fresh.load()
    assert fresh.offset_table() == manager.offset_table()


# -- persist service ----------------------------------------------------------------------

def _wait_for(predicate, timeout_s=2.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return predicate()


def _on_disk(m, group, topic, queue_id):
    fresh = ConsumerOffsetManager(m.root_dir)
    fresh.load()
    return fresh.query_offset(group, topic, queue_id)


def test_persist_service_writes_within_the_interval(manager):
    svc = ConsumerOffsetPersistService(manager, interval_ms=50)
    svc.start()
    try:
        manager.commit_offset("g", "t", 0, 42)
        committed = time.monotonic()
        assert _wait_for(lambda: _on_disk(manager, "g", "t", 0) == 42)
        assert time.monotonic() - committed < 1.0
        assert _wait_for(lambda: not manager.dirty)
        manager.commit_offset("g", "t", 0, 43)
        assert _wait_for(lambda: _on_disk(manager, "g", "t", 0) == 43)
    finally:
        svc.shutdown()
    assert svc.last_error is None


def test_persist_service_skips_unchanged_tables(manager, monkeypatch):
    calls = []
    real_persist = manager.persist
    monkeypatch.setattr(manager, "persist", lambda: (calls.append(1), real_persist()))
    svc = ConsumerOffsetPersistService(manager, interval_ms=20)
    svc.start()
    try:
        time.sleep(0.15)
        assert calls == []                 # nothing changed: nothing written
        manager.commit_offset("g", "t", 0, 1)
        assert _wait_for(lambda: len(calls) == 1 and not manager.dirty)
        time.sleep(0.1)
        assert len(calls) == 1
        manager.commit_offset("g", "t", 0, 1)      # the same value is not a change
        time.sleep(0.1)
        assert len(calls) == 1
    finally:
        svc.shutdown()
    assert len(calls) == 1
    assert not os.path.exists(manager.config_file_path() + ".bak")


def test_persist_service_persists_at_shutdown(manager):
    svc = ConsumerOffsetPersistService(manager, interval_ms=60_000)
    svc.start()
    time.sleep(0.02)                       # the first pass has run and found nothing to do
    manager.commit_offset("g", "t", 3, 99)
    assert _on_disk(manager, "g", "t", 3) == -1
    svc.shutdown()
    assert svc.last_error is None
    assert _on_disk(manager, "g", "t", 3) == 99 and not manager.dirty


def test_persist_service_keeps_going_after_a_failed_write(manager, monkeypatch):
    failures = [2]
    real_persist = type(manager).persist

    def flaky(self=manager):
        if failures[0]:
            failures[0] -= 1
            raise OSError(28, "No space left on device")
        real_persist(self)

    monkeypatch.setattr(manager, "persist", flaky)
    svc = ConsumerOffsetPersistService(manager, interval_ms=20)
    manager.commit_offset("g", "t", 0, 5)
    svc.start()
    try:
        assert _wait_for(lambda: _on_disk(manager, "g", "t", 0) == 5)
    finally:
        svc.shutdown()
    assert isinstance(svc.last_error, OSError) and failures == [0]


def test_default_interval_is_the_store_config_s():
    m = ConsumerOffsetManager("/nonexistent")
    assert ConsumerOffsetPersistService(m).interval_s * 1000 == pymq.StoreConfig().flush_consumer_offset_interval
