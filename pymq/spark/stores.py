"""Finding the stores behind a ``path``, their configuration, and opening them.

A ``path`` is either one store (a directory with ``commitlog/``) or a directory of
stores (each subdirectory with a ``commitlog/`` is one, named by the subdirectory): the
multi-store layout, one store per node or broker, read as one source. Several paths can
be given separated by commas.

A reader or writer must map a store's files with the sizes it was written with. pymq
records them in ``config/storeSizes.json``; for a store without it (written by an older
pymq, or by RocketMQ), segment sizes are read off the files (``commitlog/``,
``consumequeue/``) and index sizes inferred when the file size fits RocketMQ's 1:4
slots-to-entries ratio (the default 5M/20M does). Any ``StoreConfig`` field can be given
as an option ``store.<field>`` (e.g. ``store.commitlog_file_size``), which wins over both.

Reads open stores read-only (no lock, no recovery) inside the executor's ``read()``; a
Python worker keeps a few open between tasks and calls ``refresh()`` to catch up with a
writer. Writes open a store writable only for the driver's commit.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections import OrderedDict
from typing import Optional

import pymq
from pymq.store_sizes import SIZE_FIELDS, config_for_store, sizes_path
from pymq.errors import StoreLockedError
from pymq.store.fork_guard import forked

STORE_OPTION_PREFIX = "store."
_CONFIG_FIELDS = {f.name: f for f in dataclasses.fields(pymq.StoreConfig)}

#: System topics RocketMQ writes itself; a read without ``topics``/``topicPattern`` skips them.
SYSTEM_TOPIC_PREFIXES = ("SCHEDULE_TOPIC_XXXX", "rmq_sys_", "RMQ_SYS_", "%RETRY%", "%DLQ%")


@dataclasses.dataclass(frozen=True)
class StoreRef:
    """One store of a source: its name (a multi-store layout's subdirectory) and path."""

    name: str
    path: str


def is_store(path: str) -> bool:
    return os.path.isdir(os.path.join(path, "commitlog"))


def discover(path_option: str) -> tuple[list[StoreRef], bool]:
    """The stores of ``path`` (comma-separated paths allowed) and whether the source is a
    multi-store layout (a directory of stores, or several paths). A multi-store source may
    have no store yet: it is read as empty, and stores appearing later are picked up."""
    paths = [os.path.abspath(p.strip()) for p in path_option.split(",") if p.strip()]
    if not paths:
        raise ValueError("option 'path' is required: a store directory or a directory of stores")
    multi = len(paths) > 1
    found: list[StoreRef] = []
    for p in paths:
        if is_store(p):
            found.append(StoreRef(os.path.basename(p) or p, p))
            continue
        if not os.path.isdir(p):
            raise FileNotFoundError(f"{p} is neither a store (no commitlog/) nor a directory of stores")
        multi = True
        for name in sorted(os.listdir(p)):
            sub = os.path.join(p, name)
            if is_store(sub):
                found.append(StoreRef(name, sub))
    names = [s.name for s in found]
    if multi and len(set(names)) != len(names):
        raise ValueError(f"stores of a multi-store source need distinct directory names, got {names}")
    if not multi:
        found = [StoreRef("", found[0].path)]
    return found, multi


def is_system_topic(topic: str) -> bool:
    return topic.startswith(SYSTEM_TOPIC_PREFIXES)


# -- configuration ------------------------------------------------------------------------------

def _first_file_size(directory: str) -> Optional[int]:
    try:
        names = sorted(n for n in os.listdir(directory) if n.isdigit())
    except FileNotFoundError:
        return None
    for n in names:
        return os.path.getsize(os.path.join(directory, n))
    return None


def _cq_file_size(root: str) -> Optional[int]:
    base = os.path.join(root, "consumequeue")
    try:
        topics = os.listdir(base)
    except FileNotFoundError:
        return None
    for t in topics:
        tdir = os.path.join(base, t)
        if not os.path.isdir(tdir):
            continue
        for q in os.listdir(tdir):
            size = _first_file_size(os.path.join(tdir, q))
            if size:
                return size
    return None


def _convert(name: str, value: str):
    default = _CONFIG_FIELDS[name].default
    if isinstance(default, bool):
        if value.lower() not in ("true", "false"):
            raise ValueError(f"option store.{name} must be true or false")
        return value.lower() == "true"
    if isinstance(default, int):
        return int(value)
    return value


def config_overrides(options) -> dict:
    """``StoreConfig`` fields given as ``store.<field>`` options."""
    out = {}
    for key, value in options.items():
        key = key.lower()
        if not key.startswith(STORE_OPTION_PREFIX):
            continue
        name = key[len(STORE_OPTION_PREFIX):]
        if name not in _CONFIG_FIELDS:
            raise ValueError(f"unknown store option {key!r}; StoreConfig has {sorted(_CONFIG_FIELDS)}")
        out[name] = _convert(name, value)
    return out


def infer_config(root: str, overrides: dict, for_writing: bool = False) -> dict:
    """StoreConfig values for the store at ``root``: ``overrides`` first, then the sizes
    recorded in the store, then the sizes of its files. Raises when a writer would open
    it with index sizes that do not fit its index files (opening writable deletes index
    files of the wrong size)."""
    values = {}
    if os.path.exists(sizes_path(root)):     # recorded by the store's writer: authoritative
        recorded = config_for_store(root)
        values = {f: getattr(recorded, f) for f in SIZE_FIELDS}
    values.update(overrides)
    if "commitlog_file_size" not in values:
        size = _first_file_size(os.path.join(root, "commitlog"))
        if size:
            values["commitlog_file_size"] = size
    if "consume_queue_entries" not in values:
        size = _cq_file_size(root)
        if size and size % 20 == 0:
            values["consume_queue_entries"] = size // 20
    index_size = _first_file_size(os.path.join(root, "index"))
    if index_size and not ("index_hash_slots" in values and "index_max_entries" in values):
        slots = values.get("index_hash_slots", pymq.StoreConfig.index_hash_slots)
        entries = values.get("index_max_entries", pymq.StoreConfig.index_max_entries)
        if 40 + slots * 4 + entries * 20 != index_size:
            if (index_size - 40) % 84 == 0 and "index_hash_slots" not in values and "index_max_entries" not in values:
                slots = (index_size - 40) // 84
                values["index_hash_slots"], values["index_max_entries"] = slots, slots * 4
            elif for_writing:
                raise ValueError(
                    f"the index files of {root} are {index_size} bytes, which the index sizes cannot be "
                    "inferred from: give options store.index_hash_slots and store.index_max_entries "
                    "(40 + slots*4 + entries*20 bytes)")
    return values


def make_config(values: dict) -> pymq.StoreConfig:
    return pymq.StoreConfig(**values)


# -- read-only stores, kept open per Python worker ----------------------------------------------

_OPEN: "OrderedDict[tuple, pymq.MessageStore]" = OrderedDict()
_OPEN_LOCK = threading.Lock()
MAX_OPEN_STORES = 8


def open_read_only(path: str, config_values: dict) -> pymq.MessageStore:
    """A read-only ``MessageStore`` of ``path``, shared by the tasks a Python worker runs
    (it is caught up with ``refresh()`` by the caller)."""
    key = (path, tuple(sorted(config_values.items())))
    with _OPEN_LOCK:
        store = _OPEN.get(key)
        if store is not None and forked(store):
            del _OPEN[key]                   # opened before this process forked: unusable here
            store = None
        if store is not None and _files_deleted(store):
            del _OPEN[key]                   # retention removed segments: map what is left
            store.shutdown()
            store = None
        if store is not None:
            _OPEN.move_to_end(key)
            return store
        store = pymq.MessageStore(path, make_config(config_values), read_only=True)
        _OPEN[key] = store
        while len(_OPEN) > MAX_OPEN_STORES:
            _, old = _OPEN.popitem(last=False)
            old.shutdown()
        return store


def _files_deleted(store: pymq.MessageStore) -> bool:
    """Whether the first commit-log segment this open store maps was deleted since (the
    store keeps it mapped; a reopen sees the new first segment)."""
    first = store.get_min_phy_offset()
    return first >= 0 and not os.path.exists(os.path.join(store.store_path, "commitlog", f"{first:020d}"))


def catch_up(store: pymq.MessageStore) -> None:
    """Let a read-only store see what its writer appended, queues created since included."""
    store.refresh()


def close_all() -> None:
    """Close the stores this process keeps open (tests, and before a writer opens one)."""
    with _OPEN_LOCK:
        while _OPEN:
            _, store = _OPEN.popitem()
            store.shutdown()


def open_writable(path: str, config: pymq.StoreConfig, lock_timeout_ms: int) -> pymq.MessageStore:
    """Open (or create) the store at ``path`` for appending, waiting up to
    ``lock_timeout_ms`` for another writer to release it."""
    deadline = time.monotonic() + lock_timeout_ms / 1000.0
    delay = 0.05
    while True:
        try:
            return pymq.MessageStore(path, config).start()
        except StoreLockedError as e:
            if time.monotonic() >= deadline:
                raise StoreLockedError(
                    f"{e}. A Spark write appends in the driver's commit and needs the store's "
                    "exclusive lock: stop the process writing to it, give option lockTimeoutMs to "
                    "wait for it, or write to a store of its own (e.g. a new subdirectory of a "
                    "multi-store layout)") from None
            time.sleep(delay)
            delay = min(delay * 2, 1.0)


# -- queues ---------------------------------------------------------------------------------------

def has_queue(store: pymq.MessageStore, topic: str, queue_id: int) -> bool:
    """Whether the store has a consume queue for (topic, queue_id)."""
    return store.has_queue(topic, queue_id)


def queue_min(store: pymq.MessageStore, topic: str, queue_id: int) -> int:
    """The first offset of the queue whose message is still in the store.

    ``get_min_offset_in_queue`` can lag when files were deleted under a reader (retention
    removes commit-log segments first, then the consume-queue files wholly below them), so
    the first consume-queue file and the commit log's min offset are checked too: entries
    whose records are gone are found by bisection (a queue's records have increasing
    commit-log offsets)."""
    lo = store.get_min_offset_in_queue(topic, queue_id)     # accounts for deleted queue files
    hi = store.get_max_offset_in_queue(topic, queue_id)
    min_phy = store.get_min_phy_offset()
    where = store.get_commit_log_offset_in_queue
    if lo < hi and min_phy > 0 and where(topic, queue_id, lo) < min_phy:
        a, b = lo, hi
        while a < b:
            m = (a + b) // 2
            if where(topic, queue_id, m) < min_phy:
                a = m + 1
            else:
                b = m
        lo = a
    return min(lo, hi)


def queue_bounds(store: pymq.MessageStore, topic: str, queue_id: int) -> tuple[int, int]:
    """``(min, max)`` offsets of a queue: messages [min, max) can be read."""
    return queue_min(store, topic, queue_id), store.get_max_offset_in_queue(topic, queue_id)
