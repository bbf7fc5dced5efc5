"""fastjson text and ConfigManager load/persist, including crashes in the middle of a persist."""

from __future__ import annotations

import json
import os
import random
import stat

import pytest

from pymq.errors import CorruptStoreError
from pymq.store import config_manager as cm
from pymq.store.config_manager import ConfigManager, ConfigPersistService
from pymq.store.fastjson import FastjsonDecodeError, ObjectKeyMap, dumps_fastjson, loads_fastjson

# Written by RocketMQ (fastjson 1.x): an int-keyed map stays on the line of its brace.
REAL_CONSUMER_OFFSET = (
    '{\n\t"offsetTable":{\n'
    '\t\t"TopicTest@please_rename_unique_group_name_4":{0:250,1:250,2:250,3:250\n\t\t},\n'
    '\t\t"%RETRY%please_rename_unique_group_name_4@please_rename_unique_group_name_4":{0:0\n\t\t}\n'
    '\t}\n}')
# The same table as quoted in the task brief (entries on one line).
BRIEF_CONSUMER_OFFSET = (
    '{\n\t"offsetTable":{\n'
    '\t\t"TopicTest@please_rename_unique_group_name_4":{0:250,1:250,2:250,3:250},\n'
    '\t\t"%RETRY%please_rename_unique_group_name_4@please_rename_unique_group_name_4":{0:0}\n'
    '\t}\n}')
CONSUMER_OFFSET_TABLE = {"offsetTable": {
    "TopicTest@please_rename_unique_group_name_4": {0: 250, 1: 250, 2: 250, 3: 250},
    "%RETRY%please_rename_unique_group_name_4@please_rename_unique_group_name_4": {0: 0},
}}


# -- fastjson text -----------------------------------------------------------------------

def test_reads_real_rocketmq_consumer_offset_files():
    assert loads_fastjson(REAL_CONSUMER_OFFSET) == CONSUMER_OFFSET_TABLE
    assert loads_fastjson(BRIEF_CONSUMER_OFFSET) == CONSUMER_OFFSET_TABLE
    keys = loads_fastjson(REAL_CONSUMER_OFFSET)["offsetTable"]["TopicTest@please_rename_unique_group_name_4"]
    assert all(type(k) is int for k in keys)


def test_reads_delay_offset_shapes():
    assert loads_fastjson('{"offsetTable":{1:1,2:1,3:11}}') == {"offsetTable": {1: 1, 2: 1, 3: 11}}
    assert loads_fastjson('{\n\t"offsetTable":{1:1\n\t}\n}') == {"offsetTable": {1: 1}}
    five_x = '{\n\t"dataVersion":{\n\t\t"counter":3,\n\t\t"timestamp":1700000000000\n\t},\n' \
             '\t"offsetTable":{1:1,2:1,18:-5\n\t}\n}'
    assert loads_fastjson(five_x) == {"dataVersion": {"counter": 3, "timestamp": 1700000000000},
                                      "offsetTable": {1: 1, 2: 1, 18: -5}}


def test_writes_fastjson_pretty_format():
    assert dumps_fastjson({"offsetTable": {1: 1, 2: 1, 3: 11}}) == \
        '{\n\t"offsetTable":{1:1,2:1,3:11\n\t}\n}'
    assert dumps_fastjson(CONSUMER_OFFSET_TABLE) == REAL_CONSUMER_OFFSET
    assert dumps_fastjson({"offsetTable": {}}) == '{\n\t"offsetTable":{}\n}'
    assert dumps_fastjson({"offsetTable": {1: 1, 3: 11}}, pretty=False) == '{"offsetTable":{1:1,3:11}}'


def test_int_keys_are_unquoted_and_str_keys_quoted():
    text = dumps_fastjson({"m": {0: "a", -7: "b", "0": "c"}}, pretty=False)
    assert text == '{"m":{0:"a",-7:"b","0":"c"}}'
    assert loads_fastjson(text) == {"m": {0: "a", -7: "b", "0": "c"}}


@pytest.mark.parametrize("value", [
    {"a": {1: {2: {-3: [1, -2, 3.5, -0.25, 1e300, True, False, None]}}}},
    {"empty": {}, "list": [], "nested": [[{}], [[]]]},
    {"big": 2 ** 70, "neg": -(2 ** 63), "zero": 0, "f": -1.5e-7},
    [1, "two", {3: 4}],
    "just a string",
    -42,
    None,
])
def test_round_trip_both_formats(value):
    for pretty in (True, False):
        assert loads_fastjson(dumps_fastjson(value, pretty)) == value


