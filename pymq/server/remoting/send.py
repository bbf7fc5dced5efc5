"""SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE and CONSUMER_SEND_MSG_BACK.

A send's fields (``producerGroup``, ``topic``, ``defaultTopic``, ``defaultTopicQueueNums``,
``queueId``, ``sysFlag``, ``bornTimestamp``, ``flag``, ``properties``, ``reconsumeTimes``,
``unitMode``, ``maxReconsumeTimes``; V2 names them ``a`` .. ``n``) and its body become one
record, stored as the client sent it: the body verbatim (compressed when ``sysFlag`` says
so), the born time and the connection's address as the born host. As RocketMQ 4.9.7's
``SendMessageProcessor`` does:

* the properties are the client's with ``CLUSTER`` (the broker's cluster name) added; a
  single message that is neither delayed nor a half is stored without ``WAIT`` (the
  client's wait-for-store flag; a delayed put and a half keep it, as the broker's
  re-encoding of their properties does); each message of a batch gets the batch's own
  properties (``WAIT`` included) and ``CLUSTER`` after its own, as RocketMQ's batch
  encoder appends them;
* topics are checked, and created on their first send when auto-creation is on;
* a queue id below 0 picks a queue; one beyond the topic's queues is refused;
* a send to ``%RETRY%{group}`` whose ``reconsumeTimes`` reached the group's limit (or the
  client's ``maxReconsumeTimes``) goes to ``%DLQ%{group}`` instead;
* a transaction-prepared ``sysFlag`` stores a half message (see ``transaction.py``);
* ``DELAY`` delays by level; ONS's ``__STARTDELIVERTIME`` (ms) delivers at that time;
* as RocketMQ 5.4/5.5's broker does, a single send carrying ``_SYS_MSG_PRIORITY_`` (a
  priority >= 0) goes to queue ``min(priority, writeQueueNums - 1)`` when its properties
  make it a PRIORITY message (not transactional, delayed or FIFO; the topic's declared type
  is not checked), else the priority is dropped; one carrying ``__LITE_TOPIC`` is filed in
  its lite topic's LMQ as well (``INNER_MULTI_DISPATCH`` = ``%LMQ%$topic$lite``,
  :mod:`pymq.broker.lite_writer`), so a 4.x producer publishes to PRIORITY and LITE topics.

A batch comes as ``SEND_BATCH_MESSAGE``, or as a single send with ``batch`` (``m``) true.
RocketMQ's broker reads that flag with ``Boolean.parseBoolean``, so the C++ client's
``m=1`` is false and its batch is stored as one message whose body is the encoded batch;
so is it here.
The answer carries ``msgId`` (the offset message id: store host + commit-log offset, the
id clients compute for pulled records), ``queueId`` and ``queueOffset``. A batch body is
``MessageDecoder.encodeMessages``' layout, one entry per message::

    int32 total | int32 magic | int32 body_crc | int32 flag | int32 body_len | body
    | int16 properties_len | properties
"""

from __future__ import annotations

import os
import random
import struct

from pymq._core.layout import TRANSACTION_PREPARED_TYPE, TRANSACTION_TYPE_MASK
from pymq._core.message import Message, decode_properties
from pymq.broker.lite_topic import PROPERTY_LITE_TOPIC, IllegalLiteTopicError, check_lite_topic
from pymq.broker.lite_writer import LiteTopicQuotaError
from pymq.broker.priority import PROPERTY_PRIORITY, apply_priority
from pymq.broker.retry import SendBackError
from pymq.broker.topic_config import DEFAULT_TOPIC, PERM_READ, PERM_WRITE, RETRY_GROUP_TOPIC_PREFIX, dlq_topic
from pymq.broker.validators import is_system_topic, topic_problem
from pymq.store.lmq import PROPERTY_INNER_MULTI_DISPATCH, PROPERTY_INNER_MULTI_QUEUE_OFFSET
from pymq.status import PutMessageStatus as P

from ..traffic import DELAY, FIFO, NORMAL, TRANSACTION, observe
from .codes import RequestCode, ResponseCode
from .headers import RequestError, opt_bool, opt_int, opt_str, req_int, require, send_header

