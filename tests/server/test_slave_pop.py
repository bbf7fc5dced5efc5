"""5.x clients keep consuming from a pymq slave when its master is down (issue 28, item 2).

A master and a slave ``pymq serve`` (both with gRPC), messages sent to the master with the
official Python producer and replicated; one group consumes half of a topic on the master
(its offsets synced to the slave) and holds one more message unacked. The master is
SIGKILLed; official SimpleConsumers on the slave's gRPC endpoint then receive, ack and
change invisibility with the slave's in-memory pop state (:mod:`pymq.broker.slave_pop`):
every message once after its ack, an unacked one again after its invisible time, the half
acked on the master not at all, the master's in-flight message after its master-given
invisible time, a message past its retries held back (a slave cannot put to the DLQ), and
nothing appended to the slave's revive log. One pair for the module.
"""

from __future__ import annotations

import signal
import time

import pytest

from remoting_wire import call
from replication_e2e import create_topic, queued, wait_for
from serve_process import ServeProcess, free_port

from .conftest import make_message, write_groups

N = 40
QUEUES = 4
REVIVE = "rmq_sys_REVIVE_LOG_DefaultCluster"


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(master, slave), the master SIGKILLed by the first test; ``pair.state`` carries what
    the master's consumers did."""
    from real_rocketmq import free_ports
    root = tmp_path_factory.mktemp("slave-pop")
    port = free_ports()[1]              # the master's broker port; its HA port is port + 1
    write_groups(str(root / "master"), {"g-park": {"retryMaxTimes": 1}})
    master = ServeProcess(str(root / "master"), "--port", str(free_port()), "--namesrv-port", "off",
                          "--broker-port", str(port), "--vip-port", "off", "--broker-role", "async_master").start()
    slave = None
    try:
        slave = ServeProcess(str(root / "slave"), "--port", str(free_port()), "--namesrv-port", "off",
                             "--broker-port", "0", "--ha-port", "off", "--broker-role", "slave",
                             "--master", f"127.0.0.1:{port + 1}", "--master-broker", f"127.0.0.1:{port}",
                             "--slave-sync-interval", "0.5").start()
        yield master, slave
    finally:
        if slave is not None:
            slave.stop()
        master.stop(sig=signal.SIGKILL)


def _config(endpoint: str):
    from rocketmq import ClientConfiguration, Credentials
    return ClientConfiguration(endpoint, Credentials(), request_timeout=5)


def _consumer(endpoint: str, group: str, topic: str, await_duration: int = 5):
    from rocketmq import FilterExpression, SimpleConsumer
    c = SimpleConsumer(_config(endpoint), group, {topic: FilterExpression("*")}, await_duration)
    c.startup()
    return c


def _max_offset(broker: str, topic: str, queue: int) -> int:
    head, _ = call(broker, 30, {"topic": topic, "queueId": queue})
    return int(head["extFields"]["offset"]) if head["code"] == 0 else -1


def _synced_offsets(slave_broker: str, group: str, topic: str) -> int:
    """The sum of ``group``'s consumer offsets of ``topic`` on the slave (QUERY_CONSUMER_OFFSET)."""
    total = 0
    for q in range(QUEUES):
        head, _ = call(slave_broker, 14, {"consumerGroup": group, "topic": topic, "queueId": q})
        total += int(head["extFields"]["offset"]) if head["code"] == 0 else 0
    return total


STATE: dict = {}


