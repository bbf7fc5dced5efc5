"""TimerCheckpoint: ``config/timerCheckpoint.json``, the timer service's progress.

``{"enqueueOffset": next timer-queue offset to take in, "second": the second being
delivered, "delivered": [offsets done in it]}``; read and written as every side table
(:class:`~pymq.store.config_manager.ConfigManager`). Used by
:class:`~pymq.store.timer_service.TimerMessageService`, ``store.stats()`` and
``pymq check``.
"""

from __future__ import annotations

import os

from .config_manager import ConfigManager
from .fastjson import dumps_fastjson, loads_fastjson

__all__ = ["TimerCheckpoint"]

_MAX_LONG = (1 << 63) - 1


class TimerCheckpoint(ConfigManager):
    """``config/timerCheckpoint.json``: enqueue progress and delivery progress."""

    reset_meaning = ("the timer queue taken in again from its start: timer messages still stored "
                     "are delivered again when due")

    def __init__(self, root_dir: str) -> None:
        super().__init__()
        self.root_dir = root_dir
        self.enqueue_offset = 0
        self.second = -1
        self.delivered: set[int] = set()

    def config_file_path(self) -> str:
        return os.path.join(self.root_dir, "config", "timerCheckpoint.json")

    def encode(self, pretty: bool = True) -> str:
        with self._lock:
            return dumps_fastjson({"enqueueOffset": self.enqueue_offset, "second": self.second,
                                   "delivered": sorted(self.delivered)}, pretty)

    def decode(self, text: str) -> None:
        doc = loads_fastjson(text)
        if not isinstance(doc, dict) or not isinstance(doc.get("delivered", []), list):
            raise ValueError("not a timer checkpoint")
        enqueue_offset = _long(doc.get("enqueueOffset", 0), "enqueueOffset", 0)
        second = _long(doc.get("second", -1), "second", -1)      # -1: not delivering yet
        delivered = {_long(x, "delivered offset", 0) for x in doc.get("delivered", [])}
        with self._lock:
            self.enqueue_offset, self.second, self.delivered = enqueue_offset, second, delivered
            self._mark_changed()

    def update(self, **fields) -> None:
        with self._lock:
            for k, v in fields.items():
                setattr(self, k, v)
            self._mark_changed()


def _long(value, name: str, low: int) -> int:
    """``value`` when it is an integer in [low, Java's Long.MAX_VALUE], else ``ValueError``
    (``null``, a string, a float, a list: damage, not a reason for an open to fail)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"not a timer checkpoint: {name} {value!r} is not an integer")
    if not low <= value <= _MAX_LONG:
        raise ValueError(f"not a timer checkpoint: {name} {value} is out of range")
    return value
