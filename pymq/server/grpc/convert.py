"""Between protocol messages (``apache.rocketmq.v2.Message``) and pymq's ``Message``.

The store keeps RocketMQ's property names (``UNIQ_KEY``, ``TAGS``, ``KEYS``,
``__SHARDINGKEY``, ``TIMER_DELIVER_MS``...); a protocol message carries the same facts as
typed system properties and leaves only the application's own properties in
``user_properties``. Checks of what a client sent raise :class:`RequestError` with the
protocol's code, before anything is written.
"""

from __future__ import annotations

import functools
import gzip
import time
import zlib
from typing import Optional

from rocketmq.grpc_protocol import definition_pb2 as pb

from pymq._core.message import Message
from pymq.broker.lite_topic import PROPERTY_LITE_TOPIC, IllegalLiteTopicError, check_lite_topic
from pymq.broker.priority import PROPERTY_PRIORITY

from . import names
from .status import Code, RequestError

# properties that RocketMQ sets itself (MessageConst's system set, STRING_HASH_SET, and the
# ones pymq writes); received messages show the others as user properties, __SHARDINGKEY,
# __transactionId__ and TRACE_CONTEXT among them, as RocketMQ 5's proxy does (GrpcConverter)
SYSTEM_PROPERTIES = frozenset({
    "CLUSTER", "__BORNHOST", "BORN_TIMESTAMP", "EXTEND_UNIQ_INFO", "TRAN_PREPARED_QUEUE_OFFSET", "DUP_INFO",
    "INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME", "PUSH_REPLY_TIME", "MSG_TYPE",
    "TIMER_DELAY_LEVEL", "__CRC32#",
    "UNIQ_KEY", "TAGS", "KEYS", "DELAY", "WAIT", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID",
    "TRAN_MSG", "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG",
    "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME", "MSG_REGION", "TRACE_ON", "MAX_RECONSUME_TIMES",
    "CONSUME_START_TIME", "POP_CK", "POP_CK_OFFSET", "1ST_POP_TIME", "TRANSACTION_CHECK_TIMES",
    "CHECK_IMMUNITY_TIME_IN_SECONDS", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC",
    "TIMER_DELAY_MS", "TIMER_OUT_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES",
    "TIMER_DEL_UNIQKEY", "INNER_NUM", "INNER_BASE", "INNER_MULTI_DISPATCH", "INNER_MULTI_QUEUE_OFFSET",
    "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID", "__RECALL_HANDLE", PROPERTY_PRIORITY, PROPERTY_LITE_TOPIC,
})

# the proxy's limits on what a message carries besides its body (ProxyConfig
# userPropertyMaxNum, maxUserPropertySize)
MAX_USER_PROPERTIES = 128
MAX_USER_PROPERTY_BYTES = 16 * 1024

# a delivery timestamp whose seconds exceed this is taken as milliseconds: the official
# Python client (5.1.x) writes its millisecond delivery_timestamp into the seconds field
_MS_IN_SECONDS_FIELD = 100_000_000_000


_GZIP = pb.Encoding.GZIP
_FIFO = pb.MessageType.FIFO
_DELAY = pb.MessageType.DELAY
_PRIORITY = pb.MessageType.PRIORITY
_LITE = pb.MessageType.LITE

# what RocketMQ 5's proxy adds to every message it forwards (SendMessageActivity
# buildMessageProperty) and the broker adds on storing it (SendMessageProcessor)
PROPERTY_PRODUCER_GROUP = "PGROUP"          # the proxy names the topic as the producer group
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"  # the message's delivery_attempt
PROPERTY_BORN_HOST = "__BORNHOST"           # the client's born_host, else the peer's address
PROPERTY_BORN_TIMESTAMP = "BORN_TIMESTAMP"  # the client's born_timestamp (ms) when it sent one
PROPERTY_TRACE_CONTEXT = "TRACE_CONTEXT"
PROPERTY_CLUSTER = "CLUSTER"                # the broker's cluster name


@functools.lru_cache(maxsize=4096)
def _write_topic(name: str) -> str:
    return names.check_topic(name, for_write=True)


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def now_ms() -> int:
    """Wall-clock milliseconds."""
    return time.time_ns() // 1_000_000


def _ts_ms(ts) -> int:
    return ts.seconds * 1000 + ts.nanos // 1_000_000


def delivery_time_ms(sp) -> Optional[int]:
    """The message's delivery time (ms since the epoch) or None when it has none."""
    if not sp.HasField("delivery_timestamp"):
        return None
    ts = sp.delivery_timestamp
    if ts.seconds > _MS_IN_SECONDS_FIELD:
        return ts.seconds + ts.nanos // 1_000_000
    ms = _ts_ms(ts)
    return ms or None


