"""Queue offsets: resolving start and end offsets, their JSON form, and rate limits.

Offsets are kept per queue, ``{(store, topic, queue_id): offset}``, where ``offset`` is the
next queue offset to read (a range's end is exclusive, like Kafka's). Their JSON form is
Spark's Kafka source's, with string keys: ``{"topic": {"0": 23, "1": 40}}`` for one store;
a multi-store source nests it by store name: ``{"broker-a": {"topic": {"0": 23}}}``.
Streaming checkpoints hold this JSON.

In option values, -2 means earliest and -1 latest (Kafka's convention). Timestamps
resolve through the store's time lookup: the first offset whose store time is >= T
(``BoundaryType.LOWER``), for a start (``startingTimestamp``: read from T on) as for an
end (``endingTimestamp``: read what was stored before T).
"""

from __future__ import annotations

from typing import Optional

import pymq

EARLIEST = -2
LATEST = -1

QueueKey = tuple  # (store name, topic, queue id)


def to_json(offsets: dict, multi: bool) -> dict:
    """``{(store, topic, q): n}`` -> Kafka's shape (nested by store when ``multi``)."""
    out: dict = {}
    for (store, topic, q), off in sorted(offsets.items()):
        node = out.setdefault(store, {}) if multi else out
        node.setdefault(topic, {})[str(q)] = int(off)
    return out


def from_json(obj: dict, multi: bool) -> dict:
    """The inverse of :func:`to_json`."""
    out = {}
    items = obj.items() if multi else [("", obj)]
    for store, topics in items:
        for topic, queues in topics.items():
            for q, off in queues.items():
                out[(store, topic, int(q))] = int(off)
    return out


def spec_value(spec: dict, store: str, topic: str, queue_id: int) -> Optional[int]:
    """The value a JSON offsets option gives (store, topic, queue_id), if any. A
    multi-store source accepts the spec nested by store name, or flat (for every store)."""
    if store and store in spec and isinstance(spec[store], dict) and all(
            isinstance(v, dict) for v in spec[store].values()):
        spec = spec[store]
    queues = spec.get(topic)
    if not isinstance(queues, dict):
        return None
    value = queues.get(str(queue_id))
    return value if isinstance(value, int) else None


def by_time(store: pymq.MessageStore, topic: str, queue_id: int, ts_ms: int, lo: int, hi: int) -> int:
    """First offset of the queue whose store time is >= ``ts_ms`` (``hi`` when none is)."""
    off = store.get_offset_in_queue_by_time(topic, queue_id, ts_ms, pymq.BoundaryType.LOWER)
    return min(max(off, lo), hi)


def resolve(which: str, opts, store: pymq.MessageStore, store_name: str, topic: str, queue_id: int,
            lo: int, hi: int) -> int:
    """The start or end offset (``which``) of one queue with bounds [lo, hi) from the
    options, by precedence: ``*Timestamp``, ``*OffsetsByTimestamp``, ``*Offsets``. Queues
    a JSON spec does not list get the default (earliest for a start, latest for an end).
    A start below ``lo`` is returned as is: the caller decides about data loss."""
    ts = opts.starting_ts if which == "start" else opts.ending_ts
    if ts is not None:
        return by_time(store, topic, queue_id, ts, lo, hi)
    by_ts = opts.starting_by_ts if which == "start" else opts.ending_by_ts
    if by_ts is not None:
        value = spec_value(by_ts, store_name, topic, queue_id)
        if value is not None:
            return by_time(store, topic, queue_id, value, lo, hi)
    spec = opts.starting if which == "start" else opts.ending
    default = lo if which == "start" else hi
    if spec == "earliest":
        return lo
    if spec == "latest":
        return hi
    value = spec_value(spec, store_name, topic, queue_id)
    if value is None:
        return default
    if value == EARLIEST:
        return lo
    if value == LATEST:
        return hi
    return value


def limit_by_backlog(start: dict, latest: dict, max_rows: int) -> dict:
    """End offsets reading at most ``max_rows`` rows in all from ``start`` towards
    ``latest``, shared by backlog (like Kafka's ``maxOffsetsPerTrigger``): each queue gets
    ``floor(max_rows * lag / total lag)``, and what rounding leaves goes to the largest
    remainders, so the total is exactly ``min(max_rows, total lag)`` and every queue with a
    backlog moves once the limit allows. ``start`` holds every key of ``latest``."""
    lags = {k: max(0, latest[k] - start[k]) for k in latest}
    total = sum(lags.values())
    if total <= max_rows:
        return {k: max(start[k], latest[k]) for k in latest}
    shares = {}
    rest = []
    given = 0
    for k, lag in lags.items():
        exact = max_rows * lag / total
        n = min(lag, int(exact))
        shares[k] = n
        given += n
        if n < lag:
            rest.append((exact - n, lag, k))
    rest.sort(key=lambda r: (-r[0], -r[1], r[2]))
    for _, lag, k in rest:
        if given >= max_rows:
            break
        shares[k] += 1
        given += 1
    return {k: start[k] + shares[k] for k in latest}
