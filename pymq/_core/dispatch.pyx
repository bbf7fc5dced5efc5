# cython: language_level=3
"""Dispatch: turn commit-log records into consume-queue entries (RocketMQ's reput path).

``dispatch_segment`` walks the records of one commit-log segment from a position up to its
readable end, in chunks of records, each in two steps:

1. ``parse_request`` validates each record (magic, sizes, field lengths:
   ``checkMessageAndReturnSize`` without the CRC) and fills a ``DispatchRequest``: offsets,
   queue, store time, sysflag, and where TAGS, KEYS and UNIQ_KEY sit in the properties. The
   tagsCode is Java's hashCode of TAGS, or in SCHEDULE_TOPIC_XXXX the time a delayed
   message is due (store time + the level's delay);
2. ``CqRouter`` hands each request of a normal or committed transaction type to its
   queue's ``CqAppender`` (prepared and rolled-back records get no entry), then the index
   builder, if any, takes the chunk. A record that names more queues in its
   ``INNER_MULTI_DISPATCH`` property (RocketMQ's multi-dispatch: light message queues,
   ``%LMQ%...``, which lite topics are made of) also gets an entry in each of them, at the
   queue offset its ``INNER_MULTI_QUEUE_OFFSET`` property gives (an LMQ's queue id is 0).

Both steps run without the GIL, chunk after chunk: the writer's thread keeps the
interpreter while the dispatcher works beside it. Queues are found in a table of routes
(topic bytes, queue id -> appender) kept by the router. Only a queue not in the table
yet, a consume-queue or index file to roll, or a gap take the GIL, and only for that one
request (``CqRouter.apply`` and ``DispatchSink.accept``, the same steps with Python calls
allowed); the next chunk of a consume queue's sparse file is reserved without it.

A segment ends at an end-of-file blank (the caller rolls to the next segment) or at the
readable end. A record that fails validation stops the walk there and is reported; what to
do next is the caller's policy.
"""

from cpython.unicode cimport PyUnicode_DecodeUTF8
from cpython.mem cimport PyMem_Calloc, PyMem_Free, PyMem_Malloc
from cpython.object cimport PyObject
from libc.stdint cimport int32_t, int64_t, uint32_t
from libc.string cimport memcmp, memcpy, memset

from pymq._core.clayout cimport TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE, TRANSACTION_TYPE_MASK
from pymq._core.cq_unit cimport CqAppender
from pymq._core.hton cimport pymq_get_i32, pymq_get_i64
from pymq._core.mapped_file cimport MappedFile
from pymq._core.record cimport RecordLayout, next_property, record_crc_ok, record_layout

cdef extern from "pymq_javahash.h" nogil:
    int32_t pymq_java_hash_utf8(const char *buf, size_t n)

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
cdef const char *SCHEDULE_TOPIC_C = b"SCHEDULE_TOPIC_XXXX"
cdef const char *TIMER_TOPIC_C = b"rmq_sys_wheel_timer"

cdef enum:
    CHUNK = 1024
    MAX_DELAY_LEVELS = 64
    ROUTE_SLOTS = 512           # open addressing; cleared when half full
    MAX_ARRIVED = 256           # queues touched per GIL-free stretch before it stops
    MAX_SLOW = 8                # requests of one chunk that take the GIL one by one


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
    if pymq_get_i64(rec + 28) != phys:
        return -1                   # the acceptance rule: a record lies where PHYSICALOFFSET says
    if not record_crc_ok(rec, &lay, total):
        return -1                   # altered: filed under no queue (its own CRC covers its queue fields)
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
    out.multi_pos = -1
    out.multi_len = 0
    out.multi_offset_pos = -1
    out.multi_offset_len = 0
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
            elif _name_is(rec + s, k - s, b"INNER_MULTI_DISPATCH", 20):
                out.multi_pos = <int32_t>(k + 1)
                out.multi_len = <int32_t>(e - k - 1)
            elif _name_is(rec + s, k - s, b"INNER_MULTI_QUEUE_OFFSET", 24):
                out.multi_offset_pos = <int32_t>(k + 1)
                out.multi_offset_len = <int32_t>(e - k - 1)
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


