"""``MessageStore.stats()``: what a store is doing, as a plain JSON-serialisable dict.

The figures of RocketMQ's StoreStatsService and broker runtime info (``mqadmin
brokerStatus``) for one store: put and get totals and rates (from
:mod:`.store_stats_service`), the commit log's extent and how far flushing and dispatch
are behind, per topic and queue offsets, per group consumer lag, the disk and the
cleaning thresholds, the key index (paused for want of space or not), pending delayed
and timer messages, and the health of the background services. ``docs/operations.md``
lists every key.

Nothing here runs on the put path: the dict is built when asked for. A read-only store
(``pymq stats`` on a live store) re-reads the writer's side files (consumer offsets,
delay offsets, timer checkpoint) each time, so its figures follow the writer's.
"""

from __future__ import annotations

import time
from typing import Optional

import numpy as np

from .consumer_offsets import ConsumerOffsetManager
from .delay_offsets import DelayOffsetManager
from .disk_guard import disk_usage
from .episode_log import EpisodeLog
from .schedule_service import SCHEDULE_TOPIC
from .service_thread import ServiceThread
from .timer_service import TIMER_TOPIC, TimerCheckpoint

_CQ_UNIT = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags", ">i8")])


def _tags_codes(cq, start: int, end: int) -> np.ndarray:
    """tagsCodes of the consume-queue entries ``[start, end)``."""
    parts = []
    pos, stop = start * _CQ_UNIT.itemsize, end * _CQ_UNIT.itemsize
    mfq = cq.mapped_file_queue
    while pos < stop:
        mf = mfq.find_mapped_file_by_offset(pos)
        if mf is None or mf.file_from_offset > pos:
            break
        n = min(stop, mf.file_from_offset + mf.read_position) - pos
        if n <= 0:
            break
        parts.append(np.frombuffer(mf.read(pos - mf.file_from_offset, n), _CQ_UNIT)["tags"].astype(np.int64))
        pos += n
    return np.concatenate(parts) if parts else np.empty(0, np.int64)


class TimerBacklog:
    """Counts the timer messages not delivered yet.

    A timer message is an entry of the timer queue (``rmq_sys_wheel_timer``, tagsCode =
    its due time). Pending are the entries the timer service has not taken in yet, plus
    those taken in whose due second has not been delivered (minus what the current
    second delivered already). The due times of entries taken in are read once and kept
    while they are in the future, so each call reads only the new entries.
    """

    def __init__(self) -> None:
        self._scanned = 0
        self._due = np.empty(0, np.int64)

    def count(self, cq, enqueue_offset: int, second: int, delivered: int) -> int:
        if cq is None:
            return 0
        low, high = cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()
        frontier = second * 1000
        taken = min(max(enqueue_offset, low), high)
        if self._scanned > high or self._scanned < low:     # the queue was deleted or cleaned
            self._scanned, self._due = low, np.empty(0, np.int64)
        if self._scanned < taken:
            new = _tags_codes(cq, self._scanned, taken)
            self._due = np.concatenate([self._due, new])
            self._scanned = taken
        self._due = self._due[self._due >= frontier]
        return max(0, int(self._due.size) + (high - taken) - delivered)


def _queue_bounds(store) -> dict:
    out = {}
    for topic, qids in store.get_topics().items():
        out[topic] = {q: (store.get_min_offset_in_queue(topic, q), store.get_max_offset_in_queue(topic, q))
                      for q in sorted(qids)}
    return out


def _topics(bounds: dict) -> list:
    rows = []
    for topic in sorted(bounds):
        queues = [{"queue_id": q, "min_offset": lo, "max_offset": hi} for q, (lo, hi) in bounds[topic].items()]
        rows.append({"topic": topic, "messages": sum(hi - lo for lo, hi in bounds[topic].values()),
                     "queues": queues})
    return rows


def _groups(offset_table: dict, bounds: dict) -> list:
    rows = []
    for key in sorted(offset_table):
        topic, _, group = key.partition("@")
        queues, lag = [], 0
        for qid, committed in sorted(offset_table[key].items()):
            broker = bounds.get(topic, {}).get(qid, (0, 0))[1]
            q_lag = max(0, broker - committed)
            lag += q_lag
            queues.append({"queue_id": qid, "consumer_offset": committed, "broker_offset": broker, "lag": q_lag})
        rows.append({"group": group, "topic": topic, "lag": lag, "queues": queues})
    return rows


