"""Offsets by time as a 4.9.7 broker finds them, and mqadmin's ``resetOffsetByTime``.

**By time** (``SEARCH_OFFSET_BY_TIMESTAMP``): a 4.9.7 broker binary-searches the consume
queue for a message stored at the time asked; when none is, it answers the nearer of the
two messages around that time (the earlier on a tie), so a time after the last message
gives the last message's offset, and one before the first gives the first. pymq's store
answers RocketMQ 5's boundary rule (:meth:`pymq.MessageStore.get_offset_in_queue_by_time`);
:func:`offset_by_time_4x` derives the 4.x answer from it. A request carrying RocketMQ 5's
``boundaryType`` (``lower`` / ``upper``) gets that rule instead.

**Reset** (``INVOKE_BROKER_TO_RESET_OFFSET``, 222, from ``resetOffsetByTime``): for every
write queue of the topic the offset at the time asked (``-1``: the queue's end); it
replaces the group's committed offset when it is lower or when forced. The broker does not
write these itself: it sends them (``RESET_CONSUMER_CLIENT_OFFSET``, 220, one-way, body
``{"offsetTable": {MessageQueue: offset}}``) to every connected consumer of the group,
which moves and commits them, and answers the same table. When the request comes from a C++
tool, consumers get the table as a list (``ResetOffsetBodyForC``), as RocketMQ decides. Refusals: no such topic, or a group with no
committed offset, ``SYSTEM_ERROR``; no consumer online, ``CONSUMER_NOT_ONLINE`` (206),
which makes mqadmin fall back to writing the offsets through ``UPDATE_CONSUMER_OFFSET``.
"""

from __future__ import annotations

from pymq.status import BoundaryType
from pymq.store.fastjson import ObjectKeyMap, dumps_fastjson

from .codec import ONEWAY_FLAG, RemotingCommand
from .codes import RequestCode, ResponseCode
from .headers import opt_str, req_int, require


def offset_by_time_4x(broker, topic: str, queue_id: int, timestamp: int) -> int:
    """The queue offset a 4.9.7 broker answers for ``timestamp`` (module docstring)."""
    low = broker.get_min_offset_in_queue(topic, queue_id)
    high = broker.get_max_offset_in_queue(topic, queue_id)
    if high <= low:
        return 0
    right = broker.get_offset_in_queue_by_time(topic, queue_id, timestamp, BoundaryType.LOWER)
    right_time = broker.get_message_store_timestamp(topic, queue_id, right) if right < high else -1
    if right_time == timestamp:
        return right
    left = right - 1 if right - 1 >= low else -1
    left_time = broker.get_message_store_timestamp(topic, queue_id, left) if left >= 0 else -1
    if right_time < 0:
        return left if left >= 0 else low
    if left_time < 0:
        return right
    return right if abs(timestamp - left_time) > abs(timestamp - right_time) else left


def offset_by_time(broker, ext: dict, topic: str, queue_id: int, timestamp: int) -> int:
    """By ``boundaryType`` when the request names one (RocketMQ 5), else as 4.9.7."""
    boundary = (opt_str(ext, "boundaryType") or "").lower()
    if boundary in ("lower", "upper"):
        return broker.get_offset_in_queue_by_time(topic, queue_id, timestamp, BoundaryType(boundary))
    return offset_by_time_4x(broker, topic, queue_id, timestamp)


class OffsetResetProcessor:
    """``INVOKE_BROKER_TO_RESET_OFFSET``."""

    def __init__(self, server) -> None:
        self.server = server
        self.broker = server.broker

    def handlers(self) -> dict:
        return {RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: self.reset_offset}

    def reset_offset(self, conn, cmd):
        ext = cmd.ext_fields
        topic, group = require(ext, "topic"), require(ext, "group")
        timestamp = req_int(ext, "timestamp")
        force = (opt_str(ext, "isForce") or "true").lower() == "true"
        b = self.broker
        tc = b.topic_config_manager.select_topic_config(topic)
        if tc is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"[reset-offset] reset offset failed, no topic in this broker. topic={topic}")
        table = []
        for qid in range(tc.write_queue_nums):
            committed = b.query_offset(group, topic, qid)
            if committed == -1:
                return cmd.response(ResponseCode.SYSTEM_ERROR, f"THe consumer group <{group}> not exist")
            at = b.get_max_offset_in_queue(topic, qid) if timestamp == -1 else offset_by_time_4x(b, topic, qid,
                                                                                                timestamp)
            at = max(at, 0)
            table.append((qid, at if force or at < committed else committed))
        members = [c for c in self.server.clients.consumers_of_group(group)
                   if group in c.consumer_groups and hasattr(c.channel, "write")]
        if not members:
            return cmd.response(ResponseCode.CONSUMER_NOT_ONLINE,
                                f"Consumer not online, so can not reset offset, Group: {group} Topic: {topic} "
                                f"Timestamp: {timestamp}")
        body = self._body(topic, table)
        name = self.broker.broker_config.broker_name
        body_c = dumps_fastjson({"offsetTable": [{"topic": topic, "brokerName": name, "queueId": qid, "offset": off}
                                                 for qid, off in table]}, pretty=False).encode()
        for member in members:
            channel = member.channel
            request = RemotingCommand(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, self.server.next_opaque(),
                                      ONEWAY_FLAG, None,
                                      {"topic": topic, "group": group, "timestamp": str(timestamp),
                                       "isForce": "true" if force else "false"},
                                      body_c if cmd.language == "CPP" else body)
            channel.write(request)
        return cmd.response(ResponseCode.SUCCESS, body=body)

    def _body(self, topic: str, table: list) -> bytes:
        name = self.broker.broker_config.broker_name
        offsets = ObjectKeyMap((({"brokerName": name, "queueId": qid, "topic": topic}, off) for qid, off in table))
        return dumps_fastjson({"offsetTable": offsets}, pretty=False).encode()