def to_store_message(m: pb.Message, *, max_body_size: int, max_delay_ms: int, born_host: str,
                     transactional: bool = False, cluster: Optional[str] = None) -> Message:
    """A pymq :class:`Message` from the protocol message ``m`` (queue chosen later).

    Its properties are those RocketMQ 5 stores for a message sent through its proxy: the
    application's, ``UNIQ_KEY``, ``TAGS``, ``KEYS``, the type's own (``__SHARDINGKEY``,
    ``TIMER_DELIVER_MS``, ``TRAN_MSG``, ``_SYS_MSG_PRIORITY_``, ``__LITE_TOPIC``), the
    proxy's ``PGROUP`` (the topic), ``RECONSUME_TIME``, ``__BORNHOST``,
    ``BORN_TIMESTAMP`` and ``TRACE_CONTEXT``, and the broker's ``CLUSTER`` (``cluster``,
    when given); never ``WAIT``, which the proxy does not set."""
    topic = _write_topic(m.topic.name)
    sp = m.system_properties
    body = m.body
    if sp.body_encoding == _GZIP:
        try:
            body = gzip.decompress(body)
        except Exception:
            raise RequestError(Code.MESSAGE_CORRUPTED, "body is not valid gzip") from None
    if len(body) > max_body_size:
        raise RequestError(Code.MESSAGE_BODY_TOO_LARGE,
                           f"message body is {len(body)} bytes, more than the limit of {max_body_size}")
    if not body:
        raise RequestError(Code.MESSAGE_BODY_EMPTY, "message body is empty")
    msg_id = sp.message_id
    if not msg_id or len(msg_id) > 128 or not msg_id.encode().isalnum():     # ASCII letters and digits
        raise RequestError(Code.ILLEGAL_MESSAGE_ID, f"message id {msg_id!r} is illegal")
    props: dict[str, str] = {}
    size = 0                    # the proxy's userPropertySize: user properties, tag and keys, UTF-8
    user = m.user_properties
    if user:
        if len(user) > MAX_USER_PROPERTIES:
            raise RequestError(Code.MESSAGE_PROPERTIES_TOO_LARGE,
                               f"{len(user)} user properties, more than the limit of {MAX_USER_PROPERTIES}")
        for k, v in user.items():
            if k in SYSTEM_PROPERTIES:
                raise RequestError(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property {k!r} is reserved by the system")
            names.check_property(k, v)
            props[k] = v
            size += _utf8_len(k) + _utf8_len(v)
    props["UNIQ_KEY"] = msg_id
    tag = sp.tag
    if tag:
        tag = names.check_tag(tag)
        size += _utf8_len(tag)
    else:
        tag = None
    keys = sp.keys
    if keys:
        keys = [names.check_key(k) for k in keys]
        size += sum(_utf8_len(k) for k in keys)
    else:
        keys = None
    if size > MAX_USER_PROPERTY_BYTES:
        raise RequestError(Code.MESSAGE_PROPERTIES_TOO_LARGE,
                           f"user properties, tag and keys hold {size} bytes, more than the limit of "
                           f"{MAX_USER_PROPERTY_BYTES}")
    group = names.check_message_group(sp.message_group) if sp.HasField("message_group") else None
    deliver = delivery_time_ms(sp)
    mtype = sp.message_type
    if mtype == _FIFO and group is None:
        raise RequestError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "a FIFO message needs a message group")
    if mtype == _DELAY and deliver is None:
        raise RequestError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "a DELAY message needs a delivery timestamp")
    if transactional and (group is not None or deliver is not None):
        raise RequestError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                           "a transactional message takes no message group or delivery timestamp")
    if deliver is not None:
        if deliver - now_ms() > max_delay_ms:
            raise RequestError(Code.ILLEGAL_DELIVERY_TIME,
                               f"delivery timestamp is more than {max_delay_ms // 1000} s ahead")
        if deliver <= now_ms():
            deliver = None          # due already: deliver now
    _priority_and_lite(sp, mtype, props, group is not None or deliver is not None or transactional)
    if transactional and sp.HasField("orphaned_transaction_recovery_duration"):
        props["CHECK_IMMUNITY_TIME_IN_SECONDS"] = str(max(sp.orphaned_transaction_recovery_duration.seconds, 0))
    _proxy_properties(sp, props, topic, born_host, cluster)
    born = _ts_ms(sp.born_timestamp)         # 0 when unset: now
    return Message(topic, body, tags=tag, keys=keys, properties=props, deliver_time_ms=deliver,
                   born_timestamp=born or now_ms(), born_host=born_host, message_group=group)


