"""Requests refused before they touch the broker's state: consumer groups with illegal names
in Heartbeat and Telemetry, and batches whose entries all fail the same way. Raw calls
through the generated stub."""

from __future__ import annotations

import json
import os

import grpc
import pytest

ILLEGAL_GROUPS = ("bad group!", "g@x", "g" * 300, "%RETRY%foo", "%DLQ%foo", "CID_RMQ_SYS_TRANS")
MD = [("x-mq-client-id", "raw-checks")]


def _groups_on_disk(store: str) -> set:
    path = os.path.join(store, "config", "subscriptionGroup.json")
    if not os.path.exists(path):
        return set()
    with open(path) as f:
        return set(json.load(f)["subscriptionGroupTable"])


def test_heartbeat_and_telemetry_refuse_illegal_groups(server):
    from rocketmq.grpc_protocol import definition_pb2 as pb, service_pb2 as svc, MessagingServiceStub
    with grpc.insecure_channel(server.endpoint) as ch:
        stub = MessagingServiceStub(ch)
        for name in ILLEGAL_GROUPS:
            hb = svc.HeartbeatRequest(client_type=pb.ClientType.SIMPLE_CONSUMER)
            hb.group.name = name
            resp = stub.Heartbeat(hb, metadata=MD, timeout=5)
            assert resp.status.code == pb.Code.ILLEGAL_CONSUMER_GROUP, (name[:20], resp.status)

            cmd = svc.TelemetryCommand()
            cmd.settings.client_type = pb.ClientType.SIMPLE_CONSUMER
            cmd.settings.subscription.group.name = name
            sub = cmd.settings.subscription.subscriptions.add()
            sub.topic.name = "CheckTopic"
            replies = list(stub.Telemetry(iter([cmd]), metadata=MD, timeout=5))
            assert replies and replies[0].status.code == pb.Code.ILLEGAL_CONSUMER_GROUP, (name[:20], replies)

        hb = svc.HeartbeatRequest(client_type=pb.ClientType.SIMPLE_CONSUMER)
        hb.group.name = "good-group"
        assert stub.Heartbeat(hb, metadata=MD, timeout=5).status.code == pb.Code.OK
        producer_hb = svc.HeartbeatRequest(client_type=pb.ClientType.PRODUCER)
        assert stub.Heartbeat(producer_hb, metadata=MD, timeout=5).status.code == pb.Code.OK
    on_disk = _groups_on_disk(server.store)
    assert "good-group" in on_disk
    assert not set(ILLEGAL_GROUPS) & on_disk, on_disk


def test_batch_of_oversized_entries_is_body_too_large(server):
    """2 x 2.2 MiB: each body is within the 4 MiB limit, the batch is not (and it is within
    the 5 MiB gRPC inbound limit). Every entry fails alike, so the request's status is that
    code, not MULTIPLE_RESULTS. 10 x 3 MiB is beyond the inbound limit: gRPC refuses it
    (RESOURCE_EXHAUSTED) before it is read."""
    from rocketmq.grpc_protocol import definition_pb2 as pb, service_pb2 as svc, MessagingServiceStub
    opts = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    with grpc.insecure_channel(server.endpoint, options=opts) as ch:
        stub = MessagingServiceStub(ch)
        for count, size in ((2, 2_200_000), (10, 3 * 1024 * 1024)):
            req = svc.SendMessageRequest()
            for i in range(count):
                m = req.messages.add(body=b"x" * size)
                m.topic.name = "BigBatch"
                m.system_properties.message_id = "BIG%04d" % i
                m.system_properties.message_type = pb.MessageType.NORMAL
            if count == 10:
                with pytest.raises(grpc.RpcError) as refused:
                    stub.SendMessage(req, metadata=MD, timeout=30)
                assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                continue
            resp = stub.SendMessage(req, metadata=MD, timeout=30)
            assert pb.Code.Name(resp.status.code) == "MESSAGE_BODY_TOO_LARGE", resp.status
            assert all(pb.Code.Name(e.status.code) == "MESSAGE_BODY_TOO_LARGE" for e in resp.entries) or not resp.entries
        # a batch within the limit still goes through
        ok = svc.SendMessageRequest()
        for i in range(3):
            m = ok.messages.add(body=b"y" * 1024)
            m.topic.name = "BigBatch"
            m.system_properties.message_id = "OK%04d" % i
        resp = stub.SendMessage(ok, metadata=MD, timeout=10)
        assert resp.status.code == pb.Code.OK, resp.status
        assert len(resp.entries) == 3