#: what may follow ``%LMQ%`` in a name filed by multi-dispatch: a topic's characters and
#: the lite separator ``$``, so a name read from a record never makes a path outside
#: ``consumequeue/``
_LMQ_TAIL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-%|$")


def is_dispatchable_lmq(str name) -> bool:
    """Whether a record's ``INNER_MULTI_DISPATCH`` entry ``name`` gets an entry: an LMQ name
    (``%LMQ%`` and 1..250 more characters, topic characters or ``$``). Other names are not
    filed (RocketMQ's multi-dispatch into ordinary queues, which it does only with
    ``enableMultiDispatch``): a record cannot put itself into another topic's queue."""
    return (5 < len(name) <= 255 and name.startswith("%LMQ%")
            and all(c in _LMQ_TAIL for c in name))


cdef class DispatchSink:
    """Receives each chunk of parsed records after the consume queues got theirs.

    ``base`` is the start of the commit-log segment at offset ``file_from``; request ``i``
    describes the record at ``base + reqs[i].commitlog_offset - file_from``.

    ``accept_fast`` is the same without the GIL: it handles requests from the first on
    and returns how many it handled; the dispatcher passes the rest to ``accept``.
    ``fast_begin`` / ``fast_end`` (with the GIL) bracket a GIL-free stretch, e.g. to pin
    the files ``accept_fast`` writes to.
    """

    cdef int accept(self, const char *base, int64_t file_from, DispatchRequest *reqs, Py_ssize_t n) except -1:
        return 0

    cdef int fast_begin(self) except -1:
        return 0

    cdef Py_ssize_t accept_fast(self, const char *base, int64_t file_from, DispatchRequest *reqs,
                                Py_ssize_t n) noexcept nogil:
        return n

    cdef void fast_end(self) noexcept:
        pass


cdef struct Route:
    PyObject *app               # borrowed: CqRouter.queues holds the appender and the key
    PyObject *key               # the (topic, queue_id) tuple
    int32_t queue_id
    int32_t topic_len
    char topic[128]


cdef inline uint32_t _route_hash(const char *topic, Py_ssize_t n, int32_t qid) noexcept nogil:
    cdef uint32_t h = 2166136261u
    cdef Py_ssize_t i
    for i in range(n):
        h = (h ^ <unsigned char>topic[i]) * 16777619u
    return (h ^ <uint32_t>qid) * 2654435761u


