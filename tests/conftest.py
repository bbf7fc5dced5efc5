"""Shared fixtures: small store configurations and a guard against swallowed exceptions."""

from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import subprocess
import tempfile

import pytest

import pymq


def small_config(**overrides) -> pymq.StoreConfig:
    """A StoreConfig with test-sized files (64 KiB segments) and fast flushing."""
    values = dict(
        commitlog_file_size=64 * 1024,
        consume_queue_entries=64,
        index_hash_slots=64,
        index_max_entries=256,
        flush_interval_commitlog=50,
        warm_mapped_file_enable=False,
    )
    values.update(overrides)
    return pymq.StoreConfig(**values)


@pytest.fixture
def config_factory():
    return small_config


@pytest.fixture
def store(tmp_path):
    """A started store with small files, shut down after the test."""
    s = pymq.MessageStore(tmp_path / "store", small_config())
    s.start()
    yield s
    s.shutdown()


@pytest.fixture(autouse=True)
def no_swallowed_exceptions(capfd):
    """Fail a test when C code reported an exception it could not raise ("Exception ignored")."""
    yield
    _, err = capfd.readouterr()
    assert "Exception ignored" not in err, err


@pytest.fixture
def scratch(tmp_path):
    """A scratch directory in memory (/dev/shm) when there is one, else ``tmp_path``: the
    fuzz tests copy, open, msync and delete stores many times over."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        d = tempfile.mkdtemp(prefix="pymq-fuzz-", dir="/dev/shm")
        try:
            yield pathlib.Path(d)
        finally:
            shutil.rmtree(d, ignore_errors=True)
    else:
        yield tmp_path


def snapshot(root) -> dict:
    """Path -> (size, sha256) of every file under ``root``: what a test compares to show
    that something changed nothing on disk."""
    out = {}
    for dp, _dn, fn in os.walk(root):
        for name in fn:
            p = os.path.join(dp, name)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = (os.path.getsize(p), hashlib.sha256(f.read()).hexdigest())
    return out


def mounted_tmpfs(tmp_path, size: int):
    """Generator for a fixture: a tmpfs of ``size`` bytes mounted under ``tmp_path`` (a
    real small disk to fill), unmounted afterwards. Mounting needs root (CI runs as
    root); elsewhere the test is skipped with that reason."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    yield from _mounted(mnt, ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], "a tmpfs")


def _mounted(mnt, argv: list, what: str):
    """Run the mount command ``argv`` (the test is skipped, saying why, when it fails),
    yield ``mnt``, unmount it afterwards."""
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"cannot mount {what} here: {p.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def mounted_ext4(tmp_path, size: int):
    """Generator for a fixture: a small ext4 file system (a loop-mounted image of ``size``
    bytes, no journal) under ``tmp_path``, unmounted afterwards. Unlike tmpfs, reading a
    hole of a sparse file takes no space there, so pymq keeps its files sparse: the disk
    to fill when a test is about reserving blocks ahead. Needs root and a loop device;
    elsewhere the test is skipped with that reason."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting an ext4 image needs root")
    image = tmp_path / "disk.img"
    with open(image, "wb") as f:
        f.truncate(size)
    p = subprocess.run(["mkfs.ext4", "-q", "-F", "-O", "^has_journal", "-m", "0", str(image)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"cannot make an ext4 image here: {p.stderr.strip()}")
    yield from _mounted(mnt, ["mount", "-o", "loop", str(image), str(mnt)], "an ext4 image")


# -- a real Apache RocketMQ broker (tests/real_rocketmq.py) ----------------------------------

@pytest.fixture(scope="session")
def rocketmq_home():
    """The RocketMQ 4.9.7 distribution ($PYMQ_ROCKETMQ_HOME, else ../shared/rocketmq-4.9.7
    beside the repository, else /work/shared's); the test is skipped, saying why, without one."""
    from real_rocketmq import find_rocketmq_home
    home, why = find_rocketmq_home()
    if home is None:
        pytest.skip(why)
    return home


@pytest.fixture(scope="session")
def rocketmq_probe(rocketmq_home, tmp_path_factory):
    """tests/java/RmqProbe.java (official Java client + mqadmin), compiled once per session."""
    from real_rocketmq import Probe
    return Probe.compile(rocketmq_home, tmp_path_factory.mktemp("rmq-probe"))


@pytest.fixture
def real_broker(rocketmq_home, tmp_path):
    """A factory ``real_broker(store_dir, conf=None) -> RealBroker`` (not started); every
    broker and name server it made is stopped after the test, whatever its outcome."""
    from real_rocketmq import RealBroker
    made = []

    def make(store, conf=None):
        b = RealBroker(rocketmq_home, tmp_path / f"rmq-run-{len(made)}", store, conf)
        made.append(b)
        return b

    yield make
    failures = []
    for b in made:
        try:
            b.stop()
        except Exception as e:  # noqa: BLE001 - stop every one, then report
            failures.append(e)
    if failures:
        raise failures[0]
