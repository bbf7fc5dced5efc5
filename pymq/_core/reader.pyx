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

The status and next-offset rules of a pull (4.9.4+)::

    max == 0           NO_MESSAGE_IN_QUEUE      next 0
    offset < min       OFFSET_TOO_SMALL         next min
    offset == max      OFFSET_OVERFLOW_ONE      next offset
    offset > max       OFFSET_OVERFLOW_BADLY    next max
    no entry there     OFFSET_FOUND_NULL        next = first index of the next CQ file
    otherwise          FOUND / NO_MATCHED_MESSAGE / MESSAGE_WAS_REMOVING,
                       next = offset + entries scanned

``QueueReader`` does all of it in one C call, so a pull of 32 messages costs one Python
frame, not a dozen. ``get_message_raw`` runs the same scan and the same rules but builds no
message objects: it returns the records exactly as they lie in the commit log, as
memoryviews of the mapped segments (one per run of adjacent records), which a server writes
to its socket as they are (RocketMQ's pull response body).
"""

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.ref cimport Py_INCREF
from libc.stdint cimport int32_t, int64_t, uint32_t
from libc.string cimport memcmp, memcpy

from pymq._core.atomic cimport pymq_load_acquire_ssize

from pymq._core.clayout cimport (BORNHOST_V6_FLAG, CQ_STORE_UNIT_SIZE, IPV4_HOST_LENGTH, IPV6_HOST_LENGTH,
                                 STOREHOSTADDRESS_V6_FLAG)
from pymq._core.hton cimport pymq_get_i16, pymq_get_i32, pymq_get_i64
from pymq._core.cq_unit cimport CqAppender, lookup_by_time, queue_max_offset
from pymq._core.mapped_file cimport MappedFile, segment_for
from pymq._core.message cimport MessageExt
from pymq._core.read_batch cimport Picked, ReadBatch, rows_alloc, rows_free
from pymq._core.record cimport (DecodeCache, RecordLayout, body_crc32, ext_from_page, next_property,
                                record_crc_ok,
                               record_layout, record_layout_like)

from pymq.status import BoundaryType, GetMessageStatus
from pymq._core.record import crc32_impl

cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL

cdef extern from "pymq_crc_record.h" nogil:
    bint pymq_crc_record_usable()
    int pymq_record_crc_check(int fast, const char *rec, Py_ssize_t total, int prop_crc, Py_ssize_t body_pos,
                              Py_ssize_t body_len)
    uint32_t pymq_crc_record_fast(const unsigned char *p, size_t n)

# the CRC check on read folds a short record four chunks at a time (``src/pymq_crc_record.h``)
# where pymq_crc32 runs its VPCLMULQDQ path (not when PYMQ_CRC32_IMPL caps it below)
cdef bint _crc_fast_runs():
    return pymq_crc_record_usable() and crc32_impl() == "vpclmulqdq-avx512"


cdef int _crc_fast = _crc_fast_runs()


cdef inline bint _crc_ok(const char *rec, const RecordLayout *lay, Py_ssize_t total) noexcept nogil:
    """``record_crc_ok``, the short records through the fast fold."""
    cdef int ok = pymq_record_crc_check(_crc_fast, rec, total, lay.prop_crc, lay.body_pos, lay.body_len)
    return record_crc_ok(rec, lay, total) if ok < 0 else ok


def _use_crc_fast(bint on) -> bool:
    """Whether the CRC check on read takes the fast fold (when it can): for tests and
    measurements. Returns the setting before."""
    global _crc_fast
    before = bool(_crc_fast)
    _crc_fast = on and _crc_fast_runs()
    return before


def _record_crc32(data) -> int:
    """The fast fold's CRC-32 of ``data`` (17..272 bytes), or -1 where it does not run
    (for tests: it must equal ``zlib.crc32``)."""
    cdef const unsigned char[::1] view = memoryview(data).cast("B")
    if not _crc_fast or not 16 < view.shape[0] <= 272:
        return -1
    return pymq_crc_record_fast(&view[0], view.shape[0])

def _fold_page(data, Py_ssize_t start, Py_ssize_t count, Py_ssize_t record_size, Py_ssize_t covered) -> int:
    """The CRC check on read's arithmetic alone, for the benchmark's floor: the CRC-32 of
    the first ``covered`` bytes of each of ``count`` records of ``record_size`` bytes lying
    back to back in ``data`` (a bytes-like object) from ``start``, as a pull checks them
    (the fast fold where it runs), xored together."""
    cdef Py_buffer buf
    cdef Py_ssize_t i
    cdef uint32_t acc = 0
    cdef const unsigned char *p
    PyObject_GetBuffer(data, &buf, PyBUF_SIMPLE)
    try:
        if (start < 0 or count < 0 or covered < 1 or covered > record_size or start > buf.len
                or (count and record_size > (buf.len - start) // count)):
            raise ValueError("the records do not lie inside data")
        p = <const unsigned char *>buf.buf + start
        for i in range(count):
            if _crc_fast and 16 < covered <= 272:
                acc ^= pymq_crc_record_fast(p + i * record_size, covered)
            else:
                acc ^= <uint32_t>body_crc32(<const char *>p + i * record_size, covered)
    finally:
        PyBuffer_Release(&buf)
    return acc


cdef extern from *:
    void __builtin_prefetch(const void *p) nogil

cdef enum:
    PREFETCH_AHEAD = 8              # entries: the record prefetched while this one is checked
    PREFETCH_BYTES = 256            # of it (a longer record: the hardware prefetcher follows)
    PICKED_ON_STACK = 64
    MAX_EVENTS = 16             # damage met by one pull, reported after it (more are counted)
    EV_LOST = 1                 # the entry's record is gone (a lost-entry marker, a hole)
    EV_BAD = 2                  # the entry does not describe its record
    EV_CRC = 3                  # the record fails its body CRC

cdef int32_t LOST_ENTRY_SIZE = 0x7FFFFFFF     # a blank entry: pre-fill, or a record lost to damage


cdef dict _utf8_cache = {}


cdef inline bytes _utf8(str topic):
    """The UTF-8 bytes of a topic name (remembered: pulls name few topics)."""
    cdef object b = _utf8_cache.get(topic)
    if b is None:
        b = topic.encode("utf-8")
        if len(_utf8_cache) < 4096:
            _utf8_cache[topic] = b
    return <bytes>b


cdef inline int _queue_id(object queue_id) except? -1:
    """A queue id as a C int: an int, not a bool (a float would be truncated, ``True``
    taken for queue 1); else TypeError."""
    if type(queue_id) is not int and (isinstance(queue_id, bool) or not isinstance(queue_id, int)):
        raise TypeError(f"queue_id must be an int, not {type(queue_id).__name__}")
    return queue_id


cdef object FOUND = GetMessageStatus.FOUND
cdef object NO_MATCHED_MESSAGE = GetMessageStatus.NO_MATCHED_MESSAGE
cdef object MESSAGE_WAS_REMOVING = GetMessageStatus.MESSAGE_WAS_REMOVING
cdef object NO_MESSAGE_IN_QUEUE = GetMessageStatus.NO_MESSAGE_IN_QUEUE
cdef object OFFSET_TOO_SMALL = GetMessageStatus.OFFSET_TOO_SMALL
cdef object OFFSET_OVERFLOW_ONE = GetMessageStatus.OFFSET_OVERFLOW_ONE
cdef object OFFSET_OVERFLOW_BADLY = GetMessageStatus.OFFSET_OVERFLOW_BADLY
cdef object OFFSET_FOUND_NULL = GetMessageStatus.OFFSET_FOUND_NULL
cdef object UPPER = BoundaryType.UPPER
cdef object LOWER = BoundaryType.LOWER


cdef inline void _prefetch(const char *cq, Py_ssize_t pos, Py_ssize_t end, MappedFile seg,
                           long long seg_from) noexcept:
    """Prefetch the first ``PREFETCH_BYTES`` of the records of the entries in
    ``cq[pos:end]`` that lie in ``seg``."""
    cdef long long at
    cdef Py_ssize_t b
    while pos < end:
        at = pymq_get_i64(cq + pos) - seg_from
        if 0 <= at < seg.wrote:
            b = 0
            while b < PREFETCH_BYTES and at + b < seg.wrote:
                __builtin_prefetch(seg.base + at + b)
                b += 64
        pos += CQ_STORE_UNIT_SIZE


cdef bint _tags_match(const char *rec, Py_ssize_t size, tuple names):
    """True if the record's TAGS value equals one of ``names`` (UTF-8 bytes)."""
    cdef RecordLayout lay
    cdef Py_ssize_t s, e, k, end, n
    cdef bytes name
    if record_layout(rec, size, &lay) <= 0:
        return False
    s = lay.props_pos
    end = s + lay.props_len
    while s < end:
        if next_property(rec, s, end, &k, &e) and k - s == 4 and memcmp(rec + s, b"TAGS", 4) == 0:
            n = e - k - 1
            for name in names:
                if len(name) == n and memcmp(<const char *>name, rec + k + 1, n) == 0:
                    return True
            return False
        s = e + 1
    return False


@cython.final
@cython.freelist(16)
cdef class GetMessageResult:
    """What ``get_message`` returns (RocketMQ's GetMessageResult).

    ``messages`` are ``MessageExt`` objects in queue order; ``next_begin_offset`` is where
    the next pull of this queue starts; ``min_offset`` and ``max_offset`` are the queue's
    bounds at the time of the pull. A raw pull (``get_message_raw``) leaves ``messages``
    empty and fills ``buffers``: memoryviews of the mapped commit log holding the
    ``message_count`` records back to back (``buffer_total_size`` bytes in all). The views
    pin their segments: release them (drop the result) once written.
    """
    cdef public object status
    cdef public list messages
    cdef public list buffers
    cdef public int raw_count
    cdef public long long next_begin_offset
    cdef public long long min_offset
    cdef public long long max_offset
    cdef public long long buffer_total_size
    cdef public bint suggest_pulling_from_slave
    cdef public int damaged         # entries this pull skipped because their record is lost or damaged

    def __init__(self, status, messages=None, long long next_begin_offset=0, long long min_offset=0,
                 long long max_offset=0, long long buffer_total_size=0, bint suggest_pulling_from_slave=False):
        self.status = status
        self.messages = [] if messages is None else list(messages)
        self.next_begin_offset = next_begin_offset
        self.min_offset = min_offset
        self.max_offset = max_offset
        self.buffer_total_size = buffer_total_size
        self.suggest_pulling_from_slave = suggest_pulling_from_slave
        self.buffers = None
        self.raw_count = 0
        self.damaged = 0

    @property
    def message_count(self):
        return self.raw_count if self.buffers is not None else len(self.messages)

    def __iter__(self):
        return iter(self.messages)

    def __len__(self):
        return len(self.messages)

    def __repr__(self):
        return (f"GetMessageResult(status={self.status.name}, messages={self.message_count}, "
                f"next_begin_offset={self.next_begin_offset}, min_offset={self.min_offset}, "
                f"max_offset={self.max_offset})")


cdef class QueueReader:
    """Pulls and time lookups of one store (the found path of ``getMessage`` in C).

    ``resolve(topic, queue_id) -> CqAppender`` finds (or, as RocketMQ does, creates empty)
    the consume queue; ``parse_filter(expression)`` parses a tag expression.
    """
    cdef object commit_log_queue
    cdef long long cl_file_size
    cdef object resolve
    cdef object parse_filter
    cdef dict appenders
    cdef str last_topic             # the queue of the last pull, found again without a lookup
    cdef int last_queue_id
    cdef CqAppender last_app
    cdef dict filters
    cdef long long memory_window
    cdef int max_count_memory
    cdef int max_count_disk
    cdef long long max_bytes_memory
    cdef long long max_bytes_disk
    cdef public bint closed
    # damage handling: the body CRC checked on decoded reads; a follower (read-only store)
    # takes an entry whose record it has not scanned yet as "not yet"; ``damage`` (a
    # DamageLedger) hears of what a pull skipped; ``repair(topic, queue_id, index)``
    # (writers) rebuilds a queue from a bad entry on and returns True when it did
    cdef public bint check_crc
    cdef public bint follower
    cdef public object damage
    cdef public object repair
    cdef int ev_count
    cdef int ev_kind[MAX_EVENTS]
    cdef long long ev_index[MAX_EVENTS]
    cdef long long ev_phy[MAX_EVENTS]
    cdef long long bad_index
    # pulls served, for the store's statistics (RocketMQ's getMessageTimesTotalFound/Miss,
    # getMessageTransferedMsgCount): plain C increments, read by StoreStatsService
    cdef readonly long long found_count, miss_count, got_messages, got_bytes

    def __init__(self, commit_log_queue, long long commitlog_file_size, resolve, parse_filter,
                 long long memory_window, int max_count_memory, long long max_bytes_memory,
                 int max_count_disk, long long max_bytes_disk):
        self.commit_log_queue = commit_log_queue
        self.cl_file_size = commitlog_file_size
        self.resolve = resolve
        self.parse_filter = parse_filter
        self.appenders = {}
        self.filters = {}
        self.memory_window = memory_window
        self.max_count_memory = max_count_memory
        self.max_bytes_memory = max_bytes_memory
        self.max_count_disk = max_count_disk
        self.max_bytes_disk = max_bytes_disk
        self.closed = False
        self.check_crc = True
        self.follower = False
        self.damage = None
        self.repair = None

    def forget(self):
        """Drop cached queue handles (after queues were destroyed or recreated)."""
        self.appenders.clear()
        self.last_topic = None
        self.last_app = None

    cdef CqAppender _appender(self, str topic, int queue_id):
        if self.last_app is not None and queue_id == self.last_queue_id and (
                topic is self.last_topic or topic == self.last_topic):
            return self.last_app
        key = (topic, queue_id)
        app = self.appenders.get(key)
        if app is None:
            app = self.resolve(topic, queue_id)
            self.appenders[key] = app
        self.last_app = <CqAppender?>app
        self.last_topic = topic
        self.last_queue_id = queue_id
        return self.last_app

    def get_message(self, group, str topic not None, queue_id, long long offset, int max_msgs=32,
                    tags=None):
        """Pull up to ``max_msgs`` messages of (topic, queue_id) from queue offset ``offset``."""
        return self._pull(topic, _queue_id(queue_id), offset, max_msgs, tags, False, True, None)

    def get_message_raw(self, group, str topic not None, queue_id, long long offset, int max_msgs=32,
                        tags=None):
        """``get_message`` without decoding: the records as stored, in ``buffers``."""
        return self._pull(topic, _queue_id(queue_id), offset, max_msgs, tags, True, True, None)

    def read_batch(self, str topic not None, queue_id, long long offset, int max_msgs=32, tags=None):
        """``get_message`` without objects: the picked records left where they lie, as a
        ``ReadBatch`` (statuses and offsets as ``get_message``'s, in the batch)."""
        cdef ReadBatch batch = ReadBatch.__new__(ReadBatch)
        cdef int qid = _queue_id(queue_id)
        cdef GetMessageResult r = self._pull(topic, qid, offset, max_msgs, tags, False, True, batch)
        batch.status = r.status
        batch.next_begin_offset = r.next_begin_offset
        batch.min_offset = r.min_offset
        batch.max_offset = r.max_offset
        batch.damaged = r.damaged
        batch.topic = topic
        batch.queue_id = qid
        return batch

    cdef GetMessageResult _pull(self, str topic, int queue_id, long long offset, int max_msgs, tags, bint raw,
                                bint may_repair, ReadBatch batch):
        cdef CqAppender app
        cdef GetMessageResult r
        cdef long long min_o, max_o, pos
        cdef list cq_files
        cdef MappedFile mf
        cdef Py_ssize_t per_file
        if self.closed:
            from pymq.errors import StoreStateError
            raise StoreStateError("the store is shut down")
        if max_msgs < 1:
            raise ValueError("max_msgs must be >= 1")
        if tags is None:
            flt = None
        else:
            flt = self.filters.get(tags, self)
            if flt is self:
                flt = self.parse_filter(tags)
                if len(self.filters) < 1024:
                    self.filters[tags] = flt
        app = self._appender(topic, queue_id)
        min_o = app.min_logic_offset // CQ_STORE_UNIT_SIZE
        max_o = queue_max_offset(app)
        r = GetMessageResult.__new__(GetMessageResult)
        r.min_offset = min_o
        r.max_offset = max_o
        r.messages = [] if batch is None else None      # a batch keeps its own
        r.buffers = [] if raw else None
        r.raw_count = 0
        if max_o == 0:
            r.status = NO_MESSAGE_IN_QUEUE
            r.next_begin_offset = 0
        elif offset < min_o:
            r.status = OFFSET_TOO_SMALL
            r.next_begin_offset = min_o
        elif offset == max_o:
            r.status = OFFSET_OVERFLOW_ONE
            r.next_begin_offset = offset
        elif offset > max_o:
            r.status = OFFSET_OVERFLOW_BADLY
            r.next_begin_offset = max_o
        else:
            cq_files = app.mapped_file_queue.mapped_files
            pos = offset * CQ_STORE_UNIT_SIZE
            mf = segment_for(cq_files, pos, app.file_size)
            if mf is not None and mf.base == NULL:
                mf.map_again()          # evicted by the map cache: mapped again (closed: stays NULL)
            if mf is None or mf.base == NULL or mf._closing or pos - mf.file_from_offset >= mf.wrote:
                if self.follower and (mf is None or mf.wrote < mf.file_size):
                    # a follower that has not mapped or scanned that entry yet: not yet
                    r.status = OFFSET_OVERFLOW_ONE
                    r.next_begin_offset = offset
                    self.miss_count += 1
                    return r
                per_file = app.file_size // CQ_STORE_UNIT_SIZE
                r.status = OFFSET_FOUND_NULL
                r.next_begin_offset = offset + per_file - offset % per_file
            else:
                mf.used = True
                mf.pin()                # the map cache cannot take it while it is read
                try:
                    self._collect(r, mf, <Py_ssize_t>(pos - mf.file_from_offset), offset, topic, queue_id,
                                  max_msgs, flt.codes if flt is not None else (),
                                  flt.names_utf8 if flt is not None else (), raw, may_repair and self.repair is not None,
                                  batch)
                finally:
                    mf.unpin()
                self._report(r, topic, queue_id)
                if self.bad_index >= 0:
                    self._repair(topic, queue_id)
                    if r.raw_count == 0 and not r.messages:
                        # the queue was rebuilt from the bad entry on, or the entry stays (its
                        # record's header is the damaged side): read again (once), skipping
                        # what is still bad
                        return self._pull(topic, queue_id, offset, max_msgs, tags, raw, False, batch)
        if r.status is FOUND:
            self.found_count += 1
            self.got_messages += r.raw_count if raw or batch is not None else len(r.messages)
            self.got_bytes += r.buffer_total_size
        else:
            self.miss_count += 1
        return r

    cdef int _report(self, GetMessageResult r, str topic, int queue_id) except -1:
        """Tell the damage ledger what the last ``_collect`` skipped (after it: no Python
        call runs while segment memory is read)."""
        cdef int i
        cdef object damage = self.damage
        if damage is not None:
            for i in range(min(self.ev_count, MAX_EVENTS)):
                if self.ev_kind[i] == EV_CRC:
                    damage.crc_error(self.ev_phy[i], topic, queue_id, self.ev_index[i])
                elif self.ev_kind[i] == EV_LOST or damage.hole_at(self.ev_phy[i]) is not None:
                    damage.lost_entry(topic, queue_id, self.ev_index[i], self.ev_phy[i])
                else:
                    damage.bad_entry(topic, queue_id, self.ev_index[i], f"does not describe a record of "
                                     f"this queue at commit-log offset {self.ev_phy[i]}")
            for i in range(MAX_EVENTS, self.ev_count):
                damage.bad_entries += 1
        r.damaged = self.ev_count
        return 0

    cdef bint _repair(self, str topic, int queue_id) except -1:
        cdef long long index = self.bad_index
        self.bad_index = -1
        if self.repair is None:
            return False
        return bool(self.repair(topic, queue_id, index))

    cdef inline void _event(self, int kind, long long index, long long phy) noexcept:
        if self.ev_count < MAX_EVENTS:
            self.ev_kind[self.ev_count] = kind
            self.ev_index[self.ev_count] = index
            self.ev_phy[self.ev_count] = phy
        self.ev_count += 1

    @cython.cdivision(True)         # every division and modulo here is of non-negative values
    cdef int _collect(self, GetMessageResult r, MappedFile cq, Py_ssize_t start, long long offset,
                      str topic, int queue_id, int max_msgs, tuple tag_codes, tuple tag_names,
                      bint raw, bint may_repair, ReadBatch batch) except -1:
        cdef Py_ssize_t limit, pos, rpos, i, at
        cdef Py_ssize_t max_scan = max(16000, max_msgs * CQ_STORE_UNIT_SIZE)
        cdef int64_t offset_py, tags_code, next_file_start = -1, last_offset = 0
        cdef int32_t size_py
        cdef long long buffer_total = 0, max_phy
        cdef long long cl_fs = self.cl_file_size
        cdef int count = 0, cap
        cdef bint in_disk, filtered = len(tag_codes) > 0
        cdef list out = r.messages
        cdef list cl_files = self.commit_log_queue.mapped_files
        cdef MappedFile seg = None, last_seg
        cdef long long seg_from = -1
        cdef const char *rec
        cdef DecodeCache cache
        cdef const char *base = cq.base
        cdef object status = NO_MATCHED_MESSAGE
        cdef RecordLayout *lp
        cdef const RecordLayout *like = NULL    # the last picked record's layout
        cdef Py_ssize_t like_total = 0
        cdef bint check_crc = self.check_crc and not raw
        cdef Py_ssize_t topic_len
        cdef const char *topic_raw = PyUnicode_AsUTF8AndSize(topic, &topic_len)    # the str's own
        cdef bint lmq = topic_len >= 5 and memcmp(topic_raw, b"%LMQ%", 5) == 0     # a light message queue
        cdef long long cl_min
        cdef Picked picked_stack[PICKED_ON_STACK]
        cdef Picked *picked = picked_stack
        cdef bytes page
        cdef char *dst
        cdef MessageExt m
        cdef MappedFile run_seg = None          # raw: the current run of adjacent records
        cdef Py_ssize_t run_start = 0, run_end = 0
        cdef long long index
        cdef bint bad
        cdef MappedFile held_first = None       # batch: the segments the picked records lie in
        cdef MappedFile held_last = None
        cdef list held_more = None
        self.ev_count = 0
        self.bad_index = -1
        if not cl_files:
            max_phy = 0
            cl_min = 0
        else:
            last_seg = <MappedFile>cl_files[len(cl_files) - 1]
            max_phy = last_seg.file_from_offset + last_seg.wrote
            cl_min = (<MappedFile>cl_files[0]).file_from_offset
        # a page holds at most max_msgs messages and never more than a batch-full count
        cap = min(max_msgs, max(self.max_count_memory, self.max_count_disk, 1))
        if batch is not None:
            picked = rows_alloc(cap)            # the batch keeps it
        elif cap > PICKED_ON_STACK:
            picked = <Picked *>PyMem_Malloc(cap * sizeof(Picked))
            if picked == NULL:
                raise MemoryError()
        try:
            limit = pymq_load_acquire_ssize(&cq.wrote)     # entries below it are whole
            if limit - start > max_scan:
                limit = start + (max_scan // CQ_STORE_UNIT_SIZE) * CQ_STORE_UNIT_SIZE
            pos = start
            # 1. pick the records (no Python object is made while segment memory is read)
            while pos + CQ_STORE_UNIT_SIZE <= limit:
                offset_py = pymq_get_i64(base + pos)
                size_py = pymq_get_i32(base + pos + 8)
                tags_code = pymq_get_i64(base + pos + 12)
                if size_py == LOST_ENTRY_SIZE:
                    # a queue offset whose record was lost to damage (recovery marks it)
                    self._event(EV_LOST, offset + (pos - start) // CQ_STORE_UNIT_SIZE, offset_py)
                    pos += CQ_STORE_UNIT_SIZE
                    continue
                if next_file_start >= 0 and 0 <= offset_py < next_file_start:
                    pos += CQ_STORE_UNIT_SIZE
                    continue
                in_disk = max_phy - offset_py > self.memory_window
                if buffer_total and count:
                    if count >= max_msgs or count >= cap:
                        break
                    if in_disk:
                        if buffer_total + size_py > self.max_bytes_disk or count > self.max_count_disk - 1:
                            break
                    elif buffer_total + size_py > self.max_bytes_memory or count > self.max_count_memory - 1:
                        break
                if filtered and <int>tags_code not in tag_codes:
                    pos += CQ_STORE_UNIT_SIZE
                    continue
                if 0 <= offset_py < cl_min:
                    # the segment was deleted (RocketMQ: MESSAGE_WAS_REMOVING, skip its entries)
                    if not buffer_total:
                        status = MESSAGE_WAS_REMOVING
                    next_file_start = offset_py + cl_fs - offset_py % cl_fs
                    pos += CQ_STORE_UNIT_SIZE
                    continue
                index = offset + (pos - start) // CQ_STORE_UNIT_SIZE
                if seg is None or not (seg_from <= offset_py < seg_from + cl_fs):
                    seg = segment_for(cl_files, offset_py, cl_fs)
                    seg_from = seg.file_from_offset if seg is not None else -1
                rpos = <Py_ssize_t>(offset_py - seg_from) if seg is not None else -1
                if seg is not None:
                    # records a few entries on, into the cache while this one is checked
                    # (the scan otherwise waits for each record's lines: ~10 ns a message)
                    _prefetch(base, pos + (CQ_STORE_UNIT_SIZE if pos == start else PREFETCH_AHEAD * CQ_STORE_UNIT_SIZE),
                              min(limit, pos + (PREFETCH_AHEAD + 1) * CQ_STORE_UNIT_SIZE), seg, seg_from)
                if seg is None or seg.base == NULL or size_py <= 0 or rpos + size_py > seg.wrote:
                    if (self.follower and size_py > 0 and offset_py >= max_phy
                            and offset_py < max_phy + 2 * cl_fs):
                        break           # a follower has not scanned that far yet: not yet, not damage
                    bad = True
                else:
                    # the acceptance rule (``record_at``: a whole, consistent record whose
                    # PHYSICALOFFSET is where it lies), and the entry's queue, offset and topic
                    # (an LMQ entry points at a record filed under its parent queue)
                    rec = seg.base + rpos
                    lp = &picked[count].lay     # the layout lands where a pick keeps it
                    bad = (record_layout_like(rec, size_py, lp, like, like_total) != size_py
                           or pymq_get_i64(rec + 28) != offset_py
                           or not lmq and (pymq_get_i32(rec + 12) != queue_id
                                           or pymq_get_i64(rec + 20) != index
                                           or lp.topic_len != topic_len
                                           or memcmp(rec + lp.topic_pos, topic_raw, topic_len) != 0))
                if bad:
                    if may_repair and self.bad_index < 0:
                        self.bad_index = index      # stop here; the queue is rebuilt, then read on
                        break
                    self._event(EV_BAD, index, offset_py)
                    pos += CQ_STORE_UNIT_SIZE
                    continue
                if check_crc and not _crc_ok(seg.base + rpos, lp, size_py):
                    self._event(EV_CRC, index, offset_py)     # altered: never returned
                    pos += CQ_STORE_UNIT_SIZE
                    continue
                if filtered and not _tags_match(seg.base + rpos, size_py, tag_names):
                    pos += CQ_STORE_UNIT_SIZE
                    continue
                if raw:
                    # the records as they lie in the log: one view per run of adjacent records
                    if run_seg is not seg or rpos != run_end:
                        if run_seg is not None:
                            r.buffers.append(memoryview(run_seg)[run_start:run_end])
                        run_seg = seg
                        run_start = rpos
                    run_end = rpos + size_py
                else:
                    picked[count].src = seg.base + rpos
                    picked[count].size = size_py
                    picked[count].queue_offset = index
                    picked[count].tags_code = tags_code
                    like = &picked[count].lay
                    like_total = size_py
                    if batch is not None and seg is not held_last:
                        if held_first is None:      # segments come in order: each once
                            held_first = seg
                        elif held_more is None:
                            held_more = [seg]
                        else:
                            held_more.append(seg)
                        held_last = seg
                last_offset = offset_py
                buffer_total += size_py
                count += 1
                status = FOUND
                next_file_start = -1
                pos += CQ_STORE_UNIT_SIZE
            r.status = status
            r.next_begin_offset = offset + (pos - start) // CQ_STORE_UNIT_SIZE
            r.buffer_total_size = buffer_total
            if raw:
                if run_seg is not None:
                    r.buffers.append(memoryview(run_seg)[run_start:run_end])
                r.raw_count = count
                if count:
                    r.suggest_pulling_from_slave = max_phy - last_offset > self.memory_window
            elif batch is not None:
                # 2. the records stay where they lie: the batch takes the picks and pins
                # their segments (no Python code ran since they were read)
                r.raw_count = count
                if count:
                    batch.take(picked, cap, count, held_first, held_more)
                    picked = picked_stack
            elif count:
                # 2. one copy of the picked records, then the messages over it
                page = PyBytes_FromStringAndSize(NULL, <Py_ssize_t>buffer_total)
                dst = PyBytes_AS_STRING(page)
                at = 0
                for i in range(count):
                    memcpy(dst + at, picked[i].src, picked[i].size)
                    at += picked[i].size
                cache = DecodeCache.__new__(DecodeCache)
                cache.topic = topic
                cache.topic_raw = _utf8(topic)
                out = PyList_New(count)
                r.messages = out
                at = 0
                for i in range(count):
                    m = ext_from_page(page, at, &picked[i].lay, picked[i].size, cache)
                    if lmq:             # its place in the LMQ, not in its parent queue
                        m._queue_offset = picked[i].queue_offset
                        m.queue_id = queue_id
                    Py_INCREF(m)
                    PyList_SET_ITEM(out, i, m)
                    at += picked[i].size
                r.suggest_pulling_from_slave = max_phy - last_offset > self.memory_window
        finally:
            if picked != picked_stack:
                if batch is not None:
                    rows_free(picked, cap)
                else:
                    PyMem_Free(picked)
        return 0

    def get_offset_in_queue_by_time(self, str topic not None, queue_id, long long timestamp,
                                    boundary=LOWER):
        """RocketMQ 5.x time lookup (see ``cq_unit``)."""
        if boundary is not LOWER and boundary is not UPPER:
            raise TypeError("boundary must be a pymq.BoundaryType")
        return lookup_by_time(self._appender(topic, _queue_id(queue_id)), timestamp, boundary is UPPER,
                              self.commit_log_queue.mapped_files, self.cl_file_size)
