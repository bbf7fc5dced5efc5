# cython: language_level=3
"""Dispatch: turn commit-log records into consume-queue entries (RocketMQ's reput path).

``dispatch_segment`` walks the records of one commit-log segment from a position up to its
readable end in two phases per chunk of records:

1. without the GIL, ``parse_request`` validates each record (magic, sizes, field lengths:
   ``checkMessageAndReturnSize`` without the CRC) and fills a ``DispatchRequest``: offsets,
   queue, store time, sysflag, and where TAGS, KEYS and UNIQ_KEY sit in the properties. The
   tagsCode is Java's hashCode of TAGS, or in SCHEDULE_TOPIC_XXXX the time a delayed
   message is due (store time + the level's delay);
2. with the GIL but no Python call in the common case, ``CqRouter`` hands each request of
   a normal or committed transaction type to its queue's ``CqAppender`` (prepared and
   rolled-back records get no entry), and passes the chunk to the index builder if any.

A segment ends at an end-of-file blank (the caller rolls to the next segment) or at the
readable end. A record that fails validation stops the walk there and is reported; what to
do next is the caller's policy.
"""

from cpython.unicode cimport PyUnicode_DecodeUTF8
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport int32_t, int64_t
from libc.string cimport memcmp, memcpy

from pymq._core.clayout cimport TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE, TRANSACTION_TYPE_MASK
from pymq._core.cq_unit cimport CqAppender
from pymq._core.hton cimport pymq_get_i32, pymq_get_i64
from pymq._core.mapped_file cimport MappedFile
from pymq._core.record cimport RecordLayout, next_property, record_layout

cdef extern from "pymq_javahash.h" nogil:
    int32_t pymq_java_hash_utf8(const char *buf, size_t n)

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
cdef const char *SCHEDULE_TOPIC_C = b"SCHEDULE_TOPIC_XXXX"
cdef const char *TIMER_TOPIC_C = b"rmq_sys_wheel_timer"

cdef enum:
    CHUNK = 1024
    MAX_DELAY_LEVELS = 64


cdef inline bint _name_is(const char *p, Py_ssize_t n, const char *name, Py_ssize_t m) noexcept nogil:
    return n == m and memcmp(p, name, m) == 0


cdef inline int64_t _parse_digits(const char *p, Py_ssize_t n) noexcept nogil:
    """A non-negative decimal number of at most 18 digits, or -1."""
    cdef int64_t v = 0
    cdef Py_ssize_t i
    if n <= 0 or n > 18:
        return -1
    for i in range(n):
        if p[i] < 48 or p[i] > 57:
            return -1
        v = v * 10 + (p[i] - 48)
    return v


