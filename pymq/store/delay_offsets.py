"""DelayOffsetManager: ``config/delayOffset.json``, the next offset to deliver per delay level.

RocketMQ's ``ScheduleMessageService`` persists ``{"offsetTable":{level: offset}}`` with
fastjson (unquoted integer keys); it is loaded with a ``.bak`` fall-back and written
atomically by :class:`ConfigManager`.
"""

from __future__ import annotations

import os

from .config_manager import ConfigManager
from .fastjson import dumps_fastjson, loads_fastjson


_MAX_OFFSET = (1 << 63) - 1            # offsets are Java longs


def _parse(text: str) -> dict[int, int]:
    """The table of a delayOffset.json text; ``ValueError`` for anything else, a value of
    the wrong type included (``null``, a string, a float, a list: the offsets are longs)."""
    doc = loads_fastjson(text)
    if not isinstance(doc, dict) or not isinstance(doc.get("offsetTable", {}), dict):
        raise ValueError("not a delay offset table")
    table = {}
    for level, offset in doc.get("offsetTable", {}).items():
        level = int(level)              # a bare integer key (fastjson) or a quoted one
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise ValueError(f"bad delay offset entry {level}: {offset!r} is not an integer")
        if level < 1 or not 0 <= offset <= _MAX_OFFSET:
            raise ValueError(f"bad delay offset entry {level}: {offset}")
        table[level] = offset
    return table


class DelayOffsetManager(ConfigManager):
    """Per delay level, the next SCHEDULE_TOPIC_XXXX queue offset to deliver."""

    reset_meaning = ("every delay level at its queue's start: delayed messages still stored are "
                     "delivered again when due")

    def __init__(self, root_dir: str) -> None:
        super().__init__()
        self.root_dir = os.fspath(root_dir)
        self._table: dict[int, int] = {}

    def config_file_path(self) -> str:
        return os.path.join(self.root_dir, "config", "delayOffset.json")

    def encode(self, pretty: bool = True) -> str:
        with self._lock:
            return dumps_fastjson({"offsetTable": dict(sorted(self._table.items()))}, pretty)

    def decode(self, text: str) -> None:
        table = _parse(text)
        with self._lock:
            self._table = table
            self._mark_changed()

    def validate(self, text: str) -> None:
        _parse(text)

    def get(self, level: int) -> int:
        """Next offset to deliver for ``level`` (0 when never delivered)."""
        with self._lock:
            return self._table.get(level, 0)

    def set(self, level: int, offset: int) -> None:
        with self._lock:
            if self._table.get(level) != offset:
                self._table[level] = offset
                self._mark_changed()

    def table(self) -> dict[int, int]:
        with self._lock:
            return dict(self._table)