cdef class CqRouter:
    """Routes dispatch requests to consume-queue appenders.

    ``resolve(topic, queue_id) -> CqAppender`` finds or creates the queue (Python, once per
    queue). Known queues sit in a table of routes keyed by raw topic bytes and queue id,
    read without the GIL; the last route used is checked first, so a run of records for
    one queue costs one compare. ``arrived`` collects, per (topic, queue_id) touched, the
    queue offset after the last entry dispatched; the reput service takes it to wake
    long-polling readers.

    ``evict(mf, appender)`` is how the map cache unmaps a consume-queue file: never the
    file a routed appender writes while the dispatcher runs without the GIL.
    """
    cdef object resolve
    cdef dict queues                # (topic, queue_id) -> ((topic, queue_id), CqAppender)
    cdef Route *routes
    cdef Py_ssize_t route_count
    cdef Route *last
    cdef int64_t delay_ms[64]
    cdef int max_delay_level
    cdef public dict arrived
    cdef public DispatchSink index_builder
    cdef readonly long long dispatched
    cdef readonly long long skipped_transactions
    cdef public long long last_store_timestamp      # of the newest record dispatched
    # True while ``dispatch_segment`` runs without the GIL: routed appenders' files are
    # then being written (``evict``); public for tests only
    cdef public bint writing
    # queues touched in a GIL-free stretch: route key and next queue offset, folded into
    # ``arrived`` when the stretch ends
    cdef PyObject *arrived_keys[MAX_ARRIVED]
    cdef int64_t arrived_next[MAX_ARRIVED]
    cdef Py_ssize_t arrived_count

    def __cinit__(self):
        self.routes = <Route *>PyMem_Calloc(ROUTE_SLOTS, sizeof(Route))
        if self.routes == NULL:
            raise MemoryError()

    def __dealloc__(self):
        PyMem_Free(self.routes)

    def __init__(self, resolve, delay_levels_ms=()):
        """``delay_levels_ms[i]`` is the delay of level ``i + 1`` in ms."""
        cdef int i
        self.resolve = resolve
        self.queues = {}
        self.route_count = 0
        self.last = NULL
        self.arrived = {}
        self.arrived_count = 0
        self.index_builder = None
        for i in range(MAX_DELAY_LEVELS):
            self.delay_ms[i] = 0
        levels = list(delay_levels_ms)[:MAX_DELAY_LEVELS - 1]
        for i, v in enumerate(levels):
            self.delay_ms[i + 1] = v
        self.max_delay_level = len(levels)

    def forget(self):
        """Drop cached queues (after queues were truncated or deleted). The caller holds
        the dispatcher still (the reput service's lock)."""
        self._clear_routes()
        self.queues.clear()

    cpdef bint evict(self, MappedFile mf, CqAppender app):
        """Unmap ``mf``, a file of ``app``'s queue (``MappedFile.evict``), unless the
        dispatcher may be writing it right now: it runs without the GIL and ``mf`` is the
        file of an appender in the table of routes. Checked and done in one C call with
        the GIL held, so the dispatcher cannot start a GIL-free stretch in between."""
        if self.writing and app is not None and app.routed and app.cur is mf:
            return False
        return mf.evict()

    cdef void _clear_routes(self) noexcept:
        cdef Py_ssize_t i
        for i in range(ROUTE_SLOTS):
            if self.routes[i].app != NULL:
                (<CqAppender>self.routes[i].app).routed = False
        memset(self.routes, 0, ROUTE_SLOTS * sizeof(Route))
        self.route_count = 0
        self.last = NULL

    cdef Route *_find(self, const char *topic, int32_t topic_len, int32_t qid) noexcept nogil:
        """The route of (topic bytes, queue id), or NULL when it is not in the table."""
        cdef Route *r = self.last
        cdef uint32_t i
        cdef Py_ssize_t probes
        if (r != NULL and r.topic_len == topic_len and r.queue_id == qid
                and memcmp(topic, r.topic, topic_len) == 0):
            return r
        i = _route_hash(topic, topic_len, qid) & (ROUTE_SLOTS - 1)
        for probes in range(ROUTE_SLOTS):
            r = &self.routes[i]
            if r.app == NULL:
                return NULL
            if r.topic_len == topic_len and r.queue_id == qid and memcmp(topic, r.topic, topic_len) == 0:
                self.last = r
                return r
            i = (i + 1) & (ROUTE_SLOTS - 1)
        return NULL

    cdef Route *_route(self, const char *rec, DispatchRequest *r) except NULL:
        """The route of a request's queue, resolving (Python) a queue met for the first time."""
        cdef const char *topic = rec + r.topic_pos
        cdef Route *route = self._find(topic, r.topic_len, r.queue_id)
        cdef uint32_t i
        if route != NULL:
            return route
        name = PyUnicode_DecodeUTF8(topic, r.topic_len, "replace")
        entry = self.queues.get((name, r.queue_id))
        if entry is None:
            key = (name, r.queue_id)
            entry = (key, <CqAppender?>self.resolve(name, r.queue_id))
            self.queues[key] = entry       # holds the key and the appender the route points to
        key, app = entry
        if self.route_count >= ROUTE_SLOTS // 2:
            self._clear_routes()
        i = _route_hash(topic, r.topic_len, r.queue_id) & (ROUTE_SLOTS - 1)
        while self.routes[i].app != NULL:
            i = (i + 1) & (ROUTE_SLOTS - 1)
        route = &self.routes[i]
        (<CqAppender>app).routed = True
        route.app = <PyObject *>app
        route.key = <PyObject *>key
        route.queue_id = r.queue_id
        route.topic_len = r.topic_len
        memcpy(route.topic, topic, r.topic_len)
        self.route_count += 1
        self.last = route
        return route

    cdef int apply(self, const char *base, int64_t file_from, DispatchRequest *reqs, Py_ssize_t n) except -1:
        """Every request of ``reqs[:n]`` into its queue, Python calls allowed."""
        cdef Py_ssize_t i
        cdef DispatchRequest *r
        cdef Route *route
        cdef CqAppender app
        cdef PyObject *prev = NULL
        cdef int64_t prev_next = 0
        cdef int tx
        for i in range(n):
            r = &reqs[i]
            tx = r.sys_flag & TRANSACTION_TYPE_MASK
            if tx == TRANSACTION_PREPARED_TYPE or tx == TRANSACTION_ROLLBACK_TYPE:
                self.skipped_transactions += 1
                continue
            route = self._route(base + (r.commitlog_offset - file_from), r)
            app = <CqAppender>route.app
            app.put_fast(r.commitlog_offset, r.msg_size, r.tags_code, r.queue_offset, r.store_timestamp)
            if route.key != prev:
                if prev != NULL:
                    self.arrived[<object>prev] = prev_next
                prev = route.key
            prev_next = r.queue_offset + 1
            if r.multi_pos >= 0:
                self._multi_dispatch(base + (r.commitlog_offset - file_from), r)
        if prev != NULL:
            self.arrived[<object>prev] = prev_next
        if n:
            self.last_store_timestamp = reqs[n - 1].store_timestamp
        self.dispatched += n
        return 0

    cdef int _multi_dispatch(self, const char *rec, DispatchRequest *r) except -1:
        """The entries of a record in the queues its ``INNER_MULTI_DISPATCH`` names
        (comma-separated), at the offsets ``INNER_MULTI_QUEUE_OFFSET`` gives in the same
        order, queue id 0; only LMQ names are filed (``is_dispatchable_lmq``).
        A record whose two lists do not match gets no extra entry (RocketMQ skips it too)."""
        cdef CqAppender app
        if r.multi_offset_pos < 0:
            return 0
        names = PyUnicode_DecodeUTF8(rec + r.multi_pos, r.multi_len, "replace").split(",")
        offsets = PyUnicode_DecodeUTF8(rec + r.multi_offset_pos, r.multi_offset_len, "replace").split(",")
        if len(names) != len(offsets):
            return 0
        for name, text in zip(names, offsets):
            # ASCII digits that fit a Java long (str.isdigit takes other digits, which int()
            # refuses): anything else gets no entry, and the walk goes on
            if not is_dispatchable_lmq(name) or not text.isascii() or not text.isdigit() or len(text) > 18:
                continue
            qid = 0
            key = (name, qid)
            entry = self.queues.get(key)
            if entry is None:
                entry = (key, <CqAppender?>self.resolve(name, qid))
                self.queues[key] = entry
            app = <CqAppender>entry[1]
            offset = int(text)
            app.put_fast(r.commitlog_offset, r.msg_size, r.tags_code, offset, r.store_timestamp)
            self.arrived[entry[0]] = offset + 1
        return 0

    cdef Py_ssize_t apply_fast(self, const char *base, int64_t file_from, DispatchRequest *reqs,
                               Py_ssize_t n) noexcept nogil:
        """``apply`` without the GIL: requests from the first on, up to the first that needs
        Python (an unknown queue, a file to roll); returns how many were handled."""
        cdef Py_ssize_t i
        cdef DispatchRequest *r
        cdef Route *route
        cdef int tx
        for i in range(n):
            r = &reqs[i]
            tx = r.sys_flag & TRANSACTION_TYPE_MASK
            if tx == TRANSACTION_PREPARED_TYPE or tx == TRANSACTION_ROLLBACK_TYPE:
                self.skipped_transactions += 1
                self.dispatched += 1
                continue
            if r.multi_pos >= 0:
                return i                # more queues to write: the Python path (``apply``)
            route = self._find(base + (r.commitlog_offset - file_from) + r.topic_pos, r.topic_len, r.queue_id)
            if route == NULL:
                return i
            if self.arrived_count == 0 or self.arrived_keys[self.arrived_count - 1] != route.key:
                if self.arrived_count >= MAX_ARRIVED:
                    return i
                self.arrived_keys[self.arrived_count] = route.key
                self.arrived_next[self.arrived_count] = 0
                self.arrived_count += 1
            if not (<CqAppender>route.app).put_nogil(r.commitlog_offset, r.msg_size, r.tags_code, r.queue_offset,
                                                     r.store_timestamp):
                return i
            self.arrived_next[self.arrived_count - 1] = r.queue_offset + 1
            self.last_store_timestamp = r.store_timestamp
            self.dispatched += 1
        return n

    cdef int fold_arrived(self) except -1:
        """Fold the queues a GIL-free stretch touched into ``arrived`` (with the GIL)."""
        cdef Py_ssize_t i
        for i in range(self.arrived_count):
            if self.arrived_next[i] > 0:
                self.arrived[<object>self.arrived_keys[i]] = self.arrived_next[i]
        self.arrived_count = 0
        return 0


