"""``get_message`` and the per-queue queries (STORE_SPEC 9.2, 9.3, 3.3).

Pages are compared with what was put (a Python oracle); every ``GetMessageStatus`` the
store can produce is reached by a scenario; the transfer caps of ``isTheBatchFull``, the
scan limit of one consume-queue file / 16000 bytes, and tag filtering (hash codes plus the
real tag, so the "Aa"/"BB" collision never leaks) are checked exactly.
"""

from __future__ import annotations

import os
import random
import time
import zlib

import pytest

import pymq
from pymq import GetMessageStatus as S

from conftest import small_config
from rocketmq_decoder import decode_record, walk_commitlog


def wait_dispatched(store, timeout=5.0):
    deadline = time.monotonic() + timeout
    while store.dispatch_behind_bytes() != 0:
        assert time.monotonic() < deadline, "dispatch did not catch up"
        time.sleep(0.001)


def ok(r):
    assert r.status is pymq.PutMessageStatus.PUT_OK, (r.status, r.error)
    return r


def page_all(store, topic, qid, max_msgs, tags=None, start=0):
    """Chain pulls from ``start`` until OFFSET_OVERFLOW_ONE; returns (messages, pulls)."""
    out, pulls = [], []
    offset = start
    for _ in range(100_000):
        g = store.get_message("g", topic, qid, offset, max_msgs, tags)
        pulls.append((offset, g))
        if g.status is S.OFFSET_OVERFLOW_ONE:
            assert g.next_begin_offset == offset == g.max_offset
            assert not g.messages
            return out, pulls
        assert g.status in (S.FOUND, S.NO_MATCHED_MESSAGE), g.status
        assert g.next_begin_offset > offset, "no progress"
        out.extend(g.messages)
        offset = g.next_begin_offset
    raise AssertionError("paging never reached the max offset")


# -- paging --------------------------------------------------------------------------------------

ENTRIES = 24


@pytest.fixture(scope="module")
def paged_store(tmp_path_factory):
    """Random topics/queues/tags over several commit-log segments and CQ files."""
    rng = random.Random(11)
    root = tmp_path_factory.mktemp("paging") / "store"
    store = pymq.MessageStore(root, small_config(consume_queue_entries=ENTRIES)).start()
    put = {}
    tags_pool = [None, "TagA", "TagB", "Aa", "BB", "\u4E2D\u6587"]
    for i in range(700):
        topic = rng.choice(["P0", "P1", "P_2"])
        qid = rng.randrange(4)
        if rng.random() < 0.1:
            n = rng.randint(2, 9)
            msgs = [pymq.Message(topic, b"%s/%d/batch%d.%d" % (topic.encode(), qid, i, k) + b"." * rng.randrange(300),
                                 tags=rng.choice(tags_pool), queue_id=qid) for k in range(n)]
            r = ok(store.put_messages(msgs))
            assert r.msg_num == n
            base = len(put.get((topic, qid), []))
            assert r.queue_offset == base
            put.setdefault((topic, qid), []).extend(msgs)
        else:
            m = pymq.Message(topic, b"%s/%d/%d" % (topic.encode(), qid, i) + b"." * rng.randrange(300),
                             tags=rng.choice(tags_pool), queue_id=qid)
            r = ok(store.put_message(m))
            assert r.queue_offset == len(put.get((topic, qid), []))
            put.setdefault((topic, qid), []).append(m)
    wait_dispatched(store)
    assert len(os.listdir(os.path.join(root, "commitlog"))) >= 3
    yield store, put
    store.shutdown()


