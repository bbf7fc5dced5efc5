"""The machine and versions a benchmark ran with, for the report's header and its JSON."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import platform

from pymq._version import __version__

from .base import PEERS


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, else what :mod:`platform` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if line.startswith(("model name", "Model", "Hardware")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def core_build_info() -> str:
    """What the compiled core reports about its build (CRC-32 implementation)."""
    try:
        record = importlib.import_module("pymq._core.record")
    except ImportError as exc:
        return f"core not importable ({exc})"
    crc32_impl = getattr(record, "crc32_impl", None)
    return f"crc32={crc32_impl()}" if callable(crc32_impl) else "crc32_impl() not available"


def _dist_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def environment() -> dict[str, str]:
    """Python, CPU, pymq and peer versions, for the header and the JSON output."""
    env = {
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "cpu": f"{cpu_model()} ({os.cpu_count()} logical CPUs)",
        "pymq": __version__,
        "pymq_core": core_build_info(),
    }
    env.update({peer: _dist_version(peer) for peer in PEERS})
    return env