cdef Py_ssize_t parse_request(const char *rec, Py_ssize_t avail, int64_t phys, DispatchRequest *out,
                              const int64_t *delay_ms, int max_delay_level) noexcept nogil:
    """Validate and describe the record at ``rec``: its size (> 0), 0 at a blank, -1 when
    it is not a whole, consistent record."""
    cdef RecordLayout lay
    cdef Py_ssize_t total = record_layout(rec, avail, &lay)
    cdef Py_ssize_t s, e, k, end, i
    cdef const char *tags = NULL
    cdef Py_ssize_t tags_len = 0, delay_pos = -1, delay_len = 0, timer_pos = -1, timer_len = 0
    cdef int64_t level
    if total <= 0:
        return total
    out.commitlog_offset = phys
    out.msg_size = <int32_t>total
    out.queue_id = pymq_get_i32(rec + 12)
    out.queue_offset = pymq_get_i64(rec + 20)
    out.sys_flag = lay.sys_flag
    out.store_timestamp = lay.store_timestamp
    out.prepared_transaction_offset = pymq_get_i64(rec + lay.body_pos - 12)
    out.topic_pos = <int32_t>lay.topic_pos
    out.topic_len = <int32_t>lay.topic_len
    out.props_pos = <int32_t>lay.props_pos
    out.props_len = <int32_t>lay.props_len
    out.keys_pos = -1
    out.keys_len = 0
    out.uniq_pos = -1
    out.uniq_len = 0
    s = lay.props_pos
    end = s + lay.props_len
    while s < end:
        if next_property(rec, s, end, &k, &e):
            if _name_is(rec + s, k - s, b"TAGS", 4):
                tags = rec + k + 1
                tags_len = e - k - 1
            elif _name_is(rec + s, k - s, b"KEYS", 4):
                out.keys_pos = <int32_t>(k + 1)
                out.keys_len = <int32_t>(e - k - 1)
            elif _name_is(rec + s, k - s, b"UNIQ_KEY", 8):
                out.uniq_pos = <int32_t>(k + 1)
                out.uniq_len = <int32_t>(e - k - 1)
            elif _name_is(rec + s, k - s, b"DELAY", 5):
                delay_pos = k + 1
                delay_len = e - k - 1
            elif _name_is(rec + s, k - s, b"TIMER_OUT_MS", 12):
                timer_pos = k + 1
                timer_len = e - k - 1
        s = e + 1
    out.tags_code = pymq_java_hash_utf8(tags, tags_len) if tags_len > 0 else 0
    if timer_pos >= 0 and lay.topic_len == 19 and memcmp(rec + lay.topic_pos, TIMER_TOPIC_C, 19) == 0:
        level = _parse_digits(rec + timer_pos, timer_len)     # the due time, in ms
        if level > 0:
            out.tags_code = level
    if delay_pos >= 0 and lay.topic_len == 19 and memcmp(rec + lay.topic_pos, SCHEDULE_TOPIC_C, 19) == 0:
        level = _parse_digits(rec + delay_pos, delay_len)
        if level > 0:
            if level > max_delay_level:
                level = max_delay_level
            out.tags_code = out.store_timestamp + (delay_ms[level] if 0 < level < MAX_DELAY_LEVELS and delay_ms[level] > 0 else 1000)
    return total


cdef class DispatchSink:
    """Receives each chunk of parsed records after the consume queues got theirs.

    ``base`` is the start of the commit-log segment at offset ``file_from``; request ``i``
    describes the record at ``base + reqs[i].commitlog_offset - file_from``.
    """

    cdef int accept(self, const char *base, int64_t file_from, DispatchRequest *reqs, Py_ssize_t n) except -1:
        return 0


