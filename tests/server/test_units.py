"""Unit tests of the server's pure parts: signatures, the client table, conversions."""

from __future__ import annotations

import pytest

from pymq.broker.client_manager import ClientManager
import calendar
import time

from pymq.server.grpc.auth import Authenticator, clock_skew, parse_authorization, parse_date_time, sign
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
    at = calendar.timegm((2026, 11, 24, 8, 0, 0))           # the signed date-time, read as UTC
    assert (Authenticator({"ak": "sk"}, clock=lambda: at).check(md) is None) == ok


def _utc(seconds: float) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(seconds))


@pytest.mark.parametrize("offset_s, ok", [(0, True), (-899, True), (899, True), (-16 * 60, False), (16 * 60, False)])
def test_signed_date_time_must_be_near_the_server_clock(offset_s, ok):
    now = float(int(time.time()))
    why = Authenticator({"ak": "sk"}, clock=lambda: now).check(_md("ak", "sk", _utc(now + offset_s)))
    assert (why is None) == ok, why
    if not ok:
        assert "16m 0s" in why and "900 s allowed" in why


@pytest.mark.parametrize("text", ["20010101T000000Z", "yesterday", "20261324T080000Z", "20261124T250000Z",
                                  "20261124T080000", "2026-11-24 08:00", ""])
def test_old_and_malformed_date_times_are_refused(text):
    md = _md("ak", "sk", text)
    why = Authenticator({"ak": "sk"}).check(md)
    assert why is not None
    if text == "20010101T000000Z":
        assert "behind the server's clock" in why
    elif text:
        assert "is not a date-time" in why
    assert Authenticator({"ak": "sk"}, max_clock_skew_s=0).check(md) is None or not text   # 0: not checked


def test_date_time_forms_of_the_official_clients():
    at = calendar.timegm((2026, 11, 24, 8, 0, 0))
    assert parse_date_time("20261124T080000Z") == (at, False)                  # Java, Python, Node, C++, Go
    assert parse_date_time("2026-11-24T08:00:00.123456789Z") == (pytest.approx(at + 0.123456), True)   # Rust: RFC 3339
    assert parse_date_time("2026-11-24T16:00:00+08:00") == (at, True)
    # the compact form is also read as the server's local wall time (the Java and Python
    # clients write local time followed by 'Z')
    local = time.strftime("%Y%m%dT%H%M%SZ", time.localtime(at))
    assert abs(clock_skew(local, at)) < 1


@pytest.mark.parametrize("zone_s", [8 * 3600, -5 * 3600, 5 * 3600 + 2700, -9 * 3600 - 1800])
def test_any_zone_reads_local_time_from_elsewhere_and_still_bounds_replays(zone_s):
    """A client eight hours east (or 5 h 45 west...) writing its local time with a 'Z':
    refused when only UTC and the server's zone count, passed with ``any_zone``, which
    still refuses a date more than 14 h 15 min ahead or 12 h 15 min behind, and 2001."""
    now = float(int(time.time()))
    strict, anywhere = (Authenticator({"ak": "sk"}, clock=lambda: now, any_zone=a) for a in (False, True))
    own_zone = time.localtime(now).tm_gmtoff
    text = _utc(now + zone_s)
    if zone_s != own_zone:
        assert "another time zone" in strict.check(_md("ak", "sk", text))
    assert anywhere.check(_md("ak", "sk", text)) is None
    assert anywhere.check(_md("ak", "sk", _utc(now + 14 * 3600 + 16 * 60))) is not None
    assert anywhere.check(_md("ak", "sk", _utc(now - 12 * 3600 - 16 * 60))) is not None
    assert anywhere.check(_md("ak", "sk", "20010101T000000Z")) is not None


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


