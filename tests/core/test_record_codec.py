"""The v1 record codec against golden bytes, Java vectors and damaged input."""

from __future__ import annotations

import random
import struct
import zlib

import pytest

from pymq._core import layout, record
from pymq.errors import CorruptRecordError
from rocketmq_decoder import SAMPLE_RECORD, java_hash

SAMPLE = SAMPLE_RECORD



def encode_sample(**kw):
    args = dict(born_timestamp=1700000000000, born_host="127.0.0.1:50000",
                store_timestamp=1700000000123, store_host="127.0.0.1:10911")
    args.update(kw)
    return record.encode_message("TopicTest", b"hello", "TAGS\x01TagA", **args)


def test_sample_record_is_byte_exact():
    assert encode_sample() == SAMPLE
    assert len(SAMPLE) == 114


def test_sample_record_decodes():
    m = record.decode_message(SAMPLE, check_crc=True)
    assert (m.topic, m.body, m.tags, m.queue_id, m.store_size) == ("TopicTest", b"hello", "TagA", 0, 114)
    assert m.body_crc == 0x3610A686
    assert (m.born_timestamp, m.store_timestamp) == (1700000000000, 1700000000123)
    assert (m.born_host, m.store_host) == ("127.0.0.1:50000", "127.0.0.1:10911")
    assert m.msg_id == "7F00000100002A9F0000000000000000"
    assert m.properties == {"TAGS": "TagA"}


@pytest.mark.parametrize("born,store,sysflag,overhead", [
    ("127.0.0.1:1", "127.0.0.1:2", 0, 91),
    ("[::1]:1", "127.0.0.1:2", 0x10, 103),
    ("127.0.0.1:1", "[::1]:2", 0x20, 103),
    ("[2001:db8::7]:1", "[::1]:2", 0x30, 115),
])
def test_fixed_overhead_and_v6_flags(born, store, sysflag, overhead):
    raw = record.encode_message("", b"", b"", born_host=born, store_host=store)
    assert len(raw) == overhead == layout.cal_msg_length(sysflag, 0, 0, 0)
    assert struct.unpack_from(">i", raw, 36)[0] == sysflag
    m = record.decode_message(raw)
    assert (m.born_host, m.store_host) == (born.replace("2001:db8::7", "2001:db8::7"), store)


def test_round_trip_all_fields():
    raw = record.encode_message(
        "T%|_-1", b"\x00\xffbody", "KEYS\x01a b\x02UNIQ_KEY\x01ABC\x02x\x01\u4e2d\u6587", queue_id=7, flag=-3,
        queue_offset=123456789012, physical_offset=2**40 + 5, sys_flag=0x8,
        born_timestamp=-1, born_host="[fe80::1]:65535", store_timestamp=2**62,
        store_host="10.0.0.1:0", reconsume_times=16, prepared_transaction_offset=99)
    m = record.decode_message(raw, check_crc=True)
    assert m.topic == "T%|_-1" and m.body == b"\x00\xffbody"
    assert (m.queue_id, m.flag, m.queue_offset, m.commitlog_offset) == (7, -3, 123456789012, 2**40 + 5)
    assert m.sys_flag == 0x8 | 0x10
    assert (m.born_timestamp, m.store_timestamp) == (-1, 2**62)
    assert (m.reconsume_times, m.prepared_transaction_offset) == (16, 99)
    assert m.keys == ["a", "b"] and m.uniq_key == "ABC" and m.properties["x"] == "\u4e2d\u6587"
    assert m.body_crc == zlib.crc32(b"\x00\xffbody") & 0x7FFFFFFF
    assert m.msg_id == record.create_message_id("10.0.0.1:0", 2**40 + 5)


def test_encoder_refuses_what_v1_cannot_hold():
    with pytest.raises(ValueError):
        record.encode_message("t" * 128, b"", b"")
    with pytest.raises(ValueError):
        record.encode_message("t", b"", b"p" * 32768)
    assert len(record.encode_message("\0" * 127, b"", "\0" * 32767)) == 91 + 127 + 32767


# -- checksums and Java's String.hashCode (STORE_SPEC §1.4, §11) -----------------------------

@pytest.mark.parametrize("data,masked", [
    (b"", 0), (b"hello", 907060870), (b"Once, there was a chance for me!", 151131488),
    (b"body0", 1366271370), (b"123456789", 1274296614),
])
def test_body_crc_vectors(data, masked):
    assert record.body_crc(data) == masked


def test_crc32_matches_zlib_on_random_data():
    rng = random.Random(7)
    for n in list(range(0, 300)) + [1023, 4096, 65537, 1 << 20]:
        data = rng.randbytes(n)
        assert record.crc32(data) == zlib.crc32(data)
        assert record.body_crc(data) == zlib.crc32(data) & 0x7FFFFFFF
    assert record.crc32(b"6789", record.crc32(b"12345")) == 0xCBF43926


