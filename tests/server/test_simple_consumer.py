"""SimpleConsumer (official RocketMQ 5 Python client) against ``pymq serve``: receive, ack,
change invisible duration, redelivery after the invisible time, dead letter after the
group's retry limit, long polling."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from .conftest import make_message, receive_all


def test_receive_ack_each_message_once(server, producer_factory, simple_consumer_factory):
    p = producer_factory(["SimpleTopic"])
    sent = {p.send(make_message("SimpleTopic", f"m{i}".encode(), tag="T", props={"n": str(i)})).message_id
            for i in range(50)}
    c = simple_consumer_factory("g-simple", "SimpleTopic")
    got = receive_all(c, 50)
    assert {m.message_id for m in got} == sent
    m = got[0]
    assert m.tag == "T" and m.properties["n"] == m.body.decode()[1:]
    assert m.delivery_attempt == 1 and not m.corrupted
    # all acked: nothing comes back, even after the invisible time
    assert c.receive(32, 30) == []


def test_long_polling_wakes_on_arrival(server, producer_factory, simple_consumer_factory):
    import threading
    c = simple_consumer_factory("g-poll", "PollTopic", await_duration=10)
    p = producer_factory(["PollTopic"])
    timer = threading.Timer(1.0, lambda: p.send(make_message("PollTopic", b"wake")))
    timer.start()
    t0 = time.monotonic()
    msgs = c.receive(1, 10)
    took = time.monotonic() - t0
    timer.join()
    assert [m.body for m in msgs] == [b"wake"]
    assert took < 5, took       # woken by the arrival, not by the 10 s timeout


def test_empty_receive_waits_the_await_duration(server, simple_consumer_factory):
    c = simple_consumer_factory("g-empty", "EmptyTopic", await_duration=5)
    t0 = time.monotonic()
    assert c.receive(4, 10) == []
    assert 4.5 <= time.monotonic() - t0 < 9     # at least the proxy's minimum polling time


def test_unacked_message_redelivered_after_invisible_time(server, producer_factory, simple_consumer_factory):
    p = producer_factory(["RedeliverTopic"])
    mid = p.send(make_message("RedeliverTopic", b"again")).message_id
    c = simple_consumer_factory("g-redeliver", "RedeliverTopic")
    first = receive_all(c, 1, invisible=2, ack=False)
    assert first[0].message_id == mid and first[0].delivery_attempt == 1
    t0 = time.monotonic()
    second = receive_all(c, 1, invisible=30, ack=False, timeout=15)
    assert time.monotonic() - t0 >= 1.0
    assert second[0].message_id == mid and second[0].delivery_attempt == 2
    # the first delivery's handle is stale now: the client's ack with it is refused
    from rocketmq.v5.exception import BadRequestException
    with pytest.raises(BadRequestException):
        c.ack(first[0])
    c.ack(second[0])


def test_change_invisible_duration(server, producer_factory, simple_consumer_factory):
    p = producer_factory(["ChangeTopic"])
    p.send(make_message("ChangeTopic", b"hold"))
    c = simple_consumer_factory("g-change", "ChangeTopic")
    m = receive_all(c, 1, invisible=2, ack=False)[0]
    old = m.receipt_handle
    c.change_invisible_duration(m, 20)       # hide it longer than the first 2 s
    assert m.receipt_handle != old
    time.sleep(2.5)
    assert c.receive(1, 30) == []            # still invisible past the first deadline
    c.ack(m)                                 # the new handle acks it


def test_dead_letter_after_retry_limit(server_factory, tmp_path):
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, Producer, SimpleConsumer
    srv = server_factory(groups={"g-dlq": {"retryMaxTimes": 1}})
    cfg = ClientConfiguration(srv.endpoint, Credentials(), request_timeout=5)
    p = Producer(cfg, ("DlqTopic",))
    p.startup()
    c = SimpleConsumer(cfg, "g-dlq", {"DlqTopic": FilterExpression("*")}, 2)
    c.startup()
    try:
        mid = p.send(make_message("DlqTopic", b"poison")).message_id
        attempts = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(attempts) < 2:
            for m in c.receive(1, 1):
                attempts.append(m.delivery_attempt)      # never acked
        assert attempts == [1, 2], attempts              # the first delivery and 1 retry
        # the second delivery expires too: past the retry limit it goes to %DLQ%g-dlq
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            out = subprocess.run([sys.executable, "-m", "pymq", "--store", srv.store, "print-msg", "-t",
                                  "%DLQ%g-dlq", "--json"], capture_output=True, text=True, timeout=60)
            if mid in out.stdout:
                break
            time.sleep(0.5)
        assert mid in out.stdout and "poison" in out.stdout, out.stdout + out.stderr
        assert c.receive(1, 1) == []                     # and is not delivered again
    finally:
        c.shutdown()
        p.shutdown()


def test_receive_cut_to_the_deadline_and_cancelled_poll_gives_messages_back(server, producer_factory,
                                                                            simple_consumer_factory):
    import grpc
    from rocketmq.grpc_protocol import definition_pb2 as pb, service_pb2 as svc, MessagingServiceStub
    md = [("x-mq-client-id", "raw-poller")]
    req = svc.ReceiveMessageRequest(batch_size=8)
    req.group.name = "g-cancel"
    req.message_queue.topic.name = "CancelTopic"
    req.invisible_duration.seconds = 30
    req.long_polling_timeout.seconds = 20
    with grpc.insecure_channel(server.endpoint) as ch:
        stub = MessagingServiceStub(ch)
        t0 = time.monotonic()
        items = list(stub.ReceiveMessage(req, metadata=md, timeout=6))     # polling cut to the deadline
        assert items[0].status.code == pb.Code.MESSAGE_NOT_FOUND
        assert items[-1].HasField("delivery_timestamp") and time.monotonic() - t0 < 6
        call = stub.ReceiveMessage(req, metadata=md, timeout=30)
        time.sleep(1.0)
        call.cancel()                                                      # the client goes away mid-poll
        p = producer_factory(["CancelTopic"])
        mid = p.send(make_message("CancelTopic", b"not lost")).message_id
    c = simple_consumer_factory("g-cancel", "CancelTopic", await_duration=5)
    t0 = time.monotonic()
    got = receive_all(c, 1, timeout=10)
    assert [m.message_id for m in got] == [mid]
    assert time.monotonic() - t0 < 10            # not after the 30 s invisible time


def test_forward_to_dead_letter_queue(server, producer_factory, simple_consumer_factory):
    import grpc
    from rocketmq.grpc_protocol import definition_pb2 as pb, service_pb2 as svc, MessagingServiceStub
    p = producer_factory(["FwdTopic"])
    mid = p.send(make_message("FwdTopic", b"to the dlq")).message_id
    c = simple_consumer_factory("g-fwd", "FwdTopic")
    m = receive_all(c, 1, invisible=2, ack=False)[0]
    req = svc.ForwardMessageToDeadLetterQueueRequest(receipt_handle=m.receipt_handle, message_id=mid,
                                                     delivery_attempt=1, max_delivery_attempts=1)
    req.group.name, req.topic.name = "g-fwd", "FwdTopic"
    with grpc.insecure_channel(server.endpoint) as ch:
        stub = MessagingServiceStub(ch)
        md = [("x-mq-client-id", "raw-fwd")]
        assert stub.ForwardMessageToDeadLetterQueue(req, metadata=md, timeout=10).status.code == pb.Code.OK
        # the handle is spent: a second forward is refused
        assert stub.ForwardMessageToDeadLetterQueue(req, metadata=md, timeout=10).status.code \
            == pb.Code.INVALID_RECEIPT_HANDLE
        end = svc.EndTransactionRequest(transaction_id="not-a-transaction", resolution=pb.TransactionResolution.COMMIT)
        end.topic.name = "FwdTopic"
        assert stub.EndTransaction(end, metadata=md, timeout=10).status.code == pb.Code.INVALID_TRANSACTION_ID
    out = subprocess.run([sys.executable, "-m", "pymq", "--store", server.store, "print-msg", "-t", "%DLQ%g-fwd",
                          "--json"], capture_output=True, text=True, timeout=60)
    assert mid in out.stdout, out.stdout + out.stderr
    time.sleep(2.5)
    assert c.receive(1, 30) == []          # acked: not delivered again after its invisible time
    out = subprocess.run([sys.executable, "-m", "pymq", "--store", server.store, "print-msg", "-t", "%DLQ%g-fwd",
                          "--json"], capture_output=True, text=True, timeout=60)
    assert out.stdout.count(mid) == 1         # the refused second forward moved nothing


def test_parked_receives_hold_no_thread(server, producer_factory):
    """A hundred ReceiveMessage long polls parked at once: the server's thread count barely
    moves (they wait on its event loop), and arrivals answer every one of them, each
    message going to exactly one."""
    import asyncio
    import grpc
    from rocketmq.grpc_protocol import service_pb2 as svc, MessagingServiceStub
    n = 100

    def server_threads() -> int:
        with open(f"/proc/{server.proc.pid}/status") as f:
            return int(next(line for line in f if line.startswith("Threads:")).split()[1])

    p = producer_factory(["ParkTopic"])
    before = server_threads()

    async def main():
        async with grpc.aio.insecure_channel(server.endpoint) as ch:
            stub = MessagingServiceStub(ch)

            async def receive(i: int) -> list:
                req = svc.ReceiveMessageRequest(batch_size=1)
                req.group.name = "g-park"
                req.message_queue.topic.name = "ParkTopic"
                req.invisible_duration.seconds = 60
                req.long_polling_timeout.seconds = 20
                call = stub.ReceiveMessage(req, metadata=[("x-mq-client-id", f"parker-{i}")], timeout=30)
                return [item async for item in call]

            tasks = [asyncio.ensure_future(receive(i)) for i in range(n)]
            await asyncio.sleep(2.0)
            parked = server_threads()
            assert not any(t.done() for t in tasks)          # all waiting: nothing to receive yet
            ids = await asyncio.get_running_loop().run_in_executor(
                None, lambda: [p.send(make_message("ParkTopic", b"m%d" % i)).message_id for i in range(n)])
            return parked, ids, await asyncio.gather(*tasks)

    parked, ids, results = asyncio.run(main())
    assert parked - before < 16, (before, parked)
    got = [item.message.system_properties.message_id for r in results for item in r if item.HasField("message")]
    assert sorted(got) == sorted(ids)


def test_pymq_stats_beside_the_server_counts_what_the_client_holds(server, producer_factory,
                                                                    simple_consumer_factory):
    """An operator's ``pymq stats`` in another process, on the store ``pymq serve`` writes:
    the messages the official client received and has not acked are in flight."""
    import json

    p = producer_factory(["HeldTopic"])
    for i in range(7):
        p.send(make_message("HeldTopic", b"h%d" % i))
    c = simple_consumer_factory("g-held", "HeldTopic")
    got = receive_all(c, 7, invisible=60, ack=False)
    assert len(got) == 7
    for m in got[:3]:
        c.ack(m)
    deadline = time.monotonic() + 15
    while True:
        out = subprocess.run([sys.executable, "-m", "pymq", "--store", server.store, "stats", "--json", "--sample",
                              "0"], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        rows = [r for r in json.loads(out.stdout)["pop"] if r["group"] == "g-held"]
        if rows == [{"group": "g-held", "topic": "HeldTopic", "inflight": 4, "waiting": 0, "unread": 0}] \
                or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert rows == [{"group": "g-held", "topic": "HeldTopic", "inflight": 4, "waiting": 0, "unread": 0}]