def test_receipt_renewer_failures_are_logged_once_per_episode(tmp_path, caplog):
    """Renewals refused by the store (its appender unwritable, as on a full disk) log one
    record for the episode, not one per handle and pass, and its end when they work again."""
    import asyncio
    import logging
    import types

    import pymq
    from pymq.server.grpc.renewal import ReceiptRenewer
    from tests.conftest import small_config

    broker = pymq.Broker(tmp_path / "s", small_config()).start()
    try:
        for i in range(5):
            broker.put_message(pymq.Message("J", b"x%d" % i))
        consumer = pymq.SimpleConsumer(broker, "g", "J", await_duration=2)
        got = []
        while len(got) < 5:
            more = consumer.receive(5, 60)
            assert more, "the puts were never dispatched"
            got += more

        async def call(fn, *args):
            return fn(*args)

        server = types.SimpleNamespace(broker=broker, call=call, stopping=False)
        r = ReceiptRenewer(server, slice_ms=60_000, max_hold_ms=3_600_000)
        for m in got:
            r.hold("c1", m.receipt_handle, 0)
        caplog.set_level(logging.WARNING, logger="pymq")
        broker.commit_log.appender.set_writeable(False, "disk full (test)")
        for _ in range(10):
            assert asyncio.run(r.renew_due()) == 0
        failed = [rec for rec in caplog.records if "auto-renewing" in rec.getMessage()]
        assert len(failed) == 1 and r.errors.failures == 50 and r.errors.failing == 50
        broker.commit_log.appender.set_writeable(True)
        assert asyncio.run(r.renew_due()) == 5
        recovered = [rec for rec in caplog.records if "recovered after 50 failed attempts" in rec.getMessage()]
        assert len(recovered) == 1 and r.errors.failing == 0
    finally:
        broker.shutdown()


def test_request_error_log_one_record_per_kind_and_window(caplog, monkeypatch):
    import logging

    from pymq.server import error_log

    clock = [1000.0]
    monkeypatch.setattr(error_log.time, "monotonic", lambda: clock[0])
    notes = error_log.RequestErrorLog(logging.getLogger("pymq.test"), window_s=60)
    caplog.set_level(logging.WARNING, logger="pymq")
    assert notes.note("ReceiveMessage", "ReceiveMessage failed", ValueError("disk"))
    assert not any(notes.note("ReceiveMessage", "ReceiveMessage failed") for _ in range(99))
    assert notes.note("AckMessage", "AckMessage failed")            # another kind has its own window
    clock[0] += 61
    assert notes.note("ReceiveMessage", "ReceiveMessage failed")
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["ReceiveMessage failed", "AckMessage failed",
                        "ReceiveMessage failed (99 more since the last report)"]
    assert caplog.records[0].exc_info is not None and notes.noted == 102


def test_combined_status_single_code_when_all_fail_alike():
    from rocketmq.grpc_protocol import definition_pb2 as pb, service_pb2 as svc
    from pymq.server.grpc.send import combined_status

    def entries(*codes):
        resp = svc.SendMessageResponse()
        for c in codes:
            resp.entries.add(status=pb.Status(code=c, message=pb.Code.Name(c)))
        return resp.entries

    assert combined_status(entries(pb.Code.OK, pb.Code.OK)).code == pb.Code.OK
    too_large = combined_status(entries(*[pb.Code.MESSAGE_BODY_TOO_LARGE] * 3))
    assert too_large.code == pb.Code.MESSAGE_BODY_TOO_LARGE and too_large.message == "MESSAGE_BODY_TOO_LARGE"
    assert combined_status(entries(pb.Code.BAD_REQUEST)).code == pb.Code.BAD_REQUEST
    assert combined_status(entries(pb.Code.OK, pb.Code.BAD_REQUEST)).code == pb.Code.MULTIPLE_RESULTS
    assert combined_status(entries(pb.Code.TOO_MANY_REQUESTS, pb.Code.BAD_REQUEST)).code == pb.Code.MULTIPLE_RESULTS


def test_subscription_group_manager_creates_only_legal_groups(tmp_path):
    """Embedded use: the broker's group table auto-creates a group on first use only when
    its name is legal (RocketMQ 5's ``findSubscriptionGroupConfig``); a group already in
    the table is found whatever its name."""
    import pymq
    from pymq.broker.subscription_group import SubscriptionGroupConfig
    cfg = pymq.StoreConfig(commitlog_file_size=1 << 20, consume_queue_entries=1000, index_hash_slots=64,
                           index_max_entries=4096, warm_mapped_file_enable=False)
    with pymq.Broker(str(tmp_path / "store"), cfg).start() as broker:
        sgm = broker.subscription_group_manager
        for name in ("bad group!", "g@x", "g" * 300, "%RETRY%foo", "%DLQ%foo", ""):
            assert sgm.find_subscription_group_config(name) is None, name
            with pytest.raises(ValueError):
                sgm.update_subscription_group_config(SubscriptionGroupConfig(name))
        assert sgm.find_subscription_group_config("fine_group-1").group_name == "fine_group-1"
        assert set(sgm.groups()) >= {"fine_group-1"}
        assert not {"bad group!", "g@x", "%RETRY%foo", "%DLQ%foo"} & set(sgm.groups())
        with pytest.raises(pymq.broker.retry.SendBackError):
            broker.send_message_back("bad group!", 0)


