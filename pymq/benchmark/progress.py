"""Progress of a benchmark run: a bar with an ETA on a terminal, one line per step otherwise.

A step is one timed repeat of one workload (setup, run, check, teardown). On a terminal
the bar is redrawn in place when a step starts and when it ends (nothing runs in the
background while a step is being timed); when the stream is not a terminal (piped, a CI
log) every finished step prints exactly one line. The ETA is the sum of the remaining
steps' own durations as measured in earlier rounds; a step not yet seen counts as the
mean step so far.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import TextIO

BAR_WIDTH = 20
LINE_WIDTH = 79


def clock_text(seconds: float) -> str:
    """``m:ss`` (``h:mm:ss`` from an hour on)."""
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    """Reports the steps of a run to ``stream``; ``keys`` names every planned step in
    order (steps with the same key are the same workload in different rounds)."""

    def __init__(self, keys: Sequence[str], stream: TextIO | None, tty: bool | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.keys = list(keys)
        self.stream = stream
        self.tty = bool(stream is not None and (stream.isatty() if tty is None else tty))
        self.clock = clock
        self.started = clock()
        self.done = 0
        self.durations: dict[str, list[float]] = {}
        self._step_started = self.started

    @property
    def total(self) -> int:
        """Steps planned."""
        return len(self.keys)

    def eta(self) -> float | None:
        """Seconds the remaining steps should take, None before any step finished."""
        if not self.done:
            return None
        mean_step = (self._step_started - self.started) / self.done
        left = 0.0
        for key in self.keys[self.done:]:
            seen = self.durations.get(key)
            left += statistics.mean(seen) if seen else mean_step
        return left

    def begin(self, label: str) -> None:
        """A step starts (its label: round, workload); redraws the bar on a terminal."""
        self._step_started = self.clock()
        if self.tty:
            self._draw(label)

    def end(self, label: str, result: str) -> None:
        """The current step finished with ``result`` (its figures, one short text)."""
        now = self.clock()
        self.durations.setdefault(self.keys[self.done], []).append(now - self._step_started)
        self.done += 1
        self._step_started = now
        if self.stream is None:
            return
        if self.tty:
            self._draw(f"{label}: {result}")
        else:
            eta = self.eta()
            left = f", ~{clock_text(eta)} left" if eta is not None and self.done < self.total else ""
            width = len(str(self.total))
            print(f"[{self.done:>{width}}/{self.total} {clock_text(now - self.started)}{left}] {label}: {result}",
                  file=self.stream, flush=True)

    def close(self) -> None:
        """Ends the bar's line on a terminal (nothing otherwise)."""
        if self.tty and self.stream is not None:
            print(file=self.stream, flush=True)

    def _draw(self, text: str) -> None:
        filled = BAR_WIDTH * self.done // max(self.total, 1)
        bar = "#" * filled + "-" * (BAR_WIDTH - filled)
        eta = self.eta()
        left = f" ETA {clock_text(eta)}" if eta is not None else ""
        line = f"[{bar}] {self.done}/{self.total} {clock_text(self.clock() - self.started)}{left} {text}"
        print("\r" + line[:LINE_WIDTH] + "\x1b[K", end="", file=self.stream, flush=True)
