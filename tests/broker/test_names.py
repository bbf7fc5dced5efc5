"""RocketMQ's name rules on the embedded API (issue 24): whole names only, so a trailing
newline (which ``re.match`` with ``$`` lets through) is refused, and nothing with one
reaches ``config/topics.json`` or ``config/subscriptionGroup.json``."""

from __future__ import annotations

import json
import os

import pytest

import pymq
from pymq.broker.topic_config import TopicConfig
from pymq.broker.validators import group_problem, has_control_character, topic_problem

try:
    from .pop_testlib import small_config
except ImportError:
    from pop_testlib import small_config


@pytest.mark.parametrize("name", ["NL\n", "NL\r\n", "\nNL", "N L", "NL\x00", "T" * 128, ""])
def test_topic_rule_is_a_full_match(name):
    assert topic_problem(name) is not None
    assert topic_problem("Topic_%|-9") is None


@pytest.mark.parametrize("name", ["G\n", "G\r", "G\t", "%RETRY%G", "%DLQ%G", "g" * 256, ""])
def test_group_rule_is_a_full_match(name):
    assert group_problem(name) is not None
    assert group_problem("g" * 255) is None


def test_control_characters_are_java_iso_controls():
    assert all(has_control_character(f"a{chr(c)}b") for c in [*range(0x20), *range(0x7F, 0xA0)])
    assert not any(has_control_character(f"a{chr(c)}b") for c in (0x20, 0x7E, 0xA0, 0x4E2D))


def test_broker_refuses_newline_names_and_persists_none(tmp_path):
    path = tmp_path / "store"
    with pymq.Broker(path, small_config()) as broker:
        with pytest.raises(ValueError):
            broker.update_subscription_group("G\n")
        assert broker.subscription_group_manager.find_subscription_group_config("G\n") is None
        tcm = broker.topic_config_manager
        with pytest.raises(ValueError):
            tcm.update_topic_config(TopicConfig("NL\n", 4, 4))
        assert tcm.create_topic_in_send_message_method("NL\n") is None
        assert tcm.select_or_default_topic_config("NL\n") is None
        broker.update_subscription_group("G")
        assert tcm.create_topic_in_send_message_method("T") is not None
    with open(os.path.join(path, "config", "topics.json")) as f:
        topics = set(json.load(f)["topicConfigTable"])
    with open(os.path.join(path, "config", "subscriptionGroup.json")) as f:
        groups = set(json.load(f)["subscriptionGroupTable"])
    assert "T" in topics and "G" in groups
    assert not any("\n" in n for n in topics | groups)
