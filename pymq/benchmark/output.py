"""Where a run's files go: the JSON of the figures and the chart beside it.

Every run writes both. ``--out DIR`` puts ``bench.json`` and ``bench.png`` in DIR;
``--json FILE`` and ``--plot FILE.png`` name either file, and the other one goes beside
it (same name, the other suffix) unless ``--out`` or the other flag says where; with none
of the three the files go into a new ``./pymq-bench-<date>-<time>/``.
"""

from __future__ import annotations

import datetime
import importlib.util
import os

from .base import BenchOptions


def default_out_dir(now: datetime.datetime) -> str:
    """``pymq-bench-YYYYmmdd-HHMMSS`` in the current directory."""
    return os.path.join(os.getcwd(), f"pymq-bench-{now:%Y%m%d-%H%M%S}")


def output_paths(options: BenchOptions, now: datetime.datetime) -> tuple[str, str]:
    """The JSON and PNG paths of a run (absolute)."""
    directory = options.out_dir
    if directory is None and not options.json_path and not options.plot_path:
        directory = default_out_dir(now)
    json_path = options.json_path
    png_path = options.plot_path
    if json_path is None:
        json_path = (os.path.join(directory, "bench.json") if directory is not None
                     else os.path.splitext(png_path)[0] + ".json")
    if png_path is None:
        png_path = (os.path.join(directory, "bench.png") if directory is not None
                    else os.path.splitext(json_path)[0] + ".png")
    return os.path.abspath(json_path), os.path.abspath(png_path)


def check_output_paths(options: BenchOptions) -> None:
    """Refuse, before anything is timed, a ``--json`` or ``--plot`` whose directory does
    not exist, and ``--plot`` without matplotlib (``--out`` is created when needed)."""
    for flag, path in (("--json", options.json_path), ("--plot", options.plot_path)):
        if path and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise FileNotFoundError(f"{flag} {path!r}: no such directory")
    if options.plot_path and not can_plot():
        raise FileNotFoundError("--plot needs matplotlib: pip install matplotlib")
    if options.out_dir and os.path.exists(options.out_dir) and not os.path.isdir(options.out_dir):
        raise FileExistsError(f"--out {options.out_dir!r} is not a directory")


def can_plot() -> bool:
    """True when matplotlib can be imported (the chart needs it)."""
    return importlib.util.find_spec("matplotlib") is not None


def make_parent_dirs(*paths: str) -> None:
    """Create the directories the output files go into."""
    for path in paths:
        os.makedirs(os.path.dirname(path), exist_ok=True)
