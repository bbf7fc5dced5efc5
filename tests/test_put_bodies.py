"""``put_bodies``: raw bodies in, the records ``put_messages`` writes out (issue 27).

The oracle is ``put_messages`` itself: the same messages go through both paths into the
same queue, and the records are decoded with the independent decoder
(``rocketmq_decoder``) and compared field by field. What may differ is what belongs to
each put: born and store times, queue and commit-log offsets, the generated UNIQ_KEY
(whose counter must still follow the same rule) and the record CRC (which covers them);
everything else, properties byte for byte, must be the same, and so must the outcome of a
bad batch (the same status, or the same exception type, and nothing written).
"""

from __future__ import annotations

import itertools
import re

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import pymq
from pymq import PutMessageStatus as P

from conftest import small_config
from rocketmq_decoder import decode_record

UNIQ = re.compile(r"UNIQ_KEY\x01([0-9A-F]{32,56})")
_topics = itertools.count()


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory):
    s = pymq.MessageStore(tmp_path_factory.mktemp("pb") / "store", small_config(commitlog_file_size=256 * 1024))
    s.start()
    yield s
    s.shutdown()


def records(store, result) -> list[dict]:
    """The records ``result`` wrote, decoded from the log."""
    return [decode_record(store.select_one_message_by_offset(o)) for o in result.commitlog_offsets]


def outcome(fn):
    """``("status", status)`` or ``("raises", exception type)`` of ``fn()``; and the result."""
    try:
        r = fn()
    except (TypeError, ValueError, OverflowError) as e:
        return ("raises", type(e)), None
    return ("status", r.status), r


def as_messages(topic, bodies, keys, tags, properties, queue_id=0):
    out = []
    for i, body in enumerate(bodies):
        props = properties if properties is None or isinstance(properties, dict) else properties[i]
        tag = tags if tags is None or isinstance(tags, str) else tags[i]
        out.append(pymq.Message(topic, body, keys=None if keys is None else keys[i], tags=tag,
                                properties=props, queue_id=queue_id))
    return out


def without_put_values(rec: dict) -> dict:
    """A decoded record without what belongs to its put (times, offsets, generated id, CRC)."""
    out = dict(rec)
    for k in ("position", "born_timestamp", "store_timestamp", "queue_offset", "physical_offset", "record_crc"):
        out.pop(k)
    raw = out["raw_properties"]
    out["raw_properties"] = UNIQ.sub("UNIQ_KEY\x01<id>", raw[:-20] if rec["record_crc"] else raw)
    props = dict(out["properties"])
    if "UNIQ_KEY" in props and UNIQ.search(raw):
        props["UNIQ_KEY"] = "<id>"
    out["properties"] = props
    return out


def assert_same_records(store, by_messages, by_bodies):
    a, b = records(store, by_messages), records(store, by_bodies)
    assert len(a) == len(b) == by_bodies.msg_num
    for i, (x, y) in enumerate(zip(a, b)):
        assert without_put_values(y) == without_put_values(x), i
        assert y["queue_offset"] == by_bodies.queue_offset + i
        assert y["physical_offset"] == by_bodies.commitlog_offsets[i] == y["position"] + y["physical_offset"]
        assert (x["record_crc"] is None) == (y["record_crc"] is None)
        if y["record_crc"] is not None:
            assert y["record_crc"][0] == y["record_crc"][1]          # stored == computed
        assert y["born_timestamp"] <= y["store_timestamp"] == by_bodies.store_timestamp
    ids = [UNIQ.search(r["raw_properties"]) for r in b]
    if all(ids):
        assert by_bodies.uniq_keys == [m.group(1) for m in ids]
        # the same rule as put_messages: one prefix and time, the counter one up per message
        counters = [int(m.group(1)[-4:], 16) for m in ids]
        assert all((c2 - c1) % 65536 == 1 for c1, c2 in zip(counters, counters[1:]))
        assert len({m.group(1)[:-4] for m in ids}) == 1
    else:
        assert by_bodies.uniq_keys is None
    assert by_bodies.msg_ids == [pymq._core.record.create_message_id(store.config.store_host, o)
                                 for o in by_bodies.commitlog_offsets]


# -- the property: byte for byte what put_messages writes ---------------------------------------

_word = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\x01\x02 "),
                min_size=1, max_size=8)
