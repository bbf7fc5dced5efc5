"""ConfigManager: small JSON tables persisted under ``{root}/config/`` (RocketMQ's ``ConfigManager``).

Mirrors ``org.apache.rocketmq.common.ConfigManager`` (4.9.7): a subclass names its file
(``config_file_path``) and converts its table to and from text (``encode`` / ``decode``);
the base class loads the file with a fall-back to ``{path}.bak`` and persists it. The
text format is fastjson 1.x's, which RocketMQ uses for ``consumerOffset.json``,
``delayOffset.json`` and friends: pretty-printed with tabs, and **integer map keys
written unquoted** (``{"offsetTable":{1:1,2:1}}``), which standard JSON readers reject.
:mod:`pymq.store.fastjson` writes and reads that format.

How it differs from RocketMQ:

* ``persist`` is atomic and durable. RocketMQ (``MixAll.string2File``) writes
  ``file.tmp``, copies the old content to ``file.bak``, *deletes* the file and renames
  the tmp file into place, without any fsync, and ``ConfigManager.persist`` logs and
  swallows every error. Here the new text is written to ``{path}.tmp`` and fsynced;
  the previous file becomes ``{path}.bak`` through a hard link (so ``{path}`` never
  disappears; a rename where links are not supported); ``os.replace`` moves the tmp
  file over ``{path}``; the directory is fsynced after each rename. Errors propagate,
  and a failed persist (ENOSPC) removes its tmp file.
  A crash at any point leaves ``{path}`` or ``{path}.bak`` holding the old or the new
  text.
* A damaged ``{path}`` is never rotated into ``{path}.bak``, so one bad write cannot
  destroy the last good copy.
* When both files exist but neither is readable, ``load`` raises
  :class:`~pymq.errors.CorruptStoreError` if ``strict`` (the class default, and
  ``StoreConfig(strict_open=True)`` for a store's tables); otherwise it sets both files
  aside as ``*.corrupt-<ms>``, logs an error, records ``load_problem`` and starts with an
  empty table, the subclass's documented safe default (RocketMQ carries on with an empty
  table silently).
* Change tracking (``dirty``) lets a persist service skip writes when nothing changed.
"""

from __future__ import annotations

import abc
import errno
import logging
import os
import threading
import time
from typing import Optional

from pymq.errors import CorruptStoreError

from .fastjson import loads_fastjson
from .service_thread import ServiceThread

log = logging.getLogger("pymq")

__all__ = [
    "MISSING",
    "ConfigManager",
    "ConfigPersistService",
    "disk_full",
    "log_unsaved_at_shutdown",
    "set_aside",
]


# -- file helpers ----------------------------------------------------------------------

#: what :meth:`ConfigManager.probe` says of a file that does not exist
MISSING = "missing"

#: what a decoder raises for text that does not hold its table: ``ValueError`` by contract;
#: ``TypeError`` and ``OverflowError`` from a conversion of a JSON value of the wrong type
#: (``int(None)``, ``int(1e400)``) are damage too, never a reason for an open to fail
_DECODE_ERRORS = (ValueError, TypeError, OverflowError)


def _stat_key(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def disk_full(error: BaseException) -> bool:
    """Whether ``error`` says the disk (or the user's quota) has no room left."""
    return isinstance(error, OSError) and error.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))


def _write_durably(path: str, data: bytes) -> None:
    """Write ``data`` to a new ``path`` and fsync it; on any error ``path`` is removed.

    Unbuffered, so a failing write (ENOSPC) raises once: a buffered file would try to
    flush the same bytes again when it is closed and chain a second error to the first.
    """
    try:
        with open(path, "wb", buffering=0) as f:
            view = memoryview(data)
            while view:
                n = f.write(view)
                if not n:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
                view = view[n:]
            os.fsync(f.fileno())
    except BaseException:
        _discard(path)
        raise


