"""The body of ``REGISTER_BROKER`` (RocketMQ's ``RegisterBrokerBody``), both forms.

A broker registers its topics with a name server in one of two forms, told apart by the
header's ``compressed`` field:

* plain (``compressed=false``, 4.9.7's default: ``compressedRegister=false``): JSON, ::

      {"topicConfigSerializeWrapper": {
           "topicConfigTable": {"T": {"topicName": "T", "readQueueNums": 4, "writeQueueNums": 4,
                                      "perm": 6, "topicFilterType": "SINGLE_TAG",
                                      "topicSysFlag": 0, "order": false}},
           "dataVersion": {"timestamp": 1700000000000, "counter": 3}},
       "filterServerList": []}

* compressed (``compressed=true``): one zlib (deflate) stream of big-endian length-prefixed
  parts: ``[len][dataVersion JSON] [count] ([len][topic line])* [len][filter server JSON]``,
  where a topic line is ``TopicConfig.encode()``'s ``"name read write perm filterType"``
  (so a compressed registration carries no ``topicSysFlag``: the name server takes 0).

The header's ``bodyCrc32`` (when not 0) is the CRC32 of the body bytes as sent; a name
server refuses a body that does not match (``SYSTEM_ERROR``, "crc32 not match").

What a peer sends is bounded here before it is kept: the inflated size of a compressed
body (:data:`MAX_INFLATED_BYTES`), the number of topics (:data:`MAX_TOPICS_PER_BODY`),
topic names (:data:`MAX_NAME_LENGTH` characters, no spaces or control characters, which
the compressed form could not carry) and queue numbers (0..65535); anything else raises
:class:`BodyError`, and nothing of the registration is taken.
"""

from __future__ import annotations

import dataclasses
import json
import struct
import zlib

#: what a compressed body may inflate to (a registration of 10,000 topics is about 1 MiB)
MAX_INFLATED_BYTES = 32 << 20
#: topics one registration may carry
MAX_TOPICS_PER_BODY = 65_536
#: longest topic, broker, cluster name or address taken from a peer
MAX_NAME_LENGTH = 255
_FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")
_I32 = struct.Struct(">i")


class BodyError(ValueError):
    """A registration body that cannot be read or goes beyond the bounds."""


@dataclasses.dataclass(frozen=True)
class QueueData:
    """One broker name's queues of a topic, as a route lists them (RocketMQ's ``QueueData``)."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_json(self) -> dict:
        return {"brokerName": self.broker_name, "readQueueNums": self.read_queue_nums,
                "writeQueueNums": self.write_queue_nums, "perm": self.perm, "topicSysFlag": self.topic_sys_flag}


@dataclasses.dataclass
class RegisteredTopic:
    """A topic as a registration carries it (the fields of ``TopicConfig`` a route needs)."""

    name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = 6
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False

    def to_json(self) -> dict:
        return {"topicName": self.name, "readQueueNums": self.read_queue_nums, "writeQueueNums": self.write_queue_nums,
                "perm": self.perm, "topicFilterType": self.topic_filter_type, "topicSysFlag": self.topic_sys_flag,
                "order": self.order}

    def line(self) -> str:
        """``TopicConfig.encode()``: the compressed form's text of a topic."""
        return (f"{self.name} {self.read_queue_nums} {self.write_queue_nums} {self.perm} "
                f"{self.topic_filter_type}")


@dataclasses.dataclass
class RegisterBrokerBody:
    """Topics and data version of one registration."""

    topics: dict = dataclasses.field(default_factory=dict)          # name -> RegisteredTopic
    data_version: dict = dataclasses.field(default_factory=lambda: {"counter": 0, "timestamp": 0})
    filter_server_list: list = dataclasses.field(default_factory=list)

    def encode(self, compressed: bool) -> bytes:
        """The body as a 4.9.7 broker sends it with ``compressedRegister`` = ``compressed``."""
        if not compressed:
            return json.dumps({"filterServerList": list(self.filter_server_list),
                               "topicConfigSerializeWrapper": {
                                   "dataVersion": dict(self.data_version),
                                   "topicConfigTable": {n: t.to_json() for n, t in self.topics.items()}}},
                              separators=(",", ":")).encode()
        parts = [_chunk(json.dumps(self.data_version, separators=(",", ":")).encode()), _I32.pack(len(self.topics))]
        parts += [_chunk(t.line().encode()) for t in self.topics.values()]
        parts.append(_chunk(json.dumps(list(self.filter_server_list)).encode()))
        return zlib.compress(b"".join(parts), 9)

    @classmethod
    def decode(cls, data: bytes, compressed: bool) -> "RegisterBrokerBody":
        """Read a body in either form; raises :class:`BodyError`."""
        if not data:
            # RocketMQ: no body registers no topics, with data version (0, 0)
            return cls()
        return _decode_compressed(data) if compressed else _decode_plain(data)


def _chunk(b: bytes) -> bytes:
    return _I32.pack(len(b)) + b


