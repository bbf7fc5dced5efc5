"""pymq's store files and a real Apache RocketMQ 4.9.7 broker's are the same files, both ways
(issue 25: store files moved both ways, in the parity suite).

Each test writes a store with one side, opens it with the other as a writer, and back:
pymq -> RocketMQ -> pymq, and RocketMQ -> pymq (appending) -> RocketMQ. What the official
Java client (and mqadmin) sees through the real broker is compared with what pymq reads,
field by field. The broker's file sizes are set to pymq's: 64 KiB commit-log segments (so
records cross segment ends and their blanks) and small index files (pymq's roll over to a
second one). The broker and the Java probe come from ``tests/real_rocketmq.py`` (fixtures
in ``conftest.py``); without the distribution the tests are skipped, naming
``PYMQ_ROCKETMQ_HOME``.
"""

from __future__ import annotations

import base64
import random
import re
import time
import zlib

import pymq
from pymq.broker.topic_config import TopicConfig
from pymq.checker import StoreChecker

SEGMENT = 64 * 1024                       # commit-log segment: a few hundred messages cross several
INDEX_SLOTS, INDEX_ENTRIES = 256, 1024    # index file: RocketMQ's 4 entries per slot; ~1,100 entries roll over
SIZES = dict(commitlog_file_size=SEGMENT, index_hash_slots=INDEX_SLOTS, index_max_entries=INDEX_ENTRIES)
BROKER_CONF = {"mappedFileSizeCommitLog": SEGMENT, "maxHashSlotNum": INDEX_SLOTS, "maxIndexNum": INDEX_ENTRIES,
               "flushDiskType": "ASYNC_FLUSH"}
CLIENT_ADDED = {"MIN_OFFSET", "MAX_OFFSET"}   # the Java client adds these to each pulled message
CRC_PROP = "__CRC32#"                         # pymq's record CRC; decoded pymq messages hide it
NOTE = "café ü € 漢字"                        # a non-ASCII property value (UTF-8 both ways)


def view(m) -> dict:
    """A pymq MessageExt in the shape of the probe's JSON for a Java MessageExt."""
    return {"topic": m.topic, "queueId": m.queue_id, "queueOffset": m.queue_offset,
            "commitLogOffset": m.commitlog_offset, "storeSize": m.store_size,
            "body": base64.b64encode(m.body).decode(), "bodyCRC": m.body_crc, "flag": m.flag,
            "sysFlag": m.sys_flag, "bornTimestamp": m.born_timestamp, "storeTimestamp": m.store_timestamp,
            "bornHost": m.born_host, "storeHost": m.store_host, "reconsumeTimes": m.reconsume_times,
            "preparedTransactionOffset": m.prepared_transaction_offset, "msgId": m.uniq_key,
            "tags": m.tags, "keys": " ".join(m.keys) if m.keys else None, "properties": dict(m.properties)}


def read_all(store, topics) -> dict:
    """{topic: [view]} of every message, queue by queue from its min offset, as the probe dumps."""
    out = {}
    for topic in topics:
        msgs = []
        for q in sorted(store.get_topics().get(topic, [])):
            offset = store.get_min_offset_in_queue(topic, q)
            while True:
                g = store.get_message("check", topic, q, offset, 32)
                if not g.messages:
                    break
                msgs += [view(m) for m in g.messages]
                offset = g.next_begin_offset
        out[topic] = msgs
    return out


def crc_digits(record: bytes) -> str:
    """The ``__CRC32#`` value of a record: its CRC-32 (masked), ten digits least significant first."""
    return str(zlib.crc32(record[:-20]) & 0x7FFFFFFF).zfill(10)[::-1]


