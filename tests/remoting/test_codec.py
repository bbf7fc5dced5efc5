"""The remoting codec against an independent struct-based encoder and decoder of the two
header types (JSON and ROCKETMQ binary) and request signatures."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pymq.server.remoting.auth import RemotingAuthenticator, sign
from pymq.server.remoting import codec
from pymq.server.remoting.codec import FrameError, RemotingCommand, decode_frame, encode
from pymq.server.remoting.headers import RequestError

LANGS = ["JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO", "PHP", "OMS", "RUST"]


def binary_header(code, lang, version, opaque, flag, remark, ext) -> bytes:
    """RocketMQSerializable's layout, written here independently."""
    r = remark.encode() if remark else b""
    e = b"".join(struct.pack(">h", len(k.encode())) + k.encode() + struct.pack(">i", len(v.encode())) + v.encode()
                 for k, v in ext.items())
    return (struct.pack(">hbhii", code, lang, version, opaque, flag) + struct.pack(">i", len(r)) + r
            + struct.pack(">i", len(e)) + e)


def parse_binary_header(h: bytes) -> dict:
    code, lang, version, opaque, flag = struct.unpack_from(">hbhii", h, 0)
    pos = 13
    (rl,) = struct.unpack_from(">i", h, pos)
    remark = h[pos + 4:pos + 4 + rl].decode()
    pos += 4 + rl
    (el,) = struct.unpack_from(">i", h, pos)
    pos += 4
    ext, end = {}, pos + el
    while pos < end:
        (kl,) = struct.unpack_from(">h", h, pos)
        k = h[pos + 2:pos + 2 + kl].decode()
        pos += 2 + kl
        (vl,) = struct.unpack_from(">i", h, pos)
        ext[k] = h[pos + 4:pos + 4 + vl].decode()
        pos += 4 + vl
    return {"code": code, "language": lang, "version": version, "opaque": opaque, "flag": flag, "remark": remark,
            "ext": ext}


text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)


@given(code=st.integers(0, 32767), lang=st.integers(0, 12), version=st.integers(0, 32767),
       opaque=st.integers(-2**31, 2**31 - 1), flag=st.integers(0, 3), remark=text,
       ext=st.dictionaries(text.filter(bool), text, max_size=5), body=st.binary(max_size=64))
def test_binary_header_both_ways(code, lang, version, opaque, flag, remark, ext, body):
    h = binary_header(code, lang, version, opaque, flag, remark, ext)
    raw = struct.pack(">i", (1 << 24) | len(h)) + h + body
    cmd = decode_frame(memoryview(raw))
    assert (cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag) == (code, LANGS[lang], version, opaque, flag)
    assert (cmd.remark or "") == remark and cmd.ext_fields == ext and cmd.body == body and cmd.serialize_type == 1
    out = encode(cmd.response(7, remark or None, ext, body))
    total, word = struct.unpack_from(">ii", out, 0)
    assert total == len(out) - 4 and word >> 24 == 1
    back = parse_binary_header(out[8:8 + (word & 0xFFFFFF)])
    assert back["code"] == 7 and back["opaque"] == opaque and back["flag"] == 1 and back["ext"] == ext
    assert back["remark"] == remark and out[8 + (word & 0xFFFFFF):] == body


def test_json_header_values_read_as_text_and_answered_in_json():
    h = json.dumps({"code": 310, "language": "JAVA", "opaque": 9, "flag": 0, "version": 121,
                    "extFields": {"e": 0, "k": False, "g": 1795580000000, "i": "TAGS\x01A\x02"}}).encode()
    cmd = decode_frame(memoryview(struct.pack(">i", len(h)) + h + b"body"))
    assert cmd.ext_fields == {"e": "0", "k": "false", "g": "1795580000000", "i": "TAGS\x01A\x02"}
    assert cmd.body == b"body" and cmd.serialize_type == 0
    out = encode(cmd.response(0, None, {"queueOffset": 5}, [memoryview(b"ab"), b"cd"]))
    total, hl = struct.unpack_from(">ii", out, 0)
    doc = json.loads(out[8:8 + hl])
    assert hl >> 24 == 0 and doc["opaque"] == 9 and doc["flag"] == 1 and doc["extFields"] == {"queueOffset": "5"}
    assert out[8 + hl:] == b"abcd" and total == len(out) - 4


