"""Shared fixtures: small store configurations and a guard against swallowed exceptions."""

from __future__ import annotations

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
