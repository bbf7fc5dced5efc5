"""RocketMQ 5's attribute alterations (``+name=value``, ``-name``) on topics and groups:
the merge into what a topic has, and every refusal with RocketMQ's wording."""

from __future__ import annotations

import pytest

from pymq.broker.attributes import GROUP_ATTRIBUTES, TOPIC_ATTRIBUTES, alter_attributes, parse_alterations


def topic(create: bool, current: dict, text: str) -> dict:
    return alter_attributes(create, TOPIC_ATTRIBUTES, current, parse_alterations(text))


def test_parse_keeps_the_signs():
    assert parse_alterations("+message.type=FIFO,-reserve.time") == {"+message.type": "FIFO", "-reserve.time": ""}
    assert parse_alterations(None) == {} and parse_alterations("") == {}


@pytest.mark.parametrize("text, why", [
    ("message.type=FIFO", "add/alter attribute format is wrong: message.type"),
    ("reserve.time", "del attribute format is wrong: reserve.time"),
    ("+a=1,+a=2", r"key duplication: \+a"),
])
def test_parse_refuses(text, why):
    with pytest.raises(ValueError, match=f"^{why}$"):
        parse_alterations(text)


def test_create_then_alter():
    created = topic(True, {}, "+message.type=FIFO,+queue.type=SimpleCQ")
    assert created == {"message.type": "FIFO", "queue.type": "SimpleCQ"}
    assert topic(False, created, "") == created                 # a 4.x update keeps them
    assert topic(False, created, "+message.type=NORMAL,+reserve.time=60") == {
        "message.type": "NORMAL", "queue.type": "SimpleCQ", "reserve.time": "60"}
    assert topic(False, created, "-message.type") == {"queue.type": "SimpleCQ"}
    assert created == {"message.type": "FIFO", "queue.type": "SimpleCQ"}     # not changed in place


@pytest.mark.parametrize("create, current, text, why", [
    (True, {}, "-message.type", "only add attribute is supported while creating topic. key: message.type"),
    (True, {}, "+colour=red", "unsupported key: colour"),
    (False, {}, "-message.type", "attempt to delete a nonexistent key: message.type"),
    (False, {"queue.type": "SimpleCQ"}, "+queue.type=SimpleCQ",
     "attempt to update an unchangeable attribute. key: queue.type"),
    (True, {}, "+message.type=SOMETIMES", r"value is not in set: \[DELAY, FIFO, LITE, MIXED, NORMAL, PRIORITY, "
                                          r"TRANSACTION, UNSPECIFIED\]"),
    (True, {}, "+reserve.time=soon", 'For input string: "soon"'),
    (True, {}, "+lite.topic.expiration=43201", r"value is not in range\(-1, 43200\)"),
    (True, {}, "+queue.type=BatchCQ", "queue.type=BatchCQ is not supported by pymq"),
    (True, {}, "+cleanup.policy=COMPACTION", "cleanup.policy=COMPACTION is not supported by pymq"),
])
def test_topic_refusals(create, current, text, why):
    with pytest.raises(ValueError, match=f"^{why}$"):
        topic(create, current, text)


def test_group_attributes():
    group = alter_attributes(True, GROUP_ATTRIBUTES, {}, {"+lite.bind.topic": "Parent", "+priority.factor": "50"})
    assert group == {"lite.bind.topic": "Parent", "priority.factor": "50"}
    assert alter_attributes(False, GROUP_ATTRIBUTES, group, {"-priority.factor": ""}) == {"lite.bind.topic": "Parent"}
    for bad in ({"+priority.factor": "101"}, {"+lite.bind.topic": "two words"}, {"+lite.sub.model": "Mine"},
                {"+lite.sub.reset.offset.exclusive": "yes"}, {"lite.bind.topic": "Parent"}):
        with pytest.raises(ValueError):
            alter_attributes(False, GROUP_ATTRIBUTES, group, bad)