def _proxy_properties(sp, props: dict, topic: str, peer: str, cluster: Optional[str]) -> None:
    """Into ``props``: what RocketMQ 5's proxy and broker add to a message sent over gRPC."""
    props[PROPERTY_RECONSUME_TIME] = str(sp.delivery_attempt)
    props[PROPERTY_PRODUCER_GROUP] = topic
    if sp.trace_context:
        props[PROPERTY_TRACE_CONTEXT] = sp.trace_context
    host = sp.born_host if sp.born_host.strip() else peer
    if host:
        props[PROPERTY_BORN_HOST] = host
    if sp.HasField("born_timestamp"):
        props[PROPERTY_BORN_TIMESTAMP] = str(_ts_ms(sp.born_timestamp))
    if cluster:
        props[PROPERTY_CLUSTER] = cluster


def _priority_and_lite(sp, mtype: int, props: dict, typed: bool) -> None:
    """Into ``props``: the priority of a PRIORITY message (``_SYS_MSG_PRIORITY_``) and the
    lite topic of a LITE one (``__LITE_TOPIC``). ``typed``: the message is transactional,
    delayed or FIFO, which come first (RocketMQ drops a priority then)."""
    lite = sp.lite_topic if sp.HasField("lite_topic") else None
    priority = sp.priority if sp.HasField("priority") else None
    if mtype == _LITE and lite is None:
        raise RequestError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "a LITE message needs a lite topic")
    if mtype == _PRIORITY and priority is None:
        raise RequestError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "a PRIORITY message needs a priority")
    if priority is not None and not typed:
        if priority < 0:
            raise RequestError(Code.BAD_REQUEST, "the priority must be greater than or equal to 0")
        props[PROPERTY_PRIORITY] = str(priority)
    elif lite is not None and not typed:
        try:
            props[PROPERTY_LITE_TOPIC] = check_lite_topic(lite)
        except IllegalLiteTopicError as e:
            raise RequestError(Code.ILLEGAL_LITE_TOPIC, str(e)) from None


def message_type_of(x) -> int:
    """The protocol message type of a stored message."""
    props = x.properties
    if x.message_group or "__SHARDINGKEY" in props:
        return pb.MessageType.FIFO
    if "TRAN_MSG" in props or x.prepared_transaction_offset:
        return pb.MessageType.TRANSACTION
    if "TIMER_DELIVER_MS" in props or "DELAY" in props:
        return pb.MessageType.DELAY
    if PROPERTY_PRIORITY in props:
        return _PRIORITY
    if PROPERTY_LITE_TOPIC in props:
        return _LITE
    return pb.MessageType.NORMAL


def to_pb_message(x, *, invisible_ms: Optional[int] = None, topic: Optional[str] = None) -> pb.Message:
    """The protocol message of the stored message ``x`` (a pymq ``MessageExt``)."""
    props = x.properties
    out = pb.Message()
    out.topic.name = topic or x.topic
    body = bytes(x.body)
    out.body = body
    for k, v in props.items():
        if k not in SYSTEM_PROPERTIES:
            out.user_properties[k] = v
    sp = out.system_properties
    if x.tags:
        sp.tag = x.tags
    if x.keys:
        sp.keys.extend(x.keys)
    sp.message_id = props.get("UNIQ_KEY") or x.msg_id or ""
    sp.body_digest.type = pb.DigestType.CRC32
    sp.body_digest.checksum = format(zlib.crc32(body), "08X")
    sp.body_encoding = pb.Encoding.IDENTITY
    sp.message_type = message_type_of(x)
    sp.born_timestamp.FromMilliseconds(x.born_timestamp)
    sp.born_host = props.get(PROPERTY_BORN_HOST) or (x.born_host or "").rsplit(":", 1)[0]
    sp.store_timestamp.FromMilliseconds(x.store_timestamp)
    sp.store_host = x.store_host or ""
    deliver = props.get("TIMER_DELIVER_MS")
    if deliver and deliver.isdigit():
        sp.delivery_timestamp.FromMilliseconds(int(deliver))
    handle = x.receipt_handle
    if handle:
        sp.receipt_handle = handle
    sp.queue_id = x.queue_id
    sp.queue_offset = x.queue_offset
    if invisible_ms is not None:
        sp.invisible_duration.FromMilliseconds(invisible_ms)
    sp.delivery_attempt = x.delivery_attempt or (x.reconsume_times + 1)
    group = x.message_group or props.get("__SHARDINGKEY")
    if group:
        sp.message_group = group
    priority = props.get(PROPERTY_PRIORITY)
    if priority and priority.isdigit():
        sp.priority = int(priority)
    lite = props.get(PROPERTY_LITE_TOPIC)
    if lite:
        sp.lite_topic = lite
    trace = props.get(PROPERTY_TRACE_CONTEXT)
    if trace:
        sp.trace_context = trace
    return out
