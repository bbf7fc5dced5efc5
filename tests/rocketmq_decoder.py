"""An independent decoder of RocketMQ v1 commit-log records, for the acceptance tests.

Written from STORE_SPEC.md section 1 with ``struct`` only: it imports nothing from pymq,
so a test that reads pymq's segments with it checks pymq's bytes against the format
description, not against pymq's own decoder.

    decode_record(buf, pos) -> dict      one record (or the END_OF_FILE blank) at ``pos``
    walk_segment(path) -> list[dict]     every record of a segment file, from 0 up to the
                                         blank (included) or the first zero bytes
    parse_properties(s) -> dict          RocketMQ 4.9.7 ``string2messageProperties``

A record may end with its own CRC (RocketMQ 5's ``enabledAppendPropCRC``): the last 20
bytes of its properties are ``__CRC32#`` \\x01, ten digits (least significant first) and
\\x02, the CRC-32 & 0x7FFFFFFF of the record's bytes before them. ``decode_record`` gives it
as ``record_crc`` ``(stored, computed)`` (None without one) and leaves it out of
``properties`` (``raw_properties`` keeps it).
"""

from __future__ import annotations

import ipaddress
import struct
import zlib

MESSAGE_MAGIC_CODE = 0xDAA320A7          # v1, as an unsigned 32-bit value
BLANK_MAGIC_CODE = 0xCBD43194
END_FILE_MIN_BLANK_LENGTH = 8

BORNHOST_V6_FLAG = 0x10
STOREHOSTADDRESS_V6_FLAG = 0x20

_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_I16 = struct.Struct(">h")
_I8 = struct.Struct(">b")
# TOTALSIZE, MAGICCODE, BODYCRC, QUEUEID, FLAG, QUEUEOFFSET, PHYSICALOFFSET, SYSFLAG, BORNTIMESTAMP
_HEAD = struct.Struct(">iIiiiqqiq")       # 48 bytes


class DecodeError(ValueError):
    """The bytes at a position are not a well-formed v1 record."""


def cal_msg_length(sys_flag: int, body_len: int, topic_len: int, props_len: int) -> int:
    """``CommitLog.calMsgLength`` (STORE_SPEC 1.1)."""
    born = 20 if sys_flag & BORNHOST_V6_FLAG else 8
    store = 20 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 8
    return (4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + born + 8 + store + 4 + 8
            + 4 + max(body_len, 0) + 1 + topic_len + 2 + max(props_len, 0))


def format_host(raw: bytes) -> str:
    """8 bytes -> ``"a.b.c.d:port"``, 20 bytes -> ``"[v6]:port"`` (compressed v6 form)."""
    if len(raw) == 8:
        (port,) = _I32.unpack_from(raw, 4)
        return "%d.%d.%d.%d:%d" % (raw[0], raw[1], raw[2], raw[3], port)
    if len(raw) == 20:
        (port,) = _I32.unpack_from(raw, 16)
        return "[%s]:%d" % (ipaddress.IPv6Address(bytes(raw[:16])).compressed, port)
    raise DecodeError(f"a host field has 8 or 20 bytes, not {len(raw)}")


def parse_properties(s: str) -> dict:
    """RocketMQ 4.9.7 ``MessageDecoder.string2messageProperties`` (index-based).

    Split on ``\\x02``; a segment shorter than 3 characters is skipped; the key/value
    separator is the first ``\\x01`` from the segment start and must satisfy
    ``start < kv < end - 1`` (non-empty key and value); the value may hold more ``\\x01``.
    """
    out: dict = {}
    if not s:
        return out
    index = 0
    n = len(s)
    while index < n:
        new_index = s.find("\x02", index)
        if new_index < 0:
            new_index = n
        if new_index - index >= 3:
            kv = s.find("\x01", index)
            if index < kv < new_index - 1:
                out[s[index:kv]] = s[kv + 1:new_index]
        index = new_index + 1
    return out


