"""The dispatcher's GIL-free walk (issue 27, item 3): what used to take the GIL for the
rest of a chunk now takes it for one request, or not at all.

* A consume queue's sparse file reserves its next chunk of disk without leaving the
  GIL-free path: its Python slow path runs once, for the file's first entry, however many
  chunks the entries fill.
* A chunk of records for many queues met for the first time (more than the handful taken
  one at a time) and for known ones files every entry in its queue, in log order, with
  its queue offset, and indexes every key, while the index file rolls inside the chunk.
"""

from __future__ import annotations

import time

import pymq

from conftest import small_config


def wait_dispatched(store, timeout=10.0):
    deadline = time.monotonic() + timeout
    while store.dispatch_behind_bytes():
        assert time.monotonic() < deadline, "dispatch did not catch up"
        time.sleep(0.002)


def test_sparse_queue_chunks_are_reserved_without_the_slow_path(tmp_path):
    cfg = small_config(commitlog_file_size=4 << 20, consume_queue_entries=10_000,
                       consume_queue_reserve_bytes=20 * 100)           # a chunk holds 100 entries
    with pymq.MessageStore(tmp_path / "s", cfg) as store:
        first = store.put_message(pymq.Message("T", b"0"))
        wait_dispatched(store)
        cq = store.consume_queues.find_consume_queue("T", 0, create=False)
        slow = []
        real = cq._put_slow

        def counted(*args):
            slow.append(args)
            return real(*args)

        cq._put_slow = counted
        offsets = [first.commitlog_offset]
        for i in range(1, 1000):
            offsets.append(store.put_message(pymq.Message("T", b"%d" % i)).commitlog_offset)
        wait_dispatched(store)
        assert slow == []                                  # ten chunks, none through Python
        assert store.get_max_offset_in_queue("T", 0) == 1000
        assert [cq.get_unit(i)[0] for i in range(1000)] == offsets
        g = store.get_message("g", "T", 0, 990, 32)
        assert [m.body for m in g.messages] == [b"%d" % i for i in range(990, 1000)]


def test_a_chunk_of_many_new_queues_files_everything_in_order(tmp_path):
    queues = 40                                            # new queues in one chunk: > MAX_SLOW
    cfg = small_config(commitlog_file_size=4 << 20, index_hash_slots=64, index_max_entries=300)
    with pymq.MessageStore(tmp_path / "s", cfg) as store:
        sent = {}                                          # (queue, queue offset) -> (offset, key)
        with store.reput_service._lock:                    # all of it in the same chunk
            for i in range(600):
                q = i % queues
                r = store.put_message(pymq.Message("T", b"m%d" % i, keys=[f"k{i}"], queue_id=q))
                assert r.is_ok()
                sent[(q, r.queue_offset)] = (r.commitlog_offset, f"k{i}")
        wait_dispatched(store)
        for q in range(queues):
            n = store.get_max_offset_in_queue("T", q)
            assert n == 15
            g = store.get_message("g", "T", q, 0, 32)
            assert [(m.queue_id, m.queue_offset) for m in g.messages] == [(q, o) for o in range(n)]
            assert [m.commitlog_offset for m in g.messages] == [sent[(q, o)][0] for o in range(n)]
        assert len(store.index_service.index_files) > 1     # the index rolled inside the chunk
        for offset, key in sent.values():
            assert [m.commitlog_offset for m in store.query_message("T", key)] == [offset]
