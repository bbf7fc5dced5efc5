"""MappedFile and MappedFileQueue, after RocketMQ's MappedFileTest / MappedFileQueueTest."""

from __future__ import annotations

import os

import pytest

from pymq._core.mapped_file import MappedFile, offset_to_file_name
from pymq.errors import CorruptStoreError, SegmentSizeError, StoreStateError
from pymq.store.allocate_service import AllocateMappedFileService
from pymq.store.mapped_file_queue import MappedFileQueue


def test_file_names_have_20_digits():
    assert offset_to_file_name(0) == "00000000000000000000"
    assert offset_to_file_name(1073741824) == "00000000001073741824"


def test_mapped_file_append_read_and_close(tmp_path):
    mf = MappedFile(str(tmp_path / offset_to_file_name(0)), 64 * 1024, create=True)
    assert os.path.getsize(mf.file_name) == 64 * 1024          # allocated on disk up front
    data = b"Once, there was a chance for me!"
    assert mf.append_message(data)
    assert mf.read(0, len(data)) == data and mf.wrote_position == len(data)
    view = memoryview(mf)
    mf.close()                               # deferred: a buffer is still exported
    assert mf.closed
    assert bytes(view[:4]) == b"Once"
    view.release()
    with pytest.raises(StoreStateError):
        mf.read(0, 4)
    mf.destroy()
    assert not os.path.exists(mf.file_name)


def test_append_that_does_not_fit_writes_nothing(tmp_path):
    mf = MappedFile(str(tmp_path / "0"), 4096, create=True)
    assert mf.append_message(b"x" * 4090)
    assert not mf.append_message(b"y" * 7)
    assert mf.wrote_position == 4090 and mf.read(4090, 6) == bytes(6)
    assert mf.append_message(b"z" * 6) and mf.is_full()


def test_wrong_size_segment_is_refused(tmp_path):
    p = tmp_path / offset_to_file_name(0)
    p.write_bytes(b"\0" * 1000)
    with pytest.raises(SegmentSizeError, match="1000 bytes, expected 4096"):
        MappedFile(str(p), 4096)


def test_flush_rule_counts_pages(tmp_path):
    mf = MappedFile(str(tmp_path / "0"), 64 * 1024, create=True)
    mf.append_message(b"a" * 4096 * 3)
    assert not mf.is_able_to_flush(4)
    assert mf.flush(4) == 0
    mf.append_message(b"b" * 4096)
    assert mf.is_able_to_flush(4)
    assert mf.flush(4) == 4 * 4096
    mf.append_message(b"c")
    assert mf.flush(0) == 4 * 4096 + 1


def new_queue(tmp_path, size=1024, **kw):
    return MappedFileQueue(str(tmp_path / "q"), size, **kw)


def test_get_last_mapped_file_rolls_when_full(tmp_path):
    q = new_queue(tmp_path)
    for _ in range(1024):
        mf = q.get_last_mapped_file(0, need_create=True)
        assert mf.append_message(b"0123456789abcdef")
    assert len(q.mapped_files) == 16
    assert sorted(os.listdir(q.store_path)) == [offset_to_file_name(i * 1024) for i in range(16)]
    assert q.get_max_offset() == 16 * 1024 and q.get_min_offset() == 0


def test_find_mapped_file_by_offset(tmp_path):
    q = new_queue(tmp_path)
    for _ in range(1024):
        q.get_last_mapped_file(0, need_create=True).append_message(b"abcd")
    for offset, start in [(0, 0), (100, 0), (1024, 1024), (1124, 1024), (2048, 2048), (2148, 2048)]:
        assert q.find_mapped_file_by_offset(offset).file_from_offset == start
    assert q.find_mapped_file_by_offset(4096) is None
    assert q.find_mapped_file_by_offset(4196) is None


def test_start_offset_is_non_zero(tmp_path):
    q = new_queue(tmp_path)
    mf = q.get_last_mapped_file(1024, need_create=True)
    assert mf.file_from_offset == 1024
    assert q.find_mapped_file_by_offset(1025) is mf
    assert q.find_mapped_file_by_offset(0) is None
    assert q.find_mapped_file_by_offset(123, False) is None
    assert q.find_mapped_file_by_offset(123, True) is mf


def test_flush_moves_one_file_per_call(tmp_path):
    q = new_queue(tmp_path)
    for _ in range(1024):
        q.get_last_mapped_file(0, need_create=True).append_message(b"0123456789abcdef")
    for i in range(1, 7):
        assert q.flush(0) is False
        assert q.flushed_where == i * 1024
    q.flushed_where = 16 * 1024
    assert q.flush(0) is True


def test_load_truncate_and_gaps(tmp_path):
    q = new_queue(tmp_path)
    for _ in range(5):
        q.get_last_mapped_file(0, need_create=True).append_message(b"x" * 1024)
    q.shutdown()
    q2 = new_queue(tmp_path)
    q2.load()
    assert [m.file_from_offset for m in q2.mapped_files] == [0, 1024, 2048, 3072, 4096]
    q2.truncate_dirty_files(2500)
    assert [m.file_from_offset for m in q2.mapped_files] == [0, 1024, 2048]
    assert q2.get_max_offset() == 2500
    assert sorted(os.listdir(q2.store_path)) == [offset_to_file_name(i * 1024) for i in range(3)]
    q2.shutdown()
    os.remove(os.path.join(q2.store_path, offset_to_file_name(1024)))
    with pytest.raises(CorruptStoreError, match="does not follow"):
        new_queue(tmp_path).load()


def test_allocate_service_prepares_the_next_segment(tmp_path):
    svc = AllocateMappedFileService(warm=True)
    q = new_queue(tmp_path, size=64 * 1024, allocate_service=svc)
    first = q.get_last_mapped_file(0, need_create=True)
    nxt = os.path.join(q.store_path, offset_to_file_name(64 * 1024))
    first.append_message(b"x" * 64 * 1024)
    second = q.get_last_mapped_file(0, need_create=True)
    assert second.file_name == nxt and second.file_from_offset == 64 * 1024
    svc.shutdown()                           # the prepared third segment is deleted, not left behind
    assert sorted(os.listdir(q.store_path)) == [offset_to_file_name(0), offset_to_file_name(64 * 1024)]
    q.shutdown()
