"""The record's own CRC (``__CRC32#``, RocketMQ 5's enabledAppendPropCRC): written on
every put, checked by the one acceptance rule, hidden from decoded messages.

RocketMQ 4's BODYCRC covers the body only, so damage to a record's queue id, queue offset,
topic or properties went unnoticed: a record whose header was altered before the
dispatcher reached it (the last moments before a crash) was filed under the queue
position its header named, and the genuine record of that position, arriving later, was
taken for a duplicate and lost. The oracle here is ``zlib.crc32`` and ``struct`` over the
files, not pymq's own codec.
"""

from __future__ import annotations

import os
import shutil
import struct
import time
import zlib

import pytest
from conftest import small_config

import pymq
from pymq import testing

TOPIC = "T"


def records_on_disk(root: str) -> list[tuple[str, int, bytes]]:
    """(segment path, position, record bytes) of every record, by ``struct`` alone."""
    out = []
    for path, pos, size in testing.records(root):
        with open(path, "rb") as f:
            f.seek(pos)
            out.append((path, pos, f.read(size)))
    return out


def expected_entry(rec: bytes) -> bytes:
    crc = zlib.crc32(rec[:-20]) & 0x7FFFFFFF
    digits = "".join(str(crc // 10 ** i % 10) for i in range(10))    # least significant first
    return b"__CRC32#\x01" + digits.encode() + b"\x02"


def wait_dispatched(store, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while store.dispatch_behind_bytes():
        assert time.monotonic() < deadline, "the dispatcher did not catch up"
        time.sleep(0.002)


def build(root: str, n: int = 40, **cfg) -> list:
    out = []
    with pymq.MessageStore(root, small_config(**cfg)) as s:
        for i in range(n):
            r = s.put_message(pymq.Message(topic=TOPIC, body=b"body-%03d" % i, keys=[f"k{i}"], tags="a",
                                           queue_id=i % 2, properties={"p": "v%d" % i}))
            assert r.status is pymq.PutMessageStatus.PUT_OK
            out.append(r)
    return out


def test_every_record_ends_with_its_crc(tmp_path):
    root = str(tmp_path / "s")
    build(root, 10)
    with pymq.MessageStore(root, small_config()) as s:
        s.put_messages([pymq.Message(topic=TOPIC, body=b"b%d" % i, queue_id=0) for i in range(5)])
    recs = records_on_disk(root)
    assert len(recs) == 15
    for _, _, rec in recs:
        assert rec[-20:] == expected_entry(rec), rec[-40:]
        assert rec[-21:-20] == b"\x02"          # the entry before it is closed by a separator


def test_decoded_messages_do_not_show_it_and_puts_cannot_set_it(tmp_path):
    root = str(tmp_path / "s")
    with pymq.MessageStore(root, small_config()) as s:
        s.start()
        s.put_message(pymq.Message(topic=TOPIC, body=b"x", properties={"__CRC32#": "0000000000", "a": "b"}))
        s.put_messages([pymq.Message(topic=TOPIC, body=b"y", properties={"__CRC32#": "1"})])
        # the delay and timer transforms rewrite the properties: the client's entry stays out
        s.put_message(pymq.Message(topic=TOPIC, body=b"d", properties={"__CRC32#": "1234567890", "DELAY": "1"}))
        s.put_message(pymq.Message(topic=TOPIC, body=b"t", properties={"__CRC32#": "1", "TIMER_DELAY_SEC": "60"}))
        wait_dispatched(s)
        g = s.get_message("g", TOPIC, 0, 0, 8)
        assert [m.body for m in g.messages] == [b"x", b"y"]
        for m in g.messages:
            assert "__CRC32#" not in m.properties, m.properties
        assert g.messages[0].properties.get("a") == "b"
        m = s.look_message_by_offset(g.messages[0].commitlog_offset)
        assert "__CRC32#" not in m.properties
    for _, _, rec in records_on_disk(root):
        assert rec.count(b"__CRC32#") == 1 and rec[-20:] == expected_entry(rec)


def _field_damage(rec_path: str, pos: int, rec: bytes, what: str) -> None:
    with open(rec_path, "r+b") as f:
        if what == "queue-id":
            f.seek(pos + 12)
            f.write(struct.pack(">i", struct.unpack_from(">i", rec, 12)[0] ^ 1))
        elif what == "queue-offset":
            f.seek(pos + 20)
            f.write(struct.pack(">q", struct.unpack_from(">q", rec, 20)[0] ^ 4))
        elif what == "property":
            at = rec.index(b"p\x01v") + 2
            f.seek(pos + at)
            f.write(b"w")
        elif what == "crc-digit":
            f.seek(pos + len(rec) - 2)
            f.write(b"9" if rec[-2:-1] != b"9" else b"8")


@pytest.mark.parametrize("what", ["queue-id", "queue-offset", "property", "crc-digit"])
def test_damage_outside_the_body_is_caught_on_read(tmp_path, what):
    """A record whose header, properties or CRC digits changed after it was dispatched is
    never returned: the pull skips and reports it, the others all come back."""
    root = str(tmp_path / "s")
    written = build(root)
    path, pos, rec = records_on_disk(root)[20]            # queue 0, offset 10
    _field_damage(path, pos, rec, what)
    with pymq.MessageStore(root, small_config(), read_only=True) as s:
        g = s.get_message("g", TOPIC, 0, 0, 64)
        assert [m.queue_offset for m in g.messages] == [o for o in range(20) if o != 10]
        assert g.damaged == 1
        assert s.look_message_by_offset(written[20].commitlog_offset) is None
        assert s.stats()["damage"]["crc_errors"] + s.stats()["damage"]["bad_entries"] >= 1


def test_header_altered_before_dispatch_takes_no_other_record_place(tmp_path):
    """The case BODYCRC cannot catch: the queue id and queue offset of queue 1's record
    at offset 15 are altered so that it names queue 0 offset 16, the position of the next
    record of queue 0, before any queue entry was written for either (the queues are lost,
    the abort marker says the writer crashed). Recovery must not file the altered record
    there: queue 0 offset 16 is the genuine record, queue 1 offset 15 is reported lost and
    never handed out again, every other record is readable."""
    root = str(tmp_path / "s")
    written = build(root)
    victim = written[31]                                   # queue 1, offset 15
    genuine = written[32]                                  # queue 0, offset 16
    assert (victim.queue_offset, genuine.queue_offset) == (15, 16)
    for path, pos, rec in records_on_disk(root):
        if int(os.path.basename(path)) + pos == victim.commitlog_offset:
            with open(path, "r+b") as f:
                f.seek(pos + 12)
                f.write(struct.pack(">i", 0))
                f.seek(pos + 20)
                f.write(struct.pack(">q", 16))
    shutil.rmtree(os.path.join(root, "consumequeue"))
    testing.create_abort(root)
    with pymq.MessageStore(root, small_config()) as s:
        s.start()
        wait_dispatched(s)
        q0 = s.get_message("g", TOPIC, 0, 0, 64)
        assert [(m.queue_offset, m.body) for m in q0.messages] == [(i, b"body-%03d" % (2 * i)) for i in range(20)]
        q1 = s.get_message("g", TOPIC, 1, 0, 64)
        assert [m.queue_offset for m in q1.messages] == [o for o in range(20) if o != 15]
        assert q1.damaged == 1
        r = s.put_message(pymq.Message(topic=TOPIC, body=b"new", queue_id=1))
        assert r.queue_offset == 20
        r = s.put_message(pymq.Message(topic=TOPIC, body=b"new", queue_id=0))
        assert r.queue_offset == 20


def test_records_without_it_are_still_read(tmp_path):
    """RocketMQ 4's records (and pymq's with the setting off) carry no entry: their BODYCRC
    is their checksum. A store holding both kinds reads every record."""
    root = str(tmp_path / "s")
    build(root, 10, enabled_append_prop_crc=False)
    build(root, 10)
    recs = records_on_disk(root)
    assert [rec.count(b"__CRC32#") for _, _, rec in recs] == [0] * 10 + [1] * 10
    with pymq.MessageStore(root, small_config(), read_only=True) as s:
        got = s.get_message("g", TOPIC, 0, 0, 64).messages + s.get_message("g", TOPIC, 1, 0, 64).messages
        assert sorted(m.body for m in got) == sorted([b"body-%03d" % i for i in range(10)] * 2)
        for m in got:
            assert m.properties["p"].startswith("v") and "__CRC32#" not in m.properties
