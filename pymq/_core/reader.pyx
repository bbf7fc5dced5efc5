# cython: language_level=3
"""The pull loop of ``get_message``: consume-queue entries to ``MessageExt`` objects.

RocketMQ's ``DefaultMessageStore.getMessage`` found path, for one consume-queue file:
scan the 20-byte entries from the pull offset (at most ``max(16000, max_msgs * 20)``
bytes of them), stop when the batch is full, skip entries whose tagsCode is not
subscribed, read each remaining record from its commit-log segment. pymq adds one step
RocketMQ leaves to the client: a record whose real TAGS differ from the subscription
(a hash collision, e.g. "Aa"/"BB") is skipped too, before any object is built.

Batch full (``isTheBatchFull``), never before the first message: ``max_msgs`` reached;
or, for records still in memory, 256 KiB or 32 messages; for records older than
``access_message_in_memory_max_ratio`` of RAM behind the log's end, 64 KiB or 8 messages.
"""

from libc.stdint cimport int32_t, int64_t
from libc.string cimport memcmp

from pymq._core.clayout cimport (BORNHOST_V6_FLAG, CQ_STORE_UNIT_SIZE, IPV4_HOST_LENGTH, IPV6_HOST_LENGTH,
                                 STOREHOSTADDRESS_V6_FLAG)
from pymq._core.hton cimport pymq_get_i16, pymq_get_i32, pymq_get_i64
from pymq._core.mapped_file cimport MappedFile, segment_for
from pymq._core.message cimport MessageExt
from pymq._core.record cimport DecodeCache, check_record, decode_at

# outcome codes for the Python layer
FOUND = 0
NO_MATCHED_MESSAGE = 1
MESSAGE_WAS_REMOVING = 2


cdef bint _tags_match(const char *rec, Py_ssize_t size, tuple names):
    """True if the record's TAGS value equals one of ``names`` (UTF-8 bytes)."""
    cdef int32_t sys_flag = pymq_get_i32(rec + 36)
    cdef Py_ssize_t pos = 48 + (IPV6_HOST_LENGTH if sys_flag & BORNHOST_V6_FLAG else IPV4_HOST_LENGTH) + 8
    cdef Py_ssize_t s, e, k, end, n
    cdef bytes name
    pos += (IPV6_HOST_LENGTH if sys_flag & STOREHOSTADDRESS_V6_FLAG else IPV4_HOST_LENGTH) + 12
    pos += 4 + pymq_get_i32(rec + pos)
    pos += 1 + <signed char>rec[pos]
    s = pos + 2
    end = s + pymq_get_i16(rec + pos)
    while s < end:
        e = s
        while e < end and rec[e] != 2:
            e += 1
        k = s
        while k < e and rec[k] != 1:
            k += 1
        if k - s == 4 and memcmp(rec + s, b"TAGS", 4) == 0 and s < k < e - 1:
            n = e - k - 1
            for name in names:
                if len(name) == n and memcmp(<const char *>name, rec + k + 1, n) == 0:
                    return True
            return False
        s = e + 1
    return False


def collect(MappedFile cq, Py_ssize_t start, list commitlog_files, long long commitlog_file_size,
            str topic, int max_msgs, tuple tag_codes, tuple tag_names, long long max_phy_offset,
            long long memory_window, int max_count_memory, long long max_bytes_memory,
            int max_count_disk, long long max_bytes_disk):
    """Read messages for a pull starting at byte ``start`` of consume-queue file ``cq``.

    ``tag_codes``/``tag_names`` are empty for "all messages". Returns
    ``(messages, scanned_entries, outcome, total_bytes)``.
    """
    cdef Py_ssize_t limit, pos, rpos, size
    cdef Py_ssize_t max_scan = max(16000, max_msgs * CQ_STORE_UNIT_SIZE)
    cdef int64_t offset_py, tags_code, next_file_start = -1
    cdef int32_t size_py
    cdef long long buffer_total = 0
    cdef int count = 0, outcome = NO_MATCHED_MESSAGE
    cdef bint in_disk, filtered = len(tag_codes) > 0
    cdef list out = []
    cdef MappedFile seg
    cdef MessageExt m
    cdef DecodeCache cache = DecodeCache(topic)
    cdef const char *base
    cq._check_open()
    base = cq.base
    limit = cq.wrote
    if start < 0 or start > limit:
        raise ValueError("pull position outside the consume-queue file")
    if limit - start > max_scan:
        limit = start + (max_scan // CQ_STORE_UNIT_SIZE) * CQ_STORE_UNIT_SIZE
    pos = start
    while pos + CQ_STORE_UNIT_SIZE <= limit:
        offset_py = pymq_get_i64(base + pos)
        size_py = pymq_get_i32(base + pos + 8)
        tags_code = pymq_get_i64(base + pos + 12)
        if next_file_start >= 0 and offset_py < next_file_start:
            pos += CQ_STORE_UNIT_SIZE
            continue
        in_disk = max_phy_offset - offset_py > memory_window
        if buffer_total and count:
            if count >= max_msgs:
                break
            if in_disk:
                if buffer_total + size_py > max_bytes_disk or count > max_count_disk - 1:
                    break
            elif buffer_total + size_py > max_bytes_memory or count > max_count_memory - 1:
                break
        if filtered and <int>tags_code not in tag_codes:
            pos += CQ_STORE_UNIT_SIZE
            continue
        seg = segment_for(commitlog_files, offset_py, commitlog_file_size)
        rpos = <Py_ssize_t>(offset_py - seg.file_from_offset) if seg is not None else -1
        if (seg is None or seg.base == NULL or size_py <= 0 or rpos + size_py > seg.wrote
                or check_record(seg.base + rpos, size_py, False) != size_py):
            if not buffer_total:
                outcome = MESSAGE_WAS_REMOVING
            next_file_start = offset_py + commitlog_file_size - offset_py % commitlog_file_size
            pos += CQ_STORE_UNIT_SIZE
            continue
        if filtered and not _tags_match(seg.base + rpos, size_py, tag_names):
            pos += CQ_STORE_UNIT_SIZE
            continue
        m = decode_at(seg.base + rpos, size_py, False, cache)
        out.append(m)
        buffer_total += size_py
        count += 1
        outcome = FOUND
        next_file_start = -1
        pos += CQ_STORE_UNIT_SIZE
    return out, (pos - start) // CQ_STORE_UNIT_SIZE, outcome, buffer_total
