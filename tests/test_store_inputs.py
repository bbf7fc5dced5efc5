"""Inputs and shutdown (issue 22, item 10).

* a wait's ``timeout_s``: NaN or negative raises ValueError, ``math.inf`` waits without a
  limit (it raised OverflowError, and NaN waited forever);
* shutdown wakes every waiter at once, and each raises StoreStateError (an ``async for``
  over a ``pymq.aio.Consumer`` ends);
* after shutdown every call raises StoreStateError (a commit was silently lost);
* a queue id that is not an int raises TypeError everywhere (``1.5`` read queue 1,
  ``True`` too, ``"1"`` created a queue of that name).
"""

from __future__ import annotations

import asyncio
import math
import os
import threading
import time

import pytest

import pymq
import pymq.aio
from pymq.store.fence import public_methods

from conftest import small_config

WAIT_S = 5.0            # how long a call that should return at once may take, at most


def outcome_within(fn, seconds: float = WAIT_S):
    """Run ``fn`` in a thread: ``("ok", result)`` or ``("raised", exc)``, or
    ``("blocked", None)`` when it did not finish within ``seconds``."""
    out: list = []

    def run():
        try:
            out.append(("ok", fn()))
        except BaseException as e:      # noqa: BLE001 - handed to the test
            out.append(("raised", e))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    return out[0] if out else ("blocked", None)


def put(store, topic="T", queue_id=0, body=b"x"):
    r = store.put_message(pymq.Message(topic, body, queue_id=queue_id))
    assert r.is_ok(), r
    return r


def dispatched(store):
    deadline = time.monotonic() + 5
    while store.dispatch_behind_bytes() and time.monotonic() < deadline:
        time.sleep(0.002)


@pytest.fixture
def broker(tmp_path):
    b = pymq.Broker(tmp_path / "broker", small_config()).start()
    yield b
    b.shutdown()


# -- timeouts -------------------------------------------------------------------------------

def _waits(store, timeout):
    """Every public wait of a store, as a function of its timeout."""
    return {
        "wait_message": lambda: store.wait_message("T", 0, 10, timeout),
        "wait_messages": lambda: store.wait_messages("T", {0: 10}, timeout),
        "wait_messages_topics": lambda: store.wait_messages(("T", "U"), {"T": {0: 10}, "U": {}}, timeout),
        "consumer_poll": lambda: pymq.Consumer(store, "g", "T", consume_from="latest").poll(timeout),
        "aio_wait_message": lambda: asyncio.run(pymq.aio.AsyncStore(store).wait_message("T", 0, 10, timeout)),
        "aio_wait_messages": lambda: asyncio.run(pymq.aio.AsyncStore(store).wait_messages("T", {0: 10}, timeout)),
        "aio_consumer_poll": lambda: asyncio.run(_aio_poll(store, timeout)),
    }


async def _aio_poll(store, timeout):
    return await pymq.aio.Consumer(store, "g", "T", consume_from="latest").poll(timeout)


WAIT_NAMES = list(_waits(None, 0))


@pytest.mark.parametrize("bad", [math.nan, -1, -0.001, -math.inf], ids=["nan", "-1", "-1ms", "-inf"])
@pytest.mark.parametrize("name", WAIT_NAMES)
def test_nan_or_negative_timeout_raises_value_error(store, name, bad):
    put(store)
    kind, value = outcome_within(_waits(store, bad)[name])
    assert kind == "raised" and isinstance(value, ValueError), (kind, value)


@pytest.mark.parametrize("name", WAIT_NAMES)
def test_non_number_timeout_raises_type_error(store, name):
    kind, value = outcome_within(_waits(store, "1")[name])
    assert kind == "raised" and isinstance(value, TypeError), (kind, value)


@pytest.mark.parametrize("bad", [math.nan, -1.0])
def test_pop_and_simple_consumer_refuse_nan_or_negative_waits(broker, bad):
    kind, value = outcome_within(lambda: broker.pop_message("g", "T", 1, 1000, timeout_s=bad))
    assert kind == "raised" and isinstance(value, ValueError), (kind, value)
    with pytest.raises(ValueError):
        pymq.SimpleConsumer(broker, "g", "T", await_duration=bad)


@pytest.mark.parametrize("name", WAIT_NAMES)
def test_infinite_timeout_waits_until_a_message_comes(store, name):
    for i in range(10):
        put(store, body=b"%d" % i)
    dispatched(store)
    result: list = []
    t = threading.Thread(target=lambda: result.append(outcome_within(_waits(store, math.inf)[name], 30)))
    t.start()
    time.sleep(0.3)
    assert t.is_alive(), result             # waiting, not failing with OverflowError
    put(store, body=b"the 11th")
    t.join(10)
    assert not t.is_alive()
    kind, value = result[0]
    assert kind == "ok", (kind, value)
    if name.endswith("consumer_poll"):      # a consumer from the latest offset
        assert [m.body for m in value] == [b"the 11th"]
    else:
        assert value is True


