"""Store-level acceptance: what put_message / put_messages write is RocketMQ's v1 format,
byte for byte, read back by an independent decoder (tests/rocketmq_decoder.py), and what
a reopened store reads back is what was put."""

from __future__ import annotations

import ipaddress
import os
import random
import re
import time
import zlib

import pytest

import pymq
from pymq._core.layout import cal_msg_length

from conftest import small_config
from rocketmq_decoder import (
    SAMPLE_RECORD,
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE,
    decode_record,
    parse_properties,
    segment_files,
    walk_commitlog,
    walk_segment,
)

FILE_SIZE = 64 * 1024
MAX_MESSAGE_SIZE = 2048

# Properties RocketMQ itself may add to a stored message (STORE_SPEC 1.7); anything else in
# a stored map must have been put by the test.
SYSTEM_PROPERTIES = {
    "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID", "TRAN_MSG",
    "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG",
    "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME", "MSG_REGION", "TRACE_ON", "UNIQ_KEY",
    "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "CLUSTER", "MSG_TYPE",
}


# -- the decoder's self-test (STORE_SPEC 1.8 sample record) -------------------------------------



def test_decoder_decodes_the_spec_sample_exactly():
    raw = SAMPLE_RECORD
    assert len(raw) == 114
    rec = decode_record(raw, 0)
    expected = {
        "blank": False, "position": 0, "total_size": 114, "magic": 0xDAA320A7,
        "body_crc": 0x3610A686, "queue_id": 0, "flag": 0, "queue_offset": 0,
        "physical_offset": 0, "sys_flag": 0, "born_timestamp": 1700000000000,
        "born_host": "127.0.0.1:50000", "born_host_raw": bytes([127, 0, 0, 1, 0, 0, 0xC3, 0x50]),
        "store_timestamp": 1700000000123, "store_host": "127.0.0.1:10911",
        "store_host_raw": bytes([127, 0, 0, 1, 0, 0, 0x2A, 0x9F]),
        "reconsume_times": 0, "prepared_transaction_offset": 0, "body": b"hello",
        "topic": "TopicTest", "raw_properties": "TAGS\x01TagA", "properties": {"TAGS": "TagA"},
        "record_crc": None,
    }
    assert rec == expected
    assert rec["body_crc"] == zlib.crc32(b"hello") & 0x7FFFFFFF
    # the same record inside a larger buffer, followed by a blank of the remaining size
    buf = b"\xAA" * 10 + raw + (8 + 6).to_bytes(4, "big") + BLANK_MAGIC_CODE.to_bytes(4, "big") + b"\0" * 6
    assert decode_record(buf, 10) == {**expected, "position": 10}
    assert decode_record(buf, 124) == {"blank": True, "total_size": 14, "magic": BLANK_MAGIC_CODE,
                                       "position": 124}


def test_decoder_properties_parse_is_4_9_7s():
    assert parse_properties("") == {}
    assert parse_properties("a\x01b") == {"a": "b"}
    assert parse_properties("a\x01b\x02c\x01d") == {"a": "b", "c": "d"}
    # 4.9.7 keeps further \x01 in the value; too-short segments and empty keys/values skipped
    assert parse_properties("k\x01v\x01x\x02ab\x02\x01vv\x02kk\x01") == {"k": "v\x01x"}
    assert parse_properties("名\x01値") == {"名": "値"}


def test_decoder_rejects_garbage(tmp_path):
    raw = bytearray(SAMPLE_RECORD)
    bad = bytes(raw)
    with pytest.raises(ValueError):
        decode_record(bad[:100], 0)                   # runs past the buffer
    raw2 = bytearray(raw)
    raw2[4] ^= 1
    with pytest.raises(ValueError):
        decode_record(bytes(raw2), 0)                 # bad magic
    raw3 = bytearray(raw)
    raw3[0:4] = (115).to_bytes(4, "big")
    with pytest.raises(ValueError):
        decode_record(bytes(raw3) + b"\0", 0)         # size != calMsgLength
    seg = tmp_path / "00000000000000000000"
    seg.write_bytes(bytes(raw) * 2 + b"\0" * 100)
    recs = walk_segment(seg)
    assert [r["position"] for r in recs] == [0, 114]


# -- random round trip ----------------------------------------------------------------------------

