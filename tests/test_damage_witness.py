"""Named cases for the rules that decide between a damaged queue entry, index file or record
header (issue 22): each rule the fuzz (``test_damage_fuzz*``) meets at random, once, on
purpose, with the store of ``test_damage_cases`` (130 messages of topic ``T`` alternating
between queues 0 and 1, 8 KiB segments, 16-entry queue files, 16-slot index files).

* an index file whose structure the builder could not have written is found by
  ``IndexFile.first_problem`` and rebuilt from the log: the newest at open, an older one
  when a query first reaches it; every key is found afterwards;
* a record whose QUEUEID alone was altered is never returned and never filed under the
  queue it names: its own CRC (``__CRC32#``) fails; a record without one (RocketMQ 4's)
  still passes the acceptance rule, as BODYCRC covers the body only, and its queue entry
  is the witness that keeps its place;
* the newest record of a queue destroyed before the dispatcher reached it (a crash) keeps
  its queue offset: no new message gets it;
* a queue whose newest entries were zeroed after a clean exit gets them back from the log.
"""

from __future__ import annotations

import os
import struct

import pytest
from test_damage_cases import QUEUES, TOPIC, build, cfg, cq_units, pull_all, wait_dispatched

import pymq
from pymq import testing
from pymq._core.index_file import IndexFile, index_file_size
from pymq._core.mapped_file import MappedFile

SLOTS, ENTRIES = 16, 512            # test_damage_cases' index sizes
ENTRY_AT = 40 + SLOTS * 4            # byte position of index entry 0


def _index_problem(path: str) -> str | None:
    mf = MappedFile(path, index_file_size(SLOTS, ENTRIES), writable=False)
    try:
        return IndexFile(mf, SLOTS, ENTRIES).first_problem()
    finally:
        mf.close()


def _damage_index(path: str, how: str) -> None:
    """One structural damage to index file ``path`` (entries 1.. are in use)."""
    with open(path, "r+b") as f:
        data = bytearray(f.read())
        e = lambda i: ENTRY_AT + i * 20          # noqa: E731
        if how == "hash":                        # another slot's hash: the chain through it is broken
            h = struct.unpack_from(">i", data, e(10))[0]
            struct.pack_into(">i", data, e(10), h + 1)
        elif how == "link":                      # a link to an entry another one links to already
            struct.pack_into(">i", data, e(30) + 16, struct.unpack_from(">i", data, e(29) + 16)[0] or 1)
        elif how == "slot":                      # a slot pointing past the counted entries
            struct.pack_into(">i", data, 40 + 3 * 4, struct.unpack_from(">i", data, 36)[0] + 5)
        elif how == "order":                     # an entry naming a record after the next entry's
            struct.pack_into(">q", data, e(10) + 4, struct.unpack_from(">q", data, e(40) + 4)[0])
        elif how == "header":                    # the header's end offset
            struct.pack_into(">q", data, 24, struct.unpack_from(">q", data, 24)[0] + 1)
        f.seek(0)
        f.write(data)


@pytest.mark.parametrize("which", ["newest", "oldest"])
@pytest.mark.parametrize("how", ["hash", "link", "slot", "order", "header"])
def test_damaged_index_file_is_rebuilt(tmp_path, how, which):
    root = str(tmp_path / "s")
    written = build(root, n=1000)               # 2,000 keys: four index files of 511 entries
    files = testing.segments(root, "index")
    assert len(files) >= 4, files
    path = files[-1] if which == "newest" else files[0]
    assert _index_problem(path) is None, "the builder wrote a file its own rule rejects"
    _damage_index(path, how)
    problem = _index_problem(path)
    assert problem is not None, f"{how} damage in the {which} index file not found"
    with pymq.MessageStore(root, cfg()) as s:
        s.start()
        wait_dispatched(s)
        missed = [w.key for w in written
                  if [m.commitlog_offset for m in s.query_message(TOPIC, w.key)] != [w.offset]]
        assert not missed, f"{len(missed)} keys missed after {how} damage in the {which} file: {missed[:5]}"
        assert all(s.query_message(TOPIC, w.uniq) for w in written[::50])
        damaged = s.stats()["damage"]["damaged_index_files"]
        assert [d["path"] for d in damaged] == [path] and damaged[0]["rebuilt"], damaged
    for p in testing.segments(root, "index"):
        assert _index_problem(p) is None, f"{p} after the rebuild: {_index_problem(p)}"