_value = st.one_of(_word, st.just(""), st.just("a\x01b"))          # the last two are refused
_key = st.one_of(st.none(), _word, st.lists(_word, min_size=0, max_size=3),
                 st.lists(_word, max_size=3).map(" ".join), st.just(["a", ""]), st.just([""]))
_tag = st.one_of(st.none(), _word, st.just(""))
_prop_name = st.one_of(_word, st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "__CRC32#", "DELAY"]))
_props = st.dictionaries(_prop_name, st.one_of(st.none(), _value, st.sampled_from(["0", "3"])), max_size=4)


@st.composite
def batches(draw):
    n = draw(st.integers(1, 12))
    bodies = draw(st.lists(st.binary(max_size=300), min_size=n, max_size=n))
    keys = draw(st.one_of(st.none(), st.lists(_key, min_size=n, max_size=n)))
    tags = draw(st.one_of(st.none(), _word, st.lists(_tag, min_size=n, max_size=n)))
    properties = draw(st.one_of(st.none(), _props, st.lists(st.one_of(st.none(), _props), min_size=n, max_size=n)))
    queue_id = draw(st.integers(0, 3))
    return bodies, keys, tags, properties, queue_id


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                     HealthCheck.too_slow])
@given(batch=batches())
def test_put_bodies_writes_what_put_messages_writes(shared_store, batch):
    bodies, keys, tags, properties, queue_id = batch
    store = shared_store
    topic = f"PB{next(_topics)}"
    before = store.get_max_phy_offset()
    a, ra = outcome(lambda: store.put_messages(as_messages(topic, bodies, keys, tags, properties, queue_id)))
    mid = store.get_max_phy_offset()
    b, rb = outcome(lambda: store.put_bodies(topic, bodies, queue_id=queue_id, keys=keys, tags=tags,
                                             properties=properties))
    assert b == a
    event(f"outcome {a[1].__name__ if a[0] == 'raises' else a[1].name}")
    if a != ("status", P.PUT_OK):
        assert store.get_max_phy_offset() == mid == before          # nothing written by either
        return
    assert rb.queue_offset == ra.queue_offset + len(bodies)
    assert (rb.msg_num, rb.wrote_bytes) == (ra.msg_num, ra.wrote_bytes)
    assert_same_records(store, ra, rb)


def test_without_record_crc_too(tmp_path):
    """``enabled_append_prop_crc=False``: no ``__CRC32#`` entry, in both paths alike."""
    with pymq.MessageStore(tmp_path / "s", small_config(enabled_append_prop_crc=False)) as store:
        bodies, keys = [b"x" * 10, b"", b"yz"], ["k1", "k2 k3", None]
        ra = store.put_messages(as_messages("NoCrc", bodies, keys, "T", {"a": "b"}))
        rb = store.put_bodies("NoCrc", bodies, keys=keys, tags="T", properties={"a": "b"})
        assert_same_records(store, ra, rb)
        assert all(r["record_crc"] is None for r in records(store, rb))


def test_ipv6_hosts(tmp_path):
    cfg = small_config(store_host="[::1]:10911")
    with pymq.MessageStore(tmp_path / "s", cfg) as store:
        ra = store.put_messages(as_messages("V6", [b"a", b"bc"], None, None, None))
        rb = store.put_bodies("V6", [b"a", b"bc"])
        assert_same_records(store, ra, rb)
        assert records(store, rb)[0]["store_host"] == "[::1]:10911"


# -- what a put_bodies is, seen from the store ---------------------------------------------------

def test_bodies_are_read_back_indexed_and_dispatched(tmp_path):
    with pymq.MessageStore(tmp_path / "s", small_config()) as store:
        r = store.put_bodies("Read", [b"b%d" % i for i in range(50)], queue_id=2,
                             keys=[f"order-{i}" for i in range(50)], tags="TagA")
        assert r.is_ok() and (r.queue_offset, r.msg_num) == (0, 50)
        assert store.wait_message("Read", 2, 49, 5.0)
        got = store.get_message("g", "Read", 2, 0, 64, tags="TagA").messages
        assert [m.body for m in got[:32]] == [b"b%d" % i for i in range(32)]
        assert [m.keys for m in got[:3]] == [["order-0"], ["order-1"], ["order-2"]]
        deadline = __import__("time").monotonic() + 5
        while not store.query_message("Read", "order-7") and __import__("time").monotonic() < deadline:
            __import__("time").sleep(0.01)
        assert [m.body for m in store.query_message("Read", "order-7")] == [b"b7"]
        assert [m.body for m in store.query_message("Read", r.uniq_keys[9])] == [b"b9"]
        assert store.view_message_by_id(r.msg_ids[3]).body == b"b3"