TOPICS = ["TopicTest", "Topic_%|-9", "主题", "тема-1", "🎉emoji", "é" * 63 + "x"]   # last: 127 bytes
TAGS = [None, None, "TagA", "TagB", "标签", "тег||x", "Tag-🎉"]
KEYS = ["order-1", "キー", "ключ", "k😀", "id:42", "ünï", "k" * 40]
PROP_NAMES = ["a", "名前", "prop-ü", "x.y", "emoji😀"]
PROP_VALUES = ["b", "値 with space", "ünïcödé", "=:;,", "😀" * 5, "v" * 100]
BORN_HOSTS = [None, "10.1.2.3:4567", "[2001:db8::1]:5000", "192.168.0.255:65535", "[fe80::1:2]:0"]
FLAGS = [0, 1, -1, 2 ** 31 - 1, -2 ** 31]
QUEUE_IDS = [0, 1, 2, 3, 7, 1023, 1024, 5000]


def host_raw(host: str) -> bytes:
    """Independent packing of "ip:port" / "[v6]:port" into the on-disk host field."""
    if host.startswith("["):
        addr, port = host[1:].split("]:")
        return ipaddress.IPv6Address(addr).packed + int(port).to_bytes(4, "big")
    addr, port = host.rsplit(":", 1)
    return ipaddress.IPv4Address(addr).packed + int(port).to_bytes(4, "big")


def is_v6(host: str) -> bool:
    return host.startswith("[")


def props_bytes_upper_bound(user_props, tags, keys, uniq_len=56) -> int:
    """Upper bound of the serialized properties string (UTF-8 bytes), UNIQ_KEY included."""
    entries = dict(user_props or {})
    if tags is not None:
        entries["TAGS"] = tags
    if keys:
        entries["KEYS"] = " ".join(keys)
    entries.setdefault("UNIQ_KEY", "X" * uniq_len)
    return sum(len(k.encode()) + 1 + len(v.encode()) + 1 for k, v in entries.items())


class Expected:
    """What the test put, and what the store answered."""

    __slots__ = ("topic", "body", "tags", "keys", "user_props", "queue_id", "flag", "born_host",
                 "born_ts", "t_before", "offset", "queue_offset", "store_ts", "msg_id", "uniq",
                 "batch")

    def message(self) -> pymq.Message:
        return pymq.Message(topic=self.topic, body=self.body, tags=self.tags, keys=self.keys,
                            properties=dict(self.user_props) if self.user_props is not None else None,
                            queue_id=self.queue_id, flag=self.flag, born_timestamp=self.born_ts,
                            born_host=self.born_host)


def random_expected(rng: random.Random, topic: str, queue_id: int, small: bool) -> Expected:
    e = Expected()
    e.topic = topic
    e.queue_id = queue_id
    roll = rng.random()
    if small:
        n = rng.randrange(0, 150)
    elif roll < 0.05:
        n = 0
    elif roll < 0.10:
        n = MAX_MESSAGE_SIZE
    elif roll < 0.20:
        n = rng.randrange(600, MAX_MESSAGE_SIZE)
    else:
        n = rng.randrange(1, 600)
    e.body = rng.randbytes(n)
    e.tags = rng.choice(TAGS)
    e.keys = rng.sample(KEYS, rng.randrange(1, 4)) if rng.random() < 0.5 else None
    if rng.random() < 0.4:
        e.user_props = {name: rng.choice(PROP_VALUES) for name in rng.sample(PROP_NAMES, rng.randrange(0, 3))}
    else:
        e.user_props = None
    if not small and rng.random() < 0.02:
        e.user_props = dict(e.user_props or {}, UNIQ_KEY=f"CUSTOM-{rng.randrange(10 ** 9)}-ключ")
    e.flag = rng.choice(FLAGS) if rng.random() < 0.5 else rng.randrange(-2 ** 31, 2 ** 31)
    e.born_host = rng.choice(BORN_HOSTS)
    e.born_ts = rng.randrange(1, 2 ** 41) if rng.random() < 0.3 else 0
    e.batch = None
    return e


