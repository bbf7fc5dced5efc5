# cython: language_level=3
"""ConsumeQueue entries: the appender and the search by store time.

An entry (RocketMQ's ``CqUnit``, 20 bytes, big-endian)::

    +--------------------------+---------------+--------------------------+
    | commitlog offset     i64 | size      i32 | tagsCode             i64 |
    +--------------------------+---------------+--------------------------+

``tagsCode`` is Java's ``String.hashCode`` of the TAGS property (0 without tags), or, in
``SCHEDULE_TOPIC_XXXX``, the time the delayed message is due.

Searching by time (RocketMQ 5.x ``getOffsetInQueueByTime(ts, boundary)``). Entries are
in append order, and store timestamps are taken under the commit log's put lock, so
within a queue they do not decrease. The consume queue does not hold timestamps: each
probe reads the record's STORETIMESTAMP from the commit-log segment the entry points to
(``pickup_store_timestamp``), directly from the mapped memory, with no Python call per
probe. Within one consume-queue file, ``_search`` first settles the two corner cases
(every entry older than ``ts``: LOWER answers one past the last entry, UPPER the last;
every entry newer: LOWER answers the file's first index, UPPER 0), then bisects for the
first entry at or after ``ts`` (LOWER) or the last at or before it (UPPER), which is
RocketMQ's exact hit widened over its run of equal timestamps. The file is chosen by the
store times of its first and last entries (``lookup_by_time``), never by file mtime as
4.x did.
"""

from libc.stdint cimport int32_t, int64_t

from pymq._core.atomic cimport pymq_store_release_ssize
from pymq._core.clayout cimport BORNHOST_V6_FLAG, CQ_STORE_UNIT_SIZE, MESSAGE_MAGIC_CODE
from pymq._core.hton cimport pymq_get_i32, pymq_get_i64, pymq_put_i32, pymq_put_i64
from pymq._core.mapped_file cimport MappedFile, segment_for
from pymq._core.record cimport RecordLayout, record_layout
from libc.string cimport memcmp


cdef int64_t pickup_store_timestamp(list files, long long file_size, int64_t offset, int32_t size) noexcept:
    """STORETIMESTAMP of the record at ``offset``, or -1 when it is not readable there."""
    cdef MappedFile mf = segment_for(files, offset, file_size)
    cdef Py_ssize_t pos, need
    cdef int32_t sys_flag
    if mf is None or mf.base == NULL:
        return -1
    pos = <Py_ssize_t>(offset - mf.file_from_offset)
    if pos + 40 > mf.wrote or pymq_get_i32(mf.base + pos + 4) != MESSAGE_MAGIC_CODE:
        return -1
    sys_flag = pymq_get_i32(mf.base + pos + 36)
    need = 68 + 8 if sys_flag & BORNHOST_V6_FLAG else 56 + 8
    if pos + need > mf.wrote:
        return -1
    return pymq_get_i64(mf.base + pos + need - 8)


def store_timestamp_at(list commitlog_files, long long file_size, long long offset, int size=0):
    """``CommitLog.pickupStoreTimestamp``: the record's store time, -1 if unreadable."""
    return pickup_store_timestamp(commitlog_files, file_size, offset, size)


