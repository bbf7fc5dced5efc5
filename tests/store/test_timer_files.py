"""The pieces ``TimerMessageService`` and ``pymq check`` share, and the small public reads
the checker uses instead of other modules' private names.

* :mod:`pymq.store.timer_files`: the wheel's slot count, a slot, where a timer-log file's
  units end, whether the wheel indexes the newest units; the same answers on a mapped
  file and on a plain file read without a mapping;
* ``ConfigManager.probe`` and ``MISSING``; ``StoreCheckpoint.times()`` and ``wrong_length``;
* :mod:`pymq.side_file_check` stays a client of the store (no broker, no server).
"""

from __future__ import annotations

import ast
import os

import pytest

import pymq
from pymq._core.mapped_file import MappedFile
from pymq.store.checkpoint import CHECKPOINT_SIZE, StoreCheckpoint
from pymq.store.config_manager import MISSING
from pymq.store.delay_offsets import DelayOffsetManager
from pymq.store.timer_files import (MAGIC_DEFAULT, SLOT, UNIT, UNIT_SIZE, FileReader, read_slot, units_end,
                                    wheel_damage, wheel_slots)

FILE_SIZE = 4096


def write_units(path, units, size=FILE_SIZE, tail=b""):
    data = b"".join(UNIT.pack(*u) for u in units) + tail
    with open(path, "wb") as f:
        f.write(data + b"\0" * (size - len(data)))


@pytest.mark.parametrize("days,max_delay", [(7, 3 * 86400), (1, 3600), (1, 10 * 86400)])
def test_wheel_slots_is_the_services_count(days, max_delay):
    cfg = pymq.StoreConfig(timer_wheel_days=days, timer_max_delay_sec=max_delay)
    assert wheel_slots(cfg) == max(2 * days * 86400, max_delay + 86400)


