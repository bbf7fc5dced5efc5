"""RocketMQ 4's C++ client (rocketmq-client-cpp 1.x, shipped in the ``rocketmq`` wheel on
PyPI) against ``pymq serve``: synchronous, batched and orderly sends, a push consumer, an
orderly push consumer (which locks its queues with LOCK_BATCH_MQ before it pulls) and a pull
consumer. The client runs in a subprocess (its module name clashes with the 5.x client's)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time

import pymq

from .conftest import CPP_DEPS, run_cpp, run_node

PRODUCE = r'''
import json, os
from rocketmq.client import Producer, Message
p = Producer("CPP_PG"); p.set_namesrv_addr(os.environ["NS"]); p.start()
for i in range(20):
    m = Message("CppTopic"); m.set_keys("ck-%d" % i); m.set_tags("T%d" % (i % 2)); m.set_body("cpp-%d" % i)
    r = p.send_sync(m)
    print(json.dumps({"kind": "sync", "status": int(r.status), "id": r.msg_id, "offset": r.offset}))
batch = []
for i in range(5):
    m = Message("CppTopic"); m.set_keys("cb-%d" % i); m.set_body("batch-%d" % i); batch.append(m)
r = p.send_batch(batch)
print(json.dumps({"kind": "batch", "status": int(r.status)}))
for i in range(30):
    m = Message("CppOrder"); m.set_body("%d:%d" % (i % 3, i)); m.set_keys("o-%d" % i)
    r = p.send_orderly(m, i % 3)
    print(json.dumps({"kind": "orderly", "status": int(r.status)}))
p.shutdown()
'''

PUSH = r'''
import json, os, time
from rocketmq.client import PushConsumer
orderly = os.environ["ORDERLY"] == "1"
c = PushConsumer(os.environ["GROUP"], orderly=orderly); c.set_namesrv_addr(os.environ["NS"])
got = []
c.subscribe(os.environ["TOPIC"], lambda m: got.append((m.queue_id, m.queue_offset, m.body.decode(),
                                                       m.keys.decode() if m.keys else "")))
c.start()
t0 = time.time(); want = int(os.environ["WANT"])
while len(got) < want and time.time() - t0 < 40:
    time.sleep(0.1)
time.sleep(0.5)
for g in list(got):
    print(json.dumps({"queue": g[0], "offset": g[1], "body": g[2], "keys": g[3]}))
c.shutdown()
'''

PULL = r'''
import json, os
from rocketmq.client import PullConsumer
c = PullConsumer("CPP_PULL"); c.set_namesrv_addr(os.environ["NS"]); c.start()
for m in c.pull("CppTopic"):
    print(json.dumps({"queue": m.queue_id, "offset": m.queue_offset, "body": m.body.decode()}))
c.shutdown()
'''


def test_cpp_producer_and_consumers(remoting_server):
    server = remoting_server()
    sent = run_cpp(PRODUCE, NS=server.namesrv)
    assert [x["status"] for x in sent] == [0] * len(sent) and len(sent) == 20 + 1 + 30

    push = run_cpp(PUSH, NS=server.namesrv, GROUP="CPP_CG", TOPIC="CppTopic", ORDERLY="0", WANT=21)
    bodies = sorted(x["body"] for x in push)
    singles = [b for b in bodies if b.startswith("cpp-")]
    assert singles == sorted(f"cpp-{i}" for i in range(20)), "every message once"
    # the client flags its batch m=1, which RocketMQ 4.9.7 reads as false (Boolean.parseBoolean):
    # it stores the batch as one message, the encoded batch its body (checked against 4.9.7
    # in tests/parity/test_admin_parity.py)
    # (the client hands bodies over as C strings: the encoded batch reads as "" up to its first NUL)
    assert len(bodies) == 21
    with pymq.MessageStore(server.store, read_only=True) as store:
        stored = [m.body for qid in store.get_topics()["CppTopic"]
                  for m in store.get_message("g", "CppTopic", qid, 0, 64).messages]
    batch, = [b for b in stored if not b.startswith(b"cpp-")]
    assert all(b"batch-%d" % i in batch for i in range(5)) and len(stored) == 21, stored

    pulled = run_cpp(PULL, NS=server.namesrv)
    assert sorted(x["body"] for x in pulled) == bodies

    orderly = run_cpp(PUSH, NS=server.namesrv, GROUP="CPP_OCG", TOPIC="CppOrder", ORDERLY="1", WANT=30)
    assert len(orderly) == 30
    for shard in range(3):
        seq = [int(x["body"].split(":")[1]) for x in orderly if x["body"].startswith(f"{shard}:")]
        assert seq == sorted(seq) and len(seq) == 10, f"shard {shard} in order"


def test_orderly_consumer_holds_queue_locks(remoting_server):
    """While an orderly consumer runs, its queues are locked to it: another client of the
    group asking for the same locks gets none of them."""
    server = remoting_server()
    run_cpp(PRODUCE, NS=server.namesrv)
    env = dict(os.environ, PYTHONPATH=CPP_DEPS, NS=server.namesrv, GROUP="LOCK_CG", TOPIC="CppOrder", ORDERLY="1",
               WANT="1000")
    proc = subprocess.Popen([sys.executable, "-c", PUSH], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        mqs = [{"topic": "CppOrder", "brokerName": "broker-a", "queueId": q} for q in range(4)]
        body = base64.b64encode(json.dumps({"consumerGroup": "LOCK_CG", "clientId": "intruder@1",
                                            "mqSet": mqs}).encode()).decode()
        deadline = time.monotonic() + 30
        locked_by_other = []
        while time.monotonic() < deadline:
            r = run_node({"mode": "invoke", "addr": server.broker, "requests": [{"code": 41, "body": body}]})[0]
            locked_by_other = json.loads(base64.b64decode(r["body"]))["lockOKMQSet"]
            if not locked_by_other:
                break
            # the intruder got them: give them back and look again once the consumer locked
            run_node({"mode": "invoke", "addr": server.broker, "requests": [{"code": 42, "body": body}]})
            time.sleep(0.5)
        assert locked_by_other == [], "the orderly consumer's queues were locked to it"
    finally:
        proc.kill()
        proc.wait()