cdef class CqAppender:
    """Appends 20-byte entries to the last file of one consume queue.

    ``put`` follows ``ConsumeQueue.putMessagePositionInfo``: an entry whose record ends
    at or below ``max_physic_offset`` was already built and is skipped (replays are
    idempotent); the common case, the next entry of a file with room, is written here in
    C; anything else (a new or full file, a queue starting past 0, a duplicate or a gap)
    goes to the Python queue's ``_put_slow`` (so does an entry past the disk blocks a
    sparse file has reserved: the slow path reserves more).
    """

    def __init__(self, queue, Py_ssize_t file_size, mapped_file_queue=None):
        self.queue = queue
        self.file_size = file_size
        self.max_physic_offset = -1
        self.cur = None
        self.mapped_file_queue = mapped_file_queue
        self.min_logic_offset = 0

    def set_state(self, MappedFile cur, long long max_physic_offset):
        self.cur = cur
        self.max_physic_offset = max_physic_offset

    @property
    def current(self):
        """The file being appended to (None before the first entry)."""
        return self.cur

    cdef int put_fast(self, int64_t offset, int32_t size, int64_t tags_code, int64_t cq_offset,
                      int64_t store_timestamp) except -1:
        cdef MappedFile cur = self.cur
        cdef int64_t expect = cq_offset * CQ_STORE_UNIT_SIZE
        cdef char *p
        if offset + size <= self.max_physic_offset:
            return 1
        if cur is not None and cur.base == NULL:
            cur.map_again()                 # evicted by the map cache (a closed file stays NULL)
        if (cur is not None and cur.base != NULL and cur.writable and cur.wrote + CQ_STORE_UNIT_SIZE <= cur.reserved
                and cur.file_from_offset + cur.wrote == expect):
            p = cur.base + cur.wrote
            pymq_put_i64(p, offset)
            pymq_put_i32(p + 8, size)
            pymq_put_i64(p + 12, tags_code)
            cur.wrote += CQ_STORE_UNIT_SIZE
            self.max_physic_offset = offset + size
            self.last_store_timestamp = store_timestamp
            return 1
        self.last_store_timestamp = store_timestamp
        return 1 if self.queue._put_slow(offset, size, tags_code, cq_offset) else 0

    cdef int put_nogil(self, int64_t offset, int32_t size, int64_t tags_code, int64_t cq_offset,
                       int64_t store_timestamp) noexcept nogil:
        """``put_fast`` without the GIL (the dispatcher's common case): 1 when the entry is
        in the queue (written now, or already there), 0 when it needs ``put_fast`` (a new
        or full file, a gap, a file the map cache evicted, a disk without room for the
        next reserved chunk of a sparse file). The entry's bytes are published
        before the file's wrote position moves past them, so a reader never sees a
        half-written entry. Only the dispatcher appends; the file being appended to is never
        deleted under it (cleaning keeps a queue's last file, truncation and topic deletion
        hold the dispatcher), nor evicted (``CqRouter.evict``: not while the dispatcher runs
        without the GIL and this appender is in its table of routes)."""
        cdef char *p
        cdef Py_ssize_t wrote
        if offset + size <= self.max_physic_offset:
            return 1
        if self.cur is None or self.cur.base == NULL or not self.cur.writable:
            return 0
        wrote = self.cur.wrote
        if self.cur.file_from_offset + wrote != cq_offset * CQ_STORE_UNIT_SIZE:
            return 0
        if wrote + CQ_STORE_UNIT_SIZE > self.cur.reserved:
            # past the blocks a sparse file has reserved: the next chunk, still without
            # the GIL (a full disk or a full file: put_fast decides, with it)
            if wrote + CQ_STORE_UNIT_SIZE > self.cur.file_size or self.cur.reserve_nogil(wrote + CQ_STORE_UNIT_SIZE):
                return 0
        p = self.cur.base + wrote
        pymq_put_i64(p, offset)
        pymq_put_i32(p + 8, size)
        pymq_put_i64(p + 12, tags_code)
        pymq_store_release_ssize(&self.cur.wrote, wrote + CQ_STORE_UNIT_SIZE)
        self.max_physic_offset = offset + size
        self.last_store_timestamp = store_timestamp
        return 1

    def put(self, long long offset, int size, long long tags_code, long long cq_offset,
            long long store_timestamp=0) -> bool:
        """Add the entry for a record; True when it is in the queue (new or already there)."""
        return self.put_fast(offset, size, tags_code, cq_offset, store_timestamp) == 1

    def note_put(self, MappedFile cur, long long max_physic_offset):
        """After a slow-path append: the file now appended to and the new max."""
        self.cur = cur
        self.max_physic_offset = max_physic_offset


def read_unit(MappedFile mf, Py_ssize_t pos):
    """``(commitlog offset, size, tagsCode)`` of the entry at byte ``pos``, or None past
    the readable end."""
    if pos < 0 or pos + CQ_STORE_UNIT_SIZE > mf.wrote or (mf.base == NULL and not mf.map_again()):
        return None
    return (pymq_get_i64(mf.base + pos), pymq_get_i32(mf.base + pos + 8),
            pymq_get_i64(mf.base + pos + 12))


