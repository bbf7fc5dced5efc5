"""LMQ multi-dispatch (RocketMQ's ``INNER_MULTI_DISPATCH``): a record is filed in each LMQ
it names, at the offset ``INNER_MULTI_QUEUE_OFFSET`` gives, besides its own queue; reads
of an LMQ report the message's place there; the queues survive a reopen."""

from __future__ import annotations

import os
import time

import pymq


def _config():
    return pymq.StoreConfig(commitlog_file_size=256 * 1024, consume_queue_entries=1024, index_hash_slots=64,
                            index_max_entries=256, warm_mapped_file_enable=False)


def _put(store, body, names, offsets, queue_id=0):
    m = pymq.Message("Parent", body, properties={"INNER_MULTI_DISPATCH": names,
                                                 "INNER_MULTI_QUEUE_OFFSET": offsets})
    m.queue_id = queue_id
    assert store.put_message(m).status is pymq.PutMessageStatus.PUT_OK


def _dispatched(store):
    deadline = time.monotonic() + 10
    while store.dispatch_behind_bytes() and time.monotonic() < deadline:
        time.sleep(0.002)


def test_records_are_filed_in_each_lmq_they_name(tmp_path):
    path = tmp_path / "s"
    with pymq.MessageStore(path, _config()) as s:
        _put(s, b"a0", "%LMQ%a", "0", queue_id=2)
        _put(s, b"a1b0", "%LMQ%a,%LMQ%b", "1,0", queue_id=1)
        _put(s, b"bad", "%LMQ%a,%LMQ%b", "2", queue_id=1)      # lists of different lengths: no LMQ entry
        _dispatched(s)
        a = s.get_message("g", "%LMQ%a", 0, 0, 10)
        assert [(m.body, m.topic, m.queue_id, m.queue_offset) for m in a.messages] == [
            (b"a0", "Parent", 0, 0), (b"a1b0", "Parent", 0, 1)]
        assert [m.body for m in s.get_message("g", "%LMQ%b", 0, 0, 10).messages] == [b"a1b0"]
        parent = s.get_message("g", "Parent", 1, 0, 10)
        assert [(m.body, m.queue_id, m.queue_offset) for m in parent.messages] == [(b"a1b0", 1, 0), (b"bad", 1, 1)]
    # RocketMQ's layout: consumequeue/%LMQ%a/0, 20-byte entries
    assert os.path.getsize(next((tmp_path / "s" / "consumequeue" / "%LMQ%a" / "0").iterdir())) > 0
    with pymq.MessageStore(path, _config()) as s:
        assert s.get_max_offset_in_queue("%LMQ%a", 0) == 2
        assert s.get_max_offset_in_queue("%LMQ%b", 0) == 1
        assert [m.queue_offset for m in s.get_message("g", "%LMQ%a", 0, 1, 10).messages] == [1]


def test_a_replay_files_lmq_entries_again_at_their_offsets(tmp_path):
    """The consume queues are rebuilt from the log (queues removed): the LMQ entries come
    back at the offsets the records carry."""
    path = tmp_path / "s"
    with pymq.MessageStore(path, _config()) as s:
        for i in range(5):
            _put(s, str(i).encode(), "%LMQ%x", str(i), queue_id=i % 2)
    for root, dirs, files in os.walk(path / "consumequeue"):
        for f in files:
            os.remove(os.path.join(root, f))
    with pymq.MessageStore(path, _config()) as s:
        _dispatched(s)
        r = s.get_message("g", "%LMQ%x", 0, 0, 10)
        assert [(int(m.body), m.queue_offset) for m in r.messages] == [(i, i) for i in range(5)]


def test_offsets_that_are_not_java_longs_file_nothing_and_the_walk_goes_on(tmp_path):
    # '²' passes str.isdigit but not int(); 20 digits do not fit the consume queue's int64:
    # either one used to raise in the dispatcher at every pass, so nothing after it was filed
    with pymq.MessageStore(tmp_path / "s", _config()) as s:
        _put(s, b"sup", "%LMQ%a", "\u00b2")
        _put(s, b"huge", "%LMQ%a", "99999999999999999999")
        _put(s, b"max", "%LMQ%a", "9223372036854775807")
        _put(s, b"ok", "%LMQ%a", "0")
        assert s.put_message(pymq.Message("After", b"after")).status is pymq.PutMessageStatus.PUT_OK
        _dispatched(s)
        assert s.dispatch_behind_bytes() == 0
        assert [m.body for m in s.get_message("g", "Parent", 0, 0, 10).messages] == [b"sup", b"huge", b"max", b"ok"]
        assert [m.body for m in s.get_message("g", "%LMQ%a", 0, 0, 10).messages] == [b"ok"]
        assert [m.body for m in s.get_message("g", "After", 0, 0).messages] == [b"after"]


def test_names_that_are_not_lmqs_file_nothing_and_no_path_leaves_the_store(tmp_path):
    """A record may name only LMQs: an ordinary topic (it would put itself into another
    topic's queue), a path, an empty tail or a name too long gets no entry, and no
    directory is made for it; a good name beside them is still filed."""
    path = tmp_path / "s"
    bad = ["Other", "%LMQ%", "%LMQ%/../../escape", "%LMQ%..%2F", "%LMQ%a b", "%LMQ%" + "x" * 251]
    with pymq.MessageStore(path, _config()) as s:
        s.put_message(pymq.Message("Other", b"own", queue_id=0))
        _put(s, b"r", ",".join(bad + ["%LMQ%ok"]), ",".join(["0"] * (len(bad) + 1)))
        _dispatched(s)
        assert [m.body for m in s.get_message("g", "Other", 0, 0, 10).messages] == [b"own"]
        assert [m.body for m in s.get_message("g", "%LMQ%ok", 0, 0, 10).messages] == [b"r"]
    made = sorted(p.name for p in (path / "consumequeue").iterdir())
    assert made == ["%LMQ%ok", "Other", "Parent"], made
    assert not (tmp_path / "escape").exists() and not (path / "escape").exists()