def test_offsets_are_computed_with_a_stride_or_kept(tmp_path):
    with pymq.MessageStore(tmp_path / "s", small_config()) as store:
        same = store.put_bodies("Off", [b"abc"] * 5)
        varied = store.put_bodies("Off", [b"a", b"abcdef", b""])
        for r in (same, varied):
            offsets = r.commitlog_offsets
            assert offsets[0] == r.commitlog_offset
            assert [m.commitlog_offset for m in (store.look_message_by_offset(o) for o in offsets)] == offsets
            assert sum(store.look_message_by_offset(o).store_size for o in offsets) == r.wrote_bytes
        assert same.msg_id == ",".join(same.msg_ids)


def test_a_queue_id_none_is_queue_0_and_offsets_follow_put_messages(tmp_path):
    with pymq.MessageStore(tmp_path / "s", small_config()) as store:
        store.put_messages([pymq.Message("Q", b"m")] * 3)
        r = store.put_bodies("Q", [b"b"] * 2)
        assert r.queue_offset == 3 and store.get_queue_offset_table()[("Q", 0)] == 5


def test_uniq_key_from_properties_is_kept(tmp_path):
    with pymq.MessageStore(tmp_path / "s", small_config()) as store:
        r = store.put_bodies("U", [b"a", b"b"], properties=[{"UNIQ_KEY": "mine"}, None])
        assert r.uniq_keys is None
        got = [store.look_message_by_offset(o).properties.get("UNIQ_KEY") for o in r.commitlog_offsets]
        assert got[0] == "mine" and re.fullmatch("[0-9A-F]{32}", got[1])


@pytest.mark.parametrize("kind", ["list", "tuple", "generator", "bytearray", "memoryview", "numpy-2d",
                                  "numpy-S", "numpy-object", "arrow-binary", "arrow-large", "arrow-string",
                                  "arrow-fixed", "arrow-chunked", "arrow-sliced", "arrow-view"])
def test_body_sources(tmp_path, kind):
    want = [b"alpha", b"", b"\x00gamma\x00", b"d" * 300]
    if kind in ("numpy-2d", "arrow-fixed"):
        want = [b"ab\x00c", b"\x00\x00\x00\x00", b"wxyz"]
    bodies = {
        "list": lambda: list(want),
        "tuple": lambda: tuple(want),
        "generator": lambda: (b for b in want),
        "bytearray": lambda: [bytearray(b) for b in want],
        "memoryview": lambda: [memoryview(b) for b in want],
        "numpy-2d": lambda: np.frombuffer(b"".join(want), dtype=np.uint8).reshape(len(want), 4),
        "numpy-S": lambda: np.array(want, dtype="S300"),
        "numpy-object": lambda: np.array(want, dtype=object),
        "arrow-binary": lambda: pa.array(want, pa.binary()),
        "arrow-large": lambda: pa.array(want, pa.large_binary()),
        "arrow-string": lambda: pa.array([b.decode("latin-1") for b in want], pa.string()),
        "arrow-fixed": lambda: pa.array(want, pa.binary(4)),
        "arrow-chunked": lambda: pa.chunked_array([pa.array(want[:1]), pa.array([], pa.binary()),
                                                   pa.array(want[1:], pa.binary())]),
        "arrow-sliced": lambda: pa.array([b"skip"] + want + [b"skip"], pa.binary()).slice(1, len(want)),
        "arrow-view": lambda: pa.array(want, pa.binary_view()),
    }[kind]()
    if kind == "numpy-S":
        want = [b.rstrip(b"\x00") for b in want]            # NumPy's own item semantics
    if kind == "arrow-string":
        want = [b.decode("latin-1").encode("utf-8") for b in want]
    with pymq.MessageStore(tmp_path / "s", small_config()) as store:
        r = store.put_bodies("Src", bodies)
        assert r.is_ok(), r.error
        assert [store.look_message_by_offset(o).body for o in r.commitlog_offsets] == want