def test_strings_that_look_like_int_keys_survive():
    value = {"k{1:2}": "{1:2}", "v": "{\"a\":{3:4},5:6}", "list": ["{7:8}", ",9:10}"]}
    text = dumps_fastjson(value)
    assert loads_fastjson(text) == value
    # and in text written by someone else
    assert loads_fastjson('{"x":"{1:2}",1:"{3:4}"}') == {"x": "{1:2}", 1: "{3:4}"}


def test_escapes_and_unicode():
    value = {"esc": 'q"b\\s/\b\f\n\r\t\x00\x1f', "cjk": "消费者组", "emoji": "😀", "lone": "\ud800x\udfff",
             "é@ü": 1}
    text = dumps_fastjson(value)
    text.encode("utf-8")                       # writable as UTF-8 (lone surrogates escaped)
    assert "消费者组" in text and "😀" in text  # not \u-escaped, like fastjson
    assert loads_fastjson(text) == value
    assert loads_fastjson(text.encode("utf-8")) == value
    assert loads_fastjson(r'{"a":"\u6d88\ud83d\ude00\"\\\/"}') == {"a": "消😀\"\\/"}


@pytest.mark.parametrize("text", [
    '{"a": [1, 2.5, -3e2, true, false, null], "b": {"c": "d"}}',
    ' \t\n{ "x" : { } , "y" : [ ] } \r\n',
    '"\\ud83d\\ude00"', "0", "-0", "[-1.0E+2]", '{"a":1,"a":2}',
])
def test_agrees_with_json_on_standard_json(text):
    assert loads_fastjson(text) == json.loads(text)


def test_bom_and_whitespace_are_skipped():
    assert loads_fastjson("\ufeff\n\t{ 1 : 2 ,\n\t 3:4 }\n") == {1: 2, 3: 4}


@pytest.mark.parametrize("text", [
    "", "   ", "{", '{"a":1,}', "{1:2,}", "[1,]", '{"a" 1}', '{"a":1 "b":2}', "{1.5:2}", "{01:2}",
    "{a:1}", '{"a":"unterminated}', '{"a":1}}', '{"a":1} x', "tru", "nul", "01", "1.", ".5",
    "--1", "{-:1}", "[1 2]", "\x00",
])
def test_rejects_malformed_text(text):
    with pytest.raises(FastjsonDecodeError) as info:
        loads_fastjson(text)
    assert isinstance(info.value, ValueError)


def test_deep_nesting_is_an_error_not_a_crash():
    with pytest.raises(FastjsonDecodeError, match="Nesting"):
        loads_fastjson("[" * 10_000 + "]" * 10_000)
    assert loads_fastjson("[" * 100 + "]" * 100) is not None


def test_dumps_rejects_what_json_cannot_hold():
    for bad_key in (1.5, None, True, (1, 2)):
        with pytest.raises(TypeError):
            dumps_fastjson({bad_key: 1})
    with pytest.raises(TypeError):
        dumps_fastjson({"a": object()})
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError):
            dumps_fastjson({"a": bad})


def test_object_keys_as_fastjson_writes_a_map_keyed_by_message_queue():
    """RocketMQ's admin bodies (topic stats, consume stats) are maps keyed by MessageQueue
    objects; mqadmin reads them with fastjson."""
    mq = {"brokerName": "b", "queueId": 0, "topic": "T"}
    doc = {"offsetTable": ObjectKeyMap([(mq, {"maxOffset": 3}), (dict(mq, queueId=1), {"maxOffset": 0})]),
           "consumeTps": 0.0}
    assert dumps_fastjson(doc, pretty=False) == (
        '{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{"maxOffset":3},'
        '{"brokerName":"b","queueId":1,"topic":"T"}:{"maxOffset":0}},"consumeTps":0.0}')
    assert dumps_fastjson({"offsetTable": ObjectKeyMap()}, pretty=False) == '{"offsetTable":{}}'
    pretty = dumps_fastjson({"t": ObjectKeyMap([(mq, 1)])})
    assert pretty == '{\n\t"t":{\n\t\t{\n\t\t\t"brokerName":"b",\n\t\t\t"queueId":0,\n\t\t\t"topic":"T"\n\t\t}:1\n\t}\n}'
    for bad_key in ("queue", 0, None, [1]):
        with pytest.raises(TypeError, match="ObjectKeyMap keys"):
            dumps_fastjson(ObjectKeyMap([(bad_key, 1)]))


def _random_str(rng):
    return "".join(chr(rng.choice([rng.randrange(0x20), rng.randrange(0x20, 0x7f),
                                   rng.randrange(0x80, 0x110000)]))
                   for _ in range(rng.randrange(8)))