def _fsync_dir(directory: str) -> None:
    """Make renames in ``directory`` durable (a no-op where directories cannot be opened)."""
    if os.name == "nt":
        return
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as e:       # some file systems cannot fsync a directory
        if e.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def set_aside(path: str) -> Optional[str]:
    """Rename a damaged ``path`` to ``{path}.corrupt-<ms>`` (kept for a person to look
    at, and listed by ``pymq check``); returns the new name, or None when there was no
    file."""
    if not os.path.exists(path):
        return None
    aside = f"{path}.corrupt-{int(time.time() * 1000)}"
    os.replace(path, aside)
    return aside


def _remove_if_exists(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _discard(path: str) -> None:
    """Remove a temporary file after a failed write, quietly (the write's error is the
    one to report)."""
    try:
        os.unlink(path)
    except OSError:
        pass


# -- ConfigManager ---------------------------------------------------------------------

class ConfigManager(abc.ABC):
    """A table kept in memory and persisted as one fastjson file.

    Subclasses implement :meth:`config_file_path`, :meth:`encode` and :meth:`decode`,
    guard their table with ``self._lock`` (a re-entrant lock) and call
    :meth:`_mark_changed` under it whenever the table changes.
    """

    #: raise CorruptStoreError when neither the file nor its .bak can be read (the store
    #: sets it from StoreConfig.strict_open); otherwise start with an empty table
    strict = True
    #: a read-only owner: a damaged file is not moved aside
    read_only = False
    #: what an empty table means, for the message logged when one had to be used
    reset_meaning = "an empty table"

    def __init__(self) -> None:
        self.load_problem: Optional[str] = None     # what a non-strict load had to give up
        self._lock = threading.RLock()          # guards the subclass's table and counters
        self._persist_lock = threading.Lock()   # one persist at a time
        self._changes = 0                       # bumped by every change of the table
        self._persisted_changes = 0             # value of _changes that the file holds
        self.persists = 0                       # writes of the file begun (flush's test counts them)
        self._flushed = threading.Condition()   # flush(): a write ended; _flushing: one is under way
        self._flushing = False
        # (dev, ino, size, mtime) of {path} when it last held text we read or wrote
        self._good_stat: Optional[tuple[int, int, int, int]] = None

    # -- what a subclass provides ------------------------------------------------------

    @abc.abstractmethod
    def config_file_path(self) -> str:
        """Absolute path of the file (``configFilePath()``)."""

    @abc.abstractmethod
    def encode(self, pretty: bool = True) -> str:
        """The table as fastjson text; ``pretty`` as RocketMQ's ``encode(prettyFormat)``."""

    @abc.abstractmethod
    def decode(self, text: str) -> None:
        """Replace the table with the one in ``text``.

        Must raise ``ValueError`` (e.g. :class:`FastjsonDecodeError`) when the text does not
        hold a valid table, and must leave the table unchanged in that case. (A
        ``TypeError`` or ``OverflowError`` is taken as damage too, not as a failure of the
        load.)
        """

    def validate(self, text: str) -> None:
        """Raise ``ValueError`` unless ``text`` holds a table :meth:`decode` would accept.

        Used by :meth:`persist` to decide whether the current file may become the ``.bak``
        copy. The default only requires a fastjson object; subclasses with a stricter
        :meth:`decode` should override it without touching the table.
        """
        if not isinstance(loads_fastjson(text), dict):
            raise ValueError("top level is not an object")

    # -- change tracking ---------------------------------------------------------------

    def _mark_changed(self) -> None:
        """Record a change of the table; call with ``self._lock`` held."""
        self._changes += 1

    @property
    def dirty(self) -> bool:
        """True when the table has changed since it was last loaded or persisted."""
        with self._lock:
            return self._changes != self._persisted_changes

    # -- load --------------------------------------------------------------------------

    def load(self) -> bool:
        """Load ``{path}``, or ``{path}.bak`` when ``{path}`` is missing, empty or unreadable.

        Returns True (the return value is kept for RocketMQ's signature). When neither file
        exists the table keeps its current (initially empty) content. Raises
        :class:`~pymq.errors.CorruptStoreError` when a file exists but neither one can be
        read; other ``OSError``\\ s (permissions, I/O errors) propagate. After a fall-back to
        ``.bak`` the table is marked dirty, so the next persist repairs ``{path}``.
        """
        with self._persist_lock:
            return self._load()

    def _load(self) -> bool:
        path = self.config_file_path()
        bak = path + ".bak"
        main_problem, st = self._try_load(path)
        if main_problem is None:
            with self._lock:
                self._persisted_changes = self._changes
            self._good_stat = st
            return True
        bak_problem, _ = self._try_load(bak)
        if bak_problem is None:
            if main_problem is not MISSING:
                log.warning("%s is %s; loaded %s instead", path, main_problem, bak)
            with self._lock:
                self._mark_changed()
            self._good_stat = None
            return True
        if main_problem is MISSING and bak_problem is MISSING:
            self._good_stat = None        # a new store: nothing to load
            return True
        why = (f"cannot load {type(self).__name__}: {path} is {main_problem} and {bak} is "
               f"{bak_problem}")
        if self.strict:
            raise CorruptStoreError(f"{why}; restore one of them, or delete both to start with an empty table")
        # not strict: one damaged side file must not lock the user out of the store
        self._good_stat = None
        kept = [] if self.read_only else [p for p in (path, bak) if set_aside(p)]
        self.load_problem = (f"{why}; started with {self.reset_meaning}"
                             + (f" (damaged files kept as {', '.join(kept)})" if kept else ""))
        log.error("%s", self.load_problem)
        with self._lock:
            self._mark_changed()
        return True

    def probe(self, path: str) -> Optional[str]:
        """What is wrong with ``path`` as this table's file, read as :meth:`load` reads it
        (``load`` tries ``{path}`` and then ``{path}.bak``): None when it loads, and the
        table then holds it; :data:`MISSING` when there is no file; else what is wrong
        (``"empty"``, ``"unreadable (...)"``, ...), and the table is unchanged. Never
        writes, moves or locks anything; ``OSError``\\ s other than a missing file
        propagate."""
        return self._try_load(path)[0]

    def _try_load(self, path: str) -> tuple[Optional[str], Optional[tuple[int, int, int, int]]]:
        """Decode ``path``; return (None, stat) on success or (what is wrong, None)."""
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                raw = f.read()
        except FileNotFoundError:
            return MISSING, None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            return f"not UTF-8 ({e})", None
        if not text.strip():
            return "empty", None
        try:
            self.decode(text)
        except ValueError as e:
            return f"unreadable ({e})", None
        except (TypeError, OverflowError) as e:       # a JSON value of the wrong type
            return f"unreadable ({type(e).__name__}: {e})", None
        return None, _stat_key(st)

    # -- persist -----------------------------------------------------------------------

    def persist(self) -> None:
        """Write the table to ``{path}`` atomically and durably, keeping the old file as ``.bak``.

        Steps: write and fsync ``{path}.tmp``; if ``{path}`` holds good text, make it
        ``{path}.bak`` (hard link + rename, or a plain rename where links are not
        supported) and fsync the directory; ``os.replace`` ``{path}.tmp`` over ``{path}``
        and fsync the directory. Errors propagate; the files then still hold the old or
        the new text, and no temporary file is left (a full disk leaves the previous file
        as it was).
        """
        with self._persist_lock:
            self._persist()

    def flush(self) -> bool:
        """Return once every change made before the call is on disk (group commit).

        A caller waits for a write that read the table after its change: the one running
        when it arrives may have read it before, so it waits for that one to end (then
        all its waiters return at once) and the first still uncovered becomes the next
        writer, taking with it the changes of every caller that queued meanwhile. N
        threads flushing at once cause about two writes, not N. Returns True if this
        call wrote the file; errors propagate as from :meth:`persist`.
        """
        with self._lock:
            target = self._changes
        with self._flushed:
            while self._persisted_changes < target:
                if not self._flushing:
                    self._flushing = True
                    break
                self._flushed.wait()
            else:
                return False            # a write that read the table after our change
        try:
            with self._persist_lock:
                self._persist()
        finally:
            with self._flushed:
                self._flushing = False
                self._flushed.notify_all()
        return True

    def _persist(self) -> None:
        """:meth:`persist`'s steps; call with ``self._persist_lock`` held."""
        path = self.config_file_path()
        directory = os.path.dirname(path) or "."
        tmp, bak = path + ".tmp", path + ".bak"
        with self._lock:
            data = self.encode().encode("utf-8")
            changes = self._changes
        os.makedirs(directory, exist_ok=True)
        self._good_stat, good = None, self._good_stat
        self.persists += 1
        _write_durably(tmp, data)           # removes the tmp file when it fails
        try:
            if self._main_is_good(path, good):
                self._rotate_to_bak(path, bak)
                _fsync_dir(directory)
            os.replace(tmp, path)
        except BaseException:
            # {path} still holds the old text (or, after a rename fall-back, {path}.bak
            # does): leave no temporary file behind
            _discard(tmp)
            _discard(bak + ".tmp")
            self._good_stat = good
            raise
        _fsync_dir(directory)
        self._good_stat = _stat_key(os.stat(path))
        with self._lock:
            if changes > self._persisted_changes:
                self._persisted_changes = changes

    def _main_is_good(self, path: str, good: Optional[tuple[int, int, int, int]]) -> bool:
        """Whether ``path`` holds readable text (known from our last load/persist, or parsed now)."""
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return False
        if good is not None and _stat_key(st) == good:
            return True
        try:
            with open(path, "rb") as f:
                text = f.read().decode("utf-8")
            if text.strip():
                self.validate(text)
                return True
        except (OSError, *_DECODE_ERRORS):
            pass
        log.warning("%s is damaged; writing over it and keeping the older .bak", path)
        return False

    @staticmethod
    def _rotate_to_bak(path: str, bak: str) -> None:
        """Make the current ``path`` the ``bak`` file without ``path`` ever going missing."""
        link = bak + ".tmp"
        _remove_if_exists(link)
        try:
            os.link(path, link)
        except OSError:                 # no hard links here: rename; load() covers the gap
            os.replace(path, bak)
            return
        os.replace(link, bak)


class ConfigPersistService(ServiceThread):
    """Persists a :class:`ConfigManager` every ``interval_ms`` when it is dirty, and at shutdown.

    RocketMQ schedules ``persist()`` at a fixed rate whether or not anything changed; this
    skips unchanged tables. A failed persist is logged and kept in ``last_error`` and is
    retried on the next pass, since the table stays dirty. At shutdown a full disk
    (ENOSPC) is logged in one line: the file keeps its previous text, and no temporary
    file is left.
    """

    name = "ConfigPersistService"

    def __init__(self, manager: ConfigManager, interval_ms: int) -> None:
        if interval_ms <= 0:
            raise ValueError(f"interval_ms must be positive, not {interval_ms}")
        super().__init__(interval_ms / 1000.0)
        self.manager = manager

    def run_once(self) -> None:
        if self.manager.dirty:
            self.manager.persist()

    def on_shutdown(self) -> None:
        if self.manager.dirty:
            try:
                self.manager.persist()
            except OSError as e:
                if not disk_full(e):
                    raise
                self.last_error = e
                log_unsaved_at_shutdown(self.name, self.manager.config_file_path(), e)


def log_unsaved_at_shutdown(who: str, path: str, error: OSError, meaning: str = "") -> None:
    """One line (no traceback) for a table that a full disk kept from being saved at
    shutdown: the file keeps the text it was last saved with."""
    kept = "it keeps what it was last saved with" if os.path.exists(path) else "it was never saved"
    log.error("%s: %s not saved at shutdown: %s (errno %s); %s%s", who, path, error.strerror or error,
              error.errno, kept, f" ({meaning})" if meaning else "")