def scan_shape(MappedFile mf, Py_ssize_t start, long long log_extent, long long max_phy,
               long long before_last, long long last_at, int lost_size):
    """Recovery's walk over one file's entries from byte ``start`` (``ConsumeQueue.recover``),
    in C: entries are taken while they can describe a record (offset >= 0, size > 0, lost
    markers of size ``lost_size`` included), end within ``log_extent`` and come in log
    order. ``max_phy`` is the end of the last record taken before, ``last_at`` where that
    entry lies and ``before_last`` the end before it. Returns ``(pos, complete, max_phy,
    before_last, last_at)``: ``pos`` where the walk stopped (the file's readable end when
    ``complete``). At an entry out of log order the one before it is taken back (``pos``
    is then its position relative to this file, maybe negative: in an earlier file)."""
    cdef Py_ssize_t pos = start, end
    cdef int64_t phy
    cdef int32_t size
    cdef long long origin = mf.file_from_offset
    if mf.base == NULL and not mf.map_again():
        return start, False, max_phy, before_last, last_at
    end = mf.wrote if mf.wrote < mf.file_size else mf.file_size
    while pos + CQ_STORE_UNIT_SIZE <= mf.file_size:
        if pos + CQ_STORE_UNIT_SIZE > end:
            return pos, False, max_phy, before_last, last_at
        phy = pymq_get_i64(mf.base + pos)
        size = pymq_get_i32(mf.base + pos + 8)
        if phy < 0 or size <= 0:
            return pos, False, max_phy, before_last, last_at
        if size != lost_size:
            if phy + size > log_extent:
                return pos, False, max_phy, before_last, last_at
            if phy < max_phy:
                # out of order: this entry or the one before is garbage; the one before is
                # taken back (see ConsumeQueue.recover)
                return <Py_ssize_t>(last_at - origin), False, before_last, before_last, last_at
            before_last = max_phy
            last_at = origin + pos
            max_phy = phy + size
        pos += CQ_STORE_UNIT_SIZE
    return pos, True, max_phy, before_last, last_at


def read_unit_raw(MappedFile mf, Py_ssize_t pos):
    """The entry at byte ``pos`` regardless of the wrote position (``(0, 0, 0)`` past the
    file), for finding how far another process has written."""
    if pos < 0 or pos + CQ_STORE_UNIT_SIZE > mf.file_size or (mf.base == NULL and not mf.map_again()):
        return (0, 0, 0)
    return (pymq_get_i64(mf.base + pos), pymq_get_i32(mf.base + pos + 8),
            pymq_get_i64(mf.base + pos + 12))


cdef inline int64_t _time_at(const char *base, Py_ssize_t pos, list files, long long fs):
    return pickup_store_timestamp(files, fs, pymq_get_i64(base + pos), pymq_get_i32(base + pos + 8))