def _random_value(rng, depth=0):
    kind = rng.randrange(8 if depth < 4 else 5)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.randint(-(2 ** 70), 2 ** 70)
    if kind == 2:
        return rng.uniform(-1e6, 1e6) * 10.0 ** rng.randint(-300, 300)
    if kind in (3, 4):
        return _random_str(rng)
    if kind == 5:
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {(rng.randint(-1000, 1000) if rng.random() < 0.5 else _random_str(rng)):
            _random_value(rng, depth + 1) for _ in range(rng.randrange(4))}


def test_round_trip_random_values():
    rng = random.Random(20240601)
    for _ in range(400):
        value = _random_value(rng)
        for pretty in (True, False):
            text = dumps_fastjson(value, pretty)
            text.encode("utf-8")
            assert loads_fastjson(text) == value


# -- ConfigManager -----------------------------------------------------------------------

class TableConfig(ConfigManager):
    """A minimal ConfigManager: {"table": {int: str}}."""

    def __init__(self, path):
        super().__init__()
        self.path = str(path)
        self.table = {}

    def config_file_path(self):
        return self.path

    def encode(self, pretty=True):
        with self._lock:
            return dumps_fastjson({"table": dict(self.table)}, pretty)

    def validate(self, text):
        doc = loads_fastjson(text)
        if not isinstance(doc, dict) or not isinstance(doc.get("table"), dict):
            raise ValueError("no table")
        return doc["table"]

    def decode(self, text):
        table = self.validate(text)
        with self._lock:
            self.table = table
            self._mark_changed()

    def put(self, key, value):
        with self._lock:
            self.table[key] = value
            self._mark_changed()


def loaded(path):
    m = TableConfig(path)
    assert m.load() is True
    return m.table


@pytest.fixture
def path(tmp_path):
    return tmp_path / "config" / "table.json"


def test_load_without_files_starts_empty(path):
    m = TableConfig(path)
    assert m.load() is True
    assert m.table == {} and not m.dirty
    assert not path.parent.exists()          # loading creates nothing


def test_persist_load_round_trip_and_bak(path):
    m = TableConfig(path)
    m.load()
    m.put(1, "one")
    assert m.dirty
    m.persist()
    assert not m.dirty
    assert path.read_text() == '{\n\t"table":{1:"one"\n\t}\n}'
    assert not os.path.exists(f"{path}.bak") and not os.path.exists(f"{path}.tmp")
    m.put(2, "two")
    m.persist()
    assert loaded(path) == {1: "one", 2: "two"}
    assert loads_fastjson(open(f"{path}.bak").read()) == {"table": {1: "one"}}
    assert not os.path.exists(f"{path}.tmp") and not os.path.exists(f"{path}.bak.tmp")


@pytest.mark.parametrize("damage", [b"", b"  \n\t", b'{"table":{1:"one",2:', b"\x00\x00\x00\x00",
                                    b"garbage", b"\xff\xfe{}", b'{"table":5}', b"[]"])
def test_damaged_main_file_falls_back_to_bak(path, damage):
    m = TableConfig(path)
    m.put(1, "one")
    m.persist()
    m.put(2, "two")
    m.persist()                               # .bak = {1}, main = {1, 2}
    path.write_bytes(damage)
    m2 = TableConfig(path)
    assert m2.load() is True
    assert m2.table == {1: "one"}
    assert m2.dirty                           # so the persist service repairs the main file
    m2.persist()
    assert loaded(path) == {1: "one"}
    # the damaged main file was not rotated over the good .bak
    assert loads_fastjson(open(f"{path}.bak").read()) == {"table": {1: "one"}}


def test_missing_main_file_falls_back_to_bak(path):
    m = TableConfig(path)
    m.put(1, "one")
    m.persist()
    m.persist()
    path.unlink()
    assert loaded(path) == {1: "one"}


def test_both_damaged_raises_corrupt_store_error(path):
    path.parent.mkdir()
    path.write_text('{"table":{1:')
    open(f"{path}.bak", "w").write("")
    m = TableConfig(path)
    with pytest.raises(CorruptStoreError) as info:
        m.load()
    msg = str(info.value)
    assert str(path) in msg and f"{path}.bak" in msg and "empty" in msg and "unreadable" in msg
    assert m.table == {}


@pytest.mark.parametrize("main, bak", [(b"oops", None), (None, b"oops"), (b"", None)])
def test_damaged_file_without_a_good_copy_raises(path, main, bak):
    path.parent.mkdir()
    if main is not None:
        path.write_bytes(main)
    if bak is not None:
        open(f"{path}.bak", "wb").write(bak)
    with pytest.raises(CorruptStoreError):
        TableConfig(path).load()