def data_version_from(doc) -> dict:
    """A ``DataVersion`` JSON object as ``{"counter", "timestamp"}`` ints; raises :class:`BodyError`."""
    if not isinstance(doc, dict):
        raise BodyError("dataVersion is not an object")
    try:
        counter, timestamp = int(doc.get("counter", 0)), int(doc.get("timestamp", 0))
    except (TypeError, ValueError):
        raise BodyError("dataVersion counter or timestamp is not a number") from None
    if not (-(1 << 63) <= counter < 1 << 63 and -(1 << 63) <= timestamp < 1 << 63):
        raise BodyError("dataVersion outside a Java long")
    return {"counter": counter, "timestamp": timestamp}


def check_name(value, what: str) -> str:
    """A name or address taken from a peer: a non-empty string of at most
    :data:`MAX_NAME_LENGTH` characters without spaces or control characters."""
    if not isinstance(value, str) or not value or len(value) > MAX_NAME_LENGTH \
            or any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in value):
        raise BodyError(f"{what} {str(value)[:60]!r} is not a name pymq's name server keeps")
    return value


def _topic(name, read, write, perm, filter_type, sys_flag=0, order=False) -> RegisteredTopic:
    check_name(name, "topic")
    try:
        read, write, perm, sys_flag = int(read), int(write), int(perm), int(sys_flag)
    except (TypeError, ValueError):
        raise BodyError(f"topic {name!r}: queue numbers, perm or sys flag not numbers") from None
    if not (0 <= read <= 65535 and 0 <= write <= 65535 and 0 <= perm <= 7 and 0 <= sys_flag < 1 << 31):
        raise BodyError(f"topic {name!r}: queue numbers, perm or sys flag out of range")
    if filter_type not in _FILTER_TYPES:
        raise BodyError(f"topic {name!r}: unknown topicFilterType {str(filter_type)[:20]!r}")
    return RegisteredTopic(name, read, write, perm, filter_type, sys_flag, bool(order))


def _decode_plain(data: bytes) -> RegisterBrokerBody:
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise BodyError(f"register body is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise BodyError("register body is not a JSON object")
    wrapper = doc.get("topicConfigSerializeWrapper") or {}
    if not isinstance(wrapper, dict):
        raise BodyError("topicConfigSerializeWrapper is not an object")
    table = wrapper.get("topicConfigTable") or {}
    if not isinstance(table, dict):
        raise BodyError("topicConfigTable is not an object")
    if len(table) > MAX_TOPICS_PER_BODY:
        raise BodyError(f"{len(table)} topics in one registration (at most {MAX_TOPICS_PER_BODY})")
    topics = {}
    for key, tc in table.items():
        if not isinstance(tc, dict):
            raise BodyError(f"topic {str(key)[:60]!r}: not an object")
        t = _topic(tc.get("topicName", key), tc.get("readQueueNums", 16), tc.get("writeQueueNums", 16),
                   tc.get("perm", 6), tc.get("topicFilterType", "SINGLE_TAG"), tc.get("topicSysFlag", 0),
                   tc.get("order", False))
        topics[t.name] = t
    version = data_version_from(wrapper.get("dataVersion") or {})
    filters = doc.get("filterServerList") or []
    if not isinstance(filters, list):
        raise BodyError("filterServerList is not a list")
    return RegisterBrokerBody(topics, version, [])


class _Reader:
    """Length-prefixed parts out of an inflated stream, never past its bound."""

    def __init__(self, data: bytes) -> None:
        d = zlib.decompressobj()
        try:
            self.data = d.decompress(data, MAX_INFLATED_BYTES + 1)
        except zlib.error as e:
            raise BodyError(f"register body is not a zlib stream: {e}") from None
        if len(self.data) > MAX_INFLATED_BYTES:
            raise BodyError(f"register body inflates beyond {MAX_INFLATED_BYTES} bytes")
        self.pos = 0

    def int(self) -> int:
        if self.pos + 4 > len(self.data):
            raise BodyError("register body ends inside a length")
        (n,) = _I32.unpack_from(self.data, self.pos)
        self.pos += 4
        return n

    def part(self) -> bytes:
        n = self.int()
        if n < 0 or self.pos + n > len(self.data):
            raise BodyError("register body: a part runs past its end")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out


def _decode_compressed(data: bytes) -> RegisterBrokerBody:
    r = _Reader(data)
    try:
        version = data_version_from(json.loads(r.part()))
        count = r.int()
        if not 0 <= count <= MAX_TOPICS_PER_BODY:
            raise BodyError(f"{count} topics in one registration (at most {MAX_TOPICS_PER_BODY})")
        topics = {}
        for _ in range(count):
            fields = r.part().decode().split(" ")
            if len(fields) != 5:
                raise BodyError("register body: a topic line is not 'name read write perm filterType'")
            t = _topic(*fields)
            topics[t.name] = t
        r.part()                    # the filter server list: kept by nobody here
    except (ValueError, UnicodeDecodeError) as e:
        if isinstance(e, BodyError):
            raise
        raise BodyError(f"register body: {e}") from None
    return RegisterBrokerBody(topics, version, [])
