"""Transactional messages over the protocol: half messages, EndTransaction, and the
broker's checks of orphaned halves routed to a producer through its Telemetry stream.

A transactional send is stored as a half message (invisible until committed); the receipt's
``transaction_id`` names it. EndTransaction commits or rolls it back.

As in RocketMQ 5, the transaction id is the message's id (``UNIQ_KEY``), and the half (so
the committed message too) carries it as ``__transactionId__``. The proxy keeps the id ->
half mapping to end a transaction; so does this activity (the newest
:data:`MAX_TRACKED` halves), and it finds an older one through the index, where the half
is filed under its ``UNIQ_KEY``. A commit-log message id (what pymq answered before) is
still taken. When the broker's
transaction check finds a half left open past its timeout, the broker's client table picks
a producer publishing the half's topic; a gRPC producer gets a
``RecoverOrphanedTransactionCommand``, and that producer's ``TransactionChecker`` answers
with an EndTransaction (source ``SOURCE_SERVER_CHECK``); until then the half stays open and
is checked again at the next interval.
"""

from __future__ import annotations

import collections

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc

from pymq.broker.transaction import HALF_TOPIC, TransactionError

from . import names
from .convert import to_pb_message
from .status import Code, RequestError, ok


TRANSACTION_ID = "__transactionId__"      # MessageConst.PROPERTY_TRANSACTION_ID
MAX_TRACKED = 65_536


class TransactionActivity:
    """Half messages, EndTransaction and orphan recovery for a
    :class:`~pymq.server.grpc.GrpcServer`."""

    def __init__(self, server) -> None:
        self.server = server
        self._halves: collections.OrderedDict[str, str] = collections.OrderedDict()   # transaction id -> msg id

    def track(self, transaction_id: str, half_msg_id: str) -> None:
        """Remember which half ``transaction_id`` names (the newest :data:`MAX_TRACKED`)."""
        if transaction_id and half_msg_id:
            self._halves[transaction_id] = half_msg_id
            if len(self._halves) > MAX_TRACKED:
                self._halves.popitem(last=False)

    def _handle(self, transaction_id: str) -> str:
        """The half's commit-log message id for ``transaction_id``."""
        handle = self._halves.pop(transaction_id, None)
        if handle is not None:
            return handle
        found = self.server.broker.query_message(HALF_TOPIC, transaction_id, 64)
        if found:       # a half the check put again is there twice: the newest is the live one
            return max(found, key=lambda m: m.commitlog_offset).msg_id
        return transaction_id          # a commit-log message id itself

    def start(self) -> None:
        """Route the broker's transaction checks to connected producers (the client table
        picks one; a gRPC producer's channel sends it the check, see
        :meth:`TelemetryChannel.check_transaction`)."""
        self.server.broker.set_transaction_checker(self.server.clients.check_transaction)

    def stop(self) -> None:
        try:
            self.server.broker.set_transaction_checker(None)
        except Exception:
            pass

    async def put_half(self, ctx, msg):
        """Store ``msg`` as a half message named by its ``UNIQ_KEY`` (the transaction id);
        returns the put result."""
        transaction_id = msg.properties["UNIQ_KEY"]
        msg.properties[TRANSACTION_ID] = transaction_id
        result = await self.server.call(self.server.broker.put_half_message, msg, msg.topic)
        if result.is_ok():
            self.track(transaction_id, result.msg_id)
        return result

    async def end_transaction(self, ctx, req: svc.EndTransactionRequest) -> svc.EndTransactionResponse:
        names.check_topic(req.topic.name)
        if not req.transaction_id:
            raise RequestError(Code.INVALID_TRANSACTION_ID, "transaction id is required")
        if req.resolution == pb.TransactionResolution.COMMIT:
            commit = True
        elif req.resolution == pb.TransactionResolution.ROLLBACK:
            commit = False
        else:
            return svc.EndTransactionResponse(status=ok())   # unknown: stays open, checked later
        try:
            # False: resolved already (by an earlier call or the check) -- answered OK, as retries may repeat it
            await self.server.call(self.server.broker.end_transaction, self._handle(req.transaction_id), commit)
        except (TransactionError, ValueError, TypeError) as e:
            raise RequestError(Code.INVALID_TRANSACTION_ID, str(e)) from None
        return svc.EndTransactionResponse(status=ok())



def recover_orphaned_transaction_command(msg) -> svc.TelemetryCommand:
    """The Telemetry command that asks a producer about the half message ``msg``."""
    topic = msg.properties.get("REAL_TOPIC") or msg.topic
    cmd = svc.TelemetryCommand()
    cmd.recover_orphaned_transaction_command.message.CopyFrom(to_pb_message(msg, topic=topic))
    cmd.recover_orphaned_transaction_command.transaction_id = transaction_id_of(msg)
    return cmd


def transaction_id_of(half) -> str:
    """The transaction id of a stored half: its ``__transactionId__``, else its
    ``UNIQ_KEY`` (a half a 4.x producer sent), else its commit-log message id."""
    props = half.properties
    return props.get(TRANSACTION_ID) or props.get("UNIQ_KEY") or half.msg_id or ""
