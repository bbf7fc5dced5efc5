"""Unit tests of the server's pure parts: signatures, the client table, conversions."""

from __future__ import annotations

import pytest

from pymq.broker.client_manager import ClientManager
from pymq.server.grpc.auth import Authenticator, parse_authorization, sign
from pymq.server.grpc.send import java_string_hash


def _md(ak, sk, dt="20261124T080000Z"):
    return {"x-mq-date-time": dt,
            "authorization": f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature={sign(sk, dt)}"}


def test_signature_matches_the_official_clients():
    from rocketmq.v5.util.signature import Signature
    assert sign("secret", "20261124T080000Z") == Signature.sign("secret", "20261124T080000Z")
    fields = parse_authorization("MQv2-HMAC-SHA1 Credential=ak, SignedHeaders=x-mq-date-time, Signature=00ff")
    assert fields == {"Credential": "ak", "SignedHeaders": "x-mq-date-time", "Signature": "00ff"}


@pytest.mark.parametrize("md, ok", [
    (_md("ak", "sk"), True),
    (_md("ak", "other"), False),
    (_md("nobody", "sk"), False),
    ({}, False),
    ({"authorization": "Basic abc"}, False),
    ({**_md("ak", "sk"), "x-mq-date-time": "20261124T080001Z"}, False),
])
def test_authenticator(md, ok):
    assert (Authenticator({"ak": "sk"}).check(md) is None) == ok


def test_client_manager_expiry_and_producer_routing():
    cm = ClientManager(expire_ms=1000)
    a = cm.register("p1", "PRODUCER", None, ["T1"], channel="ch1")
    cm.register("p2", "PRODUCER", None, ["T2"], channel="ch2")
    cm.register("c1", "SIMPLE_CONSUMER", "g", ["T1"])
    assert cm.producer_for_topic("T1").client_id == "p1"
    assert cm.producer_for_topic("T2").client_id == "p2"
    assert cm.producer_for_topic("T3") is not None           # any producer with a channel
    assert [c.client_id for c in cm.consumers_of_group("g")] == ["c1"]
    assert cm.counts() == {"PRODUCER": 2, "SIMPLE_CONSUMER": 1}
    gone = cm.scan_expired(a.last_seen_ms + 5000)
    assert {c.client_id for c in gone} == {"p1", "p2", "c1"} and cm.clients() == []


def test_client_manager_channel_removed_only_if_same():
    cm = ClientManager()
    cm.register("p", "PRODUCER", channel="new")
    cm.unregister("p", channel="old")
    assert cm.get("p").channel == "new"
    cm.unregister("p", channel="new")
    assert cm.get("p").channel is None


def test_java_string_hash():
    # String.hashCode(): "" 0, "a" 97, "hello" 99162322, "polygenelubricants" Integer.MIN_VALUE
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == 2 ** 31


def test_delivery_timestamp_seconds_or_milliseconds():
    from rocketmq.grpc_protocol import definition_pb2 as pb
    from pymq.server.grpc.convert import delivery_time_ms
    sp = pb.SystemProperties()
    assert delivery_time_ms(sp) is None
    sp.delivery_timestamp.FromMilliseconds(1_795_000_000_123)
    assert delivery_time_ms(sp) == 1_795_000_000_123
    sp.delivery_timestamp.seconds = 1_795_000_000_123          # the Python client's millisecond value
    sp.delivery_timestamp.nanos = 0
    assert delivery_time_ms(sp) == 1_795_000_000_123


def test_receipt_renewer_maps_and_renews():
    import asyncio
    import types
    from pymq.broker.receipt_handle import InvalidReceiptHandleError
    from pymq.server.grpc.renewal import ReceiptRenewer

    changes = []

    def change(handle, ms):
        if handle == "gone":
            raise InvalidReceiptHandleError("stale")
        changes.append((handle, ms))
        return handle + "'"

    async def call(fn, *args):
        return fn(*args)

    server = types.SimpleNamespace(call=call, stopping=False,
                                   broker=types.SimpleNamespace(pop_service=types.SimpleNamespace(
                                       change_invisible_time=change)))
    r = ReceiptRenewer(server, slice_ms=3000, max_hold_ms=3_600_000)
    r.hold("c1", "h1", 0)              # due now
    r.hold("c1", "gone", 0)            # acked elsewhere meanwhile
    r.hold("c2", "h2", 60_000)         # not due
    assert asyncio.run(r.renew_due()) == 1
    assert changes == [("h1", 3000)] and len(r) == 2
    assert r.release("h1") == "h1'"    # the client's original handle maps to the current one
    assert r.release("other") == "other"
    r.drop_client("c2")
    assert len(r) == 0
