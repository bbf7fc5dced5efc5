"""Side files holding JSON values of the wrong type, and the damaged ``checkpoint`` kept.

A side file whose text is JSON but holds a value of the wrong type (``null``, a list, a
string, a float, a negative number, a number too large for any integer) where the table
wants something else is damage like garbage is (docs/recovery.md, "Damaged side files"):
an open never fails on it with anything but ``CorruptStoreError`` under ``strict_open``;
otherwise it loads the ``.bak`` or sets the file aside as ``*.corrupt-<ms>`` and starts
with the documented default, noted in ``open_report``. ``pymq check`` reports what an
open would do. A damaged ``checkpoint`` is kept as ``checkpoint.corrupt-<ms>`` too.
"""

from __future__ import annotations

import os
import random
import shutil
import time

import pytest
from conftest import small_config

import pymq
from pymq.checker import StoreChecker
from pymq.errors import CorruptStoreError
from pymq.store.fastjson import dumps_fastjson

NOW_S = int(time.time())

#: a good text of each ConfigManager-based side file (the broker's tables included)
GOOD = {
    "config/consumerOffset.json": {"offsetTable": {"T@g": {0: 5}}},
    "config/delayOffset.json": {"offsetTable": {1: 0}},
    "config/timerCheckpoint.json": {"enqueueOffset": 0, "second": NOW_S - 5, "delivered": [3]},
    "config/topicDeletions.json": {"deletedTopics": {"Gone": 0}},
    "config/topics.json": {"topicConfigTable": {"A": {"topicName": "A", "readQueueNums": 4,
                                                       "writeQueueNums": 4, "perm": 6}}},
    "config/subscriptionGroup.json": {"subscriptionGroupTable": {"g": {"groupName": "g",
                                                                        "retryMaxTimes": 16}}},
}
BROKER_TABLES = ("config/topics.json", "config/subscriptionGroup.json")

#: where a wrong value is put in each file
PLACES = {
    "config/consumerOffset.json": [(), ("offsetTable",), ("offsetTable", "T@g"), ("offsetTable", "T@g", 0)],
    "config/delayOffset.json": [(), ("offsetTable",), ("offsetTable", 1)],
    "config/timerCheckpoint.json": [(), ("enqueueOffset",), ("second",), ("delivered",), ("delivered", 0)],
    "config/topicDeletions.json": [(), ("deletedTopics",), ("deletedTopics", "Gone")],
    "config/topics.json": [(), ("topicConfigTable",), ("topicConfigTable", "A"),
                           ("topicConfigTable", "A", "readQueueNums")],
    "config/subscriptionGroup.json": [(), ("subscriptionGroupTable",), ("subscriptionGroupTable", "g"),
                                      ("subscriptionGroupTable", "g", "retryMaxTimes")],
}

#: wrong values, as JSON text
VALUES = {"null": "null", "list": "[1]", "string": '"1"', "float": "1.5", "negative": "-7", "huge": "1e400"}

#: what the tables that pymq's store owns must take as damage: every wrong value, anywhere
STRICT_FILES = ("config/delayOffset.json", "config/timerCheckpoint.json")

#: a wrong value that is a legal one in its place
LEGAL = {("config/timerCheckpoint.json", ("delivered",), "list")}

CASES = [(rel, place, value) for rel in GOOD for place in PLACES[rel] for value in VALUES
         if (rel, place, value) not in LEGAL]


def case_id(case):
    rel, place, value = case
    return f"{os.path.basename(rel)}-{'.'.join(map(str, place)) or 'top'}-{value}"


def with_value(rel: str, place: tuple, value: str) -> str:
    """The good text of ``rel`` with ``value`` (JSON text) at ``place``."""
    if not place:
        return value
    import copy
    doc = copy.deepcopy(GOOD[rel])
    inner = doc
    for key in place[:-1]:
        inner = inner[key]
    inner[place[-1]] = "@@VALUE@@"
    return dumps_fastjson(doc).replace('"@@VALUE@@"', value)


def cfg(**kw):
    return small_config(message_delay_level="1s", **kw)


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    path = tmp_path_factory.mktemp("values") / "s"
    with pymq.MessageStore(path, cfg()) as s:
        s.put_message(pymq.Message("T", b"m"))
    return path


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def open_store(path, **kw):
    return pymq.Broker(path, cfg(**kw))


