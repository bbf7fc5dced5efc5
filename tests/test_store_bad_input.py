"""Bad input is refused (an exception or a non-OK status) and never corrupts the store:
after every refusal the earlier messages read back intact, through the store and through
the independent decoder, and the store still takes new messages."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

import pymq
from pymq import PutMessageStatus as S

from conftest import small_config
from rocketmq_decoder import walk_commitlog

FILE_SIZE = 64 * 1024
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Tracker:
    """A started store plus the messages known to be in it."""

    def __init__(self, path, **cfg):
        self.path = str(path)
        self.cfg = small_config(**cfg)
        self.store = pymq.MessageStore(self.path, self.cfg)
        self.store.start()
        self.good = []      # (offset, topic, body)
        self.n = 0
        for _ in range(3):
            self.put_good()
        self.settle()

    def settle(self, timeout_s=5.0):
        """Wait until the dispatcher has turned every record into consume-queue entries
        (it creates consume-queue files in the background)."""
        deadline = time.monotonic() + timeout_s
        while self.store.dispatch_behind_bytes() and time.monotonic() < deadline:
            time.sleep(0.002)
        assert self.store.dispatch_behind_bytes() == 0

    def put_good(self, topic="Good"):
        body = f"good-{self.n}".encode()
        self.n += 1
        r = self.store.put_message(pymq.Message(topic=topic, body=body, tags="T", keys=["k"]))
        assert r.status is S.PUT_OK, r
        self.good.append((r.commitlog_offset, topic, body))
        return r

    def check_intact(self):
        """Earlier messages readable, log well-formed, store writable."""
        for off, topic, body in self.good:
            m = self.store.look_message_by_offset(off)
            assert m is not None and m.topic == topic and m.body == body, off
        self.put_good()
        self.store.flush()
        recs = [r for r in walk_commitlog(os.path.join(self.path, "commitlog")) if not r["blank"]]
        assert [(r["offset"], r["topic"], r["body"]) for r in recs] == self.good
        assert self.store.get_max_phy_offset() == recs[-1]["offset"] + recs[-1]["total_size"]


def tree(root) -> set:
    """Every directory and file below ``root`` (relative paths), but commit-log segments,
    which the allocator may pre-create in the background at any time."""
    out = set()
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            if os.path.basename(d) == "commitlog" and len(n) == 20 and n.isdigit():
                continue
            out.add(os.path.relpath(os.path.join(d, n), root))
    return out


@pytest.fixture
def tracker(tmp_path):
    t = Tracker(tmp_path / "store")
    yield t
    t.store.shutdown()


@pytest.fixture
def utf8_tracker(tmp_path):
    t = Tracker(tmp_path / "store", topic_validation="utf8")
    yield t
    t.store.shutdown()


# -- wrong types ------------------------------------------------------------------------------------

WRONG_TYPES = {
    "topic-int": lambda: pymq.Message(topic=1, body=b"x"),
    "topic-bytes": lambda: pymq.Message(topic=b"T", body=b"x"),
    "topic-None": lambda: pymq.Message(topic=None, body=b"x"),
    "body-int": lambda: pymq.Message(topic="T", body=1),
    "body-str": lambda: pymq.Message(topic="T", body="text"),
    "tags-int": lambda: pymq.Message(topic="T", body=b"x", tags=1),
    "keys-int-list": lambda: pymq.Message(topic="T", body=b"x", keys=[1]),
    "properties-list": lambda: pymq.Message(topic="T", body=b"x", properties=[("a", "b")]),
    "properties-str": lambda: pymq.Message(topic="T", body=b"x", properties="a=b"),
}


@pytest.mark.parametrize("make", WRONG_TYPES.values(), ids=WRONG_TYPES.keys())
def test_wrong_types_raise_type_error(tracker, make):
    with pytest.raises(TypeError):
        msg = make()
        tracker.store.put_message(msg)
    tracker.check_intact()


@pytest.mark.parametrize("props", [{"a": 1}, {1: "a"}, {"a": b"b"}, {"ok": "v", "a": 1.5}])
def test_non_str_property_raises_type_error(tracker, props):
    with pytest.raises(TypeError):
        tracker.store.put_message(pymq.Message(topic="T", body=b"x", properties=props))
    with pytest.raises(TypeError):
        tracker.store.put_messages([pymq.Message(topic="T", body=b"ok"),
                                    pymq.Message(topic="T", body=b"x", properties=props)])
    tracker.check_intact()


@pytest.mark.parametrize("call", [
    lambda s: s.put_message("x"),
    lambda s: s.put_message(b"body"),
    lambda s: s.put_messages([1]),
    lambda s: s.put_messages([pymq.Message(topic="T", body=b"x"), "y"]),
    lambda s: s.put_messages(None),
    lambda s: s.put_messages([None]),
], ids=["str", "bytes", "list-int", "list-mixed", "batch-None", "list-None"])
def test_put_of_non_message_raises_type_error(tracker, call):
    with pytest.raises(TypeError):
        call(tracker.store)
    tracker.check_intact()


PUT_NONE_SCRIPT = r"""
import sys
import pymq
sys.path.insert(0, {tests!r})
from conftest import small_config
for flush in ("ASYNC_FLUSH", "SYNC_FLUSH"):
    store = pymq.MessageStore({path!r} + flush, small_config(flush_disk_type=flush))
    store.start()
    ok = store.put_message(pymq.Message(topic="T", body=b"before"))
    try:
        store.put_message(None)
    except TypeError:
        pass
    else:
        raise SystemExit("put_message(None) did not raise TypeError")
    assert store.look_message_by_offset(ok.commitlog_offset).body == b"before"
    assert store.put_message(pymq.Message(topic="T", body=b"after")).queue_offset == 1
    store.shutdown()