def assert_same_messages(java: dict, ours: dict, record_at) -> int:
    """The Java client's messages are pymq's, field by field. The Java side also shows the
    client's MIN/MAX_OFFSET and, for records pymq wrote, their trailing ``__CRC32#`` (which
    pymq's decoding hides), which must be the record's own CRC; a compressed body (sysFlag
    0x1) is inflated by the client, stored (and read by pymq) as the producer compressed it.
    ``record_at(offset)`` is the record stored at a commit-log offset. Returns how many
    records carry their own CRC."""
    assert sorted(java) == sorted(ours)
    with_crc = 0
    for topic in java:
        assert len(java[topic]) == len(ours[topic]), topic
        for j, p in zip(java[topic], ours[topic]):
            j = dict(j, properties={k: v for k, v in j["properties"].items() if k not in CLIENT_ADDED})
            crc = j["properties"].pop(CRC_PROP, None) if CRC_PROP not in p["properties"] else None
            if crc is not None:
                with_crc += 1
                assert crc == crc_digits(record_at(p["commitLogOffset"])), p
            if p["sysFlag"] & 1:
                p = dict(p, body=base64.b64encode(zlib.decompress(base64.b64decode(p["body"]))).decode())
            assert j == p
    return with_crc


def assert_undamaged(path, store) -> None:
    """A writer's open saw a clean exit and no damage, and ``pymq check`` finds none."""
    assert store.last_exit_ok and store.open_report == []
    damage = store.stats()["damage"]
    assert not any(damage.values()), damage
    report = StoreChecker(str(path)).run()
    assert report.ok, report.problems


def assert_recovered_cleanly(broker, max_phy: int) -> None:
    """The broker's store.log says it took the store as cleanly shut down, recovered the log
    to exactly ``max_phy`` and found the consume queues complete (dispatch resumes at the
    end: nothing re-dispatched); nothing in the store's logs is an error."""
    log = broker.log("store.log")
    assert "last shutdown normally" in log, log
    assert f"load over, and the max phy offset = {max_phy}" in log, log
    assert f"[SetReputOffset] maxPhysicalPosInLogicQueue={max_phy} " in log, log
    assert not [ln for ln in log.splitlines() if " ERROR " in ln] and not broker.log("storeerror.log").strip()


def offsets_of(msgs, pred) -> dict:
    out: dict = {}
    for m in msgs:
        out.setdefault(str(m["queueId"]), [])
        if pred(m):
            out[str(m["queueId"])].append(m["queueOffset"])
    return out


def mqadmin_rows(text: str) -> list[tuple[int, int]]:
    """(queue id, queue offset) rows of ``mqadmin queryMsgByKey``'s table."""
    return [(int(q), int(o)) for q, o in re.findall(r"^[0-9A-F]{32,}\s+(\d+)\s+(\d+)\s*$", text, re.M)]