def test_sync_flush_returns_once_on_disk(tmp_path):
    with pymq.MessageStore(tmp_path / "s", small_config(flush_disk_type="SYNC_FLUSH")) as store:
        r = store.put_bodies("Sync", [b"x" * 100] * 20)
        assert r.status is P.PUT_OK
        assert store.commit_log.mapped_file_queue.flushed_where >= r.commitlog_offset + r.wrote_bytes
        f = store.async_put_bodies("Sync", [b"y" * 100] * 5)
        r = f.result(timeout=5)
        assert r.status is P.PUT_OK
        assert store.commit_log.mapped_file_queue.flushed_where >= r.commitlog_offset + r.wrote_bytes


def test_batches_roll_segments_whole(tmp_path):
    """A batch that does not fit the rest of a segment starts the next one, whole."""
    with pymq.MessageStore(tmp_path / "s", small_config()) as store:
        results = [store.put_bodies("Big", [bytes([i]) * 1000] * 40) for i in range(5)]
        assert all(r.is_ok() for r in results)
        for r in results:
            seg = r.commitlog_offset // (64 * 1024)
            assert (r.commitlog_offset + r.wrote_bytes - 1) // (64 * 1024) == seg
        assert store.wait_message("Big", 0, 199, 5.0)
        assert store.read_batch("Big", 0, 199, 1).bodies[0] == bytes([4]) * 1000


def test_a_batch_of_megabytes(tmp_path):
    """From 1 MiB on the copy runs with the GIL released; the records are whole."""
    cfg = small_config(commitlog_file_size=8 << 20, max_message_size=4 << 20)
    with pymq.MessageStore(tmp_path / "s", cfg) as store:
        bodies = [bytes([i % 251]) * 1000 for i in range(1500)]
        r = store.put_bodies("Huge", bodies, keys=[f"k{i}" for i in range(1500)])
        assert r.is_ok() and r.wrote_bytes > 1 << 20
        assert [store.look_message_by_offset(o).body for o in r.commitlog_offsets] == bodies
        assert store.look_message_by_offset(r.commitlog_offsets[-1]).keys == ["k1499"]


# -- bad input: clear errors, nothing stored --------------------------------------------------

BAD_STATUS = [
    ("empty", dict(bodies=[]), P.MESSAGE_ILLEGAL),
    ("bad topic", dict(topic="a/b"), P.MESSAGE_ILLEGAL),
    ("store topic", dict(topic="SCHEDULE_TOPIC_XXXX"), P.MESSAGE_ILLEGAL),
    ("negative queue", dict(queue_id=-1), P.MESSAGE_ILLEGAL),
    ("delay", dict(properties={"DELAY": "2"}), P.MESSAGE_ILLEGAL),
    ("delay one", dict(properties=[None, {"DELAY": "1"}]), P.MESSAGE_ILLEGAL),
    ("oversized body", dict(bodies=[b"x", b"y" * 5000]), P.MESSAGE_ILLEGAL),
    ("oversized batch", dict(bodies=[b"y" * 3000] * 3), P.MESSAGE_ILLEGAL),
    ("oversized properties", dict(properties={"p": "v" * 40000}), P.PROPERTIES_SIZE_EXCEEDED),
]

