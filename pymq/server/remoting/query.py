"""QUERY_MESSAGE (by key or unique key) and VIEW_MESSAGE_BY_ID (by commit-log offset).

Both answer with whole records as they lie in the commit log, concatenated (the body clients
decode with their message decoder). A key query (fields ``topic``, ``key``, ``maxNum``,
``beginTimestamp``, ``endTimestamp``) goes to the store's index, which returns only messages
whose KEYS or UNIQ_KEY really equal the key (the newest ``maxNum``); they are answered in
commit-log order, oldest first, as RocketMQ's store sorts its hits (so ``mqadmin
queryMsgByKey`` lists them in the order they were stored); a unique-key query (ext field
``_UNIQUE_KEY_QUERY`` = true) uses the broker's ``defaultQueryMaxNum`` (32) as RocketMQ
does. Nothing found is ``QUERY_NOT_FOUND``; an offset where no record starts is
``SYSTEM_ERROR``, as in RocketMQ.
"""

from __future__ import annotations

from .codes import RequestCode, ResponseCode
from .headers import opt_int, req_int, require


class QueryMessageProcessor:
    """Message queries of a :class:`RemotingServer`."""

    def __init__(self, server) -> None:
        self.server = server
        self.broker = server.broker

    def handlers(self) -> dict:
        return {RequestCode.QUERY_MESSAGE: self.query_message,
                RequestCode.VIEW_MESSAGE_BY_ID: self.view_message_by_id}

    def query_message(self, conn, cmd):
        ext = cmd.ext_fields
        topic, key = require(ext, "topic"), require(ext, "key")
        max_num = opt_int(ext, "maxNum", self.server.config.default_query_max_num)
        if ext.get("_UNIQUE_KEY_QUERY") == "true" or max_num <= 0:      # QueryMessageProcessor's test
            max_num = self.server.config.default_query_max_num
        begin, end = opt_int(ext, "beginTimestamp", 0), opt_int(ext, "endTimestamp", 0)
        found = self.broker.query_message(topic, key, max_num, begin, end if end > 0 else None)
        found.sort(key=lambda m: m.commitlog_offset)
        records = [r for r in (self.broker.select_one_message_by_offset(m.commitlog_offset) for m in found) if r]
        if not records:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct")
        ext_out = {"indexLastUpdateTimestamp": max(m.store_timestamp for m in found),
                   "indexLastUpdatePhyoffset": self.broker.get_max_phy_offset()}
        return cmd.response(ResponseCode.SUCCESS, None, ext_out, b"".join(records))

    def view_message_by_id(self, conn, cmd):
        offset = req_int(cmd.ext_fields, "offset")
        record = self.broker.select_one_message_by_offset(offset)
        if record is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}")
        return cmd.response(ResponseCode.SUCCESS, body=record)
