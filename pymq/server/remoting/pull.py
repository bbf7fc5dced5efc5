"""PULL_MESSAGE: records served straight from the mapped commit log, with long polling.

Request fields: consumerGroup, topic, queueId, queueOffset, maxMsgNums, sysFlag,
commitOffset, suspendTimeoutMillis, subscription, subVersion, expressionType. The store's
raw pull (``get_message_raw``) applies RocketMQ's status rules, page limits and tag filter
and hands back memoryviews of the records as they lie in the log; they become the response
body as they are, never decoded into Python objects. Answers (``PullMessageProcessor``):

    FOUND                                   SUCCESS (0), body = the records
    NO_MATCHED_MESSAGE, MESSAGE_WAS_REMOVING PULL_RETRY_IMMEDIATELY (20)
    OFFSET_OVERFLOW_ONE, OFFSET_FOUND_NULL  PULL_NOT_FOUND (19), parked if it may suspend
    NO_MESSAGE_IN_QUEUE                     offset 0: PULL_NOT_FOUND, else PULL_OFFSET_MOVED (21)
    OFFSET_TOO_SMALL, OFFSET_OVERFLOW_BADLY PULL_OFFSET_MOVED (21)

with ``nextBeginOffset``, ``minOffset``, ``maxOffset`` and ``suggestWhichBrokerId`` always
set (0, the master, unless ``slave_read_enable``). A pull with the commit-offset bit also
commits ``commitOffset`` for the group (once, not again when a parked pull is served).

On a slave (``brokerRole`` SLAVE) pulls are served the same, except that the pull's offset
is not committed and an offset that moved is not corrected: PULL_RETRY_IMMEDIATELY with the
group's ``brokerId`` suggested instead of PULL_OFFSET_MOVED.
"""

from __future__ import annotations

from pymq.broker.broker_role import MASTER_ID
from pymq.status import GetMessageStatus as S

from ..traffic import observe
from .codes import PullSysFlag, RequestCode, ResponseCode
from .headers import RequestError, opt_int, opt_str, req_int, require

_CODES = {
    S.FOUND: ResponseCode.SUCCESS,
    S.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    S.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
    S.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    S.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
    S.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
    S.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
}


class PullRequest:
    """The fields of one PULL_MESSAGE request."""

    __slots__ = ("cmd", "group", "topic", "queue_id", "offset", "max_msgs", "sys_flag", "commit_offset",
                 "suspend_ms", "tags", "group_config")

    def __init__(self, cmd) -> None:
        ext = cmd.ext_fields
        self.cmd = cmd
        self.group = require(ext, "consumerGroup")
        self.topic = require(ext, "topic")
        self.queue_id = req_int(ext, "queueId")
        self.offset = req_int(ext, "queueOffset")
        self.max_msgs = req_int(ext, "maxMsgNums")
        self.sys_flag = req_int(ext, "sysFlag")
        self.commit_offset = opt_int(ext, "commitOffset", -1)
        self.suspend_ms = opt_int(ext, "suspendTimeoutMillis", 0)
        expression_type = (opt_str(ext, "expressionType") or "TAG").upper()
        if expression_type != "TAG":
            raise RequestError(ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                               f"{expression_type} filtering is not supported, only TAG expressions")
        self.tags = opt_str(ext, "subscription") if self.sys_flag & PullSysFlag.SUBSCRIPTION else None
        self.group_config = None