cdef long long _search(MappedFile cq, Py_ssize_t low, long long timestamp, bint upper,
                       list files, long long fs) except? -2:
    """Queue index for ``timestamp`` within one consume-queue file; -1 when it is empty.

    For non-decreasing timestamps, RocketMQ's answer (an exact hit widened over its run of
    equal times; else the right neighbour for LOWER, the left for UPPER) is the first entry
    with time >= ts (LOWER) or the last with time <= ts (UPPER), so this bisects for that
    boundary directly: O(log n) probes even inside a run of thousands of equal timestamps,
    which batches and fast producers create.
    """
    cdef const char *base
    cdef Py_ssize_t high, lo, hi, mid
    cdef long long file_from = cq.file_from_offset
    cdef int64_t t
    cq._check_open()                    # maps an evicted file again
    base = cq.base
    high = (cq.wrote // CQ_STORE_UNIT_SIZE) * CQ_STORE_UNIT_SIZE - CQ_STORE_UNIT_SIZE
    if low < 0:
        low = 0
    if high < low:
        return -1
    t = _time_at(base, high, files, fs)
    if t < timestamp:
        return (file_from + high) // CQ_STORE_UNIT_SIZE + (0 if upper else 1)
    t = _time_at(base, low, files, fs)
    if t > timestamp:
        return 0 if upper else file_from // CQ_STORE_UNIT_SIZE
    # invariant, in entries: time(lo-1) < ts (LOWER) or <= ts (UPPER); time(hi) beyond
    lo = low // CQ_STORE_UNIT_SIZE
    hi = high // CQ_STORE_UNIT_SIZE + 1
    while lo < hi:
        mid = (lo + hi) // 2
        t = _time_at(base, mid * CQ_STORE_UNIT_SIZE, files, fs)
        if t < timestamp or (upper and t == timestamp):
            lo = mid + 1
        else:
            hi = mid
    return file_from // CQ_STORE_UNIT_SIZE + (lo - 1 if upper else lo)


cdef inline bint _readable(MappedFile mf) except -1:
    """Whether ``mf`` is mapped, mapping it again when the map cache evicted it (call it
    right before reading ``mf.base``: no Python code may run between)."""
    return mf.base != NULL or mf.map_again()


cdef Py_ssize_t _first_live(MappedFile mf, long long min_logic_offset) noexcept:
    """Byte position of the first entry of ``mf`` (mapped) at or past the queue's min that
    is not a pre-filled blank (size Integer.MAX_VALUE)."""
    cdef Py_ssize_t pos = <Py_ssize_t>max(0, min_logic_offset - mf.file_from_offset)
    while pos + CQ_STORE_UNIT_SIZE <= mf.wrote and pymq_get_i32(mf.base + pos + 8) == 0x7FFFFFFF:
        pos += CQ_STORE_UNIT_SIZE
    return pos


cdef long long queue_max_offset(CqAppender app):
    """``getMaxOffsetInQueue``: the next index to be written."""
    cdef list files = app.mapped_file_queue.mapped_files
    cdef MappedFile last
    if not files:
        return 0
    last = <MappedFile>files[len(files) - 1]
    return (last.file_from_offset + last.wrote) // CQ_STORE_UNIT_SIZE


cdef long long lookup_by_time(CqAppender app, long long timestamp, bint upper, list commitlog_files,
                              long long commitlog_file_size) except? -2:
    """RocketMQ 5.x ``getOffsetInQueueByTime``: pick the file by the store times of its
    first and last entries (LOWER: the first file, but the last, whose last entry is at or
    after ``ts``, else the last file; UPPER: the newest file whose first entry is at or
    before ``ts``, else 0), then search it."""
    cdef list files = app.mapped_file_queue.mapped_files
    cdef Py_ssize_t i, n = len(files), first
    cdef MappedFile mf, chosen = None
    cdef long long result
    # only files holding entries
    while n > 0 and (<MappedFile>files[n - 1]).wrote < CQ_STORE_UNIT_SIZE:
        n -= 1
    if n == 0:
        return 0
    if upper:
        for i in range(n - 1, -1, -1):
            mf = <MappedFile>files[i]
            if not _readable(mf):
                continue
            first = _first_live(mf, app.min_logic_offset)
            if first + CQ_STORE_UNIT_SIZE <= mf.wrote and _time_at(mf.base, first, commitlog_files, commitlog_file_size) <= timestamp:
                chosen = mf
                break
        if chosen is None:
            return 0
    else:
        for i in range(n - 1):
            mf = <MappedFile>files[i]
            if _readable(mf) and _time_at(mf.base, (mf.wrote // CQ_STORE_UNIT_SIZE - 1) * CQ_STORE_UNIT_SIZE,
                        commitlog_files, commitlog_file_size) >= timestamp:
                chosen = mf
                break
        if chosen is None:
            chosen = <MappedFile>files[n - 1]
    chosen._check_open()                # maps it again if evicted (raises when closed)
    chosen.used = True
    result = _search(chosen, _first_live(chosen, app.min_logic_offset), timestamp, upper,
                     commitlog_files, commitlog_file_size)
    return result if result > 0 else 0


def offset_by_time(CqAppender app, long long timestamp, bint upper, list commitlog_files,
                   long long commitlog_file_size):
    """Python entry to ``lookup_by_time``."""
    return lookup_by_time(app, timestamp, upper, commitlog_files, commitlog_file_size)


def verify_entries(MappedFile cq, Py_ssize_t start, Py_ssize_t end, list commitlog_files,
                   long long commitlog_file_size, bytes topic, int queue_id):
    """Byte position of the first entry in ``[start, end)`` that does not describe a whole
    record of ``topic``/``queue_id`` at its queue offset (size, topic, queue id and queue
    offset checked against the record), or ``end`` when all do. Pre-filled blanks pass."""
    cdef Py_ssize_t pos = start, rel
    cdef int64_t phy, index
    cdef int32_t size
    cdef MappedFile seg
    cdef RecordLayout lay
    cdef const char *rec
    cdef Py_ssize_t tl = len(topic)
    cq._check_open()
    if end > cq.file_size:
        end = cq.file_size
    while pos + CQ_STORE_UNIT_SIZE <= end:
        phy = pymq_get_i64(cq.base + pos)
        size = pymq_get_i32(cq.base + pos + 8)
        if size != 0x7FFFFFFF:
            seg = segment_for(commitlog_files, phy, commitlog_file_size)
            if seg is None or seg.base == NULL or size <= 0:
                return pos
            rel = <Py_ssize_t>(phy - seg.file_from_offset)
            if rel + size > seg.wrote:
                return pos
            rec = seg.base + rel
            index = (cq.file_from_offset + pos) // CQ_STORE_UNIT_SIZE
            if (record_layout(rec, size, &lay) != size or lay.topic_len != tl
                    or memcmp(rec + lay.topic_pos, <const char *>topic, tl) != 0
                    or pymq_get_i32(rec + 12) != queue_id or pymq_get_i64(rec + 20) != index):
                return pos
        pos += CQ_STORE_UNIT_SIZE
    return pos