def _flip_queue_id(root: str, w, new_queue_id: int) -> None:
    seg = w.offset // (8 * 1024) * (8 * 1024)
    path = os.path.join(root, "commitlog", f"{seg:020d}")
    with open(path, "r+b") as f:
        f.seek(w.offset - seg + 12)
        f.write(struct.pack(">i", new_queue_id))


@pytest.mark.parametrize("record_crc", [True, False], ids=["record-crc", "body-crc-only"])
@pytest.mark.parametrize("abort", [False, True], ids=["clean", "crash"])
def test_altered_queue_id_is_witnessed_not_refiled(tmp_path, abort, record_crc):
    root = str(tmp_path / "s")
    config = cfg(enabled_append_prop_crc=record_crc)
    written = build(root, config=config)
    victim = written[40]                         # queue 0, queue offset 20
    _flip_queue_id(root, victim, 7)
    if abort:
        testing.create_abort(root)
    mine = [w for w in written if w.queue_id == 0]
    with pymq.MessageStore(root, config) as s:
        s.start()
        wait_dispatched(s)
        assert s.get_max_offset_in_queue(TOPIC, 0) == len(mine)
        pulled, damaged, wrong = pull_all(s, 0, 0, len(mine))
        assert not wrong, wrong
        assert [m.queue_offset for m in pulled] == [w.queue_offset for w in mine if w is not victim]
        assert damaged >= 1
        assert (TOPIC, 7) not in s.get_queue_offset_table(), "the record was filed under the queue its header names"
        if not record_crc:                       # with it, the record is damage like any other
            assert s.stats()["damage"]["altered_headers"] >= 1
        r = s.put_message(pymq.Message(topic=TOPIC, body=b"after", queue_id=0))
        assert r.queue_offset == len(mine)
    assert not os.path.isdir(os.path.join(root, "consumequeue", TOPIC, "7"))


@pytest.mark.parametrize("dispatched", [False, True], ids=["undispatched", "dispatched"])
def test_destroyed_newest_record_keeps_its_offset_after_a_crash(tmp_path, dispatched):
    root = str(tmp_path / "s")
    written = build(root)
    last = written[-1]
    assert last.queue_id == 1
    ones = [w for w in written if w.queue_id == 1]
    seg = last.offset // (8 * 1024) * (8 * 1024)
    testing.flip_bytes(os.path.join(root, "commitlog", f"{seg:020d}"), last.offset - seg + 90, 4)   # in the body
    if not dispatched:                           # the crash came before the dispatcher reached it
        cq = testing.segments(root, f"consumequeue/{TOPIC}/1")[-1]
        testing.zero_bytes(cq, last.queue_offset * 20 % (16 * 20), 20)
    testing.create_abort(root)
    with pymq.MessageStore(root, cfg()) as s:
        s.start()
        wait_dispatched(s)
        assert s.get_max_offset_in_queue(TOPIC, 1) == len(ones), "the destroyed record's offset was given up"
        r = s.put_message(pymq.Message(topic=TOPIC, body=b"after", queue_id=1))
        assert r.queue_offset == len(ones), f"a new message got queue offset {r.queue_offset}"
        wait_dispatched(s)
        pulled, damaged, wrong = pull_all(s, 1, 0, len(ones) + 1)
        assert not wrong, wrong
        assert [m.body for m in pulled] == [w.body for w in ones[:-1]] + [b"after"]
        assert damaged == 1


def test_zeroed_newest_entries_come_back_after_a_clean_exit(tmp_path):
    root = str(tmp_path / "s")
    written = build(root)
    mine = [w for w in written if w.queue_id == 0]
    cq = testing.segments(root, f"consumequeue/{TOPIC}/0")[-1]
    first = (len(mine) - 3) * 20 % (16 * 20)
    testing.zero_bytes(cq, first, 3 * 20)        # the queue's last three entries
    with pymq.MessageStore(root, cfg()) as s:
        s.start()
        wait_dispatched(s)
        assert s.get_max_offset_in_queue(TOPIC, 0) == len(mine)
        pulled, damaged, wrong = pull_all(s, 0, 0, len(mine))
        assert not wrong and damaged == 0, (wrong, damaged)
        assert [(m.queue_offset, m.body) for m in pulled] == [(w.queue_offset, w.body) for w in mine]
    assert cq_units(root, TOPIC, 0, len(mine))[-1][:2] == (mine[-1].offset, mine[-1].size)
    assert QUEUES == 2
