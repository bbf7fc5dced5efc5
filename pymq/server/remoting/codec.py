"""RemotingCommand: the frames of RocketMQ 4.x's remoting protocol.

A frame on the wire (big-endian)::

    +-----------+---------------------------+----------------+-----------------+
    | int32     | int32                     | header         | body            |
    | total_len | type << 24 | header_len   | header_len B   | the rest        |
    +-----------+---------------------------+----------------+-----------------+
      total_len = 4 + header_len + len(body)      (it does not count itself)
      type: 0 = JSON, 1 = ROCKETMQ (binary)       (the top byte of the second word)

A JSON header is an object: ``{"code": int, "language": "JAVA", "version": int,
"opaque": int, "flag": int, "remark": str, "extFields": {str: str}}``. Clients put numbers
and booleans in ``extFields`` too (ali-ons does); they are read as their text.

A ROCKETMQ header::

    int16 code | int8 language | int16 version | int32 opaque | int32 flag
    int32 remark_len | remark (UTF-8) | int32 ext_len | ext
    ext = (int16 key_len | key | int32 value_len | value)*     (UTF-8)

``flag`` bit 0 marks a response, bit 1 a one-way request (no response). A response
echoes the request's ``opaque`` and is written in the request's serialize type. Frames
over :data:`MAX_FRAME` (RocketMQ's 16 MiB decoder limit) are refused, and so are JSON
headers whose code, opaque, flag or version is not a Java ``int`` (32 bits, as in
RocketMQ's ``RemotingCommand``).

JSON headers are read and written with orjson when it is installed (the ``server`` extra
brings it; a pull spends about two fifths of its Python time on its two headers with the
standard library's ``json``), with ``json`` otherwise; both give the same commands.
"""

from __future__ import annotations

import json
import struct
from typing import Optional

try:
    import orjson
except ImportError:                 # pragma: no cover - the server extra installs it
    orjson = None

JSON = 0
ROCKETMQ = 1
MAX_FRAME = 16 * 1024 * 1024
RESPONSE_FLAG = 1
ONEWAY_FLAG = 2
SERVER_VERSION = 407           # V4_9_7: MQVersion.CURRENT_VERSION of a 4.9.7 broker (Version.V4_9_7.ordinal())

# LanguageCode, in the order of its ordinal (the binary header carries the ordinal)
LANGUAGES = ("JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO", "PHP", "OMS",
             "RUST", "NODE_JS")
_LANGUAGE_CODE = {name: i for i, name in enumerate(LANGUAGES)}

_FIXED = struct.Struct(">hbhii")          # code, language, version, opaque, flag
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_PREFIX = struct.Struct(">ii")


class FrameError(ValueError):
    """A frame or header that cannot be decoded; the connection is closed."""


class RemotingCommand:
    """One request or response: ``code``, ``opaque``, ``flag``, ``remark``,
    ``ext_fields`` (str -> str), ``body`` (bytes, or a list of buffers for a response
    written without copying), and the ``serialize_type`` it came in."""

    __slots__ = ("code", "language", "version", "opaque", "flag", "remark", "ext_fields", "body",
                 "serialize_type", "received_at")

    def __init__(self, code: int, opaque: int = 0, flag: int = 0, remark: Optional[str] = None,
                 ext_fields: Optional[dict] = None, body=b"", language: str = "JAVA",
                 version: int = SERVER_VERSION, serialize_type: int = JSON) -> None:
        self.code = code
        self.opaque = opaque
        self.flag = flag
        self.remark = remark
        self.ext_fields = ext_fields if ext_fields is not None else {}
        self.body = body
        self.language = language
        self.version = version
        self.serialize_type = serialize_type
        self.received_at = 0.0          # perf_counter() when a served request arrived (metrics)

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RESPONSE_FLAG)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & ONEWAY_FLAG)

    def response(self, code: int, remark: Optional[str] = None, ext_fields: Optional[dict] = None,
                 body=b"") -> "RemotingCommand":
        """The response to this request: same opaque and serialize type."""
        return RemotingCommand(code, self.opaque, RESPONSE_FLAG, remark, ext_fields, body,
                               serialize_type=self.serialize_type)

    def __repr__(self) -> str:
        kind = "response" if self.is_response else "request"
        return f"RemotingCommand({kind} code={self.code} opaque={self.opaque} ext={self.ext_fields!r})"


# -- decoding ----------------------------------------------------------------------------------

def _text(value) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if value is None:
        return ""
    return json.dumps(value, separators=(",", ":"))


_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1


