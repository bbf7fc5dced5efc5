"""What one run produced (:class:`Report`) and its JSON file."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from .base import BenchOptions
from .rows import Row, ratios


@dataclasses.dataclass
class Report:
    """Everything one run produced: machine, options, rows, skipped workloads, and when
    and how long it ran."""

    environment: dict[str, str]
    options: BenchOptions
    rows: list[Row]
    skipped: list[dict[str, str]]
    settings: dict[str, str]  # implementation -> durability/configuration note
    started: str = ""         # local date and time the run started, ISO 8601
    wall_s: float = 0.0       # the whole run: setups, timed runs, teardowns
    rounds: int = 0
    headline: bool = False    # the default run (not --full, no --workload)
    command: str = ""         # the command line, for the record
    #: the 1-minute load average when the run started and when it ended (other jobs on
    #: the machine move every figure; a ratio's spread shows how much)
    load: tuple[float, float] | None = None

    def ratios(self) -> list[dict[str, Any]]:
        """The chart's figures: each peer's pymq/peer median and min-max over the rounds."""
        return ratios(self.rows)

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable view of the report."""
        return {
            "command": self.command,
            "started": self.started,
            "wall_s": round(self.wall_s, 3),
            "rounds": self.rounds,
            "headline": self.headline,
            "load": list(self.load) if self.load is not None else None,
            "environment": self.environment,
            "options": dataclasses.asdict(self.options),
            "settings": self.settings,
            "ratios": self.ratios(),
            "rows": [row.to_json() for row in self.rows],
            "skipped": self.skipped,
        }


def write_json(report: Report, path: str) -> None:
    """Write the report as JSON to ``path``."""
    with open(path, "w", encoding="utf-8") as out:
        json.dump(report.to_json(), out, indent=2)
        out.write("\n")