JAVA_HASHES = [
    ("", 0), ("a", 97), ("abc", 96354), ("TopicTest#key1", -1655984460),
    ("TopicTest#UNIQ", -1656663421), ("FooBar#Hello", -101609924), ("TAG1", 2567159),
    ("TagA", 2598919), ("schedule_tag", 1162501618), ("\u4e2d\u6587", 646394),
    ("\u6d88\u606f\u961f\u5217", 860276223), ("TopicTest#\u8ba2\u5355123", -609830755),
    ("\U0001F600", 1772899), ("emoji\U0001F680key", 1939299606),
    ("polygenelubricants", -2147483648), ("Aa", 2112), ("BB", 2112),
]


@pytest.mark.parametrize("s,h", JAVA_HASHES)
def test_java_hash_code_vectors(s, h):
    assert record.java_hash_code(s) == h
    assert record.java_hash_code_utf8(s.encode()) == h


@pytest.mark.parametrize("s,idx", [("TopicTest#key1", 1655984460), ("polygenelubricants", 0), ("abc", 96354)])
def test_index_key_hash(s, idx):
    assert record.index_key_hash(s) == idx


def test_java_hash_against_utf16_oracle():
    rng = random.Random(11)
    alphabet = "aZ09#-\u00e9\u4e2d\u6587\U0001F600\U0001F680\u0000\uffff"
    for _ in range(2000):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 40)))
        assert record.java_hash_code(s) == java_hash(s)
        assert record.java_hash_code_utf8(s.encode()) == java_hash(s)


# -- message ids (STORE_SPEC §1.5) ------------------------------------------------------------

def test_message_ids():
    assert record.create_message_id("127.0.0.1:10911", 0) == "7F00000100002A9F0000000000000000"
    assert record.create_message_id("127.0.0.1:10911", 123456) == "7F00000100002A9F000000000001E240"
    assert record.decode_message_id("7F00000100002A9F000000000001E240") == ("127.0.0.1:10911", 123456)
    v6 = record.create_message_id("[::1]:9103", 123456)
    assert len(v6) == 56 and record.decode_message_id(v6) == ("[::1]:9103", 123456)
    for bad in ("xyz", "7F00", ""):
        with pytest.raises(ValueError):
            record.decode_message_id(bad)


# -- damaged input: errors, never a crash ---------------------------------------------------

def test_every_truncation_is_an_error():
    for n in range(len(SAMPLE)):
        with pytest.raises(CorruptRecordError):
            record.decode_message(SAMPLE[:n] if n else b"\0")
        assert record.scan_segment  # the scanner is exercised in test_scan


def test_bad_magic_and_bad_lengths():
    bad = bytearray(SAMPLE)
    bad[4] = 0
    with pytest.raises(CorruptRecordError, match="magic"):
        record.decode_message(bad)
    for pos, value in [(0, b"\x7f\xff\xff\xff"), (84, b"\x7f\x00\x00\x00"), (84, b"\xff\xff\xff\xff")]:
        bad = bytearray(SAMPLE)
        bad[pos:pos + 4] = value
        with pytest.raises(CorruptRecordError):
            record.decode_message(bad)
    bad = bytearray(SAMPLE)
    bad[93] = 0x80            # topic length byte negative
    with pytest.raises(CorruptRecordError):
        record.decode_message(bad)


def test_zeroed_topic_length_as_rocketmq_damages_it():
    # DefaultMessageStoreTest.damageCommitlog zeroes 16 bytes at the topic length byte
    bad = bytearray(SAMPLE)
    topic_pos = 84 + 4 + 5
    bad[topic_pos:topic_pos + 16] = bytes(16)
    with pytest.raises(CorruptRecordError):
        record.decode_message(bad)


def test_crc_mismatch_detected_only_when_asked():
    bad = bytearray(SAMPLE)
    bad[88] ^= 1              # first body byte
    assert record.decode_message(bad).body == b"iello"
    with pytest.raises(CorruptRecordError, match="CRC"):
        record.decode_message(bad, check_crc=True)


def test_random_damage_never_crashes():
    rng = random.Random(3)
    records = [SAMPLE, record.encode_message("x" * 127, rng.randbytes(300), "a\x01b" * 50,
                                             born_host="[::1]:1", store_host="[::2]:2")]
    for _ in range(20000):
        buf = bytearray(rng.choice(records))
        for _ in range(rng.randrange(1, 4)):
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        buf = buf[:rng.randrange(1, len(buf) + 1)]
        try:
            m = record.decode_message(bytes(buf), check_crc=rng.random() < 0.5)
        except CorruptRecordError:
            continue
        assert m is None or m.store_size <= len(buf)


def test_blank_decodes_to_none():
    blank = struct.pack(">ii", 4096, layout.BLANK_MAGIC_CODE)
    assert record.decode_message(blank) is None