def test_pop_waits_without_limit(broker):
    result: list = []
    t = threading.Thread(target=lambda: result.append(
        outcome_within(lambda: broker.pop_message("g", "T", 1, 10_000, timeout_s=math.inf), 30)))
    t.start()
    time.sleep(0.3)
    assert t.is_alive(), result
    put(broker, body=b"popped")
    t.join(10)
    kind, value = result[0]
    assert kind == "ok" and [m.body for m in value.messages] == [b"popped"], (kind, value)


# -- shutdown wakes every waiter --------------------------------------------------------------

def _start_waiters(waits: dict) -> dict:
    """Start each wait in a thread; returns name -> (thread, result list, start time)."""
    started = {}
    for name, fn in waits.items():
        result: list = []

        def run(fn=fn, result=result):
            try:
                result.append(("ok", fn()))
            except BaseException as e:      # noqa: BLE001
                result.append(("raised", e))

        t = threading.Thread(target=run, daemon=True)
        t.start()
        started[name] = (t, result)
    return started


def _check_all_raised(started: dict, t0: float) -> None:
    for name, (t, result) in started.items():
        t.join(max(0.1, t0 + WAIT_S - time.monotonic()))
        assert not t.is_alive(), f"{name} still waits after the shutdown"
        kind, value = result[0]
        assert kind == "raised" and isinstance(value, pymq.StoreStateError), (name, kind, value)


@pytest.mark.parametrize("read_only", [False, True], ids=["writer", "read_only"])
def test_shutdown_wakes_every_waiter_at_once(tmp_path, read_only):
    path = tmp_path / "s"
    writer = pymq.MessageStore(path, small_config()).start()
    put(writer)
    dispatched(writer)
    store = pymq.MessageStore(path, read_only=True).start() if read_only else writer
    try:
        waits = {}
        for timeout in (60.0, math.inf):
            waits.update({f"{name}@{timeout}": fn for name, fn in _waits(store, timeout).items()})
        started = _start_waiters(waits)
        time.sleep(0.5)
        assert all(t.is_alive() for t, _r in started.values()), {n: r for n, (t, r) in started.items() if r}
        t0 = time.monotonic()
        store.shutdown()
        _check_all_raised(started, t0)
        assert time.monotonic() - t0 < WAIT_S
        # and a wait begun after the shutdown raises at once
        for name, fn in _waits(store, 60.0).items():
            kind, value = outcome_within(fn, 2.0)
            assert kind == "raised" and isinstance(value, pymq.StoreStateError), (name, kind, value)
    finally:
        store.shutdown()
        writer.shutdown()


def test_shutdown_wakes_a_brokers_pops(tmp_path):
    broker = pymq.Broker(tmp_path / "b", small_config()).start()
    put(broker, topic="Other")

    async def aio_receive():
        return await pymq.aio.SimpleConsumer(broker, "g", "T", await_duration=60).receive(1, 30)

    started = _start_waiters({
        "pop_message": lambda: broker.pop_message("g", "T", 1, 30_000, timeout_s=60),
        "simple_consumer": lambda: pymq.SimpleConsumer(broker, "g", "T", await_duration=60).receive(1, 30),
        "aio_simple_consumer": lambda: asyncio.run(aio_receive()),
        "wait_message": lambda: broker.wait_message("T", 0, 0, math.inf),
    })
    time.sleep(0.5)
    assert all(t.is_alive() for t, _r in started.values())
    t0 = time.monotonic()
    broker.shutdown()
    _check_all_raised(started, t0)


def test_async_for_ends_when_the_store_shuts_down(store):
    put(store, body=b"one")

    async def drain():
        return [m.body async for m in pymq.aio.Consumer(store, "g", "T")]

    started = _start_waiters({"async_for": lambda: asyncio.run(drain())})
    time.sleep(0.5)
    t0 = time.monotonic()
    store.shutdown()
    t, result = started["async_for"]
    t.join(WAIT_S)
    assert not t.is_alive() and result == [("ok", [b"one"])], result
    assert time.monotonic() - t0 < WAIT_S


# -- every call after shutdown raises ----------------------------------------------------------

@pytest.mark.parametrize("kind", ["writer", "read_only", "broker", "never_started"])
def test_every_call_after_shutdown_raises(tmp_path, kind):
    path = tmp_path / "s"
    if kind == "broker":
        store = pymq.Broker(path, small_config()).start()
    else:
        store = pymq.MessageStore(path, small_config())
        if kind != "never_started":
            store.start()
    put_ok = kind != "never_started"
    if put_ok:
        put(store)
    writer = store
    if kind == "read_only":
        store = pymq.MessageStore(path, read_only=True).start()
    store.shutdown()
    names = [n for n in public_methods(type(store)) if n not in ("shutdown", "close")]
    assert {"put_message", "get_message", "get_message_raw", "query_message", "commit_offset",
            "get_offset_in_queue_by_time", "wait_message", "start", "stats"} <= set(names)
    for name in names:
        with pytest.raises(pymq.StoreStateError, match="shut down"):
            getattr(store, name)()          # whatever the arguments: the store is shut
    # with real arguments too, the hot paths first
    for call in (lambda: store.put_message(pymq.Message("T", b"late")),
                 lambda: store.put_messages([pymq.Message("T", b"late")]),
                 lambda: store.get_message("g", "T", 0, 0),
                 lambda: store.get_message_raw("g", "T", 0, 0),
                 lambda: store.get_offset_in_queue_by_time("T", 0, 0),
                 lambda: store.query_message("T", "k"),
                 lambda: store.commit_offset("g", "T", 0, 1),
                 lambda: store.query_offset("g", "T", 0),
                 lambda: pymq.Consumer(store, "g", "T").poll(0),
                 lambda: asyncio.run(pymq.aio.AsyncStore(store).put_message(pymq.Message("T", b"late")))):
        with pytest.raises(pymq.StoreStateError):
            call()
    store.shutdown()                        # again: nothing
    store.close()
    store.__exit__(None, None, None)
    if writer is not store:
        writer.shutdown()