def _disk(store) -> dict:
    cfg = store.config
    guard = getattr(store, "disk_guard", None)
    try:
        u = guard.usage() if guard is not None else disk_usage(store.store_path)
    except OSError:
        u = None
    return {
        "path": store.store_path,
        "total_bytes": u.total if u else None,
        "free_bytes": u.free if u else None,
        "used_ratio": round(u.ratio, 4) if u else None,
        "puts_refused": bool(guard.full) if guard is not None else None,
        "clean_ratio": cfg.disk_max_used_space_ratio / 100.0,
        "clean_forcibly_ratio": cfg.disk_space_clean_forcibly_ratio if cfg.clean_file_forcibly_enable else None,
        "warning_ratio": cfg.disk_space_warning_level_ratio,
        "file_reserved_time_h": cfg.file_reserved_time,
        "delete_when": cfg.delete_when,
    }


def _commit_log(store, bounds: dict) -> dict:
    cl = store.commit_log
    mfq = cl.mapped_file_queue
    files = list(mfq.mapped_files)
    cq_bytes = sum(len(cq.mapped_file_queue.mapped_files) * cq.mapped_file_queue.file_size
                   for cq in store.consume_queues.queues())
    ix = store.index_service
    first = cl.get_min_offset()
    earliest = store.reader.pickup_store_timestamp(first) if first >= 0 and cl.get_max_offset() > first else -1
    return {
        "min_offset": first,
        "max_offset": cl.get_max_offset(),
        "flushed_offset": mfq.flushed_where if not store.read_only else None,
        "flush_behind_bytes": mfq.how_much_fall_behind() if not store.read_only else 0,
        "dispatch_behind_bytes": store.dispatch_behind_bytes(),
        "segments": len(files),
        "earliest_store_time_ms": earliest,
        "size_bytes": len(files) * cl.file_size,
        "consume_queue_bytes": cq_bytes,
        "index_bytes": len(ix.index_files) * ix.file_size,
    }


def _max_map_count() -> Optional[int]:
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def _maps(store) -> dict:
    """Files the store holds mapped, by kind (each one ``mmap``: the process may hold at
    most ``vm.max_map_count`` of all kinds), and the consume-queue files' cap (``map_cache``)."""
    ts = getattr(store, "timer_service", None)         # a read-only store runs no timers
    cache = store.consume_queues.map_cache
    out = {
        "commitlog": len(store.commit_log.mapped_file_queue.mapped_files),
        "consume_queue": cache.mapped,
        "index": len(store.index_service.index_files),
        "timer": len(ts.timer_log.mapped_files) + (ts.wheel is not None) if ts is not None else 0,
    }
    out["total"] = sum(out.values())
    out["consume_queue_files"] = sum(len(cq.mapped_file_queue.mapped_files) for cq in store.consume_queues.queues())
    out["consume_queue_cap"] = cache.cap
    out["consume_queue_peak"] = cache.peak
    out["consume_queue_evictions"] = cache.evictions
    out["consume_queue_remaps"] = cache.remaps
    out["max_map_count"] = _max_map_count()
    return out


def _index(store) -> dict:
    """The key index: whether it is being built, and whether it paused for want of space
    (then ``query_message`` finds nothing stored from ``paused_at`` on)."""
    ix = store.index_service
    enabled = bool(store.config.message_index_enable)
    if store.read_only:                  # the writer's builder is not visible from here
        paused, paused_at, reason, episodes = None, None, None, None
    else:
        paused, paused_at = ix.paused, ix.paused_at
        reason, episodes = ix.pause_reason, ix.pause_log.episodes
    return {
        "enabled": enabled,
        "paused": paused,
        "paused_at": paused_at,
        "reason": reason,
        "indexed_through": ix.indexed_through() if enabled else None,
        "files": len(ix.index_files),
        "file_size_bytes": ix.file_size,
        "pause_episodes": episodes,
    }


