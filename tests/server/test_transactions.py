"""Transactional messages (official RocketMQ 5 Python client) through ``pymq serve``: a
committed half becomes visible, a rolled-back one never does, and one left open is resolved
by the broker's check through the producer's TransactionChecker."""

from __future__ import annotations


import pytest

from .conftest import make_message, receive_all


@pytest.fixture
def tx_server(server_factory):
    """Halves are checked 1 s after they were stored."""
    return server_factory("--transaction-timeout", "1000", "--transaction-check-interval", "500")


@pytest.fixture
def slow_check_server(server_factory):
    """Halves are checked only after 60 s: the test's own commit / rollback decide."""
    return server_factory("--transaction-timeout", "60000", "--transaction-check-interval", "500")


def _clients(srv):
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, Producer, SimpleConsumer
    from rocketmq.v5.producer.producer import TransactionChecker
    from rocketmq.grpc_protocol import TransactionResolution

    class Checker(TransactionChecker):
        def __init__(self):
            self.checked = []

        def check(self, message):
            self.checked.append(message.body)
            return TransactionResolution.COMMIT if message.body.startswith(b"commit") else TransactionResolution.ROLLBACK

    cfg = ClientConfiguration(srv.endpoint, Credentials(), request_timeout=5)
    checker = Checker()
    p = Producer(cfg, ("TxTopic",), checker)
    p.startup()
    c = SimpleConsumer(cfg, "g-tx", {"TxTopic": FilterExpression("*")}, 2)
    c.startup()
    return p, c, checker


def test_commit_and_rollback(slow_check_server):
    p, c, checker = _clients(slow_check_server)
    try:
        t1 = p.begin_transaction()
        r1 = p.send(make_message("TxTopic", b"committed"), t1)
        assert r1.transaction_id == r1.message_id           # RocketMQ 5: the message's UNIQ_KEY
        t2 = p.begin_transaction()
        p.send(make_message("TxTopic", b"rolled back"), t2)
        assert c.receive(8, 10) == []             # halves are invisible
        t1.commit()
        t2.rollback()
        got = receive_all(c, 1, timeout=15)
        assert [m.body for m in got] == [b"committed"]
        assert got[0].message_id == r1.message_id
        assert got[0].properties["__transactionId__"] == r1.transaction_id    # as the proxy shows it
        assert c.receive(8, 10) == []              # the rolled-back one never shows
        assert checker.checked == []
    finally:
        c.shutdown()
        p.shutdown()


def test_unknown_resolved_by_the_producers_checker(tx_server):
    p, c, checker = _clients(tx_server)
    try:
        tx = p.begin_transaction()
        p.send(make_message("TxTopic", b"commit via check"), tx)
        tx2 = p.begin_transaction()
        p.send(make_message("TxTopic", b"drop via check"), tx2)
        # neither commit nor rollback: the broker asks the producer (Telemetry) after the timeout
        got = receive_all(c, 1, timeout=30)
        assert [m.body for m in got] == [b"commit via check"]
        assert b"commit via check" in checker.checked and b"drop via check" in checker.checked
        assert c.receive(8, 10) == []
    finally:
        c.shutdown()
        p.shutdown()


def _raw(srv):
    import grpc
    from rocketmq.grpc_protocol import MessagingServiceStub
    ch = grpc.insecure_channel(srv.endpoint)
    return ch, MessagingServiceStub(ch)


def test_transaction_ids_are_message_ids_and_survive_a_restart(server_factory, tmp_path):
    """Raw stubs: a normal send's receipt names its message id as its transaction id; a
    transactional one too, and EndTransaction with it commits the half even after the
    server restarted (the id is found through the index, the server's map being gone)."""
    from rocketmq.grpc_protocol import definition_pb2 as pb, service_pb2 as svc
    store = str(tmp_path / "store")
    srv = server_factory("--transaction-timeout", "60000", store=store)
    md = [("x-mq-client-id", "raw-tx")]
    ch, stub = _raw(srv)
    with ch:
        req = svc.SendMessageRequest()
        m = req.messages.add(body=b"plain")
        m.topic.name = "TxIdTopic"
        m.system_properties.message_id = "PLAIN0001"
        e = stub.SendMessage(req, metadata=md, timeout=5).entries[0]
        assert e.status.code == pb.Code.OK and e.transaction_id == e.message_id == "PLAIN0001"
        req = svc.SendMessageRequest()
        m = req.messages.add(body=b"half")
        m.topic.name = "TxIdTopic"
        m.system_properties.message_id = "HALF0001"
        m.system_properties.message_type = pb.MessageType.TRANSACTION
        e = stub.SendMessage(req, metadata=md, timeout=5).entries[0]
        assert e.status.code == pb.Code.OK and e.transaction_id == "HALF0001", e
    srv.stop()
    srv = server_factory("--transaction-timeout", "60000", store=store)
    ch, stub = _raw(srv)
    with ch:
        end = svc.EndTransactionRequest(message_id="HALF0001", transaction_id="HALF0001",
                                        resolution=pb.TransactionResolution.COMMIT)
        end.topic.name = "TxIdTopic"
        assert stub.EndTransaction(end, metadata=md, timeout=5).status.code == pb.Code.OK
        req = svc.ReceiveMessageRequest(batch_size=8)
        req.group.name = "g-txid"
        req.message_queue.topic.name = "TxIdTopic"
        req.invisible_duration.seconds = 30
        req.long_polling_timeout.seconds = 5
        got = {}
        for _ in range(5):
            for x in stub.ReceiveMessage(req, metadata=md, timeout=10):
                if x.HasField("message"):
                    got[x.message.body] = x.message
            if b"half" in got:
                break
        assert got[b"half"].user_properties["__transactionId__"] == "HALF0001", got