def _decode_json_header(data: bytes, loads=orjson.loads if orjson is not None else json.loads) -> RemotingCommand:
    try:
        doc = loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise FrameError(f"header is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise FrameError("header is not a JSON object")
    try:
        code = int(doc.get("code", 0))
        opaque = int(doc.get("opaque", 0))
        flag = int(doc.get("flag", 0))
        version = int(doc.get("version", 0))
    except (TypeError, ValueError, OverflowError):
        raise FrameError("header code, opaque, flag or version is not a number") from None
    if not (_INT_MIN <= code <= _INT_MAX and _INT_MIN <= opaque <= _INT_MAX and _INT_MIN <= flag <= _INT_MAX
            and _INT_MIN <= version <= _INT_MAX):
        raise FrameError("header code, opaque, flag or version is outside a Java int")
    ext = doc.get("extFields") or {}
    if not isinstance(ext, dict):
        raise FrameError("extFields is not an object")
    remark = doc.get("remark")
    return RemotingCommand(code, opaque, flag, None if remark is None else _text(remark),
                           {k if type(k) is str else str(k): v if type(v) is str else _text(v) for k, v in ext.items()},
                           b"", _text(doc.get("language", "JAVA")), version, JSON)


def _decode_binary_header(data: bytes) -> RemotingCommand:
    n = len(data)
    if n < _FIXED.size + 8:
        raise FrameError("binary header too short")
    code, language, version, opaque, flag = _FIXED.unpack_from(data, 0)
    pos = _FIXED.size
    (remark_len,) = _I32.unpack_from(data, pos)
    pos += 4
    if remark_len < 0 or pos + remark_len + 4 > n:
        raise FrameError("binary header: remark runs past the header")
    try:
        remark = data[pos:pos + remark_len].decode() if remark_len else None
        pos += remark_len
        (ext_len,) = _I32.unpack_from(data, pos)
        pos += 4
        if ext_len < 0 or pos + ext_len > n:
            raise FrameError("binary header: ext fields run past the header")
        end = pos + ext_len
        ext = {}
        while pos < end:
            if pos + 2 > end:
                raise FrameError("binary header: truncated ext key")
            (klen,) = _I16.unpack_from(data, pos)
            pos += 2
            if klen < 0 or pos + klen + 4 > end:
                raise FrameError("binary header: ext key runs past the fields")
            key = data[pos:pos + klen].decode()
            pos += klen
            (vlen,) = _I32.unpack_from(data, pos)
            pos += 4
            if vlen < 0 or pos + vlen > end:
                raise FrameError("binary header: ext value runs past the fields")
            ext[key] = data[pos:pos + vlen].decode()
            pos += vlen
    except UnicodeDecodeError as e:
        raise FrameError(f"binary header: {e}") from None
    lang = LANGUAGES[language] if 0 <= language < len(LANGUAGES) else "OTHER"
    return RemotingCommand(code, opaque, flag, remark, ext, b"", lang, version, ROCKETMQ)


def header_length(frame) -> int:
    """The header length a frame announces (the low 24 bits of its second word);
    ``frame`` starts after the length word and holds at least 4 bytes."""
    return _I32.unpack_from(frame, 0)[0] & 0xFFFFFF


def decode_header(frame) -> RemotingCommand:
    """The command of a frame's header, without its body: ``frame`` starts after the
    length word and holds at least the header word and the header (the body may still be
    on its way). Raises :class:`FrameError` for anything malformed."""
    n = len(frame)
    if n < 4:
        raise FrameError("frame shorter than its header length word")
    (word,) = _I32.unpack_from(frame, 0)
    serialize_type = (word >> 24) & 0xFF
    header_len = word & 0xFFFFFF
    if header_len > n - 4:
        raise FrameError(f"header length {header_len} exceeds the frame ({n - 4} bytes)")
    header = bytes(frame[4:4 + header_len])
    if serialize_type == JSON:
        return _decode_json_header(header)
    if serialize_type == ROCKETMQ:
        return _decode_binary_header(header)
    raise FrameError(f"unknown serialize type {serialize_type}")


def decode_frame(frame: memoryview) -> RemotingCommand:
    """A command from one frame without its length word (``frame`` = the ``total_len``
    bytes after it). Raises :class:`FrameError` for anything malformed."""
    cmd = decode_header(frame)
    cmd.body = bytes(frame[4 + header_length(frame):])
    return cmd


# -- encoding ----------------------------------------------------------------------------------

_json_encode = json.JSONEncoder(separators=(",", ":")).encode


def _stdlib_dumps(doc: dict) -> bytes:
    return _json_encode(doc).encode()


def _encode_json_header(cmd: RemotingCommand, dumps=orjson.dumps if orjson is not None else _stdlib_dumps) -> bytes:
    doc = {"code": cmd.code, "language": cmd.language, "version": cmd.version, "opaque": cmd.opaque,
           "flag": cmd.flag, "serializeTypeCurrentRPC": "JSON"}
    if cmd.remark is not None:
        doc["remark"] = cmd.remark
    if cmd.ext_fields:
        doc["extFields"] = {k: v if type(v) is str else _text(v) for k, v in cmd.ext_fields.items()}
    try:
        return dumps(doc)
    except TypeError:           # orjson refuses what json escapes (a lone surrogate in a remark)
        return _stdlib_dumps(doc)


def _encode_binary_header(cmd: RemotingCommand) -> bytes:
    remark = cmd.remark.encode() if cmd.remark else b""
    parts = [_FIXED.pack(cmd.code, _LANGUAGE_CODE.get(cmd.language, _LANGUAGE_CODE["OTHER"]), cmd.version,
                         cmd.opaque, cmd.flag), _I32.pack(len(remark)), remark]
    ext = bytearray()
    for k, v in cmd.ext_fields.items():
        kb = str(k).encode()
        vb = _text(v).encode()
        ext += _I16.pack(len(kb)) + kb + _I32.pack(len(vb)) + vb
    parts += [_I32.pack(len(ext)), bytes(ext)]
    return b"".join(parts)


def body_length(body) -> int:
    if isinstance(body, (list, tuple)):
        return sum(len(b) if not isinstance(b, memoryview) else b.nbytes for b in body)
    return len(body)


def encode_head(cmd: RemotingCommand) -> bytes:
    """The frame of ``cmd`` up to its body: length word, header word, header. The body
    (bytes, or a list of buffers) follows as it is."""
    header = _encode_json_header(cmd) if cmd.serialize_type == JSON else _encode_binary_header(cmd)
    if len(header) > 0xFFFFFF:
        raise FrameError("header too large")
    return _PREFIX.pack(4 + len(header) + body_length(cmd.body), (cmd.serialize_type << 24) | len(header)) + header


def encode(cmd: RemotingCommand) -> bytes:
    """The whole frame of ``cmd`` as one bytes object."""
    body = cmd.body
    if isinstance(body, (list, tuple)):
        body = b"".join(body)
    return encode_head(cmd) + bytes(body)