@pytest.mark.parametrize("max_msgs", [1, 7, 32])
def test_paging_returns_every_message_in_order(paged_store, max_msgs):
    store, put = paged_store
    for (topic, qid), msgs in put.items():
        mx = store.get_max_offset_in_queue(topic, qid)
        assert mx == len(msgs) > ENTRIES
        assert store.get_min_offset_in_queue(topic, qid) == 0
        got, pulls = page_all(store, topic, qid, max_msgs)
        assert [m.body for m in got] == [m.body for m in msgs]
        assert [m.tags for m in got] == [m.tags for m in msgs]
        assert [m.queue_offset for m in got] == list(range(len(msgs)))
        assert all(m.topic == topic and m.queue_id == qid for m in got)
        for offset, g in pulls[:-1]:
            # one pull reads one CQ file only, and at most max_msgs (<= 32) messages
            expect = min(max_msgs, 32, ENTRIES - offset % ENTRIES, mx - offset)
            assert g.status is S.FOUND
            assert len(g.messages) == expect, (offset, max_msgs)
            assert g.next_begin_offset == offset + expect
            assert (g.min_offset, g.max_offset) == (0, mx)
            assert g.buffer_total_size == sum(m.store_size for m in g.messages)


def test_random_start_offsets(paged_store):
    store, put = paged_store
    rng = random.Random(3)
    for _ in range(300):
        (topic, qid), msgs = rng.choice(list(put.items()))
        offset = rng.randrange(len(msgs))
        n = rng.randint(1, 40)
        g = store.get_message("g", topic, qid, offset, n)
        assert g.status is S.FOUND
        expect = min(n, 32, ENTRIES - offset % ENTRIES, len(msgs) - offset)
        assert [m.body for m in g.messages] == [m.body for m in msgs[offset:offset + expect]]
        assert g.next_begin_offset == offset + expect


# -- statuses ------------------------------------------------------------------------------------

def test_no_message_in_queue_for_unknown_queues(store):
    ok(store.put_message(pymq.Message("Known", b"x", queue_id=1)))
    wait_dispatched(store)
    for topic, qid in [("Unknown", 0), ("Known", 0), ("Known", 7)]:
        for offset in (0, 5):
            g = store.get_message("g", topic, qid, offset, 32)
            assert g.status is S.NO_MESSAGE_IN_QUEUE
            assert (g.min_offset, g.max_offset, g.next_begin_offset) == (0, 0, 0)
            assert g.messages == []
        assert store.get_min_offset_in_queue(topic, qid) == 0
        assert store.get_max_offset_in_queue(topic, qid) == 0
        assert store.get_commit_log_offset_in_queue(topic, qid, 0) == 0
        assert store.get_message_store_timestamp(topic, qid, 0) == -1
        assert store.get_offset_in_queue_by_time(topic, qid, int(time.time() * 1000)) == 0
    assert store.get_message("g", "Known", 1, 0).status is S.FOUND


def test_offset_overflow_one_and_badly(store):
    for i in range(5):
        ok(store.put_message(pymq.Message("Ov", b"%d" % i)))
    wait_dispatched(store)
    g = store.get_message("g", "Ov", 0, 5, 32)
    assert (g.status, g.next_begin_offset, g.messages) == (S.OFFSET_OVERFLOW_ONE, 5, [])
    assert (g.min_offset, g.max_offset) == (0, 5)
    for offset in (6, 7, 1000, 1 << 40):
        g = store.get_message("g", "Ov", 0, offset, 32)
        # 4.9.4+: next is the max (4.8.0 answered 0 when min == 0)
        assert (g.status, g.next_begin_offset, g.messages) == (S.OFFSET_OVERFLOW_BADLY, 5, [])
    g = store.get_message("g", "Ov", 0, 4, 32)
    assert g.status is S.FOUND and [m.body for m in g.messages] == [b"4"]
    # a negative offset is below the min
    g = store.get_message("g", "Ov", 0, -1, 32)
    assert (g.status, g.next_begin_offset, g.messages) == (S.OFFSET_TOO_SMALL, 0, [])


def cfg10(**kw):
    return small_config(consume_queue_entries=10, **kw)


