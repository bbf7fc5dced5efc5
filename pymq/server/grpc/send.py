"""SendMessage: one message or a batch, normal, delayed, FIFO, transactional, priority or lite.

The proxy picks the queue (a request names none): FIFO messages by a hash of their message
group over the topic's write queues, so that one group always lands in one queue; others
round-robin. A request of plain messages (no group, no delivery time, not transactional)
is appended as one batch, into one queue, with a single ``put_messages``. A delivery
timestamp becomes pymq's ``deliver_time_ms`` (the store's timer delivers it); a
transactional message is stored as a half message, and its ``transaction_id`` in the
receipt is what EndTransaction names. A delayed message's receipt carries a recall handle,
which RecallMessage takes back (:mod:`pymq.broker.recall`). A PRIORITY message goes to
queue ``min(priority, write queues - 1)`` (:mod:`pymq.broker.priority`); a LITE message
to a queue of its parent topic and into its lite topic's LMQ (:mod:`pymq.broker.lite_writer`).
Each message's type must be one its topic takes (the topic's ``message.type``,
:mod:`pymq.broker.topic_message_type`): else the whole request is refused with
``MESSAGE_PROPERTY_CONFLICT_WITH_TYPE``, as RocketMQ 5's proxy does.
"""

from __future__ import annotations

import itertools
import zlib

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc

from pymq._core.record import java_hash_code
from pymq.broker.lite_topic import PROPERTY_LITE_TOPIC
from pymq.broker.lite_writer import LiteTopicQuotaError
from pymq.broker.priority import PROPERTY_PRIORITY, priority_queue_id
from pymq.broker.recall import InvalidRecallHandleError, RecallTooLateError
from pymq.broker.topic_message_type import message_type, type_conflict
from pymq.status import PutMessageStatus

from ..traffic import NORMAL, observe
from .convert import to_store_message
from .names import check_topic
from .status import Code, RequestError, ok, status, status_of
from .topics import topic_for_send

_TRANSACTION = pb.MessageType.TRANSACTION
_OK = Code.OK

_PUT_CODES = {
    PutMessageStatus.FLUSH_DISK_TIMEOUT: (Code.MASTER_PERSISTENCE_TIMEOUT, "flush to disk timed out"),
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: (Code.SLAVE_PERSISTENCE_TIMEOUT, "slave flush timed out"),
    PutMessageStatus.SLAVE_NOT_AVAILABLE: (Code.HA_NOT_AVAILABLE, "slave not available"),
    PutMessageStatus.SERVICE_NOT_AVAILABLE: (Code.INTERNAL_SERVER_ERROR, "store not writeable (disk full or stopping)"),
    PutMessageStatus.CREATE_MAPEDFILE_FAILED: (Code.INTERNAL_SERVER_ERROR, "could not create a commit-log file"),
    # the request was checked before the put: what the store still refuses is the size of a
    # record or batch (past max_message_size, or larger than a commit-log segment)
    PutMessageStatus.MESSAGE_ILLEGAL: (Code.MESSAGE_BODY_TOO_LARGE, "message too large"),
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: (Code.MESSAGE_PROPERTIES_TOO_LARGE, "properties too large"),
    PutMessageStatus.OS_PAGECACHE_BUSY: (Code.TOO_MANY_REQUESTS, "page cache busy"),
    PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL: (Code.ILLEGAL_DELIVERY_TIME, "delivery time out of range"),
}


def put_status(result) -> pb.Status:
    """The protocol status of a ``PutMessageResult``."""
    st = result.status
    if st == PutMessageStatus.PUT_OK:
        return ok()
    code, text = _PUT_CODES.get(st, (Code.INTERNAL_SERVER_ERROR, st.name))
    detail = getattr(result, "error", None)
    return status(code, f"{text}: {detail}" if detail else text)


def java_string_hash(s: str) -> int:
    """``Math.abs(String.hashCode())`` of ``s`` (over UTF-16 code units), as a Python int
    (so ``Integer.MIN_VALUE`` gives 2**31, never a negative queue)."""
    return abs(java_hash_code(s))


def topic_message_type(msg, tx: bool) -> str:
    """RocketMQ's ``TopicMessageType`` of a converted message."""
    props = msg.properties
    return message_type(tx, msg.deliver_time_ms is not None, msg.message_group is not None,
                        PROPERTY_PRIORITY in props, PROPERTY_LITE_TOPIC in props)


def _message_type(msg, tx: bool) -> str:
    """The metrics' ``message_type`` of a converted message."""
    return topic_message_type(msg, tx).lower()


def combined_status(entries) -> pb.Status:
    """OK when every entry is OK; the one code (the first entry's status) when all failed
    alike; else MULTIPLE_RESULTS."""
    codes = {e.status.code for e in entries}
    if codes == {Code.OK}:
        return ok()
    if len(codes) == 1:
        return entries[0].status
    return status(Code.MULTIPLE_RESULTS, "entries have different results")


