"""Helpers of the pop tests: a broker with small files and a clock the test moves."""

from __future__ import annotations

import shutil
import time

import pymq
from pymq.broker import Broker, BrokerConfig
from pymq.broker.receipt_handle import InvalidReceiptHandleError  # noqa: F401 - for the tests

T0 = 1_700_000_000_000


def small_config(**overrides) -> pymq.StoreConfig:
    values = dict(commitlog_file_size=256 * 1024, consume_queue_entries=1024, index_hash_slots=64,
                  index_max_entries=256, flush_interval_commitlog=50, warm_mapped_file_enable=False)
    values.update(overrides)
    return pymq.StoreConfig(**values)


class FakeClock:
    """Milliseconds that move only when told to."""

    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


def open_broker(path, clock=None, config=None, start=True, **broker_config) -> Broker:
    """A started broker whose pop service reads ``clock``; the revive service runs rarely
    (tests call ``pop_service.revive()`` themselves)."""
    broker_config.setdefault("pop_revive_interval", 3_600_000)
    b = Broker(path, config or small_config(), BrokerConfig(**broker_config))
    if clock is not None:
        b.pop_service.clock = clock
    return b.start() if start else b


def set_group(broker, group: str, fifo: bool = False, retry_max_times=None) -> None:
    """Mark ``group`` FIFO and/or give it a retry limit (subscription group config)."""
    from pymq.broker.subscription_group import SubscriptionGroupConfig
    sgm = broker.subscription_group_manager
    cfg = SubscriptionGroupConfig(group_name=group)
    cfg.consume_message_orderly = fifo
    if retry_max_times is not None:
        cfg.retry_max_times = retry_max_times
    sgm.update_subscription_group_config(cfg)


def wait_dispatched(store, timeout=10.0) -> None:
    deadline = time.monotonic() + timeout
    while store.dispatch_behind_bytes() and time.monotonic() < deadline:
        time.sleep(0.001)


def crash_copy(store, dst) -> None:
    """What a SIGKILL of the process would leave of ``store`` (running, not shut down) at
    this moment, copied to ``dst``: every record written (the page cache survives the
    kill), the abort marker, the tables and offsets as last persisted (a consumer offset
    or delay offset advanced since is lost), nothing a clean shutdown writes. Call it
    when no put is under way; open ``dst`` as the reopened store, and shut the original
    down (its shutdown no longer matters)."""
    wait_dispatched(store)
    shutil.copytree(store.store_path, dst, ignore=shutil.ignore_patterns("lock"))


def put(broker, topic, body, queue_id=0, message_group=None, tags=None):
    r = broker.put_message(pymq.Message(topic, body, queue_id=queue_id, message_group=message_group, tags=tags))
    assert r.status is pymq.PutMessageStatus.PUT_OK, r.status
    return r


def dlq_bodies(broker, group) -> list:
    """Bodies in ``%DLQ%{group}`` (all queues)."""
    wait_dispatched(broker)
    topic = "%DLQ%" + group
    out = []
    for q in broker.get_topics().get(topic, []):
        off = 0
        while True:
            r = broker.get_message("t", topic, q, off, 32)
            if r.status is not pymq.GetMessageStatus.FOUND:
                break
            out.extend(m.body for m in r.messages)
            off = r.next_begin_offset
    return out