def test_offset_too_small_after_the_first_cq_file_is_deleted(tmp_path):
    """RocketMQ's cleaning deletes the oldest CQ files; the store opened afterwards has its
    min at the first remaining entry (``correctMinOffset``), and pulls below it answer
    OFFSET_TOO_SMALL with the min as the next offset."""
    root = tmp_path / "store"
    with pymq.MessageStore(root, cfg10()) as store:
        for i in range(35):
            ok(store.put_message(pymq.Message("Small", b"%d" % i)))
    os.remove(root / "consumequeue" / "Small" / "0" / ("0" * 20))
    with pymq.MessageStore(root, cfg10()) as store:
        assert store.get_min_offset_in_queue("Small", 0) == 10
        assert store.get_max_offset_in_queue("Small", 0) == 35
        for offset in (0, 3, 9):
            g = store.get_message("g", "Small", 0, offset, 32)
            assert (g.status, g.next_begin_offset, g.messages) == (S.OFFSET_TOO_SMALL, 10, [])
            assert (g.min_offset, g.max_offset) == (10, 35)
        assert store.get_commit_log_offset_in_queue("Small", 0, 3) == 0
        assert store.get_message_store_timestamp("Small", 0, 3) == -1
        got, _ = page_all(store, "Small", 0, 32, start=10)
        assert [m.body for m in got] == [b"%d" % i for i in range(10, 35)]
        assert store.get_earliest_message_time("Small", 0) == got[0].store_timestamp


def test_offset_too_small_by_correct_min_offset(store):
    """The min offset inside the first CQ file moves with the commit log's min
    (``correctMinOffset(phyMinOffset)``); here it is called directly with the physical
    offset of entry 4, as the store does after deleting commit-log files."""
    rs = [ok(store.put_message(pymq.Message("Corr", b"%d" % i))) for i in range(12)]
    wait_dispatched(store)
    cq = store.consume_queues.find_consume_queue("Corr", 0)
    cq.correct_min_offset(rs[4].commitlog_offset)
    assert store.get_min_offset_in_queue("Corr", 0) == 4
    g = store.get_message("g", "Corr", 0, 2, 32)
    assert (g.status, g.next_begin_offset, g.min_offset) == (S.OFFSET_TOO_SMALL, 4, 4)
    g = store.get_message("g", "Corr", 0, 4, 32)
    assert g.status is S.FOUND and [m.body for m in g.messages] == [b"%d" % i for i in range(4, 12)]
    # the min is set directly too (what deleting files does inside RocketMQ)
    cq.min_logic_offset = 20 * 7
    g = store.get_message("g", "Corr", 0, 6, 32)
    assert (g.status, g.next_begin_offset) == (S.OFFSET_TOO_SMALL, 7)


def test_offset_found_null(tmp_path):
    """OFFSET_FOUND_NULL needs an offset in [min, max) whose CQ file is gone: in RocketMQ a
    race between a pull and the cleaning of CQ files. Reproduced by deleting the first
    CQ file while closed (the min moves to 10) and then putting the min back to 0 by hand,
    as if the pull had read the min before the deletion. Next is the next file's first
    index (``rollNextFile``)."""
    root = tmp_path / "store"
    with pymq.MessageStore(root, cfg10()) as store:
        for i in range(25):
            ok(store.put_message(pymq.Message("Null", b"%d" % i)))
    os.remove(root / "consumequeue" / "Null" / "0" / ("0" * 20))
    with pymq.MessageStore(root, cfg10()) as store:
        store.consume_queues.find_consume_queue("Null", 0).min_logic_offset = 0
        for offset in (0, 3, 9):
            g = store.get_message("g", "Null", 0, offset, 32)
            assert (g.status, g.next_begin_offset, g.messages) == (S.OFFSET_FOUND_NULL, 10, [])
        g = store.get_message("g", "Null", 0, 10, 32)
        assert g.status is S.FOUND and len(g.messages) == 10