def test_pymq_store_opens_in_rocketmq(real_broker, rocketmq_probe, tmp_path):
    """pymq -> RocketMQ -> pymq. A store pymq wrote (2 topics, 6 queues, 360 messages with
    keys, tags or none, non-ASCII properties, other born hosts and times, flags; a pending
    delay-level message; two groups' offsets) is taken by the real broker as a cleanly shut
    down store, recovered to exactly pymq's end with its consume queues complete. Through it
    the Java client pulls every record with pymq's bytes and fields (and the trailing
    ``__CRC32#`` equal to the record's CRC), the broker's tag filter works on pymq's tags
    codes, queries by key, unique key and offset id (client and ``mqadmin queryMsgByKey``)
    use pymq's index files, pymq's committed offsets are served, and pymq's delayed message
    is delivered. The broker then creates a topic, takes sends and a commit and stops;
    pymq reopens it all as a writer with no damage, reads what the Java client read, finds
    the new messages and offsets, appends, and reopens once more."""
    path = tmp_path / "store"
    broker = real_broker(path, BROKER_CONF)
    cfg = pymq.StoreConfig(store_host=broker.address, **SIZES)   # offset ids name the real broker
    rnd = random.Random(1)
    with pymq.Broker(path, cfg) as s:
        s.topic_config_manager.update_topic_config(TopicConfig("RtOrders", 4, 4))
        s.topic_config_manager.update_topic_config(TopicConfig("RtEvents", 2, 2))
        for i in range(360):
            topic, queues = ("RtEvents", 2) if i % 3 == 0 else ("RtOrders", 4)
            body = rnd.randbytes(rnd.choice((1, 40, 300, 900, 2500)))
            s.put_message(pymq.Message(
                topic, body, tags=(None, "TagA", "TagB")[i % 3 if topic == "RtOrders" else 1],
                keys=[f"order-{i}", f"cust-{i % 11}"], properties={"seq": str(i), "note": NOTE},
                queue_id=i % queues, flag=i % 7, born_timestamp=1_700_000_000_000 + i,
                born_host=f"10.20.30.{i % 250}:{40000 + i}" if i % 5 == 0 else None))
        s.put_message(pymq.Message("RtOrders", b"delayed by pymq", tags="TagD", keys="delayed-1",
                                   queue_id=1, delay_level=2))
        for group, topic, offsets in (("rt-group-1", "RtOrders", {0: 7, 2: 30}), ("rt-group-2", "RtEvents", {1: 11})):
            for q, off in offsets.items():
                s.commit_offset(group, topic, q, off)
    assert not (path / "abort").exists() and len(list((path / "index").iterdir())) == 2

    with pymq.MessageStore(path, cfg, read_only=True) as r:     # what pymq wrote, as pymq reads it
        before, max_phy = read_all(r, ["RtOrders", "RtEvents"]), r.get_max_phy_offset()
        hit = before["RtOrders"][100]
        hit_id = r.look_message_by_offset(hit["commitLogOffset"]).msg_id     # offset id: the broker's address
        by_cust = sorted((m["queueId"], m["queueOffset"]) for m in before["RtOrders"] if "cust-3" in m["keys"])

    broker.start()
    assert_recovered_cleanly(broker, max_phy)
    sent = [{"body": base64.b64encode(b"from java %d" % j).decode(), "tags": "TagJ", "keys": f"java-{j}",
             "props": {"src": "java", "note": NOTE}, "queue": j % 4} for j in range(8)]
    (java, tag_a, by_key, uniq, by_id, admin_text, off1, off2, _, sent_orders, sent_new,
     committed, after, progress) = rocketmq_probe.run(broker, [
        {"op": "dump", "topics": ["RtOrders", "RtEvents"], "waitFor": {"RtOrders": 241}, "waitMs": 30000},
        {"op": "pullTag", "topic": "RtOrders", "tag": "TagA"},
        {"op": "query", "topic": "RtOrders", "key": "cust-3"},
        {"op": "uniq", "topic": "RtOrders", "key": hit["msgId"]},
        {"op": "viewOffsetId", "id": hit_id},
        {"op": "mqadmin", "args": ["queryMsgByKey", "-t", "RtOrders", "-k", hit["keys"].split()[0]]},
        {"op": "offsets", "group": "rt-group-1", "topic": "RtOrders"},
        {"op": "offsets", "group": "rt-group-2", "topic": "RtEvents"},
        {"op": "createTopic", "topic": "RtNew", "queues": 2},
        {"op": "send", "topic": "RtOrders", "messages": sent},
        {"op": "send", "topic": "RtNew", "messages": [dict(m, queue=m["queue"] % 2) for m in sent[:4]]},
        {"op": "consume", "group": "rt-group-1", "topic": "RtOrders", "counts": {"0": 2, "3": 2}},
        {"op": "dump", "topics": ["RtOrders", "RtEvents", "RtNew"], "waitMs": 0},
        # the groups pymq's embedded commits registered have their %RETRY% topic, which
        # consumerProgress asks routes for (issue 25: "No topic route info ... %RETRY%")
        {"op": "mqadmin", "args": ["consumerProgress", "-g", "rt-group-2"]},
    ])
    # the broker delivered pymq's pending delay-level message (SCHEDULE_TOPIC_XXXX queue 1,
    # its due time in the tags code) to its real topic and queue; the rest is pymq's records
    delayed = [m for m in java["RtOrders"] if m["keys"] == "delayed-1"]
    assert len(delayed) == 1 and delayed[0]["queueId"] == 1 and delayed[0]["properties"]["REAL_TOPIC"] == "RtOrders"
    java["RtOrders"].remove(delayed[0])
    stale_crc = delayed[0]["properties"][CRC_PROP]      # see the reopen below
    assert tag_a == offsets_of(before["RtOrders"], lambda m: m["tags"] == "TagA")   # broker-side tags-code filter
    assert sorted((m["queueId"], m["queueOffset"]) for m in by_key) == by_cust and len(by_cust) > 5
    assert [(m["queueId"], m["queueOffset"]) for m in uniq] == [(hit["queueId"], hit["queueOffset"])]
    assert by_id["commitLogOffset"] == hit["commitLogOffset"] and by_id["body"] == hit["body"]
    assert mqadmin_rows(admin_text) == [(hit["queueId"], hit["queueOffset"])], admin_text
    assert (off1["0"], off1["2"], off2["1"]) == (7, 30, 11)
    assert committed == {"0": 9, "3": 2}         # 2 more from 7, 2 from the start
    assert "RtEvents" in progress and "Exception" not in progress and "route" not in progress, progress
    assert all(m["status"] == "SEND_OK" for m in sent_orders + sent_new)
    broker.stop()
    assert not (path / "abort").exists()

    with pymq.Broker(path, cfg) as s:       # pymq reopens what both wrote, as a writer
        assert_undamaged(path, s)
        assert assert_same_messages(java, before, s.select_one_message_by_offset) == 360   # pymq's records
        ours = read_all(s, ["RtOrders", "RtEvents", "RtNew"])
        assert assert_same_messages(after, ours, s.select_one_message_by_offset) == 360
        assert s.stats()["delay"]["pending"] == 0       # the broker's delayOffset.json: delivered, not again
        # RocketMQ 4.9.7 knows no __CRC32#: delivering the delayed message it copied the
        # properties of pymq's SCHEDULE_TOPIC_XXXX record, CRC entry included, into a record
        # of its own, amid the others (Java's HashMap order), with that record's value. Both
        # sides read it as an ordinary property; pymq checks only a trailing entry, so the
        # record is not taken for damage (assert_undamaged above) and reads as Java reads it.
        (d,) = [m for m in ours["RtOrders"] if m["keys"] == "delayed-1"]
        own_crc = crc_digits(s.select_one_message_by_offset(d["commitLogOffset"]))
        assert d["properties"][CRC_PROP] == stale_crc != own_crc
        assert [m.queue_offset for m in s.query_message("RtOrders", "java-5")] == [sent_orders[5]["queueOffset"]]
        assert len(s.query_message("RtOrders", "cust-3", 64)) == len(by_cust)
        got = s.view_message_by_id(sent_new[1]["offsetMsgId"])
        assert (got.topic, got.body, got.uniq_key) == ("RtNew", b"from java 1", sent_new[1]["msgId"])
        assert [s.query_offset("rt-group-1", "RtOrders", q) for q in range(4)] == [9, -1, 30, 2]
        assert s.query_offset("rt-group-2", "RtEvents", 1) == 11
        assert s.topic_config_manager.select_topic_config("RtNew").read_queue_nums == 2
        r = s.put_message(pymq.Message("RtNew", b"pymq again", keys="again-1", queue_id=1))
        assert r.status == pymq.PutMessageStatus.PUT_OK and r.queue_offset == 2
    with pymq.Broker(path, cfg) as s:
        assert_undamaged(path, s)
        assert [m.body for m in s.query_message("RtNew", "again-1")] == [b"pymq again"]
        assert sum(len(v) for v in read_all(s, ["RtOrders", "RtEvents", "RtNew"]).values()) == 361 + 8 + 4 + 1