print("CLEAN")
"""


def test_put_message_none_raises_type_error(tmp_path):
    """In a subprocess, since a None reaching the compiled append path would crash it."""
    code = PUT_NONE_SCRIPT.format(path=str(tmp_path / "store"), tests=os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0 and "CLEAN" in p.stdout, (p.returncode, p.stdout, p.stderr[-2000:])


@pytest.mark.parametrize("qid", [-1, -2 ** 31])
def test_negative_queue_id_raises_value_error(tracker, qid):
    with pytest.raises(ValueError):
        pymq.Message(topic="T", body=b"x", queue_id=qid)
    # queue_id is a writable attribute: a negative one set later is refused at the put
    msg = pymq.Message(topic="T", body=b"x")
    try:
        msg.queue_id = qid
    except ValueError:
        pass
    else:
        try:
            r = tracker.store.put_message(msg)
        except ValueError:
            pass
        else:
            assert r.status is S.MESSAGE_ILLEGAL, r
    tracker.check_intact()


NEGATIVE_QID_BATCH_SCRIPT = r"""
import sys
import pymq
sys.path.insert(0, {tests!r})
from conftest import small_config
store = pymq.MessageStore({path!r}, small_config())
store.start()
ok = store.put_message(pymq.Message(topic="T", body=b"before"))
for qid in (-1, -1000, -2 ** 31):
    m = pymq.Message(topic="T", body=b"x")
    try:
        m.queue_id = qid
    except ValueError:
        continue
    for _ in range(3):
        try:
            r = store.put_messages([m])
        except ValueError:
            continue
        assert r.status is pymq.PutMessageStatus.MESSAGE_ILLEGAL, (qid, r)