def test_failed_decode_leaves_table_unchanged(path):
    m = TableConfig(path)
    m.put(1, "one")
    path.parent.mkdir()
    path.write_text("{}")
    with pytest.raises(CorruptStoreError):
        m.load()
    assert m.table == {1: "one"}


def test_stale_tmp_files_are_ignored_and_replaced(path):
    m = TableConfig(path)
    m.put(1, "one")
    m.persist()
    open(f"{path}.tmp", "w").write("half writ")
    open(f"{path}.bak.tmp", "w").write("junk")
    assert loaded(path) == {1: "one"}
    m.put(2, "two")
    m.persist()
    assert loaded(path) == {1: "one", 2: "two"}
    assert not os.path.exists(f"{path}.tmp") and not os.path.exists(f"{path}.bak.tmp")


def test_persist_fsyncs_file_and_directory(path, monkeypatch):
    kinds = []
    real_fsync = os.fsync

    def recording_fsync(fd):
        kinds.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real_fsync(fd)

    monkeypatch.setattr(cm.os, "fsync", recording_fsync)
    m = TableConfig(path)
    m.put(1, "one")
    m.persist()
    m.put(2, "two")
    m.persist()
    if os.name != "nt":
        assert kinds == ["file", "dir", "file", "dir", "dir"]


class Crash(Exception):
    """Stands in for the process dying at this point."""



def _arm(monkeypatch, crash_at):
    """Make the ``crash_at``-th file-system step of a persist raise Crash; return the counter."""
    count = [0]

    def wrap(name, real):
        def step(*args, **kwargs):
            count[0] += 1
            if count[0] == crash_at:
                raise Crash(f"crash at step {crash_at} ({name})")
            return real(*args, **kwargs)
        return step

    for name in ("fsync", "link", "replace", "unlink"):
        monkeypatch.setattr(cm.os, name, wrap(name, getattr(os, name)))
    monkeypatch.setattr(cm, "open", wrap("open", open), raising=False)
    return count


@pytest.mark.parametrize("links", [True, False], ids=["hard-link", "rename"])
def test_a_crash_at_any_step_leaves_old_or_new_content(tmp_path, monkeypatch, links):
    old, new = {1: "old"}, {1: "old", 2: "new"}
    outcomes = set()
    crash_at = 1
    while True:
        path = tmp_path / str(crash_at) / "table.json"
        m = TableConfig(path)
        m.table = dict(old)
        m.persist()                      # a good main file, and for crash_at > 1 ...
        m.persist()                      # ... an existing .bak as well
        m.table = dict(new)
        m._mark_changed()
        with monkeypatch.context() as mp:
            if not links:
                mp.setattr(cm.os, "link", lambda *a: (_ for _ in ()).throw(PermissionError("no links")))
            count = _arm(mp, crash_at)
            try:
                m.persist()
                crashed = False
            except Crash:
                crashed = True
        result = loaded(path)            # a fresh process after the crash
        assert result in (old, new), (crash_at, result)
        outcomes.add(("crashed" if crashed else "done", "new" if result == new else "old"))
        if not crashed:
            assert result == new
            break
        assert m.dirty                   # a failed persist is retried later
        crash_at += 1
    assert crash_at == count[0] + 1 >= 5
    assert ("crashed", "old") in outcomes and ("done", "new") in outcomes


def test_persist_error_propagates_and_retry_succeeds(path, monkeypatch):
    m = TableConfig(path)
    m.put(1, "one")
    m.persist()
    m.put(2, "two")

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as mp:
        mp.setattr(cm.os, "replace", broken_replace)
        with pytest.raises(OSError):
            m.persist()
    assert m.dirty
    assert loaded(path) == {1: "one"}
    m.persist()
    assert loaded(path) == {1: "one", 2: "two"} and not m.dirty


def test_main_file_replaced_behind_our_back_is_checked_before_rotation(path):
    m = TableConfig(path)
    m.put(1, "one")
    m.persist()
    path.write_text('{"table":{7:"seven"}}')        # someone else wrote a good file
    m.put(2, "two")
    m.persist()
    assert loads_fastjson(open(f"{path}.bak").read()) == {"table": {7: "seven"}}


def test_persist_service_skips_clean_tables_and_persists_at_shutdown(path):
    m = TableConfig(path)
    m.load()
    svc = ConfigPersistService(m, interval_ms=60_000)
    svc.start()
    try:
        m.put(1, "one")
    finally:
        svc.shutdown()
    assert svc.last_error is None
    assert loaded(path) == {1: "one"}
    with pytest.raises(ValueError):
        ConfigPersistService(m, interval_ms=0)
