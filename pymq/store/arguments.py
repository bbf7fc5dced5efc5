"""Checks of the arguments the store's public calls share: queue ids and wait timeouts.

A queue id is a Java int in RocketMQ. Python would let a float, a str, None or a bool
through to a dict lookup or a C conversion (``1.5`` truncated to queue 1, ``True`` taken
for queue 1, ``"1"`` creating a queue of that name in memory), so every public call that
takes one checks it first and raises ``TypeError``.

A wait's ``timeout_s`` is a number of seconds: NaN or a negative number raises
``ValueError`` (NaN compared false with everything and made a wait without end);
infinity, or anything beyond what a lock can wait, means "no limit".
"""

from __future__ import annotations

import math
import threading
from typing import Optional

__all__ = ["check_queue_id", "check_queue_offsets", "wait_timeout"]


def check_queue_id(queue_id: object) -> int:
    """``queue_id`` itself when it is an int (not a bool); else ``TypeError``."""
    if type(queue_id) is int:
        return queue_id
    if isinstance(queue_id, bool) or not isinstance(queue_id, int):
        raise TypeError(f"queue_id must be an int, not {type(queue_id).__name__}")
    return queue_id


def check_queue_offsets(offsets: object) -> None:
    """``{queue_id: offset}`` with int queue ids and int offsets (``wait_messages``)."""
    if not isinstance(offsets, dict):
        raise TypeError(f"offsets must be a dict of queue id to offset, not {type(offsets).__name__}")
    for queue_id, offset in offsets.items():
        check_queue_id(queue_id)
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise TypeError(f"the offset of queue {queue_id} must be an int, not {type(offset).__name__}")


def wait_timeout(timeout_s: object) -> Optional[float]:
    """The timeout to hand a ``threading`` wait: ``timeout_s`` in seconds, or None for no
    limit (infinity, or more than ``threading.TIMEOUT_MAX``). ``TypeError`` for a
    non-number, ``ValueError`` for NaN or a negative number."""
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)):
        raise TypeError(f"timeout_s must be a number of seconds, not {type(timeout_s).__name__}")
    if math.isnan(timeout_s) or timeout_s < 0:
        raise ValueError(f"timeout_s must be a number of seconds >= 0 (inf: no limit), not {timeout_s}")
    if timeout_s > threading.TIMEOUT_MAX:
        return None
    return float(timeout_s)