def test_master_consumes_half_then_dies(pair):
    from rocketmq import Producer
    master, slave = pair
    mb, sb = master.listening["broker"], slave.listening["broker"]
    for t in ("SlavePopA", "SlavePopB", "SlavePopC"):
        create_topic(mb, t, QUEUES)
    wait_for(lambda: all(f'"{t}"'.encode() in call(sb, 21, {})[1] for t in ("SlavePopA", "SlavePopB", "SlavePopC")),
             20, "the slave to sync the topics")
    p = Producer(_config(master.listening["grpc"]), ("SlavePopA", "SlavePopB", "SlavePopC"))
    p.startup()
    try:
        STATE["a"] = {p.send(make_message("SlavePopA", b"a%d" % i)).message_id for i in range(N)}
        STATE["b"] = {p.send(make_message("SlavePopB", b"b%d" % i)).message_id for i in range(N)}
        STATE["c"] = p.send(make_message("SlavePopC", b"c")).message_id
    finally:
        p.shutdown()
    # half of B consumed on the master, and the offsets synced to the slave
    c = _consumer(master.listening["grpc"], "g-half", "SlavePopB")
    try:
        acked = []
        while len(acked) < N // 2:
            for m in c.receive(min(8, N // 2 - len(acked)), 30):
                c.ack(m)
                acked.append(m.message_id)
        STATE["b_acked"] = set(acked)
        wait_for(lambda: _synced_offsets(sb, "g-half", "SlavePopB") == N // 2, 20,
                 lambda: f"the slave to sync g-half's offsets: {_synced_offsets(sb, 'g-half', 'SlavePopB')}")
        # one more received and not acked: in flight on the master for 8 s when it dies
        held = c.receive(1, 8)
        assert len(held) == 1
        STATE["b_held"] = (held[0].message_id, time.monotonic() + 8)
    finally:
        c.shutdown()
    # the slave has every message and every revive-log record of the master
    wait_for(lambda: all(queued(sb, t, QUEUES) == queued(mb, t, QUEUES) for t in ("SlavePopA", "SlavePopB")),
             20, "the slave to replicate the messages")
    wait_for(lambda: _max_offset(sb, REVIVE, 0) == _max_offset(mb, REVIVE, 0) > 0, 20,
             "the slave to replicate the revive log")
    STATE["revive_end"] = _max_offset(sb, REVIVE, 0)
    master.stop(sig=signal.SIGKILL, timeout=10)


def test_slave_delivers_only_what_the_master_did_not_ack(pair):
    _, slave = pair
    assert STATE, "needs test_master_consumes_half_then_dies"
    held_id, held_until = STATE["b_held"]
    c = _consumer(slave.listening["grpc"], "g-half", "SlavePopB")
    try:
        got = {}
        deadline = time.monotonic() + 30
        while len(got) < N - N // 2 and time.monotonic() < deadline:
            for m in c.receive(16, 30):
                assert m.message_id not in STATE["b_acked"], "acked on the master, delivered again"
                assert m.message_id not in got
                got[m.message_id] = time.monotonic()
                c.ack(m)
        assert set(got) == STATE["b"] - STATE["b_acked"]
        # the master's in-flight message kept its invisible time on the slave
        assert got[held_id] >= held_until - 0.5, (got[held_id], held_until)
    finally:
        c.shutdown()


def test_slave_serves_receive_ack_redelivery(pair):
    from rocketmq.v5.exception import BadRequestException
    _, slave = pair
    c = _consumer(slave.listening["grpc"], "g-all", "SlavePopA")
    try:
        first = c.receive(1, 3)                  # not acked: back after 3 s
        assert len(first) == 1 and first[0].delivery_attempt == 1
        t0 = time.monotonic()
        got = [first[0].message_id]
        deadline = time.monotonic() + 30
        while len(got) < N and time.monotonic() < deadline:
            for m in c.receive(16, 30):
                c.ack(m)
                got.append(m.message_id)
        assert len(got) == N and set(got) == STATE["a"]        # each once
        again = []
        while not again and time.monotonic() < deadline:
            again = c.receive(16, 30)
        assert [m.message_id for m in again] == [first[0].message_id]
        assert again[0].delivery_attempt == 2 and time.monotonic() - t0 >= 2.5
        with pytest.raises(BadRequestException):             # the first delivery's handle is stale
            c.ack(first[0])
        c.change_invisible_duration(again[0], 20)             # a new handle, which acks it
        c.ack(again[0])
        assert c.receive(16, 30) == []                        # all acked: nothing more (5 s poll)
    finally:
        c.shutdown()


def test_past_retries_held_back_and_nothing_written(pair):
    _, slave = pair
    c = _consumer(slave.listening["grpc"], "g-park", "SlavePopC")
    try:
        attempts = []
        deadline = time.monotonic() + 20
        while len(attempts) < 2 and time.monotonic() < deadline:
            attempts += [m.delivery_attempt for m in c.receive(1, 1)]     # never acked
        assert attempts == [1, 2]               # retryMaxTimes 1: two deliveries, then the DLQ's turn
        time.sleep(1.5)
        assert c.receive(1, 30) == []           # held back: a slave cannot put to %DLQ%g-park
    finally:
        c.shutdown()
    sb = slave.listening["broker"]
    # not acked: the slave's consumer offset of g-park stays below the message (never lost)
    assert _synced_offsets(sb, "g-park", "SlavePopC") == 0
    assert queued(sb, "%DLQ%g-park", 1) <= 0
    # every pop, ack and change on the slave was kept in memory: its revive log is the master's
    assert _max_offset(sb, REVIVE, 0) == STATE["revive_end"]


# -- embedded: a slave's store is its master's byte for byte (a copy of a stopped master's) --

def _store_config(role: str):
    import pymq
    return pymq.StoreConfig(broker_role=role, commitlog_file_size=16 * 1024 * 1024, consume_queue_entries=20_000,
                            index_hash_slots=20_000, index_max_entries=400_000, warm_mapped_file_enable=False)


def test_embedded_slave_takes_over_and_restart_keeps_local_offsets(tmp_path):
    import os
    import shutil

    import pymq
    from pymq.broker.broker_role import SlaveWriteError
    from pymq.broker.pop_service import wall_clock_ms

    master = pymq.Broker(str(tmp_path / "m"), _store_config("ASYNC_MASTER")).start()
    master.put_messages([pymq.Message("T", b"m%d" % i) for i in range(10)])
    popped = master.pop_message("g", "T", 4, 60_000, timeout_s=5).messages
    assert [m.queue_offset for m in popped] == [0, 1, 2, 3]
    master.ack_message(popped[0].receipt_handle)
    master.ack_message(popped[2].receipt_handle)
    master.shutdown()
    shutil.copytree(tmp_path / "m", tmp_path / "s")
    os.remove(tmp_path / "s" / "config" / "popState.json")        # not replicated
    revive = lambda b: b.get_max_offset_in_queue(REVIVE, 0)      # noqa: E731

    slave = pymq.Broker(str(tmp_path / "s"), _store_config("SLAVE")).start()
    try:
        end = revive(slave)
        got = slave.pop_message("g", "T", 32, 60_000).messages
        assert [m.queue_offset for m in got] == [4, 5, 6, 7, 8, 9]     # 0, 2 acked, 1, 3 in flight
        slave.ack_message(popped[1].receipt_handle)                    # the master's handle is current
        for m in got:
            slave.ack_message(m.receipt_handle)
        slave.pop_service.clock = lambda: wall_clock_ms() + 120_000    # 3's invisible time passes
        again = slave.pop_message("g", "T", 32, 60_000).messages
        assert [(m.queue_offset, m.reconsume_times) for m in again] == [(3, 1)]
        with pytest.raises(SlaveWriteError):
            slave.forward_to_dead_letter(again[0].receipt_handle)
        slave.ack_message(again[0].receipt_handle)
        slave.pop_service.revive()
        assert slave.query_offset("g", "T", 0) == 10                   # committed locally
        assert revive(slave) == end                                    # nothing written
    finally:
        slave.shutdown()
    assert not os.path.exists(tmp_path / "s" / "config" / "popState.json")
    # a restart loses the in-memory state; the replayed log says 1 and 3 are in flight, but
    # the local consumer offset says everything below 10 is done
    slave = pymq.Broker(str(tmp_path / "s"), _store_config("SLAVE")).start()
    try:
        slave.pop_service.clock = lambda: wall_clock_ms() + 120_000
        assert slave.pop_message("g", "T", 32, 60_000).messages == []
    finally:
        slave.shutdown()