def test_a_commit_after_shutdown_is_refused_not_lost(tmp_path):
    path = tmp_path / "s"
    with pymq.MessageStore(path, small_config()) as store:
        store.commit_offset("g", "T", 0, 3)
    with pytest.raises(pymq.StoreStateError):
        store.commit_offset("g", "T", 0, 7)
    with pymq.MessageStore(path, small_config()) as again:
        assert again.query_offset("g", "T", 0) == 3


# -- queue ids ---------------------------------------------------------------------------------

QUEUE_ID_CALLS = {
    "get_message": lambda s, q: s.get_message("g", "T", q, 0),
    "get_message_raw": lambda s, q: s.get_message_raw("g", "T", q, 0),
    "commit_offset": lambda s, q: s.commit_offset("g", "T", q, 0),
    "query_offset": lambda s, q: s.query_offset("g", "T", q),
    "wait_message": lambda s, q: s.wait_message("T", q, 0, 0.05),
    "wait_messages": lambda s, q: s.wait_messages("T", {q: 0}, 0.05),
    "wait_messages_topics": lambda s, q: s.wait_messages(("T", "U"), {"T": {q: 0}}, 0.05),
    "get_min_offset_in_queue": lambda s, q: s.get_min_offset_in_queue("T", q),
    "get_max_offset_in_queue": lambda s, q: s.get_max_offset_in_queue("T", q),
    "get_commit_log_offset_in_queue": lambda s, q: s.get_commit_log_offset_in_queue("T", q, 0),
    "get_offset_in_queue_by_time": lambda s, q: s.get_offset_in_queue_by_time("T", q, 0),
    "get_message_store_timestamp": lambda s, q: s.get_message_store_timestamp("T", q, 0),
    "get_earliest_message_time": lambda s, q: s.get_earliest_message_time("T", q),
    "has_queue": lambda s, q: s.has_queue("T", q),
    "read_columns": lambda s, q: s.read_columns("T", q, 0, 1),
    "consumer_seek": lambda s, q: pymq.Consumer(s, "g", "T").seek(q, 0),
    "aio_wait_message": lambda s, q: asyncio.run(pymq.aio.AsyncStore(s).wait_message("T", q, 0, 0.05)),
    "aio_wait_messages": lambda s, q: asyncio.run(pymq.aio.AsyncStore(s).wait_messages("T", {q: 0}, 0.05)),
}

BAD_QUEUE_IDS = {"float": 1.5, "whole_float": 1.0, "str": "1", "none": None, "true": True, "false": False}


@pytest.mark.parametrize("read_only", [False, True], ids=["writer", "read_only"])
def test_a_queue_id_that_is_not_an_int_raises_type_error(tmp_path, read_only):
    path = tmp_path / "s"
    writer = pymq.MessageStore(path, small_config()).start()
    for q in (0, 1):
        put(writer, queue_id=q, body=b"q%d" % q)
    dispatched(writer)
    writer.flush()
    store = pymq.MessageStore(path, read_only=True).start() if read_only else writer
    try:
        topics = store.get_topics()
        for call_name, call in QUEUE_ID_CALLS.items():
            if read_only and call_name == "commit_offset":
                continue                # a read-only store refuses commits whatever the id
            for id_name, bad in BAD_QUEUE_IDS.items():
                kind, value = outcome_within(lambda: call(store, bad))
                assert kind == "raised" and isinstance(value, TypeError), (call_name, id_name, kind, value)
        # nothing was created or read for them: the queues are what they were
        assert store.get_topics() == topics == {"T": [0, 1]}
        assert sorted(os.listdir(path / "consumequeue" / "T")) == ["0", "1"]
        # and real ids still work
        assert [m.body for m in store.get_message("g", "T", 1, 0).messages] == [b"q1"]
        assert store.get_max_offset_in_queue("T", 1) == 1 and store.has_queue("T", 1)
    finally:
        store.shutdown()
        writer.shutdown()


def test_int_subclasses_are_queue_ids(store):
    """An int subclass (an IntEnum) is an int; only bool is refused."""
    import enum

    class Q(enum.IntEnum):
        ONE = 1

    put(store, queue_id=1, body=b"one")
    dispatched(store)
    assert [m.body for m in store.get_message("g", "T", Q.ONE, 0).messages] == [b"one"]
    assert store.get_max_offset_in_queue("T", Q.ONE) == 1
