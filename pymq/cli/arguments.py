"""Argument types of ``pymq``: each turns bad text into argparse's one-line usage error
(exit 2) at parse time, before a store is opened, instead of an exception further down.

Numbers are bounded by what the store can hold (a queue id is a Java int, an offset or a
time a Java long), so a huge number is an argument error, not an ``OverflowError`` in
the compiled core; floats must be finite.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from pymq import admin

__all__ = ["INT32_MAX", "INT64_MAX", "bounded_float", "bounded_int", "non_empty", "time_ms"]

INT32_MAX = 2 ** 31 - 1
INT64_MAX = 2 ** 63 - 1


def bounded_int(low: int, high: int, what: str = "a whole number") -> Callable[[str], int]:
    """An argparse type: an integer in ``[low, high]``."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is out of range ({low:,}..{high:,})")
        return value

    parse.__name__ = "int"
    return parse


def bounded_float(low: float, high: float, low_open: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number in ``[low, high]`` (``(low, high]`` with
    ``low_open``)."""

    def parse(text: str) -> float:
        try:
            value = float(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value) or value > high or value < low or (low_open and value == low):
            raise argparse.ArgumentTypeError(f"{text!r} is out of range ({'more than ' if low_open else ''}"
                                             f"{low:g}..{high:g})")
        return value

    parse.__name__ = "float"
    return parse


def time_ms(text: str) -> int:
    """An argparse type: a store time, ms since the epoch or mqadmin's
    ``yyyy-MM-dd#HH:mm:ss:SSS`` (local time)."""
    try:
        value = admin.parse_time(text)
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a time (ms since the epoch, or "
                                         "yyyy-MM-dd#HH:mm:ss:SSS)") from None
    if not 0 <= value <= INT64_MAX:
        raise argparse.ArgumentTypeError(f"{text!r} is out of range (0..{INT64_MAX:,} ms)")
    return value


time_ms.__name__ = "time"


def non_empty(text: str) -> str:
    """An argparse type: a name that is not empty (nor only spaces)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty")
    return text


non_empty.__name__ = "name"
