"""Replication between pymq and a real Apache RocketMQ 4.9.7 broker, both directions
(skipped, saying why, without the distribution: tests/real_rocketmq.py).

* real master (ASYNC_MASTER) -> embedded pymq SLAVE store on its HA port (listenPort + 1):
  the official Java client sends to the real broker; the pymq slave's commit log is the
  real one byte for byte and its consume queues give every message;
* embedded pymq master (``ha_listen_port``) -> real slave broker (brokerRole=SLAVE,
  brokerId=1, haMasterAddress=pymq's): the real slave's commit log is pymq's byte for
  byte, and mqadmin's viewMessage reads every message back from the real slave. (A pull
  through the Java client needs a topic route, which 4.9.7's name server builds from
  brokerId 0's registration only: the broker layer's business, not the store's.)
"""

from __future__ import annotations

import base64
import os

import pytest

from pymq import Message, MessageStore

from ha_support import wait_until

SEGMENT = 256 * 1024
N = 600


def _file_bytes(commitlog_dir, start: int, end: int) -> bytes:
    out = bytearray()
    pos = start
    while pos < end:
        seg = pos - pos % SEGMENT
        with open(os.path.join(commitlog_dir, f"{seg:020d}"), "rb") as f:
            f.seek(pos - seg)
            n = min(end, seg + SEGMENT) - pos
            out += f.read(n)
        pos += n
    return bytes(out)


def _slave_bytes(store, end: int) -> bytes:
    mfq = store.commit_log.mapped_file_queue
    out = bytearray()
    pos = store.get_min_phy_offset()
    while pos < end:
        mf = mfq.find_mapped_file_by_offset(pos)
        n = min(end - pos, SEGMENT - (pos - mf.file_from_offset))
        out += mf.read(pos - mf.file_from_offset, n)
        pos += n
    return bytes(out)


def test_real_master_to_pymq_slave(real_broker, rocketmq_probe, tmp_path, config_factory):
    broker = real_broker(tmp_path / "rmq-master", {"mappedFileSizeCommitLog": SEGMENT,
                                                   "brokerRole": "ASYNC_MASTER", "flushDiskType": "ASYNC_FLUSH"})
    broker.start()
    slave = MessageStore(tmp_path / "pymq-slave", config_factory(
        broker_role="SLAVE", ha_master_address=f"127.0.0.1:{broker.port + 1}",
        commitlog_file_size=SEGMENT)).start()
    try:
        bodies = {os.urandom(8).hex().encode() * (1 + i % 40) for i in range(N)}
        msgs = [{"body": base64.b64encode(b).decode(), "keys": f"k{i}", "tags": "TagA", "queue": i % 4}
                for i, b in enumerate(sorted(bodies))]
        results = rocketmq_probe.run(broker, [{"op": "createTopic", "topic": "HaInterop", "queues": 4},
                                              {"op": "send", "topic": "HaInterop", "messages": msgs}])
        assert all(r["status"] == "SEND_OK" for r in results[1])

        def count():
            return sum(slave.get_max_offset_in_queue("HaInterop", q) for q in range(4))
        assert wait_until(lambda: count() == len(msgs), 30), count()
        end = slave.get_max_phy_offset()
        assert slave.get_min_phy_offset() == 0
        assert _slave_bytes(slave, end) == _file_bytes(broker.store / "commitlog", 0, end)
        got = set()
        for q in range(4):
            off = 0
            while True:
                r = slave.get_message("g", "HaInterop", q, off, 32)
                if not r.messages:
                    break
                got.update(m.body for m in r.messages)
                off = r.next_begin_offset
        assert got == bodies
        assert slave.query_message("HaInterop", "k7")[0].body == sorted(bodies)[7]
    finally:
        slave.shutdown()


def test_pymq_master_to_real_slave(real_broker, rocketmq_probe, tmp_path, config_factory):
    rslave = real_broker(tmp_path / "rmq-slave", {
        "mappedFileSizeCommitLog": SEGMENT, "brokerRole": "SLAVE", "brokerId": 1,
        "haSendHeartbeatInterval": 1000, "flushDiskType": "ASYNC_FLUSH"})
    # the records' store host is the real slave's address, so their offset message ids
    # lead mqadmin's viewMessage to the real slave (a slave alone registers no topic
    # route with its name server: 4.9.7 takes topic configs from brokerId 0 only)
    master = MessageStore(tmp_path / "pymq-master", config_factory(
        ha_listen_port=0, commitlog_file_size=SEGMENT, store_host=rslave.address)).start()
    try:
        rslave.conf["haMasterAddress"] = master.ha.address
        rslave.start()
        assert wait_until(lambda: master.ha.connection_count == 1, 30)
        sent = {}
        for i in range(N):
            body = os.urandom(10 + i % 500)
            r = master.put_message(Message("HaBack", body, tags="TagB", keys=f"key{i}", queue_id=i % 4))
            sent[r.msg_id] = body
        end = master.get_max_phy_offset()
        assert master.ha.wait_for_slave(end, 30)
        assert _file_bytes(rslave.store / "commitlog", 0, end) == _slave_bytes(master, end)
        # every message read back through the real slave (VIEW_MESSAGE_BY_ID: its commit log)
        plan = [{"op": "viewOffsetId", "id": msg_id} for msg_id in sent]
        out = rocketmq_probe.run(rslave, plan)
        assert [base64.b64decode(m["body"]) for m in out] == list(sent.values())
        assert {m["topic"] for m in out} == {"HaBack"}
    finally:
        master.shutdown()
