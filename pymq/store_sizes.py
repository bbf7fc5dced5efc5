"""``config/storeSizes.json``: the file sizes a store was written with.

A store's files only make sense at the sizes they were made with (commit-log segment
size, consume-queue entries per file, the index's slots and entries, the timer wheel's
slots, which follow ``timer_wheel_days`` and ``timer_max_delay_sec``). A writer records
them after it opened; readers that come without a config (the CLI, Spark executors,
``pymq check``) take them from there, or, for a store without the record (one written by
RocketMQ, or a damaged record), read them off the files. ``check_sizes`` refuses a config
that contradicts them before an open touches anything (docs/recovery.md).

The files are the truth: a record that contradicts what the files clearly show
(``record_conflicts``: segment names a segment size apart, queue files of another length,
index files of another length) is never used to open the store. ``config_for_store``
refuses it (``SegmentSizeError`` naming the file, the recorded and the actual sizes) and
``check_sizes`` measures a given config against the files instead, so that opening with
the true sizes works and records them again.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import dataclasses
import json
import os
from typing import Optional

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


#: within ``one_look``: what was read of each directory and file, so the checks of one
#: open (which look at the same tens of thousands of queue files several times) list each
#: directory and read each length once
_LOOK: contextvars.ContextVar[Optional[dict]] = contextvars.ContextVar("pymq_store_sizes_look", default=None)


@contextlib.contextmanager
def one_look():
    """Each directory listed and each file's length read once inside (per thread)."""
    token = _LOOK.set({})
    try:
        yield
    finally:
        _LOOK.reset(token)


def numbered_files(path: str) -> list[str]:
    """Names of the files in directory ``path`` named by their offset (digits only), in
    order; none when the directory is missing."""
    look = _LOOK.get()
    if look is not None and ("ls", path) in look:
        return look[("ls", path)]
    try:
        out = sorted(n for n in os.listdir(path) if n.isdigit())
    except (FileNotFoundError, NotADirectoryError):
        out = []
    if look is not None:
        look[("ls", path)] = out
    return out


def _size_of(path: str) -> int | None:
    look = _LOOK.get()
    if look is not None and ("size", path) in look:
        return look[("size", path)]
    try:
        out: int | None = os.path.getsize(path)
    except OSError:               # deleted meanwhile (a live writer cleans)
        out = None
    if look is not None:
        look[("size", path)] = out
    return out


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


@dataclasses.dataclass
class Conflict:
    """A size ``config/storeSizes.json`` records that the files contradict."""

    fields: tuple             #: the fields (the index's two together)
    recorded: str             #: as recorded, ``field=value``
    actual: str               #: what the files show, ``field=value`` or a length
    evidence: str             #: which files show it
    #: the fields' true values, where the files tell them (the index's at four entries per slot)
    true_values: dict = dataclasses.field(default_factory=dict)


