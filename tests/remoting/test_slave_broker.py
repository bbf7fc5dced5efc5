"""``pymq serve --broker-role slave`` beside a pymq master (issue 28, the broker side): what a
slave refuses, over remoting and gRPC, with nothing stored, as RocketMQ 4.9.7's slave answers
(SendMessageProcessor, EndTransactionProcessor, AdminBrokerProcessor.validateSlave); what it
serves (pulls, without committing their offsets; offset commits, kept locally); and the
metadata sync (SlaveSynchronize): topics, groups and consumer offsets of the master appear
on the slave within a sync.

The slave's HA address is a closed port: these tests need no byte replication (the store's
part), only the broker's. One master and one slave are shared by the module.
"""

from __future__ import annotations

import os
import time

import pytest

from remoting_wire import call        # tests/ is on sys.path
from serve_process import ServeProcess

SEND = {"producerGroup": "pg", "topic": "SlaveT", "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
        "queueId": 0, "sysFlag": 0, "bornTimestamp": 1, "flag": 0, "properties": "", "reconsumeTimes": 0}
SYNC_S = 0.3


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(master, slave) ``pymq serve`` processes; the slave has gRPC on too."""
    root = tmp_path_factory.mktemp("slave-pair")
    master = ServeProcess(str(root / "master"), "--port", "off", "--namesrv-port", "off", "--broker-port", "0",
                          "--ha-port", "off").start()
    try:
        slave = ServeProcess(str(root / "slave"), "--port", "0", "--namesrv-port", "off", "--broker-port", "0",
                             "--ha-port", "off", "--broker-role", "slave", "--master", "127.0.0.1:1",
                             "--master-broker", master.listening["broker"],
                             "--slave-sync-interval", str(SYNC_S)).start()
    except BaseException:
        master.stop()
        raise
    try:
        yield master, slave
    finally:
        slave.stop()
        master.stop()


def _commitlog_bytes(store: str) -> int:
    d = os.path.join(store, "commitlog")
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)) if os.path.isdir(d) else 0


def _eventually(check, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def test_sends_refused_with_4_9_7_codes_nothing_stored(pair):
    master, slave = pair
    addr = slave.listening["broker"]
    head, _ = call(addr, 10, SEND, b"one")                            # SEND_MESSAGE
    assert head["code"] == 14, head                                   # SERVICE_NOT_AVAILABLE
    assert head["remark"].startswith("service not available now. It may be caused by one of the following "
                                     "reasons: the broker's disk is full [CL: ")
    assert "messages are put to the slave" in head["remark"]
    assert "msgId" not in head.get("extFields", {})
    v2 = {"a": "pg", "b": "SlaveT", "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": 1, "h": 0, "i": "", "j": 0}
    assert call(addr, 310, v2, b"two")[0]["code"] == 14                # SEND_MESSAGE_V2
    head, _ = call(addr, 37, {"producerGroup": "pg", "tranStateTableOffset": 0, "commitLogOffset": 0,
                              "commitOrRollback": 8, "fromTransactionCheck": "false", "msgId": "00"})
    assert head["code"] == 11 and not head.get("remark")             # END_TRANSACTION: SLAVE_NOT_AVAILABLE
    head, _ = call(addr, 36, {"group": "slave_g", "offset": 0, "delayLevel": 0, "originMsgId": "00",
                              "originTopic": "SlaveT", "unitMode": "false", "maxReconsumeTimes": 16})
    assert head["code"] == 1, head                                    # send-back: SYSTEM_ERROR, no put
    assert _commitlog_bytes(slave.store) == 0
    assert call(master.listening["broker"], 10, SEND, b"to the master")[0]["code"] == 0


def test_admin_changes_refused(pair):
    _, slave = pair
    addr = slave.listening["broker"]
    want = "Can't modify topic or subscription group from slave broker, please execute it from master broker."
    for code, ext in ((17, {"topic": "NewT", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6}),
                      (215, {"topic": "SlaveT"}), (207, {"groupName": "slave_g"})):
        head, _ = call(addr, code, ext)
        assert (head["code"], head.get("remark")) == (1, want), (code, head)


def test_tables_and_offsets_synced_from_master(pair):
    master, slave = pair
    m, s = master.listening["broker"], slave.listening["broker"]
    assert call(m, 17, {"topic": "SyncedT", "readQueueNums": 3, "writeQueueNums": 3, "perm": 6})[0]["code"] == 0
    assert call(m, 15, {"consumerGroup": "sync_g", "topic": "SyncedT", "queueId": 2, "commitOffset": 7})[0][
        "code"] == 0

    def on_slave():
        head, _ = call(s, 14, {"consumerGroup": "sync_g", "topic": "SyncedT", "queueId": 2})
        return head["code"] == 0 and head["extFields"]["offset"] == "7"
    assert _eventually(on_slave), "the master's offset did not reach the slave"
    head, body = call(s, 351, {"topic": "SyncedT"})                   # GET_TOPIC_CONFIG
    assert head["code"] == 0 and b'"readQueueNums":3' in body
    # one sync round takes the offsets, then the subscription groups: wait for those too
    assert _eventually(lambda: call(s, 352, {"group": "sync_g"})[0]["code"] == 0)   # GET_SUBSCRIPTIONGROUP_CONFIG
    # the topic table is the master's, data version included
    assert call(s, 21, {})[1] == call(m, 21, {})[1]


def test_offset_commit_kept_on_slave_pull_does_not_commit(pair):
    master, slave = pair
    s = slave.listening["broker"]
    assert call(master.listening["broker"], 17, {"topic": "PullT", "readQueueNums": 1, "writeQueueNums": 1,
                                                 "perm": 6})[0]["code"] == 0
    assert _eventually(lambda: call(s, 351, {"topic": "PullT"})[0]["code"] == 0)
    # UPDATE_CONSUMER_OFFSET on the slave: taken locally (ConsumerManageProcessor has no role check)
    assert call(s, 15, {"consumerGroup": "local_g", "topic": "PullT", "queueId": 0, "commitOffset": 3})[0][
        "code"] == 0
    assert call(s, 14, {"consumerGroup": "local_g", "topic": "PullT", "queueId": 0})[0]["extFields"]["offset"] == "3"
    # a pull with the commit bit (1) and commitOffset 5: served, the offset not committed on a slave
    head, _ = call(s, 11, {"consumerGroup": "local_g", "topic": "PullT", "queueId": 0, "queueOffset": 0,
                           "maxMsgNums": 32, "sysFlag": 1, "commitOffset": 5, "suspendTimeoutMillis": 0,
                           "subscription": "*", "subVersion": 0, "expressionType": "TAG"})
    assert head["code"] == 19 and head["extFields"]["suggestWhichBrokerId"] == "0", head   # PULL_NOT_FOUND
    time.sleep(3 * SYNC_S)              # a sync round passes: the master has no entry for the group
    assert call(s, 14, {"consumerGroup": "local_g", "topic": "PullT", "queueId": 0})[0]["extFields"]["offset"] == "3"


def test_grpc_writes_refused_receives_served(pair):
    import grpc
    from rocketmq.grpc_protocol import definition_pb2 as pb
    from rocketmq.grpc_protocol import service_pb2 as svc
    from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc

    _, slave = pair
    meta = (("x-mq-client-id", "slave-test-client"), ("x-mq-language", "PYTHON"), ("x-mq-protocol", "v2"),
            ("x-mq-client-version", "5.0.0"))
    with grpc.insecure_channel(slave.listening["grpc"]) as channel:
        stub = svc_grpc.MessagingServiceStub(channel)
        msg = pb.Message(topic=pb.Resource(name="SlaveT"), body=b"grpc",
                         system_properties=pb.SystemProperties(message_id="01ABC", body_encoding=pb.IDENTITY,
                                                               message_type=pb.NORMAL))
        resp = stub.SendMessage(svc.SendMessageRequest(messages=[msg]), metadata=meta, timeout=10)
        assert resp.status.code == pb.FORBIDDEN and "slave" in resp.status.message, resp
        ack = stub.AckMessage(svc.AckMessageRequest(group=pb.Resource(name="g"), topic=pb.Resource(name="SlaveT"),
                                                    entries=[svc.AckMessageEntry(message_id="01ABC",
                                                                                receipt_handle="x")]),
                              metadata=meta, timeout=10)
        # receive, ack and invisibility changes are served (pop state in memory, nothing
        # written): a handle that is no receipt handle is refused as such, not as a write
        assert ack.status.code == pb.INVALID_RECEIPT_HANDLE, ack
        fwd = stub.ForwardMessageToDeadLetterQueue(svc.ForwardMessageToDeadLetterQueueRequest(
            group=pb.Resource(name="g"), topic=pb.Resource(name="SlaveT"), receipt_handle="x", message_id="01ABC",
            delivery_attempt=1, max_delivery_attempts=16), metadata=meta, timeout=10)
        assert fwd.status.code == pb.FORBIDDEN and "slave" in fwd.status.message, fwd
        received = list(stub.ReceiveMessage(svc.ReceiveMessageRequest(
            group=pb.Resource(name="g"), message_queue=pb.MessageQueue(topic=pb.Resource(name="SlaveT")),
            batch_size=1), metadata=meta, timeout=10))
        assert received[0].status.code != pb.FORBIDDEN, received[0]
    assert _commitlog_bytes(slave.store) == 0