def dispatch_segment(MappedFile seg, Py_ssize_t pos, Py_ssize_t end, CqRouter router, Py_ssize_t max_records=1 << 30):
    """Dispatch the records of ``seg`` in ``[pos, end)``.

    Returns ``(position, records, state)``: where the walk stopped, how many records it
    dispatched, and why it stopped: ``"end"`` (nothing more readable), ``"blank"`` (the
    segment's end-of-file blank: continue in the next segment) or ``"corrupt"`` (the bytes
    at ``position`` are not a whole record).

    The walk runs without the GIL from start to end. A request that needs Python (a new
    queue, a file to roll) takes the GIL for that request alone and the walk goes on
    without it; only a chunk with more than ``MAX_SLOW`` such requests is finished with
    the GIL held (many new queues at once), so the writer is never kept waiting for a
    chunk's worth of work.
    """
    cdef DispatchRequest *reqs = <DispatchRequest *>PyMem_Malloc(CHUNK * sizeof(DispatchRequest))
    cdef Py_ssize_t n = 0, size = 1, count = 0, done, slow
    cdef const char *base
    cdef int64_t file_from = seg.file_from_offset
    cdef str state = "end"
    cdef DispatchSink sink = router.index_builder
    cdef bint has_sink = sink is not None
    if reqs == NULL:
        raise MemoryError()
    if pos < 0 or end > seg.file_size or pos > end:
        PyMem_Free(reqs)
        raise ValueError("dispatch range outside the segment")
    seg.pin()
    try:
        base = seg.base
        if has_sink:
            sink.fast_begin()
        router.writing = True
        try:
            with nogil:
                while pos < end and count < max_records:
                    n = 0
                    while n < CHUNK and pos < end and count + n < max_records:
                        size = parse_request(base + pos, end - pos, file_from + pos, &reqs[n],
                                             router.delay_ms, router.max_delay_level)
                        if size <= 0:
                            break
                        pos += size
                        n += 1
                    if n == 0:
                        break
                    # the consume queues, then the index, each in log order
                    done = 0
                    slow = 0
                    while done < n:
                        done += router.apply_fast(base, file_from, reqs + done, n - done)
                        if done < n:
                            with gil:
                                router.fold_arrived()        # before apply() sets what is newer
                                if slow < MAX_SLOW:
                                    router.apply(base, file_from, reqs + done, 1)
                                    done += 1
                                else:
                                    router.apply(base, file_from, reqs + done, n - done)
                                    done = n
                            slow += 1
                    if has_sink:
                        done = 0
                        slow = 0
                        while done < n:
                            done += sink.accept_fast(base, file_from, reqs + done, n - done)
                            if done < n:
                                with gil:
                                    sink.fast_end()          # accept() may roll: pin the new file
                                    if slow < MAX_SLOW:
                                        sink.accept(base, file_from, reqs + done, 1)
                                        done += 1
                                    else:
                                        sink.accept(base, file_from, reqs + done, n - done)
                                        done = n
                                    sink.fast_begin()
                                slow += 1
                    count += n
                    if size <= 0:
                        break
        finally:
            router.writing = False
            if has_sink:
                sink.fast_end()
            router.fold_arrived()
        if size == 0:
            state = "blank"
        elif size < 0 and pos < end:
            state = "corrupt"
    finally:
        seg.unpin()
        PyMem_Free(reqs)
    return pos, count, state
