"""The timer wheel's and the timer log's files, as pure functions on readers.

:class:`~pymq.store.timer_service.TimerMessageService` reads its files through these
(``load``, ``_open_files``, ``_slot``) and so does ``pymq check``
(:mod:`pymq.side_file_check`), so the two judge a wheel the same way. A reader is any
``read(pos, size) -> bytes`` that returns fewer bytes at the end of the file: a
:class:`~pymq._core.mapped_file.MappedFile`'s ``read``, or :class:`FileReader`'s on a
plain file (read-only, no mapping). The layout is in :mod:`pymq.store.timer_service`.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterable
from typing import Optional

#: a wheel slot: second i64 | first i64 | last i64 | num i32 | magic i32
SLOT = struct.Struct(">qqqii")
#: a timer-log unit: prev i64 | due ms i64 | commitlog offset i64 | size i32 | magic i32
UNIT = struct.Struct(">qqqii")
UNIT_SIZE = 32
MAGIC_DEFAULT = 1

Read = Callable[[int, int], bytes]


def wheel_slots(config) -> int:
    """The wheel's number of one-second slots for a :class:`~pymq.config.StoreConfig`:
    more than the longest delay, so two pending seconds never share a slot (RocketMQ
    parks far timers and rolls them instead)."""
    return max(2 * config.timer_wheel_days * 86400, config.timer_max_delay_sec + 86400)


class FileReader:
    """``read(pos, size)`` on a plain file opened read-only (``with FileReader(path) as r``)."""

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_RDONLY)
        self.size = os.fstat(self._fd).st_size

    def read(self, pos: int, size: int) -> bytes:
        return os.pread(self._fd, size, pos)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> "FileReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_slot(read: Read, slots: int, second: int) -> tuple[int, int, int]:
    """(first, last, num) of ``second``'s slot in a wheel of ``slots`` slots; (-1, -1, 0)
    when the slot holds another second (its bucket was delivered long ago)."""
    sec, first, last, num, _magic = SLOT.unpack(read((second % slots) * SLOT.size, SLOT.size))
    return (first, last, num) if sec == second else (-1, -1, 0)


def units_end(read: Read, length: int, chunk: int = 1 << 16) -> int:
    """Where the units of a timer-log file of ``length`` bytes end: at the first one
    without the magic (units are whole or zero)."""
    chunk -= chunk % UNIT_SIZE
    pos = 0
    while pos < length:
        data = read(pos, min(chunk, length - pos))
        whole = len(data) // UNIT_SIZE * UNIT_SIZE
        if not whole:
            return pos
        for n, unit in enumerate(UNIT.iter_unpack(data[:whole])):
            if unit[4] != MAGIC_DEFAULT:
                return pos + n * UNIT_SIZE
        pos += whole
    return pos


def wheel_damage(read_wheel: Read, slots: int, log_files: Iterable[tuple[Read, int]], delivered: int,
                 sample: int = 1024) -> Optional[str]:
    """Why the wheel does not index the newest units of the timer log (zeroed or garbage
    slots), or None. ``log_files`` are the timer-log files, newest first, each as
    (reader, where its units end); of their last ``sample`` units, each of a second after
    ``delivered`` (the second the timer checkpoint is delivering) must be in its slot."""
    seen = 0
    for read, end in log_files:
        pos = end - UNIT_SIZE
        while pos >= 0 and seen < sample:
            _prev, due, _offset, _size, _magic = UNIT.unpack(read(pos, UNIT_SIZE))
            second = due // 1000
            if second > delivered:
                _first, last, num = read_slot(read_wheel, slots, second)
                if num <= 0 or last < 0:
                    return f"does not index the timer message due at {due}"
            seen += 1
            pos -= UNIT_SIZE
        if seen >= sample:
            break
    return None