cdef class CqRouter:
    """Routes dispatch requests to consume-queue appenders.

    ``resolve(topic, queue_id) -> CqAppender`` finds or creates the queue (Python, once per
    queue). The last queue used is remembered by its raw topic bytes, so a run of records
    for one queue costs no dictionary lookup. ``arrived`` collects, per (topic, queue_id)
    touched, the queue offset after the last entry dispatched; the reput service takes it
    to wake long-polling readers.
    """
    cdef object resolve
    cdef dict queues
    cdef CqAppender last
    cdef char last_topic[128]
    cdef int last_topic_len
    cdef int32_t last_qid
    cdef object last_key
    cdef int64_t delay_ms[64]
    cdef int max_delay_level
    cdef public dict arrived
    cdef public DispatchSink index_builder
    cdef readonly long long dispatched
    cdef readonly long long skipped_transactions
    cdef public long long last_store_timestamp      # of the newest record dispatched

    def __init__(self, resolve, delay_levels_ms=()):
        """``delay_levels_ms[i]`` is the delay of level ``i + 1`` in ms."""
        cdef int i
        self.resolve = resolve
        self.queues = {}
        self.last = None
        self.last_topic_len = -1
        self.arrived = {}
        self.index_builder = None
        for i in range(MAX_DELAY_LEVELS):
            self.delay_ms[i] = 0
        levels = list(delay_levels_ms)[:MAX_DELAY_LEVELS - 1]
        for i, v in enumerate(levels):
            self.delay_ms[i + 1] = v
        self.max_delay_level = len(levels)

    def forget(self):
        """Drop cached queues (after queues were truncated or deleted)."""
        self.queues.clear()
        self.last = None
        self.last_topic_len = -1

    cdef CqAppender _route(self, const char *rec, DispatchRequest *r):
        cdef const char *topic = rec + r.topic_pos
        if (self.last is not None and r.topic_len == self.last_topic_len and r.queue_id == self.last_qid
                and memcmp(topic, self.last_topic, r.topic_len) == 0):
            return self.last
        name = PyUnicode_DecodeUTF8(topic, r.topic_len, "replace")
        key = (name, r.queue_id)
        app = self.queues.get(key)
        if app is None:
            app = self.resolve(name, r.queue_id)
            self.queues[key] = app
        self.last = <CqAppender?>app
        memcpy(self.last_topic, topic, r.topic_len)
        self.last_topic_len = r.topic_len
        self.last_qid = r.queue_id
        self.last_key = key
        return self.last

    cdef int apply(self, const char *base, int64_t file_from, DispatchRequest *reqs, Py_ssize_t n) except -1:
        cdef Py_ssize_t i
        cdef DispatchRequest *r
        cdef CqAppender app, prev = None
        cdef object prev_key = None
        cdef int64_t prev_next = 0
        cdef int tx
        for i in range(n):
            r = &reqs[i]
            tx = r.sys_flag & TRANSACTION_TYPE_MASK
            if tx == TRANSACTION_PREPARED_TYPE or tx == TRANSACTION_ROLLBACK_TYPE:
                self.skipped_transactions += 1
                continue
            app = self._route(base + (r.commitlog_offset - file_from), r)
            app.put_fast(r.commitlog_offset, r.msg_size, r.tags_code, r.queue_offset, r.store_timestamp)
            if app is not prev:
                if prev is not None:
                    self.arrived[prev_key] = prev_next
                prev = app
                prev_key = self.last_key
            prev_next = r.queue_offset + 1
        if prev is not None:
            self.arrived[prev_key] = prev_next
        if n:
            self.last_store_timestamp = reqs[n - 1].store_timestamp
        self.dispatched += n
        return 0


def dispatch_segment(MappedFile seg, Py_ssize_t pos, Py_ssize_t end, CqRouter router, Py_ssize_t max_records=1 << 30):
    """Dispatch the records of ``seg`` in ``[pos, end)``.

    Returns ``(position, records, state)``: where the walk stopped, how many records it
    dispatched, and why it stopped: ``"end"`` (nothing more readable), ``"blank"`` (the
    segment's end-of-file blank: continue in the next segment) or ``"corrupt"`` (the bytes
    at ``position`` are not a whole record).
    """
    cdef DispatchRequest *reqs = <DispatchRequest *>PyMem_Malloc(CHUNK * sizeof(DispatchRequest))
    cdef Py_ssize_t n, size = 1, count = 0, chunk_start
    cdef const char *base
    cdef int64_t file_from = seg.file_from_offset
    cdef str state = "end"
    if reqs == NULL:
        raise MemoryError()
    if pos < 0 or end > seg.file_size or pos > end:
        PyMem_Free(reqs)
        raise ValueError("dispatch range outside the segment")
    seg.pin()
    try:
        base = seg.base
        while pos < end and count < max_records:
            chunk_start = pos
            n = 0
            with nogil:
                while n < CHUNK and pos < end and count + n < max_records:
                    size = parse_request(base + pos, end - pos, file_from + pos, &reqs[n],
                                         router.delay_ms, router.max_delay_level)
                    if size <= 0:
                        break
                    pos += size
                    n += 1
            if n:
                router.apply(base, file_from, reqs, n)
                if router.index_builder is not None:
                    router.index_builder.accept(base, file_from, reqs, n)
                count += n
            if size == 0:
                state = "blank"
                break
            if size < 0 and pos < end:
                state = "corrupt"
                break
    finally:
        seg.unpin()
        PyMem_Free(reqs)
    return pos, count, state