table = store.get_queue_offset_table()
assert table == {{("T", 0): 1}}, table
assert store.look_message_by_offset(ok.commitlog_offset).body == b"before"
r = store.put_messages([pymq.Message(topic="T", body=b"after")])
assert r.queue_offset == 1, r
store.shutdown()
print("CLEAN")
"""


def test_negative_queue_id_in_a_batch_is_refused(tmp_path):
    """In a subprocess: a negative queue id that reaches put_messages (set on the
    attribute after construction) must be refused, not index the offset table."""
    path = str(tmp_path / "store")
    code = NEGATIVE_QID_BATCH_SCRIPT.format(path=path, tests=os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0 and "CLEAN" in p.stdout, (p.returncode, p.stdout, p.stderr)
    recs = [r for r in walk_commitlog(os.path.join(path, "commitlog")) if not r["blank"]]
    assert [(r["body"], r["queue_id"], r["queue_offset"]) for r in recs] == [(b"before", 0, 0), (b"after", 0, 1)]


# -- topic names ------------------------------------------------------------------------------------

@pytest.mark.parametrize("topic", ["a/b", "..", ".", "a b", "", "x" * 128, "中文", "a\\b", "a.b",
                                   "a\x00b", "tab\t", "../etc"])
def test_invalid_topic_in_strict_mode_is_message_illegal(tracker, topic):
    before = tree(os.path.dirname(tracker.path))
    r = tracker.store.put_message(pymq.Message(topic=topic, body=b"x"))
    assert r.status is S.MESSAGE_ILLEGAL, (topic, r)
    assert not r.is_ok()
    r = tracker.store.put_messages([pymq.Message(topic=topic, body=b"x")])
    assert r.status is S.MESSAGE_ILLEGAL, (topic, r)
    assert (topic, 0) not in tracker.store.get_queue_offset_table()
    time.sleep(0.05)                   # let any background work settle, then: nothing new on disk
    assert tree(os.path.dirname(tracker.path)) == before
    tracker.check_intact()


def test_longest_strict_topic_is_accepted(tracker):
    topic = "%|_-aZ09" * 15 + "abcdefg"
    assert len(topic) == 127
    tracker.put_good(topic)
    tracker.check_intact()


@pytest.mark.parametrize("topic", ["../x", "a/b", "..", ".", "a\x00b", "a\\b", "x\n", "é" * 64, ""])
def test_invalid_topic_in_utf8_mode_is_message_illegal(utf8_tracker, topic):
    before = tree(os.path.dirname(utf8_tracker.path))
    r = utf8_tracker.store.put_message(pymq.Message(topic=topic, body=b"x"))
    assert r.status is S.MESSAGE_ILLEGAL, (topic, r)
    r = utf8_tracker.store.put_messages([pymq.Message(topic=topic, body=b"x")])
    assert r.status is S.MESSAGE_ILLEGAL, (topic, r)
    assert (topic, 0) not in utf8_tracker.store.get_queue_offset_table()
    time.sleep(0.05)
    assert tree(os.path.dirname(utf8_tracker.path)) == before
    utf8_tracker.check_intact()


def test_utf8_mode_accepts_127_byte_topic(utf8_tracker):
    utf8_tracker.put_good("é" * 63 + "x")
    utf8_tracker.put_good("中文主题")
    utf8_tracker.check_intact()


# -- sizes ----------------------------------------------------------------------------------------

def test_body_over_max_message_size_is_message_illegal(tmp_path):
    t = Tracker(tmp_path / "store", max_message_size=1000)
    try:
        r = t.store.put_message(pymq.Message(topic="T", body=b"x" * 1001))
        assert r.status is S.MESSAGE_ILLEGAL
        r = t.store.put_messages([pymq.Message(topic="T", body=b"x" * 1001)])
        assert r.status is S.MESSAGE_ILLEGAL
        # a batch whose client encoding exceeds the limit though each body is small
        r = t.store.put_messages([pymq.Message(topic="T", body=b"x" * 400) for _ in range(3)])
        assert r.status is S.MESSAGE_ILLEGAL
        r = t.store.put_message(pymq.Message(topic="T", body=b"x" * 1000))
        assert r.status is S.PUT_OK
        t.good.append((r.commitlog_offset, "T", b"x" * 1000))
        t.check_intact()
    finally:
        t.store.shutdown()


def test_properties_over_32767_bytes_is_properties_size_exceeded(tracker):
    value = "é" * 17000              # 34000 bytes, 17000 chars
    r = tracker.store.put_message(pymq.Message(topic="T", body=b"x", properties={"p": value}))
    assert r.status is S.PROPERTIES_SIZE_EXCEEDED, r
    r = tracker.store.put_messages([pymq.Message(topic="T", body=b"x", properties={"p": value})])
    assert r.status is S.PROPERTIES_SIZE_EXCEEDED, r
    tracker.check_intact()


def test_properties_over_32767_chars_is_message_illegal(tracker):
    r = tracker.store.put_message(pymq.Message(topic="T", body=b"x", properties={"p": "a" * 33000}))
    assert r.status is S.MESSAGE_ILLEGAL, r
    tracker.check_intact()


def test_properties_just_under_the_limit_are_accepted(tracker):
    # UNIQ_KEY (9 + 32 bytes + separator) is added by the store: leave room for it
    value = "v" * (32767 - 2 - 43 - 1)
    r = tracker.store.put_message(pymq.Message(topic="T", body=b"big-props", properties={"p": value}))
    assert r.status is S.PUT_OK, r
    assert tracker.store.look_message_by_offset(r.commitlog_offset).properties["p"] == value
    tracker.good.append((r.commitlog_offset, "T", b"big-props"))
    tracker.check_intact()


@pytest.mark.parametrize("props", [{"a\x01": "v"}, {"a": "v\x01"}, {"a\x02b": "v"}, {"a": "\x02"},
                                   {"": "v"}, {"a": ""}, {"ok": "fine", "bad\x01": "v"}])
def test_property_separators_or_empty_parts_raise_value_error(tracker, props):
    with pytest.raises(ValueError):
        tracker.store.put_message(pymq.Message(topic="T", body=b"x", properties=props))
    with pytest.raises(ValueError):
        tracker.store.put_messages([pymq.Message(topic="T", body=b"x", properties=props)])
    tracker.check_intact()


@pytest.mark.parametrize("props", [{"a": "\ud800"}, {"\udfff": "v"}])
def test_property_with_lone_surrogate_raises_value_error(tracker, props):
    with pytest.raises(ValueError):        # UnicodeEncodeError: it has no UTF-8 form
        tracker.store.put_message(pymq.Message(topic="T", body=b"x", properties=props))
    tracker.check_intact()


@pytest.mark.parametrize("host", ["nonsense", "1.2.3.4", "1.2.3.4:65536", "1.2.3.4:-1", "[::1]", "[zz::1]:80",
                                  "300.1.1.1:80", ""])
def test_bad_born_host_raises_value_error(tracker, host):
    with pytest.raises(ValueError):
        tracker.store.put_message(pymq.Message(topic="T", body=b"x", born_host=host))
    with pytest.raises(ValueError):
        tracker.store.put_messages([pymq.Message(topic="T", body=b"x", born_host=host)])
    tracker.check_intact()


@pytest.mark.parametrize("field", ["tags", "keys"])
def test_separators_in_tags_and_keys_raise_value_error(tracker, field):
    kwargs = {field: "a\x01b" if field == "tags" else ["a\x02b"]}
    with pytest.raises(ValueError):
        tracker.store.put_message(pymq.Message(topic="T", body=b"x", **kwargs))
    tracker.check_intact()


def test_record_that_can_never_fit_a_segment_is_message_illegal(tracker):
    r = tracker.store.put_message(pymq.Message(topic="T", body=b"x" * (FILE_SIZE + 1)))
    assert r.status is S.MESSAGE_ILLEGAL
    # find the properties length the store uses for a message like this one
    probe = tracker.store.put_message(pymq.Message(topic="T", body=b""))
    tracker.good.append((probe.commitlog_offset, "T", b""))
    fixed = probe.wrote_bytes                      # record size with an empty body
    too_big = FILE_SIZE - 7 - fixed                # record of FILE_SIZE - 7 bytes: never fits
    r = tracker.store.put_message(pymq.Message(topic="T", body=b"y" * too_big))
    assert r.status is S.MESSAGE_ILLEGAL, r
    r = tracker.store.put_messages([pymq.Message(topic="T", body=b"y" * too_big)])
    assert r.status is S.MESSAGE_ILLEGAL, r
    tracker.check_intact()
    # FILE_SIZE - 8 bytes fits, alone in a fresh segment
    body = b"z" * (too_big - 1)
    r = tracker.store.put_message(pymq.Message(topic="T", body=body))
    assert r.status is S.PUT_OK, r
    assert r.wrote_bytes == FILE_SIZE - 8 and r.commitlog_offset % FILE_SIZE == 0
    tracker.good.append((r.commitlog_offset, "T", body))
    tracker.check_intact()


# -- batches ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("msgs", [
    lambda: [pymq.Message(topic="A", body=b"1"), pymq.Message(topic="B", body=b"2")],
    lambda: [pymq.Message(topic="A", body=b"1", queue_id=0), pymq.Message(topic="A", body=b"2", queue_id=1)],
    lambda: [pymq.Message(topic="A", body=b"1"), pymq.Message(topic="A", body=b"2", delay_level=3)],
    lambda: [pymq.Message(topic="A", body=b"1", delay_level=1)],
    lambda: [pymq.Message(topic="A", body=b"1", deliver_time_ms=1)],
    lambda: [],
], ids=["mixed-topics", "mixed-queues", "delay-level", "single-delay", "deliver-time", "empty"])
def test_bad_batch_is_message_illegal(tracker, msgs):
    before = tracker.store.get_max_phy_offset()
    r = tracker.store.put_messages(msgs())
    assert r.status is S.MESSAGE_ILLEGAL, r
    assert not r.is_ok() and r.msg_ids == []
    assert tracker.store.get_max_phy_offset() == before
    assert ("A", 0) not in tracker.store.get_queue_offset_table()
    tracker.check_intact()


# -- lifecycle --------------------------------------------------------------------------------------

def test_put_before_start_is_service_not_available_and_after_shutdown_raises(tmp_path):
    """Before start() a put is refused with a status (the store opens, then starts); after
    shutdown() every call raises StoreStateError (tests/test_store_inputs.py)."""
    path = tmp_path / "store"
    store = pymq.MessageStore(path, small_config())
    try:
        r = store.put_message(pymq.Message(topic="T", body=b"early"))
        assert r.status is S.SERVICE_NOT_AVAILABLE
        r = store.put_messages([pymq.Message(topic="T", body=b"early")])
        assert r.status is S.SERVICE_NOT_AVAILABLE
        store.start()
        r = store.put_message(pymq.Message(topic="T", body=b"kept"))
        assert r.status is S.PUT_OK and r.queue_offset == 0
        kept = r.commitlog_offset
    finally:
        store.shutdown()
    with pytest.raises(pymq.StoreStateError):
        store.put_message(pymq.Message(topic="T", body=b"late"))
    with pytest.raises(pymq.StoreStateError):
        store.put_messages([pymq.Message(topic="T", body=b"late")])
    recs = walk_commitlog(path / "commitlog")
    assert [r["body"] for r in recs] == [b"kept"]
    with pymq.MessageStore(path, small_config()) as store:
        assert store.look_message_by_offset(kept).body == b"kept"
        r = store.put_message(pymq.Message(topic="T", body=b"again"))
        assert r.status is S.PUT_OK and r.queue_offset == 1


# -- a second writer --------------------------------------------------------------------------------

def test_second_writer_in_process_gets_store_locked_error(tracker):
    with pytest.raises(pymq.StoreLockedError):
        pymq.MessageStore(tracker.path, small_config())
    with pytest.raises(pymq.StoreLockedError):
        pymq.MessageStore(tracker.path + "/", small_config())
    tracker.check_intact()
    assert os.path.exists(os.path.join(tracker.path, "abort"))


def test_second_writer_in_subprocess_gets_store_locked_error(tracker):
    code = textwrap.dedent(f"""
        import sys, pymq
        try:
            pymq.MessageStore({tracker.path!r})
        except pymq.StoreLockedError as e:
            print("LOCKED", e)
            sys.exit(3)
        sys.exit(0)
    """)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 3, (p.stdout, p.stderr)
    assert "LOCKED" in p.stdout
    tracker.check_intact()


def test_lock_is_released_by_shutdown(tmp_path):
    path = tmp_path / "store"
    with pymq.MessageStore(path, small_config()) as s:
        s.put_message(pymq.Message(topic="T", body=b"1"))
    with pymq.MessageStore(path, small_config()) as s:
        assert s.put_message(pymq.Message(topic="T", body=b"2")).queue_offset == 1


# -- a damaged directory ----------------------------------------------------------------------------

@pytest.mark.parametrize("which,new_size", [("middle", FILE_SIZE - 1), ("middle", 0),
                                            ("last", FILE_SIZE + 4096), ("middle", FILE_SIZE + 4096)])
def test_segment_of_wrong_size_raises_segment_size_error(tmp_path, which, new_size):
    """A segment of the wrong length that recovery cannot repair (a short one in the middle,
    any too long one) is refused with a clear error naming the file and both sizes."""
    path = tmp_path / "store"
    with pymq.MessageStore(path, small_config()) as s:
        for i in range(5):
            s.put_message(pymq.Message(topic="T", body=b"x" * 30000))
    segs = sorted((path / "commitlog").iterdir())
    assert len(segs) == 3
    seg = segs[1] if which == "middle" else segs[-1]
    os.truncate(seg, new_size)
    with pytest.raises(pymq.SegmentSizeError) as info:
        pymq.MessageStore(path, small_config())
    text = str(info.value)
    assert seg.name in text and str(new_size) in text and str(FILE_SIZE) in text, text
    # the failed open released the lock: fixing the file lets the store open again
    os.truncate(seg, FILE_SIZE)
    with pymq.MessageStore(path, small_config()) as s:
        assert s.look_message_by_offset(0).body == b"x" * 30000


@pytest.mark.parametrize("cut", [1, 4096, FILE_SIZE - 100, FILE_SIZE])
def test_short_last_segment_is_recovered(tmp_path, cut):
    """A last segment cut short (damage: segments are allocated whole) is extended back and
    recovery keeps exactly the whole records before the cut; the queue offsets of the lost
    ones are not reused (a pull reports them as damaged); writing continues after them."""
    path = tmp_path / "store"
    with pymq.MessageStore(path, small_config()) as s:
        rs = [s.put_message(pymq.Message(topic="T", body=b"%d" % i + b"x" * 20000)) for i in range(5)]
    last = sorted((path / "commitlog").iterdir())[-1]
    start = int(last.name)
    new_size = FILE_SIZE - cut
    os.truncate(last, new_size)
    keep = [r for r in rs if r.commitlog_offset + r.wrote_bytes <= start + new_size]
    with pymq.MessageStore(path, small_config()) as s:
        assert os.path.getsize(last) == FILE_SIZE
        in_last = [r for r in keep if r.commitlog_offset >= start]
        # with no whole record left in it, the log ends where the last segment begins (the
        # segment before is closed by its end-of-file blank)
        expected_end = max(r.commitlog_offset + r.wrote_bytes for r in in_last) if in_last else start
        assert s.get_max_phy_offset() == expected_end
        for r in keep:
            assert s.look_message_by_offset(r.commitlog_offset) is not None
        # the lost records keep their queue offsets (lost markers): none is handed out again
        assert s.get_max_offset_in_queue("T", 0) == len(rs)
        g = s.get_message("g", "T", 0, 0, 32)
        assert [m.commitlog_offset for m in g.messages] == [r.commitlog_offset for r in keep]
        assert g.damaged == len(rs) - len(keep) and g.next_begin_offset == len(rs)
        r = s.put_message(pymq.Message(topic="T", body=b"after"))
        assert r.is_ok() and r.queue_offset == len(rs)


# -- disk full --------------------------------------------------------------------------------------

DISK_FULL_SCRIPT = r"""
import os, resource, signal, sys, json
import pymq
sys.path.insert(0, {tests!r})
from conftest import small_config

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
path = {path!r}
store = pymq.MessageStore(path, small_config(warm_mapped_file_enable=True))
store.start()
put = []
r = store.put_message(pymq.Message(topic="T", body=b"first"))
assert r.status is pymq.PutMessageStatus.PUT_OK
put.append((r.commitlog_offset, r.queue_offset, "first"))
# from here on no file may grow past a little more than the lock/abort files need:
# the next commit-log segment (64 KiB) cannot be allocated
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (8192, hard))
failed = None
for i in range(200):
    body = ("m%d-" % i).encode() + b"x" * 2000
    r = store.put_message(pymq.Message(topic="T", body=body))
    if r.status is not pymq.PutMessageStatus.PUT_OK:
        failed = (i, r.status.name, r.is_ok(), r.commitlog_offset)
        break
    put.append((r.commitlog_offset, r.queue_offset, body.decode()))
