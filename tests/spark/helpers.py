"""Stores for the Spark tests: test-sized configuration, deterministic content, and
what get_message returns for them (the reference a read is compared with)."""

from __future__ import annotations

import pymq


def spark_config(**overrides) -> pymq.StoreConfig:
    """A StoreConfig with test-sized files (64 KiB segments, 64-entry queue files)."""
    values = dict(commitlog_file_size=64 * 1024, consume_queue_entries=64, index_hash_slots=64,
                  index_max_entries=256, flush_interval_commitlog=50, warm_mapped_file_enable=False)
    values.update(overrides)
    return pymq.StoreConfig(**values)


def body_of(topic: str, queue_id: int, i: int) -> bytes:
    return f"{topic}/{queue_id}/{i}".encode()


def fill_store(path, layout: dict, config=None, keys=True, tags=True) -> None:
    """Append ``layout[(topic, queue_id)]`` messages per queue, interleaved across queues,
    with deterministic bodies, tags, keys and a user property."""
    config = config or spark_config()
    counts = dict(layout)
    done = {k: 0 for k in counts}
    with pymq.MessageStore(path, config) as store:
        while any(done[k] < counts[k] for k in counts):
            for (topic, q), n in counts.items():
                i = done[(topic, q)]
                if i >= n:
                    continue
                msg = pymq.Message(topic, body_of(topic, q, i), queue_id=q,
                                   tags=f"tag{i % 3}" if tags and i % 4 else None,
                                   keys=[f"k{i}", f"q{q}"] if keys and i % 5 else None,
                                   properties={"i": str(i)})
                r = store.put_message(msg)
                assert r.status is pymq.PutMessageStatus.PUT_OK
                done[(topic, q)] = i + 1


def store_messages(path, config=None) -> list:
    """Every message of a store as pulled with get_message, queue by queue."""
    cfg = config or spark_config()
    cfg.max_transfer_count_on_message_in_memory = 100_000
    cfg.max_transfer_bytes_on_message_in_memory = 1 << 30
    cfg.max_transfer_count_on_message_in_disk = 100_000
    cfg.max_transfer_bytes_on_message_in_disk = 1 << 30
    out = []
    store = pymq.MessageStore(path, cfg, read_only=True)
    try:
        for topic, qids in sorted(store.get_topics().items()):
            for q in qids:
                off = store.get_min_offset_in_queue(topic, q)
                end = store.get_max_offset_in_queue(topic, q)
                while off < end:
                    g = store.get_message("check", topic, q, off, max_msgs=100_000)
                    assert g.status is pymq.GetMessageStatus.FOUND, g
                    out.extend(g.messages)
                    off = g.next_begin_offset
    finally:
        store.shutdown()
    return out


def row_key(r) -> tuple:
    return (r["topic"], r["queue_id"], r["queue_offset"])