def record_conflicts(store_path: str, recorded: dict | None = None,
                     found: FileSizes | None = None) -> list[Conflict]:
    """The sizes recorded in ``config/storeSizes.json`` that the store's files clearly
    contradict; reads, never writes.

    Files are named by their start offset, a multiple of their size, and allocated whole,
    so a record is contradicted by a commit-log segment or consume-queue file whose name
    is not a multiple of the recorded size, or by a length that at least two files share
    (most of them) and that is not the recorded one (index files are named by time: only
    their length counts). One file alone is not evidence, since damage cuts or extends
    files: a short last segment is recovered by giving it its length back, a queue or
    index file of the wrong length is rebuilt (docs/recovery.md). A lone commit-log
    segment longer than recorded contradicts it too (no open would use it).

    The timer settings are not read off the files (a wheel's length cannot tell damage
    from other settings)."""
    if recorded is None:
        recorded, problem = recorded_sizes(store_path)
        if problem:
            return []
    if not recorded:
        return []
    found = found if found is not None else sizes_of_files(store_path)
    out: list[Conflict] = []
    rec_seg = recorded.get("commitlog_file_size")
    if rec_seg is not None and found.commitlog_segments:
        cl = os.path.join(store_path, "commitlog")
        why, agreed = _contradiction([cl], rec_seg, "commit-log segment")
        lone = _size_of(os.path.join(cl, numbered_files(cl)[0])) if found.commitlog_segments == 1 else None
        if why is None and lone and lone > rec_seg:
            why, agreed = f"the only commit-log segment is {lone} bytes long", lone
        if why:
            seg = found.commitlog_file_size or agreed
            out.append(Conflict(("commitlog_file_size",), f"commitlog_file_size={rec_seg}",
                                f"commitlog_file_size={seg}", why, {"commitlog_file_size": seg} if seg else {}))
    rec_cq = recorded.get("consume_queue_entries")
    if rec_cq is not None and found.consume_queue_files:
        why, agreed = _contradiction(_queue_dirs(store_path), rec_cq * 20, "consume-queue")
        if why:
            cq = found.consume_queue_entries or (agreed // 20 if agreed and agreed % 20 == 0 else None)
            out.append(Conflict(("consume_queue_entries",), f"consume_queue_entries={rec_cq}",
                                f"consume_queue_entries={cq if cq else '?'}", why,
                                {"consume_queue_entries": cq} if cq else {}))
    slots, entries = recorded.get("index_hash_slots"), recorded.get("index_max_entries")
    if slots is not None and entries is not None and found.index_files:
        want = index_file_size(slots, entries)
        why, length = _contradiction([os.path.join(store_path, "index")], want, "index", offset_names=False)
        if why and length:
            fit, rest = divmod(length - 40, 84)            # RocketMQ's four entries per slot
            true = {"index_hash_slots": fit, "index_max_entries": 4 * fit} if fit > 0 and rest == 0 else {}
            actual = f"index file length={length}"
            if true:
                actual += f" (index_hash_slots={fit}, index_max_entries={4 * fit} at four entries per slot)"
            out.append(Conflict(("index_hash_slots", "index_max_entries"),
                                f"index_hash_slots={slots}, index_max_entries={entries} (index file length={want})",
                                actual, why, true))
    return out


def _queue_dirs(store_path: str) -> list[str]:
    """The directories of the store's consume queues (``consumequeue/<topic>/<id>``)."""
    root = os.path.join(store_path, "consumequeue")
    out = []
    for topic in (sorted(os.listdir(root)) if os.path.isdir(root) else []):
        tdir = os.path.join(root, topic)
        if os.path.isdir(tdir):
            out.extend(os.path.join(tdir, q) for q in sorted(os.listdir(tdir)))
    return out


def _contradiction(dirs: list[str], size: int, what: str, offset_names: bool = True) -> tuple[str | None, int | None]:
    """How the numbered files in ``dirs`` contradict a file size of ``size`` bytes, and
    the length they agree on: (None, ...) when they do not. See ``record_conflicts``."""
    lengths = []
    for d in dirs:
        names = numbered_files(d)
        if offset_names and any(int(n) % size for n in names):
            return (f"the {what} files' names (their start offsets) are not multiples of {size} bytes",
                    _most_common([int(b) - int(a) for a, b in zip(names, names[1:])]))
        lengths.extend(n for n in (_size_of(os.path.join(d, name)) for name in names) if n)
    counts = collections.Counter(lengths)
    agreed = _most_common(lengths)
    if agreed is not None and counts[agreed] >= 2 and agreed != size:
        return f"{counts[agreed]} of the {len(lengths)} {what} files are {agreed} bytes long", agreed
    return None, agreed


def contradiction_message(store_path: str, conflicts: list[Conflict]) -> str:
    """The error of an open refused because ``config/storeSizes.json`` contradicts the
    files: the file, what it records, what the files show, and the ways out."""
    path = sizes_path(store_path)
    recorded = ", ".join(c.recorded for c in conflicts)
    actual = "; ".join(f"{c.actual} ({c.evidence})" for c in conflicts)
    return (f"{path} contradicts the store's files: it records {recorded}, but the files show {actual}. "
            f"Opening with the recorded sizes would drop or resize files, so nothing was opened and "
            f"nothing was changed. The files are the truth: fix {path} or delete it (the sizes are then "
            f"read off the files), or open the store with a StoreConfig that has the files' sizes "
            f"(a writer then records them again).")


def check_sizes(store_path: str, config: StoreConfig, config_given: bool = True) -> None:
    """Raise :class:`SegmentSizeError` when ``config``'s file sizes contradict those the
    store at ``store_path`` was written with; reads, never writes.

    The sizes are those recorded in ``config/storeSizes.json``; when it is missing or
    damaged (or lacks a size), or the files contradict it (``record_conflicts``), those
    read off the files (``sizes_of_files``): a config with the files' sizes opens a store
    whose record is wrong (the open records them again). A size only
    counts while files of its kind exist (an empty index, say, can take other sizes).
    Opening with contradicting sizes would grow, drop or rebuild the store's files for
    the other sizes, so the caller must refuse before it touches anything.
    ``config_given=False``: ``config`` is what ``config_for_store`` made of the store (a
    record the files contradict is then refused, whatever ``config`` holds)."""
    with one_look():
        recorded, problem = recorded_sizes(store_path)
        found = sizes_of_files(store_path)
        conflicts = record_conflicts(store_path, recorded, found) if not problem else []
    if conflicts and not config_given:
        raise SegmentSizeError(contradiction_message(store_path, conflicts))
    # the files are the truth: a recorded size they contradict is measured against them
    contradicted = {}
    for c in conflicts:
        for field in c.fields:
            recorded = {k: v for k, v in recorded.items() if k != field}
            contradicted[field] = (f"read off the files: config/storeSizes.json records {c.recorded}, "
                                   "which they contradict")
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
            whence = ("recorded in config/storeSizes.json" if field in recorded
                      else contradicted.get(field, off_files))
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
                          f"index_max_entries={config.index_max_entries})",
                          contradicted.get("index_hash_slots", off_files)))
    if not wrong:
        return
    groups: dict[str, list[str]] = {}
    for what, value, _, whence in wrong:
        groups.setdefault(whence, []).append(f"{what}={value}")
    store_side = "; ".join(f"{', '.join(items)} ({whence})" for whence, items in groups.items())
    given_side = ", ".join(f"{what}={value}" for what, _, value, _ in wrong)
    if conflicts:
        advice = (f"Open it with a StoreConfig that has the sizes the files show (the open then records "
                  f"them again); {sizes_path(store_path)} contradicts the files, so an open without a config "
                  f"is refused until it is fixed or deleted")
    elif config_given:
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


def config_for_store(store_path: str, refuse_contradiction: bool = True) -> StoreConfig:
    """RocketMQ's defaults with the file sizes recorded in the store, or, when the record
    is missing or damaged, read off the store's files.

    A record that contradicts the files (``record_conflicts``) raises
    :class:`SegmentSizeError` (opening with it would drop or resize files);
    ``refuse_contradiction=False`` (``pymq check``, which reports it) takes the files'
    sizes for the fields it gets wrong instead."""
    sizes, problem = recorded_sizes(store_path)
    if not sizes or problem:
        return infer_sizes(store_path, StoreConfig())
    with one_look():
        conflicts = record_conflicts(store_path, sizes)
    if conflicts and refuse_contradiction:
        raise SegmentSizeError(contradiction_message(store_path, conflicts))
    config = StoreConfig(**sizes)
    for c in conflicts:
        for field, value in c.true_values.items():
            setattr(config, field, value)
    return config
