"""END_TRANSACTION, and CHECK_TRANSACTION_STATE sent to producers.

A 4.x transactional producer sends its message with the prepared bit in ``sysFlag``; it is
stored as a half message (``send.py``). It then ends the transaction with a one-way
``END_TRANSACTION`` naming the half by ``commitLogOffset``, with ``commitOrRollback`` 8
(commit), 12 (rollback) or 0 (unknown: left open). When the broker's check finds a half
left open past its timeout, a producer of its group gets a one-way
``CHECK_TRANSACTION_STATE`` on its connection: fields ``tranStateTableOffset``,
``commitLogOffset``, ``msgId`` and ``transactionId`` (the unique key) and ``offsetMsgId``,
body = the half re-encoded with its real topic and queue (``MessageDecoder.encode``). The
producer answers with ``END_TRANSACTION`` (``fromTransactionCheck`` = true) on the half's
check copy, which the broker resolves once, by its unique key.
"""

from __future__ import annotations

from pymq._core.message import encode_properties
from pymq._core.record import encode_message
from pymq.broker.transaction import TransactionError

from .codec import ONEWAY_FLAG, RemotingCommand
from .codes import RequestCode, ResponseCode
from .headers import opt_int, req_int

COMMIT_TYPE = 8
ROLLBACK_TYPE = 12


def check_request(opaque: int, half) -> RemotingCommand:
    """The CHECK_TRANSACTION_STATE request about ``half`` (a stored half message)."""
    props = half.properties
    key = props.get("UNIQ_KEY", "")
    body = encode_message(props.get("REAL_TOPIC", half.topic), half.body, encode_properties(props),
                          queue_id=int(props.get("REAL_QID", "0") or 0), flag=half.flag,
                          queue_offset=half.queue_offset, physical_offset=half.commitlog_offset,
                          sys_flag=half.sys_flag, born_timestamp=half.born_timestamp, born_host=half.born_host,
                          store_timestamp=half.store_timestamp, store_host=half.store_host,
                          reconsume_times=half.reconsume_times,
                          prepared_transaction_offset=half.prepared_transaction_offset)
    ext = {"tranStateTableOffset": half.queue_offset, "commitLogOffset": half.commitlog_offset, "msgId": key,
           "transactionId": key, "offsetMsgId": half.msg_id}
    return RemotingCommand(RequestCode.CHECK_TRANSACTION_STATE, opaque, ONEWAY_FLAG, None, ext, body)


class EndTransactionProcessor:
    """Transactions of a :class:`RemotingServer`."""

    def __init__(self, server) -> None:
        self.server = server
        self.broker = server.broker

    def handlers(self) -> dict:
        return {RequestCode.END_TRANSACTION: self.end_transaction}

    def end_transaction(self, conn, cmd):
        ext = cmd.ext_fields
        offset = req_int(ext, "commitLogOffset")
        kind = opt_int(ext, "commitOrRollback")
        if self.broker.is_slave:        # 4.9.7: before anything, no remark
            return cmd.response(ResponseCode.SLAVE_NOT_AVAILABLE)
        if kind not in (COMMIT_TYPE, ROLLBACK_TYPE):
            return cmd.response(ResponseCode.SUCCESS)        # unknown: open until the next check
        return self.server.call(self._end, cmd, offset, kind == COMMIT_TYPE)

    def _end(self, cmd, offset: int, commit: bool):
        try:
            self.broker.end_transaction(offset, commit)      # False: resolved already, fine
        except (TransactionError, ValueError, TypeError) as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, str(e))
        return cmd.response(ResponseCode.SUCCESS)

    def send_check(self, conn, half) -> None:
        """Ask the producer on ``conn`` about ``half``; runs on the loop."""
        conn.write(check_request(self.server.next_opaque(), half))