readable = all(store.look_message_by_offset(off).body.decode() == body for off, _, body in put)
files = sorted((n, os.path.getsize(os.path.join(path, "commitlog", n)))
               for n in os.listdir(os.path.join(path, "commitlog")))
# lift the limit: the store is writable again
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
r = store.put_message(pymq.Message(topic="T", body=b"after"))
after = (r.status.name, r.commitlog_offset, r.queue_offset)
store.shutdown()
print(json.dumps(dict(put=put, failed=failed, readable=readable, files=files, after=after)))
"""


def test_disk_full_on_segment_creation(tmp_path):
    import json

    path = str(tmp_path / "store")
    code = DISK_FULL_SCRIPT.format(path=path, tests=os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, (p.stdout, p.stderr)
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["failed"] is not None, "every put succeeded although no segment could be created"
    i, status, is_ok, offset = out["failed"]
    assert status == "CREATE_MAPEDFILE_FAILED", out["failed"]
    assert not is_ok
    # it failed when a new segment was needed (the first, or the pre-allocated second, filled up)
    last_put = out["put"][-1][0]
    assert last_put < 2 * FILE_SIZE
    assert out["readable"]
    # no partial segment: every file present while the limit held was whole
    assert out["files"], out
    for name, size in out["files"]:
        assert size == FILE_SIZE, out["files"]
        assert int(name) % FILE_SIZE == 0
    assert [int(n) for n, _ in out["files"]] == [k * FILE_SIZE for k in range(len(out["files"]))]
    # writable again once space is back, with the next queue offset
    st, after_off, after_q = out["after"]
    assert st == "PUT_OK" and after_q == len(out["put"]) and after_off % FILE_SIZE == 0
    # the log on disk: every message put, in order, then the one after
    recs = [r for r in walk_commitlog(os.path.join(path, "commitlog")) if not r["blank"]]
    assert [(r["offset"], r["queue_offset"]) for r in recs] == \
        [(off, q) for off, q, _ in out["put"]] + [(after_off, after_q)]
    assert [r["body"].decode() for r in recs[:-1]] == [b for _, _, b in out["put"]]
    with pymq.MessageStore(path, small_config()) as s:
        assert s.look_message_by_offset(after_off).body == b"after"