def test_rocketmq_store_opens_in_pymq_and_back(real_broker, rocketmq_probe, tmp_path):
    """RocketMQ -> pymq -> RocketMQ. A store the real broker wrote (Java producer: 240
    messages over several segments, one compressed body, keys, tags, non-ASCII properties;
    a group that consumed some and committed; a delay-level message still pending at the
    stop) opens in pymq as a writer with its sizes read off the files and no damage. pymq
    reads every record as the Java client read it, finds them by key, unique key and offset
    id through RocketMQ's index, sees the committed offsets, delivers the pending delayed
    message exactly once, appends after RocketMQ's records (index entries and offsets
    too), and closes. The real broker reopens that store as cleanly shut down, and serves
    RocketMQ's records and pymq's alike: pulls, queries by key and unique key through the
    index both wrote, and the offsets both committed."""
    path = tmp_path / "store"
    broker = real_broker(path, BROKER_CONF).start()
    rnd = random.Random(2)
    orders = []
    for i in range(200):
        body = b"z" * 6000 if i == 77 else rnd.randbytes(rnd.choice((1, 50, 400, 1500)))  # > 4 KiB: compressed
        orders.append({"body": base64.b64encode(body).decode(), "tags": (None, "TagA", "TagB")[i % 3],
                       "keys": f"rorder-{i} rcust-{i % 9}", "props": {"seq": str(i), "note": NOTE}, "queue": i % 4})
    events = [{"body": base64.b64encode(b"event %d" % i).decode(), "tags": "TagE", "keys": f"revent-{i}",
               "queue": i % 2} for i in range(40)]
    delayed = {"body": base64.b64encode(b"delayed by rocketmq").decode(), "tags": "TagD", "keys": "rdelayed",
               "queue": 2, "delayLevel": 3}            # 10 s: still pending when the broker stops
    _, _, sent_orders, sent_events, c1, c2, java, sent_delayed = rocketmq_probe.run(broker, [
        {"op": "createTopic", "topic": "RmqOrders", "queues": 4},
        {"op": "createTopic", "topic": "RmqEvents", "queues": 2},
        {"op": "send", "topic": "RmqOrders", "messages": orders},
        {"op": "send", "topic": "RmqEvents", "messages": events},
        {"op": "consume", "group": "rmq-group", "topic": "RmqOrders", "counts": {"0": 10, "1": 99, "2": 3}},
        {"op": "consume", "group": "rmq-group", "topic": "RmqEvents", "counts": {"1": 5}},
        {"op": "dump", "topics": ["RmqOrders", "RmqEvents"], "waitMs": 0},
        {"op": "send", "topic": "RmqOrders", "messages": [delayed]},
    ])
    assert (c1, c2) == ({"0": 10, "1": 50, "2": 3}, {"1": 5})      # queue 1: all 50 consumed
    broker.stop()
    assert not (path / "abort").exists()
    assert len(list((path / "commitlog").iterdir())) >= 3 and len(list((path / "index").iterdir())) == 1

    with pymq.Broker(path) as s:            # a writer, its sizes read off RocketMQ's files
        assert (s.config.commitlog_file_size, s.config.index_hash_slots) == (SEGMENT, INDEX_SLOTS)
        assert_undamaged(path, s)
        # the delayed message is not there yet, unless a slow stop let the broker deliver it
        ours = {t: [m for m in msgs if m["keys"] != "rdelayed"] for t, msgs in read_all(s, java).items()}
        assert assert_same_messages(java, ours, s.select_one_message_by_offset) == 0
        assert ours["RmqOrders"][0]["properties"]["note"] == NOTE
        compressed = [m for m in ours["RmqOrders"] if m["sysFlag"] & 1]
        assert [m["keys"] for m in compressed] == ["rorder-77 rcust-5"]
        assert [m.queue_offset for m in s.query_message("RmqOrders", "rorder-123")] == [sent_orders[123]["queueOffset"]]
        assert len(s.query_message("RmqOrders", "rcust-4", 64)) == 22
        assert [m.keys for m in s.query_message("RmqEvents", sent_events[7]["msgId"])] == [["revent-7"]]
        assert s.view_message_by_id(sent_orders[9]["offsetMsgId"]).body == base64.b64decode(orders[9]["body"])
        assert [s.query_offset("rmq-group", "RmqOrders", q) for q in range(4)] == [10, 50, 3, -1]
        assert s.query_offset("rmq-group", "RmqEvents", 1) == 5
        assert sent_delayed[0]["status"] == "SEND_OK"
        appended = []
        for i in range(20):
            r = s.put_message(pymq.Message("RmqEvents", b"pymq %d" % i, tags="TagP", keys=f"pevent-{i}",
                                           queue_id=i % 2))
            assert r.status == pymq.PutMessageStatus.PUT_OK and r.queue_offset == 20 + i // 2
            appended.append(r)
        s.commit_offset("rmq-group", "RmqEvents", 0, 25)       # into RocketMQ's group, past its records
        s.commit_offset("pymq-group", "RmqEvents", 1, 28)      # a group RocketMQ never saw
        # pymq delivers the broker's pending delayed message when due (a stop slower than
        # the 10 s would have let the broker deliver it first: it must be there once either way)
        deadline = time.time() + 30
        while not s.query_message("RmqOrders", "rdelayed") and time.time() < deadline:
            time.sleep(0.2)
        final = read_all(s, ["RmqOrders", "RmqEvents"])
        got = [m for m in final["RmqOrders"] if m["keys"] == "rdelayed"]
        assert len(got) == 1 and got[0]["queueId"] == 2 and base64.b64decode(got[0]["body"]) == b"delayed by rocketmq"
        assert [m for m in final["RmqOrders"] if m["keys"] != "rdelayed"] == ours["RmqOrders"]
        assert [m for m in final["RmqEvents"] if m["tags"] != "TagP"] == ours["RmqEvents"]
        assert len(final["RmqEvents"]) == 60
        records = {m["commitLogOffset"]: s.select_one_message_by_offset(m["commitLogOffset"])
                   for topic in final for m in final[topic]}
        max_phy = s.get_max_phy_offset()
    assert not (path / "abort").exists()

    broker = real_broker(path, BROKER_CONF).start()     # RocketMQ takes back what pymq appended
    assert_recovered_cleanly(broker, max_phy)
    pevent = next(m for m in final["RmqEvents"] if m["keys"] == "pevent-13")      # queue 1, offset 26
    again, by_key, by_uniq, admin_text, offsets_rmq, offsets_pymq, consumed = rocketmq_probe.run(broker, [
        {"op": "dump", "topics": ["RmqOrders", "RmqEvents"], "waitMs": 0},
        {"op": "query", "topic": "RmqEvents", "key": "pevent-13"},
        {"op": "uniq", "topic": "RmqEvents", "key": pevent["msgId"]},
        {"op": "mqadmin", "args": ["queryMsgByKey", "-t", "RmqOrders", "-k", "rdelayed"]},
        {"op": "offsets", "group": "rmq-group", "topic": "RmqEvents"},
        {"op": "offsets", "group": "pymq-group", "topic": "RmqEvents"},
        {"op": "consume", "group": "pymq-group", "topic": "RmqEvents", "counts": {"1": 5}},
    ])
    # pymq's records carry their CRC: the 20 appended, and the delayed one if pymq delivered it
    pymq_delivered = CRC_PROP.encode() in records[got[0]["commitLogOffset"]]
    assert assert_same_messages(again, final, records.__getitem__) == 20 + pymq_delivered
    assert (pevent["queueId"], pevent["queueOffset"]) == (1, 26)
    assert [(m["queueId"], m["queueOffset"]) for m in by_key] == [(1, 26)]
    assert [(m["queueId"], m["queueOffset"], m["keys"]) for m in by_uniq] == [(1, 26, "pevent-13")]
    assert mqadmin_rows(admin_text) == [(2, got[0]["queueOffset"])], admin_text
    assert offsets_rmq == {"0": 25, "1": 5} and offsets_pymq["1"] == 28, (offsets_rmq, offsets_pymq)
    assert consumed == {"1": 30}                        # pymq's offset 28, then its last two records
    broker.kill()                                       # nothing more to check: no clean stop needed
