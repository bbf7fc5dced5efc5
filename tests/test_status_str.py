"""The status enums print as their RocketMQ names (``print(result.status)`` used to print
``6``), and still compare, hash and serialise as their numbers."""

from __future__ import annotations

import json

import pytest

import pymq
from pymq import AppendMessageStatus, GetMessageStatus, PutMessageStatus
from conftest import small_config


@pytest.mark.parametrize("enum_class", [PutMessageStatus, GetMessageStatus, AppendMessageStatus])
def test_every_member_prints_its_name(enum_class):
    for member in enum_class:
        assert str(member) == f"{member}" == "%s" % member == member.name
        assert f"{member:>30}" == member.name.rjust(30)
        assert f"{member:d}" == str(member.value) and member == member.value and hash(member) == hash(member.value)
        assert json.dumps(member) == str(member.value)


def test_statuses_of_a_real_put_and_get(tmp_path):
    with pymq.MessageStore(str(tmp_path / "s"), small_config()) as store:
        put = store.put_message(pymq.Message("T", b"x"))
        bad = store.put_message(pymq.Message("T", b"y" * (store.config.max_message_size + 1)))
        assert store.wait_message("T", 0, 0, 10.0)           # dispatched to the queue
        got = store.get_message("g", "T", 0, 0)
    assert (str(put.status), str(got.status)) == ("PUT_OK", "FOUND")
    assert str(bad.status) == "MESSAGE_ILLEGAL" and f"{bad.status}" == "MESSAGE_ILLEGAL"
