"""What a :class:`pymq.Broker` adds to ``stats()``: pop in-flight counts per consumer group
and topic (RocketMQ 5's ``rocketmq_consumer_inflight_messages``), half messages not
resolved yet (``rocketmq_half_messages``), the broker's background services, and the
warnings of the process serving it (``server``)."""

from __future__ import annotations

from pymq.store.store_stats import services


def pop_stats(pop_service, broker) -> list:
    """``[{"group", "topic", "inflight", "waiting", "unread"}]``: messages received and
    not acked yet, messages held back behind their FIFO message group, and messages the
    group has not received at all, summed over the topic's queues."""
    with pop_service._lock:
        counts = queue_counts(pop_service.state)
    return pop_rows(counts, broker)


def queue_counts(state) -> list:
    """``[((group, topic, queue id), inflight, waiting, next offset)]`` of a PopState."""
    return [(key, len(s.inflight), len(s.waiting), s.next_offset) for key, s in state.queues.items()]


def pop_rows(counts: list, store) -> list:
    """:func:`pop_stats`'s rows from :func:`queue_counts`, the unread counts from ``store``."""
    rows: dict = {}
    for (group, topic, qid), inflight, waiting, next_offset in counts:
        row = rows.setdefault((group, topic), {"group": group, "topic": topic, "inflight": 0, "waiting": 0,
                                               "unread": 0})
        row["inflight"] += inflight
        row["waiting"] += waiting
        row["unread"] += max(0, store.get_max_offset_in_queue(topic, qid) - next_offset)
    return [rows[k] for k in sorted(rows)]


def broker_stats(broker, stats: dict) -> dict:
    """``stats`` (the store's) with the broker's additions."""
    stats["pop"] = pop_stats(broker.pop_service, broker)
    stats["transactions"] = {"half_pending": broker.transaction_service.pending()}
    stats["services"] = services(broker, broker.pop_service, broker.transaction_service)
    stats["server"] = {"warnings": [dict(w) for w in broker.server_warnings]}
    return stats