@pytest.mark.parametrize("host, loopback", [
    ("127.0.0.1", True), ("127.1.2.3", True), ("::1", True), ("[::1]", True), ("localhost", True),
    ("0.0.0.0", False), ("::", False), ("10.1.2.3", False), ("192.0.2.1", False),
])
def test_is_loopback(host, loopback):
    from pymq.server.exposure import is_loopback
    assert is_loopback(host) is loopback


def test_bind_warnings_say_what_a_bind_exposes():
    from pymq.server.exposure import bind_warnings

    def kinds(host, **kw):
        args = dict(access_key=None, grpc_port=8081, grpc_tls=False, remoting_ports={"broker": 10911},
                    metrics_host=None)
        args.update(kw)
        return [w["kind"] for w in bind_warnings(host, **args)]
    assert kinds("127.0.0.1") == []
    assert kinds("127.0.0.1", metrics_host="0.0.0.0") == ["public-metrics"]
    assert kinds("0.0.0.0") == ["open-access", "plaintext"]
    assert kinds("0.0.0.0", access_key="ak") == ["plaintext"]
    assert kinds("0.0.0.0", access_key="ak", grpc_tls=True, remoting_ports={}) == []
    assert kinds("0.0.0.0", access_key="ak", grpc_port=None, remoting_ports={"namesrv": 9876}) == ["plaintext"]
    msg = bind_warnings("0.0.0.0", access_key=None, grpc_port=None, grpc_tls=False, remoting_ports={},
                        metrics_host=None)[0]["message"]
    assert "without access keys" in msg and "0.0.0.0" in msg
    # a master's HA port: the whole commit log to anyone, keys or not (the HA protocol has none)
    assert kinds("127.0.0.1", ha_port=10912) == []
    assert kinds("0.0.0.0", access_key="ak", grpc_tls=True, remoting_ports={}, ha_port=10912) == ["open-replication"]
    msg = bind_warnings("0.0.0.0", access_key="ak", grpc_port=None, grpc_tls=False, remoting_ports={},
                        metrics_host=None, ha_port=0)[0]["message"]
    assert "whole commit log" in msg and "(picked)" in msg


def test_broker_stats_carry_the_server_warnings(tmp_path):
    import pymq
    with pymq.Broker(tmp_path / "s", pymq.StoreConfig(commitlog_file_size=1 << 20,
                                                      warm_mapped_file_enable=False)) as b:
        assert b.stats()["server"] == {"warnings": []}
        b.server_warnings.append({"kind": "open-access", "message": "m"})
        assert b.stats()["server"]["warnings"] == [{"kind": "open-access", "message": "m"}]


def test_connection_deadlines():
    """Which connections a sweep drops: idle ones, and those whose frame began too long ago
    (unless their reading is paused for a backlog); a draining backlog counts as activity."""
    from types import SimpleNamespace

    from pymq.server.remoting.deadlines import overdue, sweep_interval

    class Transport:
        def __init__(self, backlog=0):
            self.backlog = backlog

        def get_write_buffer_size(self):
            return self.backlog

    def conn(last, frame=None, paused=False, backlog=0):
        return SimpleNamespace(transport=Transport(backlog), last_active=last, frame_started=frame,
                               reading_paused=paused, write_backlog=0)
    assert overdue(conn(last=100.0), 219.0, 120, 10) is None
    assert overdue(conn(last=100.0), 221.0, 120, 10) == "idle"
    assert overdue(conn(last=100.0), 221.0, 0, 10) is None                  # idle timeout off
    assert overdue(conn(last=215.0, frame=209.0), 220.0, 120, 10) == "slow frame"
    assert overdue(conn(last=215.0, frame=209.0, paused=True), 220.0, 120, 10) is None
    assert overdue(conn(last=215.0, frame=209.0), 220.0, 120, 0) is None    # frame limit off
    draining = conn(last=100.0, backlog=1000)
    assert overdue(draining, 221.0, 120, 10) is None and draining.last_active == 221.0
    assert sweep_interval(120, 10) == 1.0 and sweep_interval(2, 1) == 0.25 and sweep_interval(0, 0) == 0