class PullMessageProcessor:
    """PULL_MESSAGE for a :class:`RemotingServer`."""

    def __init__(self, server) -> None:
        self.server = server
        self.broker = server.broker

    def handlers(self) -> dict:
        return {RequestCode.PULL_MESSAGE: self.pull_message}

    def pull_message(self, conn, cmd):
        req = PullRequest(cmd)
        b = self.broker
        tc = b.topic_config_manager.select_topic_config(req.topic)
        if tc is None:
            raise RequestError(ResponseCode.TOPIC_NOT_EXIST, f"topic[{req.topic}] not exist, apply first please!")
        if not tc.readable:
            raise RequestError(ResponseCode.NO_PERMISSION, f"the topic[{req.topic}] pulling message is forbidden")
        if not 0 <= req.queue_id < max(tc.read_queue_nums, 1):
            raise RequestError(ResponseCode.SYSTEM_ERROR,
                               f"queueId[{req.queue_id}] is illegal, topic:[{req.topic}] readQueueNums:[{tc.read_queue_nums}]")
        group = b.subscription_group_manager.find_subscription_group_config(req.group)
        if group is None:
            raise RequestError(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group [{req.group}] does not exist")
        if not group.consume_enable:
            raise RequestError(ResponseCode.NO_PERMISSION, f"subscription group no permission, {req.group}")
        if req.max_msgs < 1:
            raise RequestError(ResponseCode.SYSTEM_ERROR, "maxMsgNums must be >= 1")
        if req.tags is None:
            # no subscription in the request: the one the group's heartbeats registered
            req.tags = self.server.clients.subscriptions_of_group(req.group).get(req.topic)
        if req.sys_flag & PullSysFlag.COMMIT_OFFSET and req.commit_offset >= 0 and not b.is_slave:
            b.commit_offset(req.group, req.topic, req.queue_id, req.commit_offset)
        req.group_config = group
        response, parkable = self._serve(req)
        if parkable and req.sys_flag & PullSysFlag.SUSPEND and req.suspend_ms > 0 and not self.server.stopping:
            self.server.hold.park(conn, req, (req.topic, req.queue_id), req.offset,
                                  min(req.suspend_ms, self.server.config.pull_hold_max_ms))
            return None
        return response

    def serve(self, req: PullRequest):
        """The response to ``req`` now, never parked (a parked pull served again)."""
        return self._serve(req)[0]

    def _suggest(self, req: PullRequest, r) -> int:
        """``suggestWhichBrokerId``: the master, unless ``slave_read_enable``; then the
        group's ``whichBrokerWhenConsumeSlowly`` when the pull is far behind (its data no
        longer in memory), else the group's ``brokerId`` (4.9.7's PullMessageProcessor)."""
        g = req.group_config
        if not self.broker.broker_config.slave_read_enable or g is None:
            return MASTER_ID
        return g.which_broker_when_consume_slowly if r.suggest_pulling_from_slave else g.broker_id

    def _serve(self, req: PullRequest):
        cmd = req.cmd
        if req.tags == "*":
            req.tags = None
        try:
            r = self.broker.get_message_raw(req.group, req.topic, req.queue_id, req.offset, req.max_msgs, req.tags)
        except ValueError as e:
            raise RequestError(ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(e)) from None
        status = r.status
        code = _CODES.get(status)
        if status is S.NO_MESSAGE_IN_QUEUE:
            code = ResponseCode.PULL_NOT_FOUND if req.offset == 0 else ResponseCode.PULL_OFFSET_MOVED
        elif code is None:
            code = ResponseCode.PULL_RETRY_IMMEDIATELY
        suggest = self._suggest(req, r)
        if code == ResponseCode.PULL_OFFSET_MOVED and self.broker.is_slave:
            # a slave does not correct the offset (offsetCheckInSlave false): the client is
            # told to retry, at the group's broker
            code = ResponseCode.PULL_RETRY_IMMEDIATELY
            suggest = req.group_config.broker_id if req.group_config is not None else MASTER_ID
        ext = {"nextBeginOffset": r.next_begin_offset, "minOffset": r.min_offset, "maxOffset": r.max_offset,
               "suggestWhichBrokerId": suggest}
        body = b""
        if code == ResponseCode.SUCCESS:
            body = r.buffers
            server = self.server
            stats = server.stats
            stats.pulled += r.message_count
            stats.pulled_bytes += r.buffer_total_size
            if server.out_observer is not None:
                observe(server, server.out_observer, req.topic, req.group, r.message_count, r.buffer_total_size)
        parkable = code == ResponseCode.PULL_NOT_FOUND and req.offset >= r.max_offset
        return cmd.response(code, None, ext, body), parkable