@pytest.mark.parametrize("n", [0, 1, 5, FILE_SIZE // UNIT_SIZE - 1, FILE_SIZE // UNIT_SIZE])
@pytest.mark.parametrize("chunk", [UNIT_SIZE, 3 * UNIT_SIZE + 5, 1 << 16])
def test_units_end_on_a_mapped_and_a_plain_file(tmp_path, n, chunk):
    path = str(tmp_path / "00000000000000000000")
    write_units(path, [(-1, 1000 * i, 64 * i, 64, MAGIC_DEFAULT) for i in range(n)])
    mf = MappedFile(path, FILE_SIZE, writable=False)
    try:
        with FileReader(path) as f:
            assert units_end(mf.read, FILE_SIZE, chunk) == units_end(f.read, f.size, chunk) == n * UNIT_SIZE
    finally:
        mf.close()


def test_units_end_stops_at_a_unit_without_the_magic_and_at_a_partial_unit(tmp_path):
    path = str(tmp_path / "log")
    write_units(path, [(-1, 1, 2, 3, MAGIC_DEFAULT), (-1, 1, 2, 3, MAGIC_DEFAULT), (-1, 1, 2, 3, 7),
                       (-1, 1, 2, 3, MAGIC_DEFAULT)])
    with FileReader(path) as f:
        assert units_end(f.read, f.size) == 2 * UNIT_SIZE
    write_units(path, [(-1, 1, 2, 3, MAGIC_DEFAULT)] * 2, size=2 * UNIT_SIZE + 10)
    with FileReader(path) as f:
        assert units_end(f.read, f.size) == 2 * UNIT_SIZE


def wheel_with(slots, filed):
    data = bytearray(slots * SLOT.size)
    for second, (first, last, num) in filed.items():
        pos = (second % slots) * SLOT.size
        data[pos:pos + SLOT.size] = SLOT.pack(second, first, last, num, 0)
    return bytes(data)


def reader(data):
    return lambda pos, size: data[pos:pos + size]


def test_read_slot_and_wheel_damage():
    slots = 100
    units = [(-1, 5_000, 0, 64, MAGIC_DEFAULT), (-1, 7_500, 64, 64, MAGIC_DEFAULT)]
    log = b"".join(UNIT.pack(*u) for u in units)
    wheel = wheel_with(slots, {5: (0, 0, 1), 7: (32, 32, 1)})
    assert read_slot(reader(wheel), slots, 7) == (32, 32, 1)
    assert read_slot(reader(wheel), slots, 107) == (-1, -1, 0)       # the slot holds another second
    assert wheel_damage(reader(wheel), slots, [(reader(log), len(log))], delivered=4) is None
    zeroed = bytes(len(wheel))
    assert wheel_damage(reader(zeroed), slots, [(reader(log), len(log))], delivered=4) == \
        "does not index the timer message due at 7500"
    # seconds delivered already need no slot; only the last ``sample`` units are looked at
    assert wheel_damage(reader(zeroed), slots, [(reader(log), len(log))], delivered=7) is None
    half = wheel_with(slots, {7: (32, 32, 1)})
    assert wheel_damage(reader(half), slots, [(reader(log), len(log))], delivered=4, sample=1) is None
    assert wheel_damage(reader(half), slots, [(reader(log), len(log))], delivered=4, sample=2) is not None
    # files newest first: the older file is read once the newer one is done
    older, newer = log[:UNIT_SIZE], log[UNIT_SIZE:]
    assert wheel_damage(reader(half), slots, [(reader(newer), UNIT_SIZE), (reader(older), UNIT_SIZE)],
                        delivered=4) is not None


def test_the_service_and_the_check_judge_a_store_s_wheel_alike(tmp_path):
    import time

    from conftest import small_config

    from pymq.checker import StoreChecker

    path = tmp_path / "s"
    cfg = small_config(timer_wheel_days=1, timer_max_delay_sec=3600)
    with pymq.MessageStore(path, cfg) as s:
        s.put_message(pymq.Message("T", b"later", deliver_time_ms=int(time.time() * 1000) + 600_000))
        deadline = time.monotonic() + 5
        while s.timer_service.checkpoint.enqueue_offset < 1 and time.monotonic() < deadline:
            time.sleep(0.005)
    assert os.path.getsize(path / "timerwheel") == wheel_slots(cfg) * SLOT.size
    assert StoreChecker(str(path), cfg).run().ok
    with open(path / "timerwheel", "r+b") as f:
        f.write(bytes(os.path.getsize(path / "timerwheel")))
    check = StoreChecker(str(path), cfg).run()
    assert [p.where for p in check.problems] == ["timerwheel"]
    assert "does not index the timer message due at" in check.problems[0].detail
    store = pymq.MessageStore(path, cfg)
    try:
        assert any("does not index the timer message due at" in n for n in store.open_report), store.open_report
    finally:
        store.shutdown()


# -- public reads used by the checker --------------------------------------------------------

def test_probe_says_what_load_would_find(tmp_path):
    table = DelayOffsetManager(str(tmp_path))
    path = table.config_file_path()
    assert table.probe(path) is MISSING == "missing"
    os.makedirs(os.path.dirname(path))
    with open(path, "w") as f:
        f.write("")
    assert table.probe(path) == "empty"
    with open(path, "w") as f:
        f.write('{"offsetTable":{1:null}}')
    assert table.probe(path).startswith("unreadable (")
    assert table.table() == {}                           # unchanged by a failed decode
    with open(path, "w") as f:
        f.write('{"offsetTable":{1:5}}')
    assert table.probe(path) is None and table.table() == {1: 5}
    assert sorted(os.listdir(os.path.dirname(path))) == ["delayOffset.json"]   # nothing written or moved


def test_checkpoint_times_and_wrong_length(tmp_path):
    root = str(tmp_path)
    assert StoreCheckpoint(root, read_only=True).times() is None           # no file
    cp = StoreCheckpoint(root)
    cp.physic_msg_timestamp = 1_700_000_000_000
    assert cp.times() == (1_700_000_000_000, 0, 0) and not cp.wrong_length
    cp.close()
    with open(tmp_path / "checkpoint", "ab") as f:
        f.write(b"\1")
    ro = StoreCheckpoint(root, read_only=True)
    assert ro.wrong_length and ro.times() is None and ro.load_problem
    assert os.path.getsize(tmp_path / "checkpoint") == CHECKPOINT_SIZE + 1     # read-only changes nothing
    with open(tmp_path / "checkpoint", "r+b") as f:
        f.truncate(CHECKPOINT_SIZE)
        f.write((-5).to_bytes(8, "big", signed=True))
    ro = StoreCheckpoint(root, read_only=True)
    assert not ro.wrong_length and ro.times() == (-5, 0, 0) and ro.physic_msg_timestamp == 0
    ro.close()


def test_an_impossible_time_is_written_as_zero_by_the_next_flush(tmp_path):
    root = str(tmp_path)
    cp = StoreCheckpoint(root)
    cp.logics_msg_timestamp = 1_700_000_000_000
    cp.flush()
    cp.close()
    with open(tmp_path / "checkpoint", "r+b") as f:
        f.write((-5).to_bytes(8, "big", signed=True))
    cp = StoreCheckpoint(root)
    assert cp.load_problem and cp.times() == (-5, 1_700_000_000_000, 0)
    cp.flush()
    assert cp.times() == (0, 1_700_000_000_000, 0)
    cp.close()
    assert StoreCheckpoint(root, read_only=True).load_problem is None


def test_the_side_file_check_is_a_client_of_the_store():
    import pymq.side_file_check as module

    tree = ast.parse(open(module.__file__, encoding="utf-8").read())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not {m for m in imported if m.startswith(("pymq.broker", "pymq.server", "pymq.cli"))}, imported
