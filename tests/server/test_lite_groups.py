"""Exclusive lite groups and the offset option of ``SyncLiteSubscription`` against
``pymq serve``, through raw gRPC (the official Python client 5.1.2 sends no offset option
and ignores ``NotifyUnsubscribeLiteCommand``); messages are sent with the official producer.
One server for the module.

* ``lite.sub.model=Exclusive``: a client's PARTIAL_ADD takes the lite topic from the
  group's other client, which is told on its Telemetry stream and receives no more of it;
* offset option: policy MAX starts after what is stored, MIN from the start, an offset
  there, tail N that many before the group's offset.
"""

from __future__ import annotations

import queue
import threading
import uuid

import grpc
import pytest

from .conftest import ServerProcess, write_groups, write_topics

pb = pytest.importorskip("rocketmq.grpc_protocol.definition_pb2")
from google.protobuf import duration_pb2  # noqa: E402
from rocketmq import ClientConfiguration, Credentials, Message, Producer  # noqa: E402
from rocketmq.grpc_protocol import MessagingServiceStub, service_pb2 as svc  # noqa: E402

PARENT = "lite-parent"
TOPICS = {PARENT: {"queues": 2, "attributes": {"message.type": "LITE"}}}
GROUPS = {"excl-group": {"attributes": {"lite.bind.topic": PARENT, "lite.sub.model": "Exclusive"}},
          "offset-group": {"attributes": {"lite.bind.topic": PARENT}}}


class RawLiteClient:
    """A lite push consumer spoken in raw gRPC: its Telemetry stream (what the server
    pushes lands in ``pushed``), SyncLiteSubscription and ReceiveMessage."""

    def __init__(self, endpoint: str, group: str) -> None:
        self.id = "raw-" + uuid.uuid4().hex[:10]
        self.group = group
        self.channel = grpc.insecure_channel(endpoint)
        self.stub = MessagingServiceStub(self.channel)
        self.md = [("x-mq-client-id", self.id)]
        self.pushed: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        settings = pb.Settings(client_type=pb.ClientType.LITE_PUSH_CONSUMER)
        settings.subscription.group.name = group
        settings.subscription.subscriptions.add().topic.name = PARENT

        def requests():
            yield svc.TelemetryCommand(settings=settings)
            self._stop.wait()

        self._call = self.stub.Telemetry(requests(), metadata=self.md)
        first = next(self._call)
        assert first.status.code == pb.Code.OK, first
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for cmd in self._call:
                self.pushed.put(cmd)
        except grpc.RpcError:
            pass

    def sync(self, lites, action=pb.LiteSubscriptionAction.PARTIAL_ADD, **option) -> pb.Status:
        req = svc.SyncLiteSubscriptionRequest(action=action, lite_topic_set=list(lites))
        req.topic.name = PARENT
        req.group.name = self.group
        if option:
            if "policy" in option:
                req.offset_option.policy = pb.OffsetOption.Policy.Value(option["policy"])
            else:
                setattr(req.offset_option, *next(iter(option.items())))
        return self.stub.SyncLiteSubscription(req, metadata=self.md, timeout=5).status

    def receive(self, wait_s: float = 1.0) -> list:
        """(lite topic, body) of one receive, each acked."""
        req = svc.ReceiveMessageRequest(batch_size=32, auto_renew=False)
        req.group.name = self.group
        req.message_queue.topic.name = PARENT
        req.filter_expression.expression = "*"
        req.invisible_duration.CopyFrom(duration_pb2.Duration(seconds=30))
        req.long_polling_timeout.CopyFrom(duration_pb2.Duration(seconds=int(wait_s), nanos=int(wait_s % 1 * 1e9)))
        got = []
        for resp in self.stub.ReceiveMessage(req, metadata=self.md, timeout=wait_s + 5):
            if resp.HasField("message"):
                m = resp.message
                got.append((m.system_properties.lite_topic, m.body.decode()))
                ack = svc.AckMessageRequest()
                ack.group.name = self.group
                ack.topic.name = PARENT
                e = ack.entries.add(message_id=m.system_properties.message_id,
                                    receipt_handle=m.system_properties.receipt_handle)
                e.lite_topic = m.system_properties.lite_topic
                assert self.stub.AckMessage(ack, metadata=self.md, timeout=5).status.code == pb.Code.OK
        return got

    def receive_all(self, n: int, tries: int = 10) -> list:
        got: list = []
        for _ in range(tries):
            got += self.receive()
            if len(got) >= n:
                break
        return got

    def close(self) -> None:
        self._stop.set()
        self.channel.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    store = str(tmp_path_factory.mktemp("lite-groups") / "store")
    write_topics(store, TOPICS)
    write_groups(store, GROUPS)
    s = ServerProcess(store).start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def producer(server):
    p = Producer(ClientConfiguration(server.endpoint, Credentials(), request_timeout=5), (PARENT,))
    p.startup()
    yield p
    p.shutdown()


def send(producer, lite: str, *bodies: str) -> None:
    for body in bodies:
        m = Message()
        m.topic = PARENT
        m.body = body.encode()
        m.lite_topic = lite
        producer.send(m)


def test_an_exclusive_group_gives_a_lite_topic_to_the_last_subscriber(server, producer):
    a, b = RawLiteClient(server.endpoint, "excl-group"), RawLiteClient(server.endpoint, "excl-group")
    try:
        assert a.sync(["solo"]).code == pb.Code.OK
        send(producer, "solo", "s0")
        assert a.receive_all(1) == [("solo", "s0")]
        assert b.sync(["solo"]).code == pb.Code.OK          # b takes it: a is told
        cmd = a.pushed.get(timeout=5)
        assert cmd.HasField("notify_unsubscribe_lite_command")
        assert cmd.notify_unsubscribe_lite_command.lite_topic == "solo"
        send(producer, "solo", "s1")
        assert b.receive_all(1) == [("solo", "s1")]
        assert a.receive() == []
        assert b.pushed.empty()
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("option, expected", [
    ({"policy": "MAX"}, ["o3"]),
    ({"policy": "MIN"}, ["o0", "o1", "o2", "o3"]),
    ({"offset": 2}, ["o2", "o3"]),
])
def test_the_offset_option_says_where_a_subscription_starts(server, producer, option, expected):
    lite = "off-" + uuid.uuid4().hex[:8]
    send(producer, lite, "o0", "o1", "o2")
    c = RawLiteClient(server.endpoint, "offset-group")
    try:
        assert c.sync([lite], **option).code == pb.Code.OK
        send(producer, lite, "o3")
        assert [body for _, body in c.receive_all(len(expected))] == expected
    finally:
        c.close()


def test_tail_n_goes_back_from_the_groups_offset(server, producer):
    lite = "tail-" + uuid.uuid4().hex[:8]
    send(producer, lite, "t0", "t1", "t2", "t3")
    c = RawLiteClient(server.endpoint, "offset-group")
    try:
        assert c.sync([lite]).code == pb.Code.OK
        assert [body for _, body in c.receive_all(4)] == ["t0", "t1", "t2", "t3"]
        assert c.sync([lite], tail_n=2).code == pb.Code.OK       # offset 4 -> 2
        assert [body for _, body in c.receive_all(2)] == ["t2", "t3"]
    finally:
        c.close()