def test_queue_min_moves_past_entries_of_a_deleted_commitlog_segment(tmp_path):
    """The oldest commit-log segment is deleted (cleaning) while the CQ still has entries
    pointing into it. RocketMQ's ``correctMinOffset`` scans only the first CQ file, so a
    queue whose whole first file points into the deleted segment keeps min 0 and its
    pulls find MESSAGE_WAS_REMOVING page after page. pymq walks on to the first entry whose
    record is still stored (docs/retention.md): a pull below it is OFFSET_TOO_SMALL with
    the next offset at the new min, as a consumer needs to move on."""
    root = tmp_path / "store"
    body = b"r" * 1000
    with pymq.MessageStore(root, cfg10()) as store:
        rs = [ok(store.put_message(pymq.Message("Rm", body + b"%d" % i))) for i in range(150)]
    first_kept = next(i for i, r in enumerate(rs) if r.commitlog_offset >= 64 * 1024)
    assert first_kept > 20
    os.remove(root / "commitlog" / ("0" * 20))
    with pymq.MessageStore(root, cfg10()) as store:
        assert store.get_min_phy_offset() == 64 * 1024
        assert store.get_min_offset_in_queue("Rm", 0) == first_kept
        g = store.get_message("g", "Rm", 0, 0, 32)
        assert (g.status, g.next_begin_offset, g.messages) == (S.OFFSET_TOO_SMALL, first_kept, [])
        offset, got = first_kept, []
        while offset < 150:
            g = store.get_message("g", "Rm", 0, offset, 32)
            assert g.status is S.FOUND
            got.extend(g.messages)
            offset = g.next_begin_offset
        assert [m.body for m in got] == [body + b"%d" % i for i in range(first_kept, 150)]


def test_no_matched_message_advances_past_the_scanned_entries(tmp_path):
    with pymq.MessageStore(tmp_path / "s", small_config(consume_queue_entries=40)) as store:
        for i in range(100):
            ok(store.put_message(pymq.Message("NoMatch", b"%d" % i, tags="TagB" if i == 45 else "Aa")))
        wait_dispatched(store)
        for offset, nxt in [(0, 40), (5, 40), (39, 40), (80, 100), (99, 100)]:
            for expr in ("TagZ", "BB", "BB || TagZ"):       # "BB" collides with "Aa" (2112)
                g = store.get_message("g", "NoMatch", 0, offset, 32, tags=expr)
                assert (g.status, g.next_begin_offset, g.messages) == (S.NO_MATCHED_MESSAGE, nxt, []), (offset, expr)
                assert (g.min_offset, g.max_offset) == (0, 100)
        g = store.get_message("g", "NoMatch", 0, 40, 1, tags="TagB")
        assert g.status is S.FOUND and [m.body for m in g.messages] == [b"45"]
        assert g.next_begin_offset == 46
        g = store.get_message("g", "NoMatch", 0, 46, 1, tags="TagB")
        assert (g.status, g.next_begin_offset) == (S.NO_MATCHED_MESSAGE, 80)