def _delay(store, bounds: dict) -> dict:
    if store.read_only:
        offsets = DelayOffsetManager(store.store_path)
        offsets.read_only = True
        offsets.load()
    else:
        offsets = store.schedule_service.offsets
    levels = store.config.delay_levels_ms()
    rows, total = [], 0
    for level, delay_ms in enumerate(levels, start=1):
        lo, hi = bounds.get(SCHEDULE_TOPIC, {}).get(level - 1, (0, 0))
        pending = max(0, hi - max(offsets.get(level), lo))
        total += pending
        rows.append({"level": level, "delay_ms": delay_ms, "pending": pending})
    return {"pending": total, "levels": rows}


def _timer(store, backlog: TimerBacklog) -> dict:
    if store.read_only:
        cp = TimerCheckpoint(store.store_path)
        cp.read_only = True
        cp.load()
    else:
        cp = store.timer_service.checkpoint
    cq = store.consume_queues.find_consume_queue(TIMER_TOPIC, 0, create=False)
    pending = backlog.count(cq, cp.enqueue_offset, max(cp.second, 0), len(cp.delivered))
    gate = None if store.read_only else store.timer_service.gate
    return {"pending": pending, "delivering_second": cp.second,
            "refusing": gate.reason if gate is not None else None,
            "refused_total": gate.refused if gate is not None else 0}


def _health(name: str, e: EpisodeLog) -> dict:
    return {"name": name, "failing": e.failing, "failures": e.failures, "episodes": e.episodes,
            "last_error": (e.last_error if isinstance(e.last_error, str) else repr(e.last_error))
            if e.last_error is not None else None}


def services(*holders) -> list:
    """Health of the background services found among the attributes of ``holders``
    (``name``, ``failing``: consecutive failures now, ``failures``, ``episodes``,
    ``last_error``), and of the retried steps inside them (a delivery put, a
    dead-lettering), named by what they do."""
    rows, seen = [], set()
    for holder in holders:
        for value in list(vars(holder).values()):
            if isinstance(value, ServiceThread) and id(value) not in seen:
                seen.add(id(value))
                rows.append(_health(value.name, value.episode_log))
    for holder in holders + tuple(v for h in holders for v in vars(h).values() if isinstance(v, ServiceThread)):
        for value in list(vars(holder).values()):
            if isinstance(value, EpisodeLog) and id(value) not in seen and value is not getattr(holder, "episode_log", None):
                seen.add(id(value))
                rows.append(_health(value.what, value))
    return rows


def store_stats(store, stats_service, backlog: TimerBacklog, offsets: Optional[dict] = None) -> dict:
    """The stats dict of ``store`` (see the module docstring and docs/operations.md)."""
    bounds = _queue_bounds(store)
    if store.read_only:
        manager = ConsumerOffsetManager(store.store_path)
        manager.read_only = True
        manager.load()
        table = manager.offset_table()
    else:
        table = store.consumer_offsets.offset_table()
    totals = stats_service.totals()
    return {
        "time_ms": int(time.time() * 1000),
        "store_path": store.store_path,
        "read_only": store.read_only,
        "running": store.running,
        "uptime_s": round(time.monotonic() - stats_service.opened_at, 3),
        "put": {"messages_total": totals["put_messages"], "bytes_total": totals["put_bytes"]},
        "get": {"found_total": totals["get_found"], "miss_total": totals["get_miss"],
                "messages_total": totals["get_messages"], "bytes_total": totals["get_bytes"]},
        "tps": stats_service.rates(),
        "commitlog": _commit_log(store, bounds),
        "topics": _topics(bounds),
        "groups": _groups(table, bounds),
        "disk": _disk(store),
        "index": _index(store),
        "maps": _maps(store),
        "delay": _delay(store, bounds),
        "timer": _timer(store, backlog),
        "services": services(store),
        "damage": store.commit_log.damage.stats(),
        "replication": _replication(store),
    }


def _replication(store) -> dict:
    """The HA side's view (docs/replication.md): a master's slaves with their push and
    ack offsets and lag in bytes and seconds; a slave's master offset seen vs applied and
    the seconds since the master's last byte; else just the role."""
    ha = getattr(store, "ha", None)
    if ha is None:
        return {"role": store.config.broker_role, "ha": False}
    return dict(ha.stats(), ha=True)
