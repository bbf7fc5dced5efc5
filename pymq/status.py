"""Status enums with RocketMQ's names (``PutMessageStatus``, ``GetMessageStatus``, ...).

This module imports nothing from pymq.
"""

import enum


class _StatusEnum(enum.IntEnum):
    """An ``IntEnum`` that prints as its RocketMQ name: ``str(status)`` and ``f"{status}"``
    give ``"PUT_OK"``, not ``"0"``. It still compares and serialises as its number (JSON,
    the protocols); a numeric format (``f"{status:d}"``) gives the number."""

    def __str__(self) -> str:
        return self.name

    def __format__(self, spec: str) -> str:
        if spec and spec[-1] in "bcdoxXneEfFgG%":
            return int.__format__(self, spec)
        return format(self.name, spec)


class PutMessageStatus(_StatusEnum):
    """Outcome of ``put_message`` / ``put_messages`` (RocketMQ 4.9.x names, then 5.x's
    timer statuses in 5.x's order; RocketMQ 5's statuses pymq never returns are left out).

    ``WHEEL_TIMER_NOT_ENABLE``: a timer message (``deliver_time_ms``, TIMER_* properties,
    a recall's delete mark) while the timer wheel or the timer log cannot be created or
    opened (a full disk): it is refused instead of being stored where nothing would
    deliver it; the result's ``error`` says why. Timer puts resume by themselves once
    the files can be created. Delay levels do not use the wheel and are not refused.
    """

    PUT_OK = 0
    FLUSH_DISK_TIMEOUT = 1
    FLUSH_SLAVE_TIMEOUT = 2
    SLAVE_NOT_AVAILABLE = 3
    SERVICE_NOT_AVAILABLE = 4
    CREATE_MAPEDFILE_FAILED = 5
    MESSAGE_ILLEGAL = 6
    PROPERTIES_SIZE_EXCEEDED = 7
    OS_PAGECACHE_BUSY = 8
    UNKNOWN_ERROR = 9
    LMQ_CONSUME_QUEUE_NUM_EXCEEDED = 10
    WHEEL_TIMER_MSG_ILLEGAL = 11
    WHEEL_TIMER_NOT_ENABLE = 12


class AppendMessageStatus(_StatusEnum):
    """Outcome of one append into a commit-log segment."""

    PUT_OK = 0
    END_OF_FILE = 1
    MESSAGE_SIZE_EXCEEDED = 2
    PROPERTIES_SIZE_EXCEEDED = 3
    UNKNOWN_ERROR = 4


class GetMessageStatus(_StatusEnum):
    """Outcome of ``get_message`` (RocketMQ 4.9.x names)."""

    FOUND = 0
    NO_MATCHED_MESSAGE = 1
    MESSAGE_WAS_REMOVING = 2
    OFFSET_FOUND_NULL = 3
    OFFSET_OVERFLOW_BADLY = 4
    OFFSET_OVERFLOW_ONE = 5
    OFFSET_TOO_SMALL = 6
    NO_MATCHED_LOGIC_QUEUE = 7
    NO_MESSAGE_IN_QUEUE = 8


class BoundaryType(enum.Enum):
    """Which end of a run of equal store timestamps a time lookup returns (RocketMQ 5.x)."""

    LOWER = "lower"
    UPPER = "upper"


class FlushDiskType(str, enum.Enum):
    """When a put is acknowledged: after the page cache write, or after ``msync``."""

    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"