class SendActivity:
    """Answers SendMessage for a :class:`~pymq.server.grpc.GrpcServer`."""

    def __init__(self, server) -> None:
        self.server = server
        self._rr: dict[str, itertools.count] = {}

    def _next_queue(self, topic: str, n: int) -> int:
        c = self._rr.get(topic)
        if c is None:
            c = self._rr[topic] = itertools.count(zlib.crc32(topic.encode()) & 0xFF)
        return next(c) % n

    async def send_message(self, ctx, req: svc.SendMessageRequest) -> svc.SendMessageResponse:
        server = self.server
        broker = server.broker
        if not req.messages:
            raise RequestError(Code.MESSAGE_CORRUPTED, "no message to send")        # as the proxy answers
        cfg = server.config
        max_delay_ms = broker.config.timer_max_delay_sec * 1000
        born_host = ctx.peer_host
        cluster = broker.broker_config.cluster_name
        resp = svc.SendMessageResponse()
        converted = []
        max_body = cfg.max_body_size
        for m in req.messages:
            tx = m.system_properties.message_type == _TRANSACTION
            msg = to_store_message(m, max_body_size=max_body, max_delay_ms=max_delay_ms,
                                   born_host=born_host, transactional=tx, cluster=cluster)
            converted.append((msg, tx))
        topic = converted[0][0].topic
        if any(msg.topic != topic for msg, _ in converted):
            raise RequestError(Code.MESSAGE_CORRUPTED, "a batch holds messages of one topic only")
        view = await server.call(topic_for_send, broker, topic)
        n = view.write_queue_nums
        if n < 1:
            raise RequestError(Code.FORBIDDEN, f"topic {topic!r} has no write queue")
        kinds = [topic_message_type(msg, tx) for msg, tx in converted]
        for kind in kinds:
            why = type_conflict(view.message_type, kind)
            if why is not None:
                raise RequestError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, why)
        plain = all(kind == "NORMAL" for kind in kinds)
        if plain and len(converted) > 1:
            msgs = [msg for msg, _ in converted]
            limit = broker.config.max_message_size
            size = sum(len(msg.body) for msg in msgs)
            if size > limit:       # RocketMQ: a batch is one message of its encoded size
                raise RequestError(Code.MESSAGE_BODY_TOO_LARGE,
                                   f"batch of {len(msgs)} bodies holds {size} bytes, more than the limit of {limit}")
            qid = self._next_queue(topic, n)
            for msg in msgs:
                msg.queue_id = qid
            result = await server.call(broker.put_messages, msgs)
            st = put_status(result)
            add = resp.entries.add
            if st.code == _OK:
                first = result.queue_offset
                for i, msg in enumerate(msgs):
                    uniq = msg.properties["UNIQ_KEY"]
                    add(status=st, message_id=uniq, transaction_id=uniq, offset=first + i)
                sent = len(msgs)
                if server.in_observer is not None:
                    observe(server, server.in_observer, topic, NORMAL, len(msgs), result.wrote_bytes)
            else:
                for msg in msgs:
                    uniq = msg.properties["UNIQ_KEY"]
                    add(status=st, message_id=uniq, transaction_id=uniq)
                sent = 0
            resp.status.CopyFrom(st)       # every entry alike
        else:
            for msg, tx in converted:
                uniq = msg.properties["UNIQ_KEY"]
                e = resp.entries.add(message_id=uniq, transaction_id=uniq)    # RocketMQ 5: the UNIQ_KEY, every send
                try:
                    props = msg.properties
                    if msg.message_group is not None:
                        msg.queue_id = java_string_hash(msg.message_group) % n
                    elif PROPERTY_PRIORITY in props:
                        msg.queue_id = priority_queue_id(int(props[PROPERTY_PRIORITY]), n)
                    else:
                        msg.queue_id = self._next_queue(topic, n)
                    if tx:
                        result = await server.transactions.put_half(ctx, msg)
                    elif PROPERTY_LITE_TOPIC in props:
                        result = await server.call(broker.put_lite_message, msg, props[PROPERTY_LITE_TOPIC])
                    else:
                        result = await server.call(broker.put_message, msg)
                    e.status.CopyFrom(put_status(result))
                    if e.status.code == Code.OK:
                        e.offset = result.queue_offset
                        if msg.deliver_time_ms is not None and not tx:
                            e.recall_handle = broker.recall_handle(msg, result) or ""
                        if server.in_observer is not None:
                            observe(server, server.in_observer, topic, _message_type(msg, tx), 1,
                                    result.wrote_bytes)
                except LiteTopicQuotaError as exc:
                    e.status.CopyFrom(status(Code.LITE_TOPIC_QUOTA_EXCEEDED, str(exc)))
                except Exception as exc:  # one entry's failure is its own
                    e.status.CopyFrom(status_of(exc))
            resp.status.CopyFrom(combined_status(resp.entries))
            sent = sum(1 for e in resp.entries if e.status.code == _OK)
        server.stats.sent += sent
        return resp

    async def recall_message(self, ctx, req: svc.RecallMessageRequest) -> svc.RecallMessageResponse:
        """RecallMessage (5.3): cancel a delayed message by the recall handle of its receipt."""
        topic = check_topic(req.topic.name, for_write=True)
        try:
            message_id = await self.server.call(self.server.broker.recall_message, topic, req.recall_handle)
        except InvalidRecallHandleError as e:
            raise RequestError(Code.BAD_REQUEST, str(e)) from None
        except RecallTooLateError as e:
            raise RequestError(Code.ILLEGAL_DELIVERY_TIME, str(e)) from None
        return svc.RecallMessageResponse(status=ok(), message_id=message_id)
