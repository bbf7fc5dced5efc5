"""``config/storeSizes.json``: the file sizes a store was written with.

A store's files only make sense at the sizes they were made with (commit-log segment
size, consume-queue entries per file, the index's slots and entries, the timer wheel's
slots, which follow ``timer_wheel_days`` and ``timer_max_delay_sec``). A writer records
them after it opened; readers that come without a config (the CLI, Spark executors,
``pymq check``) take them from there, or, for a store without the record (one written by
RocketMQ, or a damaged record), read them off the files. ``check_sizes`` refuses a config
that contradicts them before an open touches anything (docs/recovery.md).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os

from ._core.index_file import index_file_size
from .config import StoreConfig
from .errors import PymqError, SegmentSizeError

#: the settings the files' lengths follow: the timer settings give the wheel's slot count
#: (``timer_files.wheel_slots``)
SIZE_FIELDS = ("commitlog_file_size", "consume_queue_entries", "index_hash_slots", "index_max_entries",
               "timer_wheel_days", "timer_max_delay_sec")


def sizes_path(store_path: str) -> str:
    """``config/storeSizes.json``: the file sizes a store was last opened for writing with."""
    return os.path.join(store_path, "config", "storeSizes.json")


def save_sizes(store_path: str, config: StoreConfig) -> None:
    """Record ``config``'s file sizes with the store (atomically), so that readers that
    open it without a config (the CLI, Spark executors) map its files right."""
    path = sizes_path(store_path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = json.dumps({f: getattr(config, f) for f in SIZE_FIELDS}, indent=1).encode()
    try:
        with open(path, "rb") as f:
            if f.read() == data:
                return
    except FileNotFoundError:
        pass
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb", buffering=0) as f:
            f.write(data)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:                    # a full disk: leave the old file, and no half-written copy
            os.remove(tmp)
        except OSError:
            pass
        raise


def recorded_sizes(store_path: str) -> tuple[dict, str | None]:
    """The sizes in ``config/storeSizes.json`` and what is wrong with the file (None when
    it is good or missing)."""
    try:
        with open(sizes_path(store_path), "rb") as f:
            sizes = json.loads(f.read())
        if not isinstance(sizes, dict):
            raise ValueError("not an object")
        values = {k: int(v) for k, v in sizes.items() if k in SIZE_FIELDS}
        StoreConfig(**values)
        return values, None
    except FileNotFoundError:
        return {}, None
    except (ValueError, TypeError, PymqError, UnicodeDecodeError) as e:
        return {}, f"{sizes_path(store_path)} is unreadable ({e}): file sizes read off the files instead"


def numbered_files(path: str) -> list[str]:
    """Names of the files in directory ``path`` named by their offset (digits only), in
    order; none when the directory is missing."""
    try:
        return sorted(n for n in os.listdir(path) if n.isdigit())
    except (FileNotFoundError, NotADirectoryError):
        return []


def _size_of(path: str) -> int | None:
    try:
        return os.path.getsize(path)
    except OSError:               # deleted meanwhile (a live writer cleans)
        return None


def _most_common(values: list[int]) -> int | None:
    """The value seen most often (the smaller one of a tie); None for none."""
    counts = collections.Counter(values)
    return min(counts, key=lambda v: (-counts[v], v)) if counts else None


@dataclasses.dataclass
class FileSizes:
    """What a store's files show of the sizes they were made with; a size is None when no
    file tells it. The counts say whether files of the kind exist at all."""

    commitlog_segments: int = 0
    commitlog_file_size: int | None = None
    consume_queue_files: int = 0
    consume_queue_entries: int | None = None
    index_files: int = 0
    index_file_bytes: int | None = None


def sizes_of_files(store_path: str) -> FileSizes:
    """Read the sizes off the files. Segment names are start offsets, so with two or more
    segments their distance is the segment size, whatever damage did to the lengths; a
    lone segment tells it by its length (an empty one tells nothing). Consume queues: the
    size most of them show (name distance, else the length of a queue's only file). Index
    files: the length most of them have."""
    out = FileSizes()
    cl = os.path.join(store_path, "commitlog")
    names = numbered_files(cl)
    out.commitlog_segments = len(names)
    if len(names) > 1:
        out.commitlog_file_size = _most_common([int(b) - int(a) for a, b in zip(names, names[1:])])
    elif names:
        out.commitlog_file_size = _size_of(os.path.join(cl, names[0])) or None
    cq = os.path.join(store_path, "consumequeue")
    by_names, by_length = [], []
    for topic in (sorted(os.listdir(cq)) if os.path.isdir(cq) else []):
        tdir = os.path.join(cq, topic)
        for qid in (sorted(os.listdir(tdir)) if os.path.isdir(tdir) else []):
            files = numbered_files(os.path.join(tdir, qid))
            out.consume_queue_files += len(files)
            if len(files) > 1:
                gap = int(files[1]) - int(files[0])
                if gap > 0 and gap % 20 == 0:
                    by_names.append(gap // 20)
            elif files:
                length = _size_of(os.path.join(tdir, qid, files[0]))
                if length and length % 20 == 0:
                    by_length.append(length // 20)
    out.consume_queue_entries = _most_common(by_names or by_length)
    ix = os.path.join(store_path, "index")
    files = numbered_files(ix)
    out.index_files = len(files)
    out.index_file_bytes = _most_common([n for n in (_size_of(os.path.join(ix, f)) for f in files) if n])
    return out


def infer_sizes(store_path: str, config: StoreConfig) -> StoreConfig:
    """``config`` with the file sizes read off the store's files (``sizes_of_files``): the
    commit-log segment size, the consume-queue entries per file, and the index sizes when
    the index file's length fits RocketMQ's ratio of four entries per slot (a store written
    by RocketMQ has no storeSizes.json)."""
    found = sizes_of_files(store_path)
    if found.commitlog_file_size is not None:
        config.commitlog_file_size = found.commitlog_file_size
    if found.consume_queue_entries is not None:
        config.consume_queue_entries = found.consume_queue_entries
    if found.index_file_bytes is not None:
        slots, rest = divmod(found.index_file_bytes - 40, 84)   # 4 + 4 entries x 20
        if slots > 0 and rest == 0:
            config.index_hash_slots, config.index_max_entries = slots, 4 * slots
    return config


def check_sizes(store_path: str, config: StoreConfig, config_given: bool = True) -> None:
    """Raise :class:`SegmentSizeError` when ``config``'s file sizes contradict those the
    store at ``store_path`` was written with; reads, never writes.

    The sizes are those recorded in ``config/storeSizes.json``; when it is missing or
    damaged (or lacks a size), those read off the files (``sizes_of_files``). A size only
    counts while files of its kind exist (an empty index, say, can take other sizes).
    Opening with contradicting sizes would grow, drop or rebuild the store's files for
    the other sizes, so the caller must refuse before it touches anything.
    ``config_given=False``: ``config`` is what ``config_for_store`` made of the store."""
    recorded, problem = recorded_sizes(store_path)
    found = sizes_of_files(store_path)
    if problem:
        off_files = "read off the files: config/storeSizes.json is unreadable"
    elif recorded:
        off_files = "read off the files: config/storeSizes.json does not record it"
    else:
        off_files = "read off the files: there is no config/storeSizes.json"
    wrong = []      # (what, the store's, the config's, whence)

    def differs(field: str, files_exist: bool, inferred: int | None = None) -> None:
        store_value = recorded.get(field, inferred)
        if files_exist and store_value is not None and store_value != getattr(config, field):
            whence = "recorded in config/storeSizes.json" if field in recorded else off_files
            wrong.append((field, store_value, getattr(config, field), whence))

    differs("commitlog_file_size", found.commitlog_segments > 0, found.commitlog_file_size)
    differs("consume_queue_entries", found.consume_queue_files > 0, found.consume_queue_entries)
    wheel = os.path.exists(os.path.join(store_path, "timerwheel"))
    differs("timer_wheel_days", wheel)              # recorded only: a wheel's length alone
    differs("timer_max_delay_sec", wheel)           # cannot tell damage from other settings
    if "index_hash_slots" in recorded and "index_max_entries" in recorded:
        differs("index_hash_slots", found.index_files > 0)
        differs("index_max_entries", found.index_files > 0)
    elif found.index_file_bytes is not None:
        given = index_file_size(config.index_hash_slots, config.index_max_entries)
        if given != found.index_file_bytes:
            wrong.append(("index file length", found.index_file_bytes,
                          f"{given} (index_hash_slots={config.index_hash_slots}, "
                          f"index_max_entries={config.index_max_entries})", off_files))
    if not wrong:
        return
    groups: dict[str, list[str]] = {}
    for what, value, _, whence in wrong:
        groups.setdefault(whence, []).append(f"{what}={value}")
    store_side = "; ".join(f"{', '.join(items)} ({whence})" for whence, items in groups.items())
    given_side = ", ".join(f"{what}={value}" for what, _, value, _ in wrong)
    if config_given:
        advice = ("Open it without a config (the sizes it was written with are then used) or with "
                  "a StoreConfig that has these sizes")
    else:
        advice = "Open it with a StoreConfig that has the sizes it was written with"
    if all(what.startswith("index") for what, _, _, _ in wrong):
        advice += (f"; the index is rebuilt from the commit log, so to give it other sizes delete "
                   f"{os.path.join(store_path, 'index')} first")
    raise SegmentSizeError(
        f"{store_path} was written with other file sizes than the config gives: the store has "
        f"{store_side}; the config has {given_side}. Nothing was changed. {advice}.")


def config_for_store(store_path: str) -> StoreConfig:
    """RocketMQ's defaults with the file sizes recorded in the store, or, when the record
    is missing or damaged, read off the store's files."""
    sizes, problem = recorded_sizes(store_path)
    if sizes and not problem:
        return StoreConfig(**sizes)
    return infer_sizes(store_path, StoreConfig())