@pytest.mark.parametrize("raw", [b"", b"\x00\x00", struct.pack(">i", 100) + b"{}",
                                 struct.pack(">i", (1 << 24) | 3) + b"abc",
                                 struct.pack(">i", 2) + b"[]", struct.pack(">i", 8) + b'{"code":'])
def test_malformed_headers_raise_frame_error(raw):
    with pytest.raises(FrameError):
        decode_frame(memoryview(raw))


@pytest.mark.parametrize("field", ["code", "opaque", "flag", "version"])
@pytest.mark.parametrize("value", [2**31, -2**31 - 1, 10**30, 1e30])
def test_json_header_numbers_outside_a_java_int_raise_frame_error(field, value):
    h = json.dumps({"code": 11, "opaque": 1, "flag": 0, "version": 437, field: value}).encode()
    with pytest.raises(FrameError):
        decode_frame(memoryview(struct.pack(">i", len(h)) + h))


json_value = st.one_of(st.integers(-2**63, 2**64 - 1), st.booleans(), st.none(), text,
                       st.floats(allow_nan=False, allow_infinity=False))


@given(code=st.integers(-2**31, 2**31 - 1), opaque=st.integers(-2**31, 2**31 - 1), flag=st.integers(0, 3),
       remark=st.one_of(st.none(), text), language=text,
       ext=st.dictionaries(text, json_value, max_size=6), body=st.binary(max_size=16))
def test_json_headers_read_and_written_alike_with_orjson_and_json(code, opaque, flag, remark, language, ext, body):
    """The orjson path (the server extra) and the standard library's give the same
    commands from the same bytes, and responses that parse to the same document."""
    assert codec.orjson is not None, "the test extra installs orjson"
    doc = {"code": code, "language": language, "version": 437, "opaque": opaque, "flag": flag, "extFields": ext}
    if remark is not None:
        doc["remark"] = remark
    h = json.dumps(doc).encode()
    fast = codec._decode_json_header(h)
    slow = codec._decode_json_header(h, loads=json.loads)
    for name in RemotingCommand.__slots__:
        assert getattr(fast, name) == getattr(slow, name), name
    resp = fast.response(code, remark, ext, body)
    assert json.loads(codec._encode_json_header(resp)) == json.loads(
        codec._encode_json_header(resp, dumps=codec._stdlib_dumps))


def test_a_remark_orjson_refuses_is_written_by_json():
    resp = RemotingCommand(11, 3).response(1, "bad \udcff byte")
    assert json.loads(codec._encode_json_header(resp))["remark"] == "bad \udcff byte"


def test_signature_is_hmac_sha1_over_sorted_values_and_body():
    ext = {"b": "2", "AccessKey": "ak", "a": "1", "OnsChannel": "ALIYUN"}
    expect = base64.b64encode(hmac.new(b"sk", b"ak" + b"ALIYUN" + b"1" + b"2" + b"payload", hashlib.sha1).digest())
    assert sign("sk", ext, b"payload") == expect.decode()
    auth = RemotingAuthenticator({"ak": "sk"})
    good = RemotingCommand(10, ext_fields=dict(ext, Signature=expect.decode()), body=b"payload")
    auth.check(good)
    for bad in (RemotingCommand(10, ext_fields=dict(ext), body=b"payload"),
                RemotingCommand(10, ext_fields=dict(ext, Signature=expect.decode()), body=b"other"),
                RemotingCommand(10, ext_fields=dict(ext, AccessKey="nobody", Signature=expect.decode()))):
        with pytest.raises(RequestError) as e:
            auth.check(bad)
        assert e.value.code == 16
