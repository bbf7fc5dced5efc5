"""A do-nothing ``apache.rocketmq.v2.MessagingService`` of the same shape as ``pymq serve``:
the same grpc.aio server, the same answers (routes to itself, settings, OK send receipts, a
canned receive stream, OK acks), and no broker behind it. ``bench_server.py`` measures the
same clients against it to find the limit of the client + gRPC stack on this machine.

    python bench/null_server.py PORT
"""

from __future__ import annotations

import asyncio
import sys

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc
from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc

OK = pb.Status(code=pb.Code.OK, message="OK")
TYPES = (pb.MessageType.NORMAL, pb.MessageType.FIFO, pb.MessageType.DELAY, pb.MessageType.TRANSACTION)


class NullService(svc_grpc.MessagingServiceServicer):
    def __init__(self, port: int) -> None:
        self.port = port
        self.offset = 0
        self.canned = []
        for i in range(32):
            m = pb.Message(body=b"x" * 100)
            m.topic.name = "BenchTopic"
            sp = m.system_properties
            sp.message_id = "NULL%08d" % i
            sp.receipt_handle = "1 1 0 %x 10 BenchTopicg" % i
            sp.body_encoding = pb.Encoding.IDENTITY
            sp.message_type = pb.MessageType.NORMAL
            sp.born_timestamp.FromMilliseconds(1)
            sp.delivery_attempt = 1
            self.canned.append(m)

    async def QueryRoute(self, request, context):
        resp = svc.QueryRouteResponse(status=OK)
        for qid in range(4):
            q = resp.message_queues.add(id=qid, permission=pb.Permission.READ_WRITE)
            q.topic.name = request.topic.name
            q.broker.name = "null"
            q.broker.endpoints.scheme = pb.AddressScheme.IPv4
            q.broker.endpoints.addresses.add(host="127.0.0.1", port=self.port)
            q.accept_message_types.extend(TYPES)
        return resp

    async def Heartbeat(self, request, context):
        return svc.HeartbeatResponse(status=OK)

    async def Telemetry(self, request_iterator, context):
        async for cmd in request_iterator:
            if cmd.HasField("settings"):
                s = pb.Settings()
                s.CopyFrom(cmd.settings)
                s.metric.on = False
                if s.HasField("subscription"):
                    s.subscription.long_polling_timeout.seconds = 20
                yield svc.TelemetryCommand(status=OK, settings=s)

    async def SendMessage(self, request, context):
        resp = svc.SendMessageResponse(status=OK)
        for m in request.messages:
            self.offset += 1
            resp.entries.add(status=OK, message_id=m.system_properties.message_id, offset=self.offset)
        return resp

    async def ReceiveMessage(self, request, context):
        yield svc.ReceiveMessageResponse(status=OK)
        for m in self.canned[:request.batch_size or 32]:
            yield svc.ReceiveMessageResponse(message=m)
        r = svc.ReceiveMessageResponse()
        r.delivery_timestamp.FromMilliseconds(1)
        yield r

    async def AckMessage(self, request, context):
        resp = svc.AckMessageResponse(status=OK)
        for e in request.entries:
            resp.entries.add(status=OK, message_id=e.message_id, receipt_handle=e.receipt_handle)
        return resp

    async def NotifyClientTermination(self, request, context):
        return svc.NotifyClientTerminationResponse(status=OK)


async def main(port: int) -> None:
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    svc_grpc.add_MessagingServiceServicer_to_server(NullService(port), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print(f"null server listening on 127.0.0.1:{port}", flush=True)
    await server.wait_for_termination()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
