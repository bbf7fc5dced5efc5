"""Transactional messages over the protocol: half messages, EndTransaction, and the
broker's checks of orphaned halves routed to a producer through its Telemetry stream.

A transactional send is stored as a half message (invisible until committed); the receipt's
``transaction_id`` names it. EndTransaction commits or rolls it back. When the broker's
transaction check finds a half left open past its timeout, the broker's client table picks
a producer publishing the half's topic; a gRPC producer gets a
``RecoverOrphanedTransactionCommand``, and that producer's ``TransactionChecker`` answers
with an EndTransaction (source ``SOURCE_SERVER_CHECK``); until then the half stays open and
is checked again at the next interval.
"""

from __future__ import annotations

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc

from pymq.broker.transaction import TransactionError

from . import names
from .convert import to_pb_message
from .status import Code, RequestError, ok


class TransactionActivity:
    """Half messages, EndTransaction and orphan recovery for a
    :class:`~pymq.server.grpc.GrpcServer`."""

    def __init__(self, server) -> None:
        self.server = server

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
        """Store ``msg`` as a half message; returns (put result, transaction id)."""
        result = await self.server.call(self.server.broker.put_half_message, msg, msg.topic)
        return result, result.msg_id or ""

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
            await self.server.call(self.server.broker.end_transaction, req.transaction_id, commit)
        except (TransactionError, ValueError, TypeError) as e:
            raise RequestError(Code.INVALID_TRANSACTION_ID, str(e)) from None
        return svc.EndTransactionResponse(status=ok())



def recover_orphaned_transaction_command(msg) -> svc.TelemetryCommand:
    """The Telemetry command that asks a producer about the half message ``msg``."""
    topic = msg.properties.get("REAL_TOPIC") or msg.topic
    cmd = svc.TelemetryCommand()
    cmd.recover_orphaned_transaction_command.message.CopyFrom(to_pb_message(msg, topic=topic))
    cmd.recover_orphaned_transaction_command.transaction_id = msg.msg_id or ""
    return cmd
