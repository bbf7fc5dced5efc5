"""The machine and versions a benchmark ran with, for the report's header and its JSON."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import platform
import tempfile

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


def filesystem(path: str) -> str:
    """The filesystem ``path`` is on, from /proc/mounts: ``"ext4 on /dev/vda"`` (the
    mount with the longest prefix of the real path), plus the disk's model where
    /sys/block knows it; ``"unknown"`` when /proc/mounts cannot be read."""
    real = os.path.realpath(path)
    best = ("", "unknown", "")
    try:
        with open("/proc/mounts", encoding="utf-8", errors="replace") as mounts:
            for line in mounts:
                fields = line.split()
                if len(fields) < 3:
                    continue
                device, point, fstype = fields[0], fields[1].replace("\\040", " "), fields[2]
                inside = real == point or real.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best[0]):
                    best = (point, fstype, device)
    except OSError:
        return "unknown"
    _, fstype, device = best
    text = f"{fstype} on {device}" if device else fstype
    model = _disk_model(device)
    return f"{text} ({model})" if model else text


def _disk_model(device: str) -> str:
    name = os.path.basename(device)
    for candidate in (name, name.rstrip("0123456789"), name.rsplit("p", 1)[0]):
        try:
            with open(f"/sys/block/{candidate}/device/model", encoding="utf-8") as f:
                return f.read().strip()
        except OSError:
            continue
    return ""


def memory_gib() -> float | None:
    """Total memory in GiB from /proc/meminfo, None where it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="utf-8") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / (1 << 20)
    except (OSError, ValueError, IndexError):
        pass
    return None


def environment(directory: str | None = None) -> dict[str, str]:
    """The machine (CPU model, cores, memory, the filesystem the temporary stores are on,
    ``directory`` or the system temp dir), Python, pymq and peer versions, for the
    header, the chart's caption and the JSON output."""
    memory = memory_gib()
    env = {
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "cpu": f"{cpu_model()} ({os.cpu_count()} logical CPUs)",
        "cpu_model": cpu_model(),
        "cores": str(os.cpu_count()),
        "memory": f"{memory:.1f} GiB" if memory is not None else "unknown",
        "filesystem": filesystem(directory or tempfile.gettempdir()),
        "pymq": __version__,
        "pymq_core": core_build_info(),
    }
    env.update({peer: _dist_version(peer) for peer in PEERS})
    return env