BAD_RAISES = [
    ("topic type", dict(topic=b"T"), TypeError),
    ("queue bool", dict(queue_id=True), TypeError),
    ("queue float", dict(queue_id=1.0), TypeError),
    ("queue str", dict(queue_id="1"), TypeError),
    ("bodies bytes", dict(bodies=b"abc"), TypeError),
    ("bodies str", dict(bodies="abc"), TypeError),
    ("body str", dict(bodies=[b"a", "b"]), TypeError),
    ("body None", dict(bodies=[b"a", None]), TypeError),
    ("body int", dict(bodies=[1]), TypeError),
    ("body strided", dict(bodies=[memoryview(b"abcd")[::2]]), TypeError),
    ("bodies number", dict(bodies=5), TypeError),
    ("bodies 1-D bytes array", dict(bodies=np.zeros(4, dtype=np.uint8)), TypeError),
    ("bodies 3-D array", dict(bodies=np.zeros((2, 2, 2), dtype=np.uint8)), TypeError),
    ("bodies int array", dict(bodies=pa.array([1, 2])), TypeError),
    ("body null", dict(bodies=pa.array([b"a", None])), ValueError),
    ("keys length", dict(keys=["k"]), ValueError),
    ("keys str", dict(keys="k1 k2"), TypeError),
    ("key type", dict(keys=[1, None]), TypeError),
    ("key empty in list", dict(keys=[[""], None]), ValueError),
    ("key separator", dict(keys=["a\x01b", None]), ValueError),
    ("tags length", dict(tags=["a", "b", "c"]), ValueError),
    ("tag type", dict(tags=[b"a", None]), TypeError),
    ("tag separator", dict(tags="a\x02"), ValueError),
    ("properties type", dict(properties=[{"a": "b"}, "c"]), TypeError),
    ("properties str", dict(properties="a=b"), TypeError),
    ("property value type", dict(properties={"a": 1}), TypeError),
    ("property separator", dict(properties={"a": "b\x01"}), ValueError),
    ("property empty", dict(properties={"a": ""}), ValueError),
]


def _call(store, **kw):
    args = dict(topic="Bad", bodies=[b"a", b"b"])
    args.update(kw)
    topic, bodies = args.pop("topic"), args.pop("bodies")
    return store.put_bodies(topic, bodies, **args)


@pytest.fixture(scope="module")
def bad_store(tmp_path_factory):
    s = pymq.MessageStore(tmp_path_factory.mktemp("bad") / "store", small_config(max_message_size=4096))
    s.start()
    yield s
    s.shutdown()


@pytest.mark.parametrize("name,kw,status", BAD_STATUS, ids=[c[0] for c in BAD_STATUS])
def test_bad_batches_get_a_status_and_write_nothing(bad_store, name, kw, status):
    before = bad_store.get_max_phy_offset()
    r = _call(bad_store, **kw)
    assert r.status is status and r.error and not r.is_ok()
    assert bad_store.get_max_phy_offset() == before


@pytest.mark.parametrize("name,kw,exc", BAD_RAISES, ids=[c[0] for c in BAD_RAISES])
def test_bad_arguments_raise_and_write_nothing(bad_store, name, kw, exc):
    before = bad_store.get_max_phy_offset()
    with pytest.raises(exc):
        _call(bad_store, **kw)
    assert bad_store.get_max_phy_offset() == before


def test_an_unwriteable_store_refuses(tmp_path):
    with pymq.MessageStore(tmp_path / "s", small_config()) as store:
        store.commit_log.appender.set_writeable(False, "disk full (test)")
        r = store.put_bodies("W", [b"a"])
        assert (r.status, r.error) == (P.SERVICE_NOT_AVAILABLE, "disk full (test)")
        store.commit_log.appender.set_writeable(True)
    with pytest.raises(pymq.StoreStateError):
        store.put_bodies("W", [b"a"])


def _arrow_with_offsets(offsets, typ, data=b"abcdefgh"):
    """An Arrow array whose first and last offsets are sound, which is all pyarrow checks
    when it builds one (``validate(full=True)`` would refuse the middle ones)."""
    width = np.int32 if typ == pa.binary() else np.int64
    arr = pa.Array.from_buffers(typ, len(offsets) - 1,
                                [None, pa.py_buffer(np.array(offsets, width).tobytes()), pa.py_buffer(data)])
    with pytest.raises(pa.ArrowInvalid):
        arr.validate(full=True)
    return arr


@pytest.mark.parametrize("typ", [pa.binary(), pa.large_binary()], ids=["binary", "large_binary"])
@pytest.mark.parametrize("offsets", [[0, 1 << 30, 8], [0, 3000, 8], [0, -100000, 8], [0, 6, 2, 8]],
                         ids=["far", "past", "before", "backwards"])
def test_arrow_offsets_outside_the_data_raise_and_write_nothing(bad_store, typ, offsets):
    # every body used to be read from wherever its offsets pointed: past the 8-byte data
    # buffer (a crash, or bytes of the process in the log) or with a negative length
    before = bad_store.get_max_phy_offset()
    with pytest.raises(ValueError, match="outside the data buffer"):
        bad_store.put_bodies("Bad", _arrow_with_offsets(offsets, typ))
    assert bad_store.get_max_phy_offset() == before
