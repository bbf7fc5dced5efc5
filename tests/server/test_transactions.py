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
        assert r1.transaction_id
        t2 = p.begin_transaction()
        p.send(make_message("TxTopic", b"rolled back"), t2)
        assert c.receive(8, 10) == []             # halves are invisible
        t1.commit()
        t2.rollback()
        got = receive_all(c, 1, timeout=15)
        assert [m.body for m in got] == [b"committed"]
        assert got[0].message_id == r1.message_id
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