def run_puts(store, rng: random.Random, count: int) -> list:
    """Put ``count`` random messages, singly and in batches; returns the Expected list in
    put order, checking each result as it comes."""
    out = []
    next_qoff = {}
    while len(out) < count:
        topic = rng.choice(TOPICS)
        qid = rng.choice(QUEUE_IDS)
        if rng.random() < 0.15 and count - len(out) >= 2:
            n = min(rng.randrange(2, 7), count - len(out))
            batch = [random_expected(rng, topic, qid, small=True) for _ in range(n)]
            while sum(20 + len(e.body) + 2 + props_bytes_upper_bound(e.user_props, e.tags, e.keys)
                      for e in batch) > MAX_MESSAGE_SIZE:
                batch.pop()
            msgs = [e.message() for e in batch]
            t_before = int(time.time() * 1000)
            r = store.put_messages(msgs)
            assert r.status is pymq.PutMessageStatus.PUT_OK, (r, getattr(r, "error", None))
            assert r.msg_num == len(batch)
            base = next_qoff.get((topic, qid), 0)
            assert r.queue_offset == base
            offsets = r.commitlog_offsets
            ids = r.msg_ids
            assert len(offsets) == len(batch) and len(ids) == len(batch)
            assert r.msg_id == ",".join(ids)
            assert r.commitlog_offset == offsets[0]
            for i, e in enumerate(batch):
                e.batch = len(out)          # batch id: index of its first message
                e.t_before = t_before
                e.offset = offsets[i]
                e.queue_offset = base + i
                e.store_ts = r.store_timestamp
                e.msg_id = ids[i]
                e.uniq = None
            assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
            assert offsets[0] // FILE_SIZE == offsets[-1] // FILE_SIZE     # one segment
            assert offsets[-1] < offsets[0] + r.wrote_bytes <= (offsets[0] // FILE_SIZE + 1) * FILE_SIZE - 8
            next_qoff[(topic, qid)] = base + len(batch)
            out.extend(batch)
        else:
            e = random_expected(rng, topic, qid, small=False)
            e.t_before = int(time.time() * 1000)
            r = store.put_message(e.message())
            assert r.status is pymq.PutMessageStatus.PUT_OK, (r, getattr(r, "error", None))
            assert r.msg_num == 1
            e.offset = r.commitlog_offset
            e.queue_offset = r.queue_offset
            assert r.queue_offset == next_qoff.get((topic, qid), 0)
            next_qoff[(topic, qid)] = r.queue_offset + 1
            e.store_ts = r.store_timestamp
            e.msg_id = r.msg_id
            e.uniq = r.uniq_key
            if e.user_props and "UNIQ_KEY" in e.user_props:
                assert e.uniq == e.user_props["UNIQ_KEY"]
            out.append(e)
    return out


def expected_props(e: Expected) -> dict:
    props = dict(e.user_props or {})
    if e.tags is not None:
        props["TAGS"] = e.tags
    if e.keys:
        props["KEYS"] = " ".join(e.keys)
    return props


def check_uniq_key(value, store_host: str, given=None) -> None:
    if given is not None:
        assert value == given
        return
    n = 32 if not is_v6(store_host) else 56
    assert value is not None and re.fullmatch(f"[0-9A-F]{{{n}}}", value), value


def check_log_against(expected: list, commitlog_dir: str, store_host: str, seed: int) -> None:
    """Walk every segment with the independent decoder and compare with ``expected``."""
    segs = segment_files(commitlog_dir)
    assert segs, "no segments"
    for i, (start, path) in enumerate(segs):
        assert start == i * FILE_SIZE, f"segment names are not a gap-free run: {segs}"
        assert os.path.getsize(path) == FILE_SIZE, path
        assert os.path.basename(path) == f"{start:020d}"
    records = walk_commitlog(commitlog_dir)
    msgs = [r for r in records if not r["blank"]]
    assert len(msgs) == len(expected), f"seed={seed}"
    # size of the put (one message or a whole batch) that starts at each offset
    unit_size = {}
    for rec, e in zip(msgs, expected):
        first = expected[e.batch].offset if e.batch is not None else e.offset
        unit_size[first] = unit_size.get(first, 0) + rec["total_size"]

    # one blank at the end of every segment but the last, closing it exactly
    by_segment = {}
    for r in records:
        by_segment.setdefault(r["segment"], []).append(r)
    last_segment = segs[-1][0]
    for start, _ in segs:
        recs = by_segment.get(start, [])
        assert recs, f"segment {start} holds no record"
        assert recs[0]["position"] == 0
        blanks = [r for r in recs if r["blank"]]
        if start == last_segment:
            assert not blanks, f"the last segment ends in a blank: {blanks}"
            continue
        assert len(blanks) == 1 and recs[-1] is blanks[0], f"segment {start}"
        blank = blanks[0]
        assert blank["total_size"] == FILE_SIZE - blank["position"], blank
        assert blank["total_size"] >= 8
        # the blank was needed: the next record did not fit with 8 bytes to spare
        nxt = by_segment[start + FILE_SIZE][0]
        assert blank["position"] + unit_size[nxt["offset"]] + 8 > FILE_SIZE, (blank, unit_size[nxt["offset"]])

    store_raw = host_raw(store_host)
    uniqs = set()
    seen_qoff = {}
    prev_end = None
    for rec, e in zip(msgs, expected):
        ctx = f"seed={seed} offset={e.offset}"
        assert rec["offset"] == e.offset, ctx
        assert rec["physical_offset"] == rec["offset"], ctx
        if prev_end is not None and rec["position"] != 0:
            assert rec["offset"] == prev_end, ctx        # records are contiguous within a segment
        prev_end = rec["offset"] + rec["total_size"]
        assert rec["magic"] == MESSAGE_MAGIC_CODE
        assert rec["topic"] == e.topic, ctx
        assert rec["body"] == e.body, ctx
        assert rec["body_crc"] == zlib.crc32(e.body) & 0x7FFFFFFF, ctx
        if rec["record_crc"] is None:         # only where the properties leave no room for it
            assert len(rec["raw_properties"].encode()) > 32767 - 21, ctx
        else:
            assert rec["record_crc"][0] == rec["record_crc"][1], ctx
        assert rec["queue_id"] == e.queue_id, ctx
        assert rec["flag"] == e.flag, ctx
        assert rec["queue_offset"] == e.queue_offset, ctx
        key = (e.topic, e.queue_id)
        assert rec["queue_offset"] == seen_qoff.get(key, 0), ctx   # consecutive per queue
        seen_qoff[key] = rec["queue_offset"] + 1
        born = e.born_host if e.born_host is not None else store_host
        assert rec["born_host"] == born, ctx
        assert rec["born_host_raw"] == host_raw(born), ctx
        assert rec["store_host"] == store_host, ctx
        assert rec["store_host_raw"] == store_raw, ctx
        flag = (0x10 if is_v6(born) else 0) | (0x20 if is_v6(store_host) else 0)
        assert rec["sys_flag"] == flag, ctx
        if e.born_ts:
            assert rec["born_timestamp"] == e.born_ts, ctx
        else:
            assert e.t_before - 5 <= rec["born_timestamp"] <= rec["store_timestamp"], ctx
        assert rec["store_timestamp"] == e.store_ts, ctx
        assert e.t_before - 5 <= rec["store_timestamp"] <= e.t_before + 60_000, ctx
        assert rec["reconsume_times"] == 0 and rec["prepared_transaction_offset"] == 0, ctx
        props = rec["properties"]
        want = expected_props(e)
        for k, v in want.items():
            assert props.get(k) == v, (ctx, k, props)
        assert set(props) - set(want) <= SYSTEM_PROPERTIES, (ctx, props)
        if e.tags is None:
            assert "TAGS" not in props, ctx
        if not e.keys:
            assert "KEYS" not in props, ctx
        given = (e.user_props or {}).get("UNIQ_KEY")
        check_uniq_key(props.get("UNIQ_KEY"), store_host, given)
        if e.uniq is not None:
            assert props["UNIQ_KEY"] == e.uniq, ctx
        if given is None:
            assert props["UNIQ_KEY"] not in uniqs, ctx
            uniqs.add(props["UNIQ_KEY"])
        assert rec["total_size"] == cal_msg_length(
            rec["sys_flag"], len(rec["body"]), len(rec["topic"].encode()), len(rec["raw_properties"].encode()))
        # the offset message id, computed independently
        assert e.msg_id == (store_raw + rec["offset"].to_bytes(8, "big")).hex().upper(), ctx
    # the last segment ends after its last record with zeros (walk stopped there)
    return msgs


def check_reopened(store, expected: list, seed: int) -> None:
    for e in expected:
        ctx = f"seed={seed} offset={e.offset}"
        m = store.look_message_by_offset(e.offset)
        assert m is not None, ctx
        assert m.commitlog_offset == e.offset, ctx
        assert m.topic == e.topic, ctx
        assert m.body == e.body, ctx
        assert m.tags == e.tags, ctx
        assert m.keys == (e.keys or None), ctx
        props = m.properties
        for k, v in expected_props(e).items():
            assert props.get(k) == v, (ctx, k)
        assert m.queue_id == e.queue_id, ctx
        assert m.queue_offset == e.queue_offset, ctx
        assert m.flag == e.flag, ctx
        assert m.born_host == (e.born_host if e.born_host is not None else store.config.store_host), ctx
        if e.born_ts:
            assert m.born_timestamp == e.born_ts, ctx
        assert m.store_timestamp == e.store_ts, ctx
        assert m.msg_id == e.msg_id, ctx
        assert m.store_host == store.config.store_host, ctx
        assert m.body_crc == zlib.crc32(e.body) & 0x7FFFFFFF, ctx
        assert m.uniq_key == props.get("UNIQ_KEY") and m.uniq_key, ctx
        if e.uniq is not None:
            assert m.uniq_key == e.uniq, ctx


def expected_queue_table(expected: list) -> dict:
    table = {}
    for e in expected:
        table[(e.topic, e.queue_id)] = max(table.get((e.topic, e.queue_id), 0), e.queue_offset + 1)
    return table


@pytest.mark.parametrize("store_host,count", [("127.0.0.1:10911", 10_000), ("[::1]:10911", 3_000)],
                         ids=["ipv4-store", "ipv6-store"])
def test_random_round_trip(tmp_path, store_host, count):
    seed = int(os.environ.get("PYMQ_TEST_SEED", random.randrange(2 ** 32)))
    print(f"seed={seed} (rerun with PYMQ_TEST_SEED={seed})")
    rng = random.Random(seed)
    path = tmp_path / "store"
    cfg = dict(commitlog_file_size=FILE_SIZE, max_message_size=MAX_MESSAGE_SIZE,
               topic_validation="utf8", store_host=store_host)
    store = pymq.MessageStore(path, small_config(**cfg))
    store.start()
    try:
        expected = run_puts(store, rng, count)
        max_offset = store.get_max_phy_offset()
    finally:
        store.shutdown()
    commitlog = os.path.join(path, "commitlog")
    msgs = check_log_against(expected, commitlog, store_host, seed)
    assert msgs[-1]["offset"] + msgs[-1]["total_size"] == max_offset
    assert len(segment_files(commitlog)) >= 20, "the test meant to cross many segments"
    assert any(e.batch is not None for e in expected) and any(e.batch is None for e in expected)
    assert any(len(e.body) == MAX_MESSAGE_SIZE for e in expected)
    assert any(len(e.body) == 0 for e in expected)

    store = pymq.MessageStore(path, small_config(**cfg))
    try:
        assert store.get_max_phy_offset() == max_offset
        check_reopened(store, expected, seed)
        table = expected_queue_table(expected)
        assert store.get_queue_offset_table() == table
        store.start()
        topic, qid = max(table, key=table.get)
        r = store.put_message(pymq.Message(topic=topic, body=b"after reopen", queue_id=qid))
        assert r.status is pymq.PutMessageStatus.PUT_OK
        assert r.queue_offset == table[(topic, qid)]
        assert r.commitlog_offset == max_offset or r.commitlog_offset % FILE_SIZE == 0
        r2 = store.put_message(pymq.Message(topic="FreshTopic", body=b"x", queue_id=3))
        assert r2.queue_offset == 0
        assert store.get_queue_offset_table()[(topic, qid)] == table[(topic, qid)] + 1
        m = store.look_message_by_offset(r.commitlog_offset)
        assert m.body == b"after reopen" and m.queue_offset == table[(topic, qid)]
    finally:
        store.shutdown()


def test_keys_with_non_ascii_whitespace_round_trip(tmp_path):
    """KEYS is the keys joined with " " (RocketMQ's KEY_SEPARATOR) and split on " " only:
    a key holding a no-break or ideographic space is one key."""
    keys = ["a\u00a0b", "全角\u3000空白", "tab-free"]
    with pymq.MessageStore(tmp_path / "store", small_config()) as store:
        r = store.put_message(pymq.Message(topic="T", body=b"x", keys=keys))
        store.flush()
        rec = walk_segment(os.path.join(store.store_path, "commitlog", f"{0:020d}"))[0]
        assert rec["properties"]["KEYS"] == " ".join(keys)
        m = store.look_message_by_offset(r.commitlog_offset)
        assert m.keys == keys


# -- a record fits only with 8 bytes to spare -------------------------------------------------------

def _segment_tail(path):
    recs = walk_segment(path)
    return recs[-1]


@pytest.mark.parametrize("leftover", [8, 9, 7, 1, 0])
def test_single_message_fits_only_with_8_bytes_to_spare(tmp_path, leftover):
    store = pymq.MessageStore(tmp_path / "store", small_config())
    store.start()
    try:
        r0 = store.put_message(pymq.Message(topic="T", body=b"x" * 100))
        assert r0.status is pymq.PutMessageStatus.PUT_OK and r0.commitlog_offset == 0
        props_len = r0.wrote_bytes - cal_msg_length(0, 100, 1, 0)
        assert props_len > 0
        p = r0.commitlog_offset + r0.wrote_bytes
        record_size = FILE_SIZE - p - leftover
        body = record_size - cal_msg_length(0, 0, 1, props_len)
        r1 = store.put_message(pymq.Message(topic="T", body=b"y" * body))
        assert r1.status is pymq.PutMessageStatus.PUT_OK, r1
        assert r1.wrote_bytes == record_size
        assert r1.queue_offset == 1
        if leftover >= 8:
            assert r1.commitlog_offset == p
            assert r1.commitlog_offset + r1.wrote_bytes == FILE_SIZE - leftover
            # the next message closes the segment with a blank of exactly `leftover` bytes
            r2 = store.put_message(pymq.Message(topic="T", body=b"z"))
            assert r2.commitlog_offset == FILE_SIZE and r2.queue_offset == 2
            blank_at = FILE_SIZE - leftover
        else:
            assert r1.commitlog_offset == FILE_SIZE, r1
            blank_at = p
        store.flush()
        seg0 = os.path.join(store.store_path, "commitlog", f"{0:020d}")
        seg1 = os.path.join(store.store_path, "commitlog", f"{FILE_SIZE:020d}")
        recs0 = walk_segment(seg0)
        assert [r["position"] for r in recs0] == ([0, p, blank_at] if leftover >= 8 else [0, p])
        assert recs0[-1]["blank"] and recs0[-1]["magic"] == BLANK_MAGIC_CODE
        assert recs0[-1]["total_size"] == FILE_SIZE - blank_at
        recs1 = walk_segment(seg1)
        assert recs1[0]["physical_offset"] == FILE_SIZE and not recs1[0]["blank"]
        if leftover < 8:
            assert recs1[0]["body"] == b"y" * body and recs1[0]["queue_offset"] == 1
        m = store.look_message_by_offset(r1.commitlog_offset)
        assert m.body == b"y" * body and m.queue_offset == 1
    finally:
        store.shutdown()


@pytest.mark.parametrize("leftover", [8, 7])
def test_batch_fits_only_with_8_bytes_to_spare(tmp_path, leftover):
    store = pymq.MessageStore(tmp_path / "store", small_config())
    store.start()
    try:
        r0 = store.put_messages([pymq.Message(topic="B", body=b"a" * 10) for _ in range(3)])
        assert r0.status is pymq.PutMessageStatus.PUT_OK and r0.msg_num == 3
        props_len = r0.wrote_bytes // 3 - cal_msg_length(0, 10, 1, 0)
        p = r0.wrote_bytes
        # two messages: a small one and a large one that brings the batch to the wanted size
        want = FILE_SIZE - p - leftover
        small = cal_msg_length(0, 10, 1, props_len)
        big_body = want - small - cal_msg_length(0, 0, 1, props_len)
        r1 = store.put_messages([pymq.Message(topic="B", body=b"s" * 10),
                                 pymq.Message(topic="B", body=b"L" * big_body)])
        assert r1.status is pymq.PutMessageStatus.PUT_OK, r1
        assert r1.wrote_bytes == want
        assert r1.queue_offset == 3
        if leftover >= 8:
            assert r1.commitlog_offsets == [p, p + small]
        else:
            assert r1.commitlog_offsets == [FILE_SIZE, FILE_SIZE + small]
            seg0 = os.path.join(store.store_path, "commitlog", f"{0:020d}")
            tail = _segment_tail(seg0)
            assert tail["blank"] and tail["position"] == p and tail["total_size"] == FILE_SIZE - p
            recs1 = walk_segment(os.path.join(store.store_path, "commitlog", f"{FILE_SIZE:020d}"))
            assert [(r["queue_offset"], len(r["body"])) for r in recs1] == [(3, 10), (4, big_body)]
    finally:
        store.shutdown()
