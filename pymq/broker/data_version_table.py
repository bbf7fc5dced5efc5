"""DataVersionTable: a broker table of named entries with RocketMQ's ``dataVersion``.

``topics.json`` and ``subscriptionGroup.json`` share one shape (fastjson, written
atomically with a ``.bak`` by :class:`~pymq.store.config_manager.ConfigManager`)::

    {"<table key>": {"<name>": {...entry...}, ...},
     "dataVersion": {"timestamp": <ms of the last change>, "counter": <changes>}}

A subclass names the table key and converts one entry to and from JSON; this class keeps
the entries and bumps the data version on every change. A change is written at once
unless the file was written less than ``WRITE_INTERVAL_S`` ago; then one write, that long
after the last, takes every change made meanwhile. So a flood of new topics (a client
sending to new names) writes the file a few times a second, not once per topic (RocketMQ
writes it per topic), and a single change is on disk when the call returns. A deferred
write that fails is retried, and logged once per episode; ``close()`` writes what is
pending.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Optional

from pymq.store.config_manager import ConfigManager
from pymq.store.episode_log import EpisodeLog
from pymq.store.fastjson import dumps_fastjson, loads_fastjson

log = logging.getLogger("pymq")

#: Writes of one table are at least this far apart; changes in between wait for the next.
WRITE_INTERVAL_S = 0.2
#: A deferred write that failed (a full disk) is tried again this much later.
RETRY_S = 1.0


class DataVersionTable(ConfigManager):
    """Named entries persisted in ``{root}/config/{file_name}``."""

    file_name = ""          # e.g. "topics.json"
    table_key = ""          # e.g. "topicConfigTable"

    def __init__(self, root_dir: str, broker_config) -> None:
        super().__init__()
        self.root_dir = os.fspath(root_dir)
        self.broker_config = broker_config
        self._table: dict[str, Any] = {}
        self._version = {"timestamp": int(time.time() * 1000), "counter": 0}
        self._last_write = float("-inf")                 # monotonic time of the last write begun
        self._write_timer: Optional[threading.Timer] = None
        self._closed = False
        self.write_errors = EpisodeLog(log, f"writing {self.file_name or 'a broker table'}")

    # -- what a subclass provides ----------------------------------------------------------

    def entry_from_json(self, name: str, doc: dict) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    @staticmethod
    def entry_name(entry: Any) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    # -- ConfigManager -------------------------------------------------------------------

    def config_file_path(self) -> str:
        return os.path.join(self.root_dir, "config", self.file_name)

    def _parse(self, text: str) -> tuple[dict[str, Any], dict]:
        doc = loads_fastjson(text)
        if not isinstance(doc, dict) or not isinstance(doc.get(self.table_key, {}), dict):
            raise ValueError(f"not a {self.table_key}")
        table = {n: self.entry_from_json(n, e) for n, e in doc.get(self.table_key, {}).items()}
        version = doc.get("dataVersion") if isinstance(doc.get("dataVersion"), dict) else {}
        return table, version

    def encode(self, pretty: bool = True) -> str:
        with self._lock:
            return dumps_fastjson({self.table_key: {n: e.to_json() for n, e in sorted(self._table.items())},
                                   "dataVersion": dict(self._version)}, pretty)

    def decode(self, text: str) -> None:
        table, version = self._parse(text)
        with self._lock:
            self._table = table
            if version:
                self._version = {"timestamp": int(version.get("timestamp", 0)),
                                 "counter": int(version.get("counter", 0))}
            self._mark_changed()

    def validate(self, text: str) -> None:
        self._parse(text)

    @property
    def data_version(self) -> dict:
        """``{"timestamp", "counter"}``: RocketMQ's ``DataVersion`` of the table."""
        with self._lock:
            return dict(self._version)

    # -- entries -------------------------------------------------------------------------

    def _changed(self) -> None:
        """Bump the data version and write the table: now, or with the next write when
        the last was less than ``WRITE_INTERVAL_S`` ago (call without the lock)."""
        with self._lock:
            self._version = {"timestamp": int(time.time() * 1000), "counter": self._version["counter"] + 1}
            self._mark_changed()
            if self._write_timer is not None:
                return                          # the write scheduled takes this change too
            wait = self._last_write + WRITE_INTERVAL_S - time.monotonic()
            if wait > 0 and not self._closed:
                self._schedule(wait)
                return
            self._last_write = time.monotonic()
        self.flush()

    def _schedule(self, delay: float) -> None:
        """With the lock held: one deferred write, ``delay`` seconds from now."""
        t = threading.Timer(delay, self._deferred_write)
        t.daemon = True
        t.name = f"pymq-write-{self.file_name}"
        self._write_timer = t
        t.start()

    def _deferred_write(self) -> None:
        with self._lock:
            if self._write_timer is None or self._closed:
                return
            self._write_timer = None
            self._last_write = time.monotonic()
        try:
            self.flush()
        except OSError as e:
            self.write_errors.failed(e)
            with self._lock:
                if self._write_timer is None and not self._closed:
                    self._schedule(RETRY_S)
            return
        self.write_errors.succeeded()

    def close(self) -> None:
        """Write what is pending now, and defer no more writes (every later change is
        written at once). Errors propagate as from ``persist``."""
        with self._lock:
            self._closed = True
            t, self._write_timer = self._write_timer, None
        if t is not None:
            t.cancel()
        self.persist()

    def get(self, name: str) -> Optional[Any]:
        with self._lock:
            return self._table.get(name)

    def entries(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._table)

    def put(self, entry: Any) -> Any:
        """Create or replace an entry."""
        with self._lock:
            self._table[self.entry_name(entry)] = entry
        self._changed()
        return entry

    def put_if_absent(self, entry: Any) -> Any:
        """The entry of that name, created from ``entry`` if there is none."""
        with self._lock:
            existing = self._table.get(self.entry_name(entry))
            if existing is not None:
                return existing
            self._table[self.entry_name(entry)] = entry
        self._changed()
        return entry

    def remove(self, name: str) -> bool:
        with self._lock:
            gone = self._table.pop(name, None) is not None
        if gone:
            self._changed()
        return gone