def test_scan_limit_is_16000_bytes_of_cq_or_max_msgs_units(tmp_path):
    """One pull scans at most max(16000, max_msgs*20) bytes of CQ (800 units)."""
    with pymq.MessageStore(tmp_path / "s", small_config(consume_queue_entries=1000,
                                                        commitlog_file_size=1 << 20)) as store:
        store.put_messages([pymq.Message("Scan", b"s", tags="Aa") for _ in range(64)])
        for _ in range(900 // 64):
            store.put_messages([pymq.Message("Scan", b"s", tags="Aa") for _ in range(64)])
        wait_dispatched(store)
        mx = store.get_max_offset_in_queue("Scan", 0)
        assert mx == 64 * (1 + 900 // 64) > 900
        g = store.get_message("g", "Scan", 0, 0, 32, tags="TagZ")
        assert (g.status, g.next_begin_offset) == (S.NO_MATCHED_MESSAGE, 800)
        g = store.get_message("g", "Scan", 0, 0, 1000, tags="TagZ")
        assert (g.status, g.next_begin_offset) == (S.NO_MATCHED_MESSAGE, 1000 if mx >= 1000 else mx)
        g = store.get_message("g", "Scan", 0, 100, 850, tags="TagZ")
        assert (g.status, g.next_begin_offset) == (S.NO_MATCHED_MESSAGE, min(100 + 850, mx))


def test_get_message_after_shutdown_raises(tmp_path):
    store = pymq.MessageStore(tmp_path / "s", small_config()).start()
    ok(store.put_message(pymq.Message("T", b"x")))
    store.shutdown()
    with pytest.raises(pymq.StoreStateError):
        store.get_message("g", "T", 0, 0, 32)


# -- transfer caps (isTheBatchFull, testPullSize) ----------------------------------------------------

def test_pull_size(store):
    """DefaultMessageStoreTest.testPullSize: 32 messages; 32, 20 and 10 give exactly that."""
    for i in range(32):
        ok(store.put_message(pymq.Message("PullSize", b"body%d" % i, tags="TAG1")))
    wait_dispatched(store)
    for n in (32, 20, 10, 1):
        g = store.get_message("g", "PullSize", 0, 0, n)
        assert g.status is S.FOUND
        assert len(g.messages) == g.message_count == n
        assert [m.body for m in g.messages] == [b"body%d" % i for i in range(n)]
        assert g.next_begin_offset == n


def test_in_memory_count_cap_is_32(store):
    for i in range(60):
        ok(store.put_message(pymq.Message("Cap", b"%d" % i)))
    wait_dispatched(store)
    for n in (33, 64, 100, 10_000):
        g = store.get_message("g", "Cap", 0, 0, n)
        assert len(g.messages) == 32 and g.next_begin_offset == 32
    g = store.get_message("g", "Cap", 0, 32, 100)
    assert len(g.messages) == 28 and g.next_begin_offset == 60


def test_in_memory_byte_cap_is_256_kib(tmp_path):
    cfg = small_config(commitlog_file_size=4 << 20, consume_queue_entries=64)
    with pymq.MessageStore(tmp_path / "s", cfg) as store:
        rs = [ok(store.put_message(pymq.Message("Bytes", bytes([i]) * 10_000))) for i in range(40)]
        wait_dispatched(store)
        size = rs[0].wrote_bytes
        assert all(r.wrote_bytes == size for r in rs)
        g = store.get_message("g", "Bytes", 0, 0, 32)
        assert len(g.messages) == 262_144 // size < 32
        assert g.buffer_total_size == len(g.messages) * size <= 262_144
        assert g.next_begin_offset == len(g.messages)


def test_transfer_caps_follow_the_config(tmp_path):
    cfg = small_config(max_transfer_count_on_message_in_memory=5, max_transfer_bytes_on_message_in_memory=1000)
    with pymq.MessageStore(tmp_path / "s", cfg) as store:
        for i in range(20):
            ok(store.put_message(pymq.Message("Cfg", b"%d" % i)))
        big = [ok(store.put_message(pymq.Message("Big", b"B" * 3000))) for _ in range(3)]
        wait_dispatched(store)
        g = store.get_message("g", "Cfg", 0, 0, 32)
        assert len(g.messages) == 5 and g.next_begin_offset == 5
        g = store.get_message("g", "Cfg", 0, 0, 3)
        assert len(g.messages) == 3
        # the first message always comes, even when larger than the byte cap
        g = store.get_message("g", "Big", 0, 0, 32)
        assert len(g.messages) == 1 and g.buffer_total_size == big[0].wrote_bytes > 1000
        assert g.next_begin_offset == 1


# -- tag filtering --------------------------------------------------------------------------------

TAGS_POOL = ["Aa", "BB", "AaAa", "BBBB", "AaBB", "BBAa", "TagX", "TagY", "\u4E2D\u6587", None]
EXPRESSIONS = ["Aa", "BB", "BB || TagX", "*", None, "", " Aa ||  BB ", "AaAa", "BBAa || TagY",
               "\u4E2D\u6587 || AaBB", "TagZ", "Aa||Aa", "TagX || TagY || BBBB"]


def oracle_match(expr, tag) -> bool:
    if expr is None or expr.strip() in ("", "*"):
        return True
    wanted = {p.strip() for p in expr.split("||") if p.strip()}
    return tag in wanted


def test_java_collisions_in_the_pool():
    from test_consume_queue_format import java_hash
    assert java_hash("Aa") == java_hash("BB") == 2112
    assert java_hash("AaAa") == java_hash("BBBB") == java_hash("AaBB") == java_hash("BBAa")


@pytest.mark.parametrize("max_msgs", [1, 7, 32])
def test_tag_filter_never_returns_another_tag(tmp_path, max_msgs):
    rng = random.Random(max_msgs)
    with pymq.MessageStore(tmp_path / "s", small_config(consume_queue_entries=30)) as store:
        put = []
        for i in range(400):
            tag = rng.choice(TAGS_POOL)
            m = pymq.Message("Filt", b"%d" % i, tags=tag, queue_id=i % 2)
            ok(store.put_message(m))
            put.append(m)
        wait_dispatched(store)
        for qid in (0, 1):
            mine = [m for m in put if m.queue_id == qid]
            for expr in EXPRESSIONS:
                got, pulls = page_all(store, "Filt", qid, max_msgs, tags=expr)
                want = [m for m in mine if oracle_match(expr, m.tags)]
                assert [m.body for m in got] == [m.body for m in want], expr
                assert all(oracle_match(expr, m.tags) for m in got)
                mx = len(mine)
                for offset, g in pulls[:-1]:
                    file_end = min(offset - offset % 30 + 30, mx)
                    if not g.messages:
                        assert g.status is S.NO_MATCHED_MESSAGE
                        assert g.next_begin_offset == file_end
                    elif len(g.messages) == max_msgs:
                        # the batch filled: the next pull starts right after the last one
                        assert g.status is S.FOUND
                        assert g.next_begin_offset == g.messages[-1].queue_offset + 1
                    else:
                        # not full: the scan ran to the end of the CQ file
                        assert g.status is S.FOUND and len(g.messages) < max_msgs
                        assert g.next_begin_offset == file_end


# -- returned fields and the per-queue queries ----------------------------------------------------

def test_message_ext_fields(tmp_path):
    root = tmp_path / "s"
    with pymq.MessageStore(root, small_config()) as store:
        plain = ok(store.put_message(pymq.Message("Fields", b"first")))
        m_in = pymq.Message("Fields", b"\x00body\xff" * 3, tags="TagA", keys=["order-1", "k2"],
                            properties={"a": "b", "\u4E2D": "\u6587"}, flag=7,
                            born_timestamp=1_700_000_000_000, born_host="10.1.2.3:4567")
        r = ok(store.put_message(m_in))
        ok(store.put_message(pymq.Message("Fields", b"third", properties={"UNIQ_KEY": "MYUNIQ"})))
        wait_dispatched(store)
        g = store.get_message("g", "Fields", 0, 0, 32)
        assert g.status is S.FOUND and len(g.messages) == 3
        first, m, third = g.messages
        assert m.topic == "Fields"
        assert m.body == b"\x00body\xff" * 3
        assert m.tags == "TagA"
        assert m.keys == ["order-1", "k2"]
        assert m.properties["TAGS"] == "TagA"
        assert m.properties["KEYS"] == "order-1 k2"
        assert m.properties["a"] == "b" and m.properties["\u4E2D"] == "\u6587"
        assert m.properties["UNIQ_KEY"] == r.uniq_key == m.uniq_key
        assert set(m.properties) == {"TAGS", "KEYS", "a", "\u4E2D", "UNIQ_KEY"}
        assert m.queue_id == 0 and m.queue_offset == 1 and m.flag == 7
        assert m.commitlog_offset == r.commitlog_offset == plain.commitlog_offset + plain.wrote_bytes
        assert m.store_size == r.wrote_bytes
        assert m.store_timestamp == r.store_timestamp
        assert m.born_timestamp == 1_700_000_000_000
        assert m.born_host == "10.1.2.3:4567"
        assert m.store_host == "127.0.0.1:10911"
        assert m.msg_id == "7F00000100002A9F%016X" % r.commitlog_offset == r.msg_id
        assert m.body_crc == zlib.crc32(m.body) & 0x7FFFFFFF
        assert m.sys_flag == 0 and m.reconsume_times == 0 and m.prepared_transaction_offset == 0
        assert first.tags is None and first.keys in (None, [])
        assert set(first.properties) == {"UNIQ_KEY"} and first.uniq_key == plain.uniq_key
        assert third.uniq_key == "MYUNIQ"
        assert len({first.uniq_key, m.uniq_key, third.uniq_key}) == 3
        # the same fields as the independent decoder reads in the log
        with open(root / "commitlog" / ("0" * 20), "rb") as f:
            data = f.read()
        for got in g.messages:
            rec = decode_record(data, got.commitlog_offset)
            assert rec["body"] == got.body and rec["topic"] == got.topic
            assert rec["properties"] == got.properties
            assert rec["queue_offset"] == got.queue_offset and rec["physical_offset"] == got.commitlog_offset
            assert rec["total_size"] == got.store_size and rec["store_timestamp"] == got.store_timestamp
            assert rec["born_host"] == got.born_host and rec["flag"] == got.flag
            assert rec["body_crc"] == got.body_crc


def test_message_ext_fields_ipv6_store_host(tmp_path):
    with pymq.MessageStore(tmp_path / "s", small_config(store_host="[::1]:10911")) as store:
        r = ok(store.put_message(pymq.Message("V6", b"six", tags="T", born_host="[2001:db8::7]:99")))
        wait_dispatched(store)
        m = store.get_message("g", "V6", 0, 0).messages[0]
        assert m.store_host == "[::1]:10911" and m.born_host == "[2001:db8::7]:99"
        assert m.sys_flag & 0x30 == 0x30
        assert m.msg_id == "0" * 30 + "01" + "00002A9F" + "%016X" % r.commitlog_offset
        assert len(m.msg_id) == 56 and m.msg_id == r.msg_id


def test_per_queue_queries(tmp_path):
    root = tmp_path / "s"
    with pymq.MessageStore(root, small_config(consume_queue_entries=16)) as store:
        rs = {}
        for i in range(90):
            q = i % 3
            rs.setdefault(q, []).append(ok(store.put_message(pymq.Message("Q", b"%d" % i, queue_id=q))))
            if i % 10 == 0:
                time.sleep(0.002)
        wait_dispatched(store)
        for q, results in rs.items():
            assert store.get_min_offset_in_queue("Q", q) == 0
            assert store.get_max_offset_in_queue("Q", q) == 30
            for off, r in enumerate(results):
                assert store.get_commit_log_offset_in_queue("Q", q, off) == r.commitlog_offset
                assert store.get_message_store_timestamp("Q", q, off) == r.store_timestamp
            for bad in (-1, -100, 30, 31, 1000):
                assert store.get_message_store_timestamp("Q", q, bad) == -1
            for bad in (30, 31, 1000):
                assert store.get_commit_log_offset_in_queue("Q", q, bad) == 0
            assert store.get_earliest_message_time("Q", q) == results[0].store_timestamp
        assert store.get_message_store_timestamp("Q", 9, 0) == -1
        assert store.get_message_store_timestamp("Nope", 0, 0) == -1
        assert store.get_earliest_message_time("Nope", 0) == -1
        assert store.get_min_offset_in_queue("Nope", 3) == store.get_max_offset_in_queue("Nope", 3) == 0
        assert store.get_queue_offset_table()[("Q", 1)] == 30
    # the CQ entries agree with the decoder
    recs = [r for r in walk_commitlog(root / "commitlog") if not r["blank"]]
    assert [r["offset"] for r in recs if r["queue_id"] == 2] == [r.commitlog_offset for r in rs[2]]


def test_tag_whose_hash_is_zero_or_min_int(store):
    """"\\x00" hashes to 0 like an untagged message's tagsCode, and "polygenelubricants" to
    Integer.MIN_VALUE: the CQ codes collide, the real tag decides."""
    tags = [None, "\x00", "\x00\x00", "polygenelubricants", None, "\x00", "x"]
    for i, t in enumerate(tags):
        ok(store.put_message(pymq.Message("Zero", b"%d" % i, tags=t)))
    wait_dispatched(store)
    for expr in ["\x00", "\x00\x00", "polygenelubricants", "\x00 || polygenelubricants", "x"]:
        g = store.get_message("g", "Zero", 0, 0, 32, tags=expr)
        want = [b"%d" % i for i, t in enumerate(tags) if oracle_match(expr, t)]
        assert [m.body for m in g.messages] == want, repr(expr)
        assert g.status is S.FOUND and g.next_begin_offset == len(tags)