def aside(path, rel):
    d = os.path.dirname(os.path.join(path, rel))
    return [n for n in os.listdir(d) if n.startswith(os.path.basename(rel) + ".corrupt-")]


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_a_wrong_value_never_stops_an_open(template, tmp_path, case):
    rel, place, value = case
    path = tmp_path / "s"
    shutil.copytree(template, path)
    text = with_value(rel, place, VALUES[value])
    write(path / rel, text)

    # strict: refused with CorruptStoreError, or opened when the value is one the table takes
    try:
        open_store(path, strict_open=True).shutdown()
        rejected = False
    except CorruptStoreError as e:
        assert rel in str(e), e
        rejected = True
    if rel in STRICT_FILES:
        assert rejected, text
    assert not aside(path, rel)

    # the check, before any open, says the same (the broker's entries are the broker's to read)
    report = StoreChecker(str(path)).run()
    assert not any("cannot be checked" in p.detail for p in report.problems), report.problems
    if rel not in BROKER_TABLES or len(place) < 3:
        assert [p.where for p in report.problems if p.kind == "sidefile"] == ([rel] if rejected else []), \
            (text, report.problems)

    # read-only: always opens and moves nothing
    pymq.MessageStore(path, read_only=True).shutdown()
    assert not aside(path, rel)

    # a writer opens: the file set aside and noted when rejected
    store = open_store(path)
    try:
        noted = [n for n in store.open_report if os.path.basename(rel) in n]
        assert bool(noted) == rejected, (text, store.open_report)
    finally:
        store.shutdown()
    assert bool(aside(path, rel)) == rejected, os.listdir(os.path.dirname(path / rel))
    if rejected:
        notes = StoreChecker(str(path)).run().notes
        assert any(f"{os.path.basename(rel)}.corrupt-" in n for n in notes), notes


@pytest.mark.parametrize("rel", STRICT_FILES)
@pytest.mark.parametrize("value", list(VALUES))
def test_a_wrong_value_with_a_good_bak_loads_the_bak(template, tmp_path, rel, value):
    path = tmp_path / "s"
    shutil.copytree(template, path)
    write(path / (rel + ".bak"), dumps_fastjson(GOOD[rel]))
    write(path / rel, with_value(rel, PLACES[rel][-1], VALUES[value]))
    store = open_store(path, strict_open=True)
    try:
        assert not [n for n in store.open_report if os.path.basename(rel) in n], store.open_report
        if rel == "config/delayOffset.json":
            assert store.schedule_service.offsets.table() == {1: 0}
        else:
            cp = store.timer_service.checkpoint
            assert (cp.enqueue_offset, cp.second, cp.delivered) == (0, NOW_S - 5, {3})
    finally:
        store.shutdown()


def test_the_legal_values_still_load(template, tmp_path):
    """The decoders take what pymq and RocketMQ write: integer keys bare or quoted, the
    timer checkpoint's unset second (-1), missing fields at their defaults."""
    from pymq.store.delay_offsets import DelayOffsetManager
    from pymq.store.timer_service import TimerCheckpoint

    path = tmp_path / "s"
    shutil.copytree(template, path)
    cases = [("config/delayOffset.json", '{"offsetTable":{1:3,"2":0}}', {1: 3, 2: 0}),
             ("config/delayOffset.json", '{}', {}),
             ("config/timerCheckpoint.json", '{"enqueueOffset":4,"second":-1,"delivered":[0,9]}', (4, -1, {0, 9})),
             ("config/timerCheckpoint.json", '{}', (0, -1, set()))]
    for rel, text, want in cases:
        write(path / rel, text)
        if rel == "config/delayOffset.json":
            table = DelayOffsetManager(str(path))
            table.load()
            assert table.table() == want
        else:
            table = TimerCheckpoint(str(path))
            table.load()
            assert (table.enqueue_offset, table.second, table.delivered) == want
        store = pymq.MessageStore(path, cfg(strict_open=True))
        try:
            assert not store.open_report, store.open_report
        finally:
            store.shutdown()
        os.remove(path / rel)


# -- checkpoint --------------------------------------------------------------------------------

def damage(path, how):
    data = open(path, "rb").read()
    new = {"truncated": data[:100], "garbage": random.Random(7).randbytes(len(data)),
           "longer": data + b"\0" * 8}[how]
    with open(path, "wb") as f:
        f.write(new)
    return new


@pytest.mark.parametrize("how", ["truncated", "garbage", "longer"])
def test_a_damaged_checkpoint_is_kept_aside_by_an_open(template, tmp_path, how):
    path = tmp_path / "s"
    shutil.copytree(template, path)
    damaged = damage(path / "checkpoint", how)
    pymq.MessageStore(path, read_only=True).shutdown()
    assert not aside(path, "checkpoint")                       # read-only moves nothing
    store = pymq.MessageStore(path, cfg())
    try:
        kept = aside(path, "checkpoint")
        assert len(kept) == 1, os.listdir(path)
        assert open(path / kept[0], "rb").read() == damaged
        assert any(kept[0] in n for n in store.open_report), store.open_report
    finally:
        store.shutdown()
    assert os.path.getsize(path / "checkpoint") == 4096
    report = StoreChecker(str(path)).run()
    assert report.ok, report.problems
    assert any(n.startswith("damaged file set aside by an earlier open") and kept[0] in n
               for n in report.notes), report.notes


def test_a_zeroed_or_good_checkpoint_is_not_set_aside(template, tmp_path):
    path = tmp_path / "s"
    shutil.copytree(template, path)
    pymq.MessageStore(path, cfg()).shutdown()
    with open(path / "checkpoint", "r+b") as f:
        f.write(b"\0" * 4096)
    pymq.MessageStore(path, cfg()).shutdown()
    assert not aside(path, "checkpoint")