START_DELIVER_TIME = "__STARTDELIVERTIME"       # ONS's timer property (ms)
_BATCH_HEAD = struct.Struct(">iiiii")
_PUT_CODES = {
    P.PUT_OK: ResponseCode.SUCCESS,
    P.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    P.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    P.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
    P.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    P.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
    P.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
    P.OS_PAGECACHE_BUSY: ResponseCode.SYSTEM_BUSY,
}


#: put statuses whose message is in the log: the send is answered with its id and offsets
#: (``sendOK`` in 4.9.7's ``handlePutMessageResult``), under the status's own code
_STORED = frozenset({P.PUT_OK, P.FLUSH_DISK_TIMEOUT, P.FLUSH_SLAVE_TIMEOUT, P.SLAVE_NOT_AVAILABLE})


def _disk_ratio(path: str) -> float:
    """``UtilAll.getDiskPartitionSpaceUsedPercent``: the used share of ``path``'s partition
    (0..1, rounded up to a hundredth), -1 when it cannot be measured."""
    try:
        st = os.statvfs(path)
    except OSError:
        return -1.0
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    entire = used + st.f_bavail * st.f_frsize
    if st.f_blocks <= 0 or entire <= 0:
        return -1.0
    return (used * 100 // entire + (1 if used * 100 % entire else 0)) / 100.0


def disk_util(store_path: str) -> str:
    """4.9.7's ``diskUtil()`` text: the used ratios of the commit log's, consume queues' and
    index's partitions."""
    ratios = [_disk_ratio(os.path.join(store_path, d)) for d in ("commitlog", "consumequeue", "index")]
    return "CL: %5.2f CQ: %5.2f INDEX: %5.2f" % tuple(ratios)


def service_not_available_remark(store_path: str) -> str:
    """4.9.7's remark of a send answered SERVICE_NOT_AVAILABLE (a slave, a full disk, a
    store shutting down)."""
    return ("service not available now. It may be caused by one of the following reasons: the broker's disk is "
            f"full [{disk_util(store_path)}], messages are put to the slave, message store has been shut down, etc.")


_DELAY_PROPERTIES = ("DELAY", START_DELIVER_TIME, "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS")
PROPERTY_CLUSTER = "CLUSTER"                    # MessageConst.PROPERTY_CLUSTER
PROPERTY_WAIT = "WAIT"                          # MessageConst.PROPERTY_WAIT_STORE_MSG_OK


def _drop_inner(props: dict) -> dict:
    """Leave out the multi-dispatch properties only the broker sets (``INNER_MULTI_DISPATCH``,
    ``INNER_MULTI_QUEUE_OFFSET``: a lite message's LMQ and its place there, assigned under
    the lite writer's lock): a 4.x client cannot file its message into LMQs by naming them."""
    props.pop(PROPERTY_INNER_MULTI_DISPATCH, None)
    props.pop(PROPERTY_INNER_MULTI_QUEUE_OFFSET, None)
    return props


def _client_properties(text):
    """A send's properties string, decoded, without the broker's own (:func:`_drop_inner`)."""
    return _drop_inner(decode_properties(text))


def _delayed(props: dict) -> bool:
    """The message has a delay level (``DELAY`` > 0, what ``getDelayTimeLevel`` reads)."""
    level = props.get("DELAY")
    return bool(level) and level.isdigit() and int(level) > 0


def message_type(props: dict, sys_flag: int) -> str:
    """The metrics' ``message_type`` of a send (RocketMQ's
    ``TopicMessageType.parseFromMessageProperty``): transaction when prepared, delay when it
    has a delay level or a delivery time, fifo when it has a sharding key, else normal."""
    if sys_flag & TRANSACTION_TYPE_MASK == TRANSACTION_PREPARED_TYPE:
        return TRANSACTION
    if any(props.get(k) not in (None, "", "0") for k in _DELAY_PROPERTIES):
        return DELAY
    if props.get("__SHARDINGKEY"):
        return FIFO
    return NORMAL


LMQ_QUOTA_REMARK = ("[LMQ_CONSUME_QUEUE_NUM_EXCEEDED]broker config enableLmq and enableMultiDispatch, lmq "
                    "consumeQueue num exceed maxLmqConsumeQueueNum config num, default limit 2w.")


def decode_batch(body: bytes, topic: str) -> list[tuple[int, bytes, dict]]:
    """The (flag, body, properties) of each message of a batch body; RequestError when
    it is malformed."""
    out = []
    pos, n = 0, len(body)
    while pos < n:
        if n - pos < _BATCH_HEAD.size:
            raise RequestError(ResponseCode.MESSAGE_ILLEGAL, f"batch entry at {pos} is truncated")
        total, _magic, _crc, flag, body_len = _BATCH_HEAD.unpack_from(body, pos)
        end = pos + total
        head_end = pos + _BATCH_HEAD.size
        if total < _BATCH_HEAD.size + 2 or end > n or body_len < 0 or head_end + body_len + 2 > end:
            raise RequestError(ResponseCode.MESSAGE_ILLEGAL, f"batch entry at {pos} has bad lengths")
        data = body[head_end:head_end + body_len]
        (props_len,) = struct.unpack_from(">h", body, head_end + body_len)
        props_start = head_end + body_len + 2
        if props_len < 0 or props_start + props_len != end:
            raise RequestError(ResponseCode.MESSAGE_ILLEGAL, f"batch entry at {pos} has bad properties")
        out.append((flag, data, decode_properties(body[props_start:end])))
        pos = end
    if not out:
        raise RequestError(ResponseCode.MESSAGE_ILLEGAL, "empty batch")
    return out


class SendMessageProcessor:
    """Sends and send-backs for a :class:`RemotingServer`."""

    def __init__(self, server) -> None:
        self.server = server
        self.broker = server.broker

    def handlers(self) -> dict:
        return {RequestCode.SEND_MESSAGE: self.send_message, RequestCode.SEND_MESSAGE_V2: self.send_message,
                RequestCode.SEND_BATCH_MESSAGE: self.send_batch_message,
                RequestCode.CONSUMER_SEND_MSG_BACK: self.consumer_send_msg_back}

    # -- checks ---------------------------------------------------------------------------

    def _topic_for_send(self, topic: str, queue_id: int, client_queue_nums: int = 0):
        """The topic's config (created on first send), the checks of ``msgCheck``. A new
        topic gets the producer's ``defaultTopicQueueNums``, at most the queues of
        ``TBW102`` (``createTopicInSendMessageMethod``)."""
        why = topic_problem(topic)
        if why is not None:
            raise RequestError(ResponseCode.SYSTEM_ERROR, why)
        if is_system_topic(topic) and not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            raise RequestError(ResponseCode.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden.")
        tcm = self.broker.topic_config_manager
        tc = tcm.select_topic_config(topic)
        if tc is None:
            if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                group = self._group(topic[len(RETRY_GROUP_TOPIC_PREFIX):])
                tc = tcm.create_topic_of_group(topic, group.retry_queue_nums, PERM_READ | PERM_WRITE)
            else:
                default = tcm.select_topic_config(DEFAULT_TOPIC)
                n = self.broker.broker_config.default_topic_queue_nums
                if client_queue_nums > 0 and default is not None:
                    n = min(client_queue_nums, default.write_queue_nums)
                # a new topic's queues, checked before it is created: a refused send leaves none
                if queue_id >= n and tcm.why_not_created(topic) is None:
                    raise RequestError(ResponseCode.SYSTEM_ERROR,
                                       f"request queueId[{queue_id}] is illegal, topic:[{topic}] writeQueueNums:[{n}]")
                tc = tcm.create_topic_in_send_message_method(topic, n)
        if tc is None:
            why = tcm.why_not_created(topic)
            raise RequestError(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!"
                               + (f" ({why})" if why else ""))
        if not tc.perm & PERM_WRITE:
            raise RequestError(ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")
        if queue_id >= max(tc.write_queue_nums, tc.read_queue_nums):
            raise RequestError(ResponseCode.SYSTEM_ERROR,
                               f"request queueId[{queue_id}] is illegal, topic:[{topic}] writeQueueNums:[{tc.write_queue_nums}]")
        return tc

    def _group(self, group: str):
        cfg = self.broker.subscription_group_manager.find_subscription_group_config(group)
        if cfg is None:
            raise RequestError(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}")
        return cfg

    # -- single sends ---------------------------------------------------------------------

    def send_message(self, conn, cmd):
        h = send_header(cmd.ext_fields, cmd.code == RequestCode.SEND_MESSAGE_V2)
        if opt_bool(h, "batch"):          # a batch sent with a single-message code and batch=true
            return self.send_batch_message(conn, cmd)
        topic = require(h, "topic")
        queue_id = req_int(h, "queueId")
        sys_flag = opt_int(h, "sysFlag")
        reconsume_times = opt_int(h, "reconsumeTimes")
        tc = self._topic_for_send(topic, queue_id, opt_int(h, "defaultTopicQueueNums"))
        if queue_id < 0:
            queue_id = random.randrange(max(tc.write_queue_nums, 1))
        props = _client_properties(opt_str(h, "properties"))
        props[PROPERTY_CLUSTER] = self.broker.broker_config.cluster_name
        prepared = sys_flag & TRANSACTION_TYPE_MASK == TRANSACTION_PREPARED_TYPE
        if not prepared and not _delayed(props):
            props.pop(PROPERTY_WAIT, None)
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            group = self._group(topic[len(RETRY_GROUP_TOPIC_PREFIX):])
            limit = opt_int(h, "maxReconsumeTimes", group.retry_max_times)
            if reconsume_times >= limit:
                topic = dlq_topic(group.group_name)
                self.broker.topic_config_manager.create_topic_of_group(topic, 1, PERM_READ | PERM_WRITE)
                queue_id = 0
        deliver_at = props.get(START_DELIVER_TIME)
        if deliver_at and "TIMER_DELIVER_MS" not in props and deliver_at.isdigit():
            props["TIMER_DELIVER_MS"] = deliver_at
        if PROPERTY_PRIORITY in props:
            queue_id = apply_priority(props, message_type(props, sys_flag) != NORMAL, queue_id, tc.write_queue_nums)
        lite = props.get(PROPERTY_LITE_TOPIC)
        if lite and not prepared and not _delayed(props) and "TIMER_DELIVER_MS" not in props:
            try:
                check_lite_topic(lite)
            except IllegalLiteTopicError as e:
                raise RequestError(ResponseCode.MESSAGE_ILLEGAL, str(e)) from None
        else:
            lite = None
        try:
            msg = Message(topic, cmd.body, properties=props, queue_id=queue_id, flag=opt_int(h, "flag"),
                          born_timestamp=opt_int(h, "bornTimestamp"), born_host=conn.peer,
                          sys_flag=sys_flag, reconsume_times=max(reconsume_times, 0))
        except (TypeError, ValueError) as e:
            raise RequestError(ResponseCode.MESSAGE_ILLEGAL, str(e)) from None
        if prepared:
            put = self.broker.put_half_message
            args = (msg, opt_str(h, "producerGroup") or "DEFAULT_PRODUCER")
        elif lite:
            put = self._put_lite
            args = (msg, lite)
        else:
            put = self.broker.put_message
            args = (msg,)
        kind = (topic, message_type(props, sys_flag))
        if self.server._inline:
            return self._answer(cmd, put(*args), queue_id, kind)
        return self._put_async(cmd, put, args, queue_id, kind)

    def _put_lite(self, msg, lite: str):
        """A LITE message's put; a new lite topic past the broker's LMQ quota is answered as
        RocketMQ answers ``LMQ_CONSUME_QUEUE_NUM_EXCEEDED``."""
        try:
            return self.broker.put_lite_message(msg, lite)
        except LiteTopicQuotaError:
            raise RequestError(ResponseCode.SYSTEM_ERROR, LMQ_QUOTA_REMARK) from None

    async def _put_async(self, cmd, put, args, queue_id: int, kind: tuple):
        return self._answer(cmd, await self.server.send_queue.put(put, *args), queue_id, kind)

    def _answer(self, cmd, r, queue_id: int, kind: tuple):
        """The response to a put; ``kind`` is (topic, message type) for the metrics."""
        code = _PUT_CODES.get(r.status, ResponseCode.SYSTEM_ERROR)
        if r.status not in _STORED:
            if r.status is P.SERVICE_NOT_AVAILABLE:
                # 4.9.7's remark, then pymq's reason when the store gave one (a full disk)
                why = f" (pymq: {r.error})" if r.error else ""
                return cmd.response(code, service_not_available_remark(self.broker.store_path) + why)
            return cmd.response(code, f"{r.status.name}: {r.error or ''}".rstrip(": "))
        server = self.server
        server.stats.sent += max(r.msg_num, 1)
        if server.in_observer is not None:
            observe(server, server.in_observer, kind[0], kind[1], max(r.msg_num, 1), r.wrote_bytes)
        ext = {"msgId": r.msg_id, "queueId": queue_id, "queueOffset": r.queue_offset,
               "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
        return cmd.response(code, None, ext)

    # -- batches --------------------------------------------------------------------------

    def send_batch_message(self, conn, cmd):
        h = send_header(cmd.ext_fields, True)
        topic = require(h, "topic")
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            raise RequestError(ResponseCode.MESSAGE_ILLEGAL, "batch message does not support retry group")
        queue_id = req_int(h, "queueId")
        tc = self._topic_for_send(topic, queue_id, opt_int(h, "defaultTopicQueueNums"))
        if queue_id < 0:
            queue_id = random.randrange(max(tc.write_queue_nums, 1))
        born, flag_sys, host = opt_int(h, "bornTimestamp"), opt_int(h, "sysFlag"), conn.peer
        batch_props = _client_properties(opt_str(h, "properties"))
        batch_props[PROPERTY_CLUSTER] = self.broker.broker_config.cluster_name
        msgs = []
        for flag, data, props in decode_batch(bytes(cmd.body), topic):
            _drop_inner(props)
            if props.get("DELAY") or props.get(START_DELIVER_TIME):
                raise RequestError(ResponseCode.MESSAGE_ILLEGAL, "batch message does not support delay")
            props.update(batch_props)
            msgs.append(Message(topic, data, properties=props, queue_id=queue_id, flag=flag, born_timestamp=born,
                                born_host=host, sys_flag=flag_sys & ~TRANSACTION_TYPE_MASK))
        kind = (topic, NORMAL)
        if self.server._inline:
            return self._answer(cmd, self.broker.put_messages(msgs), queue_id, kind)
        return self._put_async(cmd, self.broker.put_messages, (msgs,), queue_id, kind)

    # -- send back (retry / DLQ) ------------------------------------------------------------

    def consumer_send_msg_back(self, conn, cmd):
        ext = cmd.ext_fields
        group = require(ext, "group")
        offset = req_int(ext, "offset")
        delay_level = opt_int(ext, "delayLevel")
        limit = opt_int(ext, "maxReconsumeTimes", -1)
        self._group(group)
        if self.server._inline:
            return self._sent_back(cmd, group, offset, delay_level, limit)
        return self.server.call(self._sent_back, cmd, group, offset, delay_level, limit)

    def _sent_back(self, cmd, group: str, offset: int, delay_level: int, limit: int):
        try:
            r = self.broker.send_message_back(group, offset, delay_level, limit if limit >= 0 else None)
        except SendBackError as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, str(e))
        if r.status is not P.PUT_OK:
            # 4.9.7 answers every put status but PUT_OK with SYSTEM_ERROR and the status's
            # name (asyncConsumerSendMsgBack), SERVICE_NOT_AVAILABLE on a slave included
            return cmd.response(ResponseCode.SYSTEM_ERROR, r.status.name)
        return cmd.response(ResponseCode.SUCCESS)