def decode_record(buf, pos: int = 0) -> dict:
    """Decode the v1 record (or END_OF_FILE blank) starting at ``pos`` of ``buf``.

    A blank gives ``{"blank": True, "total_size": maxBlank, "magic": 0xCBD43194,
    "position": pos}``. A record gives every field; ``raw_properties`` is the undecoded
    string and ``properties`` its 4.9.7 parse. Raises ``DecodeError`` on anything
    malformed (bad magic, lengths past the record, size != calMsgLength).
    """
    mv = memoryview(buf).cast("B")
    limit = len(mv)
    if pos < 0 or pos + 8 > limit:
        raise DecodeError(f"fewer than 8 bytes at {pos}")
    (total,) = _I32.unpack_from(mv, pos)
    (magic,) = _U32.unpack_from(mv, pos + 4)
    if magic == BLANK_MAGIC_CODE:
        return {"blank": True, "total_size": total, "magic": magic, "position": pos}
    if magic != MESSAGE_MAGIC_CODE:
        raise DecodeError(f"bad magic 0x{magic:08X} at {pos}")
    if total < 91 or pos + total > limit:
        raise DecodeError(f"record size {total} at {pos} outside [91, {limit - pos}]")
    end = pos + total

    def need(p: int, n: int) -> None:
        if n < 0 or p + n > end:
            raise DecodeError(f"field at {p} (+{n}) runs past the record end {end}")

    (_total, _magic, body_crc, queue_id, flag, queue_offset, physical_offset, sys_flag,
     born_timestamp) = _HEAD.unpack_from(mv, pos)
    p = pos + 48
    born_len = 20 if sys_flag & BORNHOST_V6_FLAG else 8
    store_len = 20 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 8
    need(p, born_len + 8 + store_len + 4 + 8 + 4)
    born_raw = bytes(mv[p:p + born_len])
    p += born_len
    (store_timestamp,) = _I64.unpack_from(mv, p)
    p += 8
    store_raw = bytes(mv[p:p + store_len])
    p += store_len
    (reconsume_times,) = _I32.unpack_from(mv, p)
    p += 4
    (prepared_tx,) = _I64.unpack_from(mv, p)
    p += 8
    (body_len,) = _I32.unpack_from(mv, p)
    p += 4
    need(p, body_len)
    body = bytes(mv[p:p + body_len])
    p += body_len
    need(p, 1)
    (topic_len,) = _I8.unpack_from(mv, p)
    p += 1
    need(p, topic_len)
    topic_raw = bytes(mv[p:p + topic_len])
    p += topic_len
    need(p, 2)
    (props_len,) = _I16.unpack_from(mv, p)
    p += 2
    need(p, props_len)
    props_raw = bytes(mv[p:p + props_len])
    p += props_len
    if p != end or cal_msg_length(sys_flag, body_len, topic_len, props_len) != total:
        raise DecodeError(f"record at {pos}: size {total} != calMsgLength of its fields")
    props_str = props_raw.decode("utf-8")
    record_crc = None
    tail = bytes(mv[end - 20:end]) if props_len >= 20 else b""
    if (tail[:9] == b"__CRC32#\x01" and tail[19:] == b"\x02" and tail[9:19].isdigit()
            and (props_len == 20 or mv[end - 21] == 2)):
        stored = sum(int(chr(d)) * 10 ** i for i, d in enumerate(tail[9:19]))
        record_crc = (stored, zlib.crc32(mv[pos:end - 20]) & 0x7FFFFFFF)
        visible = props_raw[:props_len - 20 - (1 if props_len > 20 else 0)].decode("utf-8")
    else:
        visible = props_str
    return {
        "blank": False,
        "position": pos,
        "total_size": total,
        "magic": magic,
        "body_crc": body_crc,
        "queue_id": queue_id,
        "flag": flag,
        "queue_offset": queue_offset,
        "physical_offset": physical_offset,
        "sys_flag": sys_flag,
        "born_timestamp": born_timestamp,
        "born_host": format_host(born_raw),
        "born_host_raw": born_raw,
        "store_timestamp": store_timestamp,
        "store_host": format_host(store_raw),
        "store_host_raw": store_raw,
        "reconsume_times": reconsume_times,
        "prepared_transaction_offset": prepared_tx,
        "body": body,
        "topic": topic_raw.decode("utf-8"),
        "raw_properties": props_str,
        "properties": parse_properties(visible),
        "record_crc": record_crc,
    }


def walk_segment(path) -> list:
    """Every record of the segment file at ``path``, in order, starting at 0.

    Stops after the END_OF_FILE blank (which is returned too, as the last element) or at
    a position whose first 8 bytes are zero (the unwritten tail), or at the file end.
    Raises ``DecodeError`` at anything else that is not a whole record.
    """
    with open(path, "rb") as f:
        data = f.read()
    out = []
    pos = 0
    n = len(data)
    while pos + 8 <= n:
        if data[pos:pos + 8] == b"\0" * 8:
            break
        rec = decode_record(data, pos)
        out.append(rec)
        if rec["blank"]:
            break
        pos += rec["total_size"]
    return out


def segment_files(commitlog_dir) -> list:
    """``[(start_offset, path), ...]`` of the segment files of a directory, by name.

    Every entry of the directory must be a file named by a 20-digit number."""
    import os

    out = []
    for name in sorted(os.listdir(commitlog_dir)):
        if len(name) != 20 or not name.isdigit():
            raise DecodeError(f"{name!r} in {commitlog_dir} is not a 20-digit segment name")
        out.append((int(name), os.path.join(commitlog_dir, name)))
    return out


def walk_commitlog(commitlog_dir) -> list:
    """Every record (blanks included) of every segment, in order. Each dict gets
    ``offset`` (segment start + position) and ``segment`` (the segment's start)."""
    out = []
    for start, path in segment_files(commitlog_dir):
        for rec in walk_segment(path):
            rec["segment"] = start
            rec["offset"] = start + rec["position"]
            out.append(rec)
    return out


# STORE_SPEC §1.8: the sample record (topic TopicTest, queue 0, body "hello", TAGS=TagA,
# born 127.0.0.1:50000 at 1700000000000, stored at 1700000000123 on 127.0.0.1:10911).
SAMPLE_RECORD_HEX = """
00 00 00 72 DA A3 20 A7 36 10 A6 86 00 00 00 00
00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
00 00 00 00 00 00 00 00 00 00 01 8B CF E5 68 00
7F 00 00 01 00 00 C3 50 00 00 01 8B CF E5 68 7B
7F 00 00 01 00 00 2A 9F 00 00 00 00 00 00 00 00
00 00 00 00 00 00 00 05 68 65 6C 6C 6F 09 54 6F
70 69 63 54 65 73 74 00 09 54 41 47 53 01 54 61
67 41
"""
SAMPLE_RECORD = bytes.fromhex(SAMPLE_RECORD_HEX)


# -- Java's hashing, independently (STORE_SPEC §11) -----------------------------------------------

def java_hash(s: str) -> int:
    """Java ``String.hashCode``: fold the UTF-16 code units, int32 wraparound, signed."""
    units = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def index_hash(s: str) -> int:
    """``IndexFile.indexKeyHashMethod``: ``abs(hashCode)``, 0 when that stays negative."""
    a = abs(java_hash(s))
    return 0 if a > (1 << 31) - 1 else a
