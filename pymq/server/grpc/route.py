"""QueryRoute and QueryAssignment: where a topic's queues are (always this server).

pymq is one broker: every queue of a topic is served here, so a route lists the topic's
queues with this server's own reachable address, and an assignment hands a consumer the
whole broker (RocketMQ 5 pops from every queue of the broker a receive names). Each queue
says which message types it takes (the topic's ``message.type``: a PRIORITY topic's take
PRIORITY messages only, a LITE topic's LITE messages only).
"""

from __future__ import annotations

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc

from pymq.broker.topic_message_type import accepted_types

from . import names
from .status import ok
from .topics import PERM_READ, PERM_WRITE, TopicView, find_topic


def accept_message_types(view: TopicView) -> list:
    """The protocol message types a topic's queues take: the one it declares, all for
    MIXED, the four 4.x kinds when it declares none (:mod:`pymq.broker.topic_message_type`)."""
    return [pb.MessageType.Value(t) for t in accepted_types(view.message_type)]


def permission(perm: int) -> int:
    """The protocol's ``Permission`` of RocketMQ perm bits."""
    r, w = bool(perm & PERM_READ), bool(perm & PERM_WRITE)
    if r and w:
        return pb.Permission.READ_WRITE
    if r:
        return pb.Permission.READ
    if w:
        return pb.Permission.WRITE
    return pb.Permission.NONE


class RouteActivity:
    """Answers QueryRoute and QueryAssignment for a :class:`~pymq.server.grpc.GrpcServer`."""

    def __init__(self, server) -> None:
        self.server = server

    def endpoints(self, requested: pb.Endpoints) -> pb.Endpoints:
        """This server's endpoints: the access point the client used when it named one
        (it reached us there), else the configured address."""
        if requested is not None and requested.addresses:
            return requested
        cfg = self.server.config
        e = pb.Endpoints(scheme=pb.AddressScheme.IPv4)
        e.addresses.add(host=cfg.route_host, port=self.server.port)
        return e

    def _broker(self, endpoints: pb.Endpoints) -> pb.Broker:
        return pb.Broker(name=self.server.broker.broker_config.broker_name, id=0, endpoints=endpoints)

    def _queue(self, view: TopicView, qid: int, perm: int, broker: pb.Broker, namespace: str) -> pb.MessageQueue:
        q = pb.MessageQueue(id=qid, permission=perm, broker=broker)
        q.topic.name = view.name
        q.topic.resource_namespace = namespace
        q.accept_message_types.extend(accept_message_types(view))
        return q

    async def query_route(self, ctx, req: svc.QueryRouteRequest) -> svc.QueryRouteResponse:
        topic = names.check_topic(req.topic.name)
        view = find_topic(self.server.broker, topic)
        broker = self._broker(self.endpoints(req.endpoints if req.HasField("endpoints") else None))
        resp = svc.QueryRouteResponse(status=ok())
        # queues 0..max(read, write)-1; each readable below read_queue_nums, writeable below write
        for qid in range(max(view.read_queue_nums, view.write_queue_nums)):
            perm = view.perm
            if qid >= view.read_queue_nums:
                perm &= ~PERM_READ
            if qid >= view.write_queue_nums:
                perm &= ~PERM_WRITE
            resp.message_queues.append(self._queue(view, qid, permission(perm), broker, req.topic.resource_namespace))
        return resp

    async def query_assignment(self, ctx, req: svc.QueryAssignmentRequest) -> svc.QueryAssignmentResponse:
        topic = names.check_topic(req.topic.name)
        names.check_group(req.group.name)
        view = find_topic(self.server.broker, topic)
        resp = svc.QueryAssignmentResponse(status=ok())
        if view.read_queue_nums > 0 and view.perm & PERM_READ:
            broker = self._broker(self.endpoints(req.endpoints if req.HasField("endpoints") else None))
            q = self._queue(view, -1, permission(view.perm), broker, req.topic.resource_namespace)
            resp.assignments.add(message_queue=q)
        return resp
