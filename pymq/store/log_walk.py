"""Walking the commit log at open: whole records, holes fenced, a torn tail kept aside.

RocketMQ's recovery walks records from a starting segment and cuts the log at the first
position that does not hold a whole record, dropping everything after it; Kafka deletes the
segments after its recovery point. pymq cuts only what cannot be anything but a torn tail:

* the walk accepts records by the one rule of ``pymq._core.record.record_at`` (layout,
  PHYSICALOFFSET equal to where the record lies, the body CRC when asked);
* at a position that holds no such record it looks for the next one
  (``record.next_record``: magic code, size, position and CRC must all agree, so a
  record start is unambiguous), in the rest of the segment and then in later segments.
  Found: the stretch between is a **hole**, fenced (kept on disk, never read as a
  record), and the walk goes on from that record;
* nothing valid after it: the log ends there (a torn tail). Its non-zero bytes are
  copied to ``corrupt/commitlog-<offset>-<ms>`` (beside ``commitlog/``, whose listing
  RocketMQ's broker requires to hold segments only) before the cut, and later segments
  that hold data are kept there too (hard links) instead of being deleted, so recovery
  never destroys bytes that may have held acknowledged records.

Finding where written data ends uses the file's extents (``SEEK_DATA``/``SEEK_HOLE``), so
the unwritten rest of a sparse segment is not read.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from typing import Callable, Optional

from pymq._core import record
from pymq._core.mapped_file import MappedFile

from .damage import DamageLedger

log = logging.getLogger("pymq")

#: a later segment whose first bytes are all zero was never written (only pre-allocated)
_PROBE = 4096


def data_end(path: str, start: int, end: int) -> int:
    """Where the file's last data extent in ``[start, end)`` ends (``start`` when there is
    none): bytes past it are unallocated, hence zero. Falls back to ``end`` when the file
    system cannot tell."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return end
    try:
        pos, last = start, start
        while pos < end:
            try:
                d = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as e:
                if e.errno == errno.ENXIO:
                    break
                return end
            if d >= end:
                break
            h = os.lseek(fd, d, os.SEEK_HOLE)
            last = min(h, end)
            pos = h
        return last
    finally:
        os.close(fd)


def written_end(mf: MappedFile, start: int, end: int) -> int:
    """One past the last non-zero byte of ``mf`` in ``[start, end)``, ``start`` if none."""
    stop = data_end(mf.file_name, start, end)
    if stop <= start:
        return start
    last = record.last_nonzero(mf, start, stop)
    return start if last < 0 else last + 1


def resync(files: list, index: int, pos: int, scan_end: Callable[[MappedFile], int]) -> Optional[tuple[int, int]]:
    """The next valid record (or closing blank) after the bad bytes at ``pos`` of
    ``files[index]``: ``(segment index, position)``, or None when none follows."""
    mf = files[index]
    end = scan_end(mf)
    if written_end(mf, pos, end) > pos:
        q = record.next_record(mf, pos + 1, end)
        if q >= 0:
            return index, q
    for j in range(index + 1, len(files)):
        nxt = files[j]
        e = scan_end(nxt)
        if written_end(nxt, 0, min(_PROBE, e)) == 0:
            return None                    # pre-allocated, never written: the log ended before
        q = record.next_record(nxt, 0, e)
        if q >= 0:
            return j, q
    return None


def walk(files: list, index: int, check_crc: bool, scan_end: Callable[[MappedFile], int],
         ledger: DamageLedger, found_by: str) -> tuple[int, int, int]:
    """Walk accepted records from the start of ``files[index]``, crossing end-of-file
    blanks and fencing holes in ``ledger``. Returns ``(end, segment index, position)``:
    the commit-log offset after the last record, and where that is."""
    pos = 0
    while index < len(files):
        mf = files[index]
        end = scan_end(mf)
        p, _count, blank = record.scan_segment(mf, pos, end, check_crc)
        if blank or p >= mf.file_size:
            index += 1
            pos = 0
            continue
        nxt = resync(files, index, p, scan_end) if p < end else None
        if nxt is None:
            return mf.file_from_offset + p, index, p
        j, q = nxt
        ledger.add_hole(mf.file_from_offset + p, files[j].file_from_offset + q, found_by)
        index, pos = j, q
    last = files[-1]
    return last.file_from_offset + last.file_size, len(files) - 1, last.file_size


def damaged_tail_end(mf: MappedFile, pos: int, end: int) -> int:
    """After a clean exit, where the damaged last record(s) starting at ``pos`` end: one
    past the last non-zero byte, or further when the bytes at ``pos`` still carry the
    magic code and a total size that fits the segment (the record may end in zero bytes).
    ``pos`` when nothing was written after it, and when the file was found short (``end``
    below its size): a file that lost its end is a torn write, cut like one (the record
    running past where the file ended would pass the acceptance rule once that stretch
    is filled, as the rule does not cover its properties)."""
    if end < mf.file_size:
        return pos
    stop = written_end(mf, pos, end)
    if stop <= pos:
        return pos
    if pos + 8 <= stop:
        head = mf.read(pos, 8)
        size = int.from_bytes(head[:4], "big", signed=True)
        if int.from_bytes(head[4:], "big", signed=True) == record.MESSAGE_MAGIC_CODE_C and stop - pos < size <= end - pos:
            return pos + size
    return stop


def keep_torn_tail(files: list, index: int, pos: int, scan_end: Callable[[MappedFile], int],
                   ledger: DamageLedger) -> None:
    """Before the log is cut at ``pos`` of ``files[index]``: copy the non-zero bytes after
    it to ``<store>/corrupt/commitlog-<offset>-<ms>`` and keep later segments that hold
    data as ``corrupt/commitlog-<name>-<ms>`` (the cut deletes them). Their content is
    not a record the store can read, but it may be what an operator needs."""
    ms = int(time.time() * 1000)
    mf = files[index]
    keep_dir = os.path.join(os.path.dirname(os.path.dirname(mf.file_name)), "corrupt")
    end = written_end(mf, pos, scan_end(mf))
    if end > pos:
        offset = mf.file_from_offset + pos
        path: Optional[str] = os.path.join(keep_dir, f"commitlog-{offset:020d}-{ms}")
        try:
            os.makedirs(keep_dir, exist_ok=True)
            with open(path, "wb") as f:
                f.write(memoryview(mf)[pos:end])
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            log.error("commit log: cannot keep the %d cut bytes at %d (%s)", end - pos, offset, e)
            path = None
        ledger.add_torn_tail(offset, end - pos, path)
    for later in files[index + 1:]:
        if written_end(later, 0, min(_PROBE, later.file_size)) == 0:
            continue                       # pre-allocated, never written
        kept: Optional[str] = os.path.join(keep_dir, f"commitlog-{later.file_from_offset:020d}-{ms}")
        try:
            os.makedirs(keep_dir, exist_ok=True)
            os.link(later.file_name, kept)         # the cut unlinks the name, the bytes stay
        except OSError as e:
            log.error("commit log: cannot keep segment %s before the cut (%s)", later.file_name, e)
            kept = None
        ledger.add_torn_tail(later.file_from_offset, later.file_size, kept)
