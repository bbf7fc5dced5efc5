# cython: language_level=3
"""IndexFile: RocketMQ's hash index of message keys, over a mapped file.

Layout (big-endian)::

    +--------------------------------------------------------------+  0
    | header (40): beginTimestamp i64 | endTimestamp i64 |           |
    |              beginPhyOffset i64 | endPhyOffset i64 |           |
    |              hashSlotCount i32  | indexCount i32               |
    +--------------------------------------------------------------+  40
    | slot table: hashSlotNum x i32, the index number of the newest |
    | entry of that slot (0 = empty)                                 |
    +--------------------------------------------------------------+  40 + slots*4
    | entries: indexNum x 20 bytes; entry n at 40 + slots*4 + n*20:  |
    |   keyHash i32 | phyOffset i64 | timeDiff i32 (s) | prevIndex i32 |
    +--------------------------------------------------------------+

A key is ``topic#key``; its hash is ``abs(String.hashCode)`` (0 for Integer.MIN_VALUE) and
its slot ``hash % hashSlotNum``. Entries of one slot form a chain from the newest back
through ``prevIndex``. Entry number 0 is never used: ``indexCount`` starts at 1, and a
file is full at ``indexCount >= indexNum``, so it holds ``indexNum - 1`` entries. The
header in the file is the state: every put updates it in place.

Walking a chain (``selectPhyOffset``) stops at ``max_num`` results, at an invalid or
self-referencing ``prevIndex``, at an entry older than the range asked for, and, in pymq,
after ``indexCount`` steps at most, so a damaged chain cannot loop. ``select_phy_offset``
is RocketMQ's walk (hash comparison only: "Aa" and "BB" collide). ``query`` is what the
store uses: it reads each candidate's record from the commit log and keeps it only when
the topic, the real key (a KEYS word or the UNIQ_KEY) and the real store time match, so
collisions never leak and RocketMQ's whole-second ``timeDiff`` cannot drop a message that
is inside the range.
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.ref cimport Py_INCREF
from libc.stdint cimport int32_t, int64_t, uint32_t
from libc.string cimport memchr, memcmp, memcpy

from pymq._core.atomic cimport pymq_release_fence
from pymq._core.clayout cimport TRANSACTION_ROLLBACK_TYPE, TRANSACTION_TYPE_MASK
from pymq._core.dispatch cimport DispatchRequest, DispatchSink
from pymq._core.hton cimport pymq_get_i32, pymq_get_i64, pymq_put_i32, pymq_put_i64
from pymq._core.mapped_file cimport MappedFile, segment_for
from pymq._core.message cimport MessageExt
from pymq._core.record cimport RecordLayout, ext_from_page, next_property, record_layout

cdef extern from "pymq_javahash.h" nogil:
    uint32_t pymq_java_hash_utf8_from(uint32_t h, const char *buf, size_t n)

cdef enum:
    HEADER_SIZE = 40
    SLOT_SIZE = 4
    ENTRY_SIZE = 20

INDEX_HEADER_SIZE = HEADER_SIZE


cdef inline int32_t _abs_hash(uint32_t h) noexcept nogil:
    """``indexKeyHashMethod``: ``abs(hashCode)``, 0 for ``Integer.MIN_VALUE``."""
    cdef int32_t v = <int32_t>h
    if v == -2147483648:
        return 0
    return -v if v < 0 else v


cdef inline int32_t index_hash(const char *topic, Py_ssize_t topic_len, const char *key, Py_ssize_t key_len) noexcept nogil:
    """``indexKeyHashMethod(topic + "#" + key)``."""
    cdef uint32_t h = pymq_java_hash_utf8_from(0, topic, topic_len)
    h = 31u * h + 35u                       # '#'
    return _abs_hash(pymq_java_hash_utf8_from(h, key, key_len))


def index_file_size(int hash_slot_num, int index_num) -> int:
    """Bytes of an index file: 40 + slots*4 + entries*20."""
    return HEADER_SIZE + hash_slot_num * SLOT_SIZE + index_num * ENTRY_SIZE


cdef Py_ssize_t _record_has_key(const char *rec, Py_ssize_t avail, const char *topic, Py_ssize_t topic_len,
                                const char *key, Py_ssize_t key_len, long long begin, long long end,
                                RecordLayout *out) noexcept:
    """The record's size when its topic is ``topic``, its store time is in [begin, end]
    and ``key`` is its UNIQ_KEY or one of the space-separated words of its KEYS (its
    checked layout in ``out``); 0 otherwise."""
    cdef RecordLayout lay
    cdef Py_ssize_t s, e, k, stop, w, we, total
    total = record_layout(rec, avail, &lay)
    if total <= 0:
        return 0
    out[0] = lay
    if lay.topic_len != topic_len or memcmp(rec + lay.topic_pos, topic, topic_len) != 0:
        return 0
    if lay.store_timestamp < begin or lay.store_timestamp > end:
        return 0
    s = lay.props_pos
    stop = s + lay.props_len
    while s < stop:
        if next_property(rec, s, stop, &k, &e):
            if k - s == 8 and memcmp(rec + s, b"UNIQ_KEY", 8) == 0:
                if e - k - 1 == key_len and memcmp(rec + k + 1, key, key_len) == 0:
                    return total
            elif k - s == 4 and memcmp(rec + s, b"KEYS", 4) == 0:
                w = k + 1
                while w < e:
                    we = w
                    while we < e and rec[we] != 32:
                        we += 1
                    if we - w == key_len and memcmp(rec + w, key, key_len) == 0:
                        return total
                    w = we + 1
        s = e + 1
    return 0


cdef inline bint _link_entry(char *base, Py_ssize_t entries_pos, int hash_slot_num, int32_t count,
                             int32_t key_hash, int64_t phy, int64_t store_ts) noexcept nogil:
    """Write entry number ``count`` (1 <= count < indexNum, checked by the caller) and
    link it into its slot; True when the slot was empty. The entry is published before
    the slot points to it (a reader may walk the chain at the same time, without a
    lock); the header is the caller's (``_put_header``)."""
    cdef Py_ssize_t slot_pos = HEADER_SIZE + <Py_ssize_t>(key_hash % hash_slot_num) * SLOT_SIZE
    cdef Py_ssize_t entry_pos = entries_pos + <Py_ssize_t>count * ENTRY_SIZE
    cdef int32_t slot_value = pymq_get_i32(base + slot_pos)
    cdef int64_t begin_ts = pymq_get_i64(base)
    cdef int64_t diff
    if slot_value <= 0 or slot_value > count:
        slot_value = 0
    diff = store_ts - begin_ts
    diff = diff // 1000 if diff >= 0 else -((-diff) // 1000)     # Java's truncating division
    if begin_ts <= 0 or diff < 0:
        diff = 0
    elif diff > 2147483647:
        diff = 2147483647
    pymq_put_i32(base + entry_pos, key_hash)
    pymq_put_i64(base + entry_pos + 4, phy)
    pymq_put_i32(base + entry_pos + 12, <int32_t>diff)
    pymq_put_i32(base + entry_pos + 16, slot_value)
    pymq_release_fence()
    pymq_put_i32(base + slot_pos, count)
    if count <= 1:
        pymq_put_i64(base + 16, phy)
        pymq_put_i64(base, store_ts)
    return slot_value == 0


cdef inline void _put_header(char *base, int32_t next_count, int32_t new_slots, int64_t phy,
                             int64_t store_ts) noexcept nogil:
    """After entries up to ``next_count - 1`` were linked: the header's counts and ends."""
    if new_slots:
        pymq_put_i32(base + 32, pymq_get_i32(base + 32) + new_slots)
    pymq_put_i32(base + 36, next_count)
    pymq_put_i64(base + 24, phy)
    pymq_put_i64(base + 8, store_ts)


@cython.final
cdef class IndexFile:
    """One index file: ``IndexFile(mapped_file, hash_slot_num, index_num)``.

    For a new file, ``end_phy_offset`` / ``end_timestamp`` seed the header from the
    previous file (as RocketMQ's ``getAndCreateLastIndexFile`` does).
    """
    cdef readonly MappedFile mapped_file
    cdef readonly int hash_slot_num
    cdef readonly int index_num
    cdef Py_ssize_t entries_pos

    def __init__(self, MappedFile mapped_file, int hash_slot_num, int index_num,
                 long long end_phy_offset=0, long long end_timestamp=0):
        if hash_slot_num < 1 or index_num < 2:
            raise ValueError("an index file needs >= 1 slot and >= 2 entries")
        if mapped_file.file_size != index_file_size(hash_slot_num, index_num):
            raise ValueError(f"{mapped_file.file_name}: {mapped_file.file_size} bytes, expected "
                             f"{index_file_size(hash_slot_num, index_num)} for these sizes")
        self.mapped_file = mapped_file
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.entries_pos = HEADER_SIZE + <Py_ssize_t>hash_slot_num * SLOT_SIZE
        mapped_file.set_positions(mapped_file.file_size)
        if (end_phy_offset > 0 or end_timestamp > 0) and not mapped_file.writable:
            raise ValueError("cannot seed a read-only index file")
        if end_phy_offset > 0:
            self._put64(16, end_phy_offset)
            self._put64(24, end_phy_offset)
        if end_timestamp > 0:
            self._put64(0, end_timestamp)
            self._put64(8, end_timestamp)

    cdef inline char *_base(self) except NULL:
        self.mapped_file._check_open()
        return self.mapped_file.base

    cdef inline void _put64(self, Py_ssize_t pos, int64_t v) except *:
        pymq_put_i64(self._base() + pos, v)

    cdef inline int64_t end_phy(self) except? -1:
        return pymq_get_i64(self._base() + 24)

    # -- header ------------------------------------------------------------------------------

    @property
    def begin_timestamp(self):
        return pymq_get_i64(self._base())

    @property
    def end_timestamp(self):
        return pymq_get_i64(self._base() + 8)

    @property
    def begin_phy_offset(self):
        return pymq_get_i64(self._base() + 16)

    @property
    def end_phy_offset(self):
        return pymq_get_i64(self._base() + 24)

    @property
    def hash_slot_count(self):
        return pymq_get_i32(self._base() + 32)

    @property
    def index_count(self):
        """Next entry number; values <= 0 on disk (a fresh file) read as 1."""
        cdef int32_t v = pymq_get_i32(self._base() + 36)
        return v if v > 0 else 1

    def is_write_full(self) -> bool:
        return self.index_count >= self.index_num

    def is_time_matched(self, long long begin, long long end) -> bool:
        """RocketMQ's overlap test of [begin, end] with the file's time range."""
        cdef long long fb = self.begin_timestamp, fe = self.end_timestamp
        return (begin < fb and end > fe) or (fb <= begin <= fe) or (fb <= end <= fe)

    # -- writing -----------------------------------------------------------------------------

    cdef int put_hashed(self, int32_t key_hash, int64_t phy, int64_t store_ts) except -1:
        """Add an entry; 1 when added, 0 when the file is full."""
        cdef char *base = self._base()
        cdef int32_t count = pymq_get_i32(base + 36)
        if not self.mapped_file.writable:
            raise ValueError("the index file is mapped read-only")
        if count <= 0:
            count = 1
        if count >= self.index_num:
            return 0
        _put_header(base, count + 1, _link_entry(base, self.entries_pos, self.hash_slot_num, count, key_hash,
                                                 phy, store_ts), phy, store_ts)
        return 1

    def put_key(self, key, long long phy_offset, long long store_timestamp) -> bool:
        """``IndexFile.putKey`` for a raw key (``str``); False when the file is full."""
        cdef bytes k = key.encode("utf-8") if isinstance(key, str) else bytes(key)
        cdef int32_t h = <int32_t>pymq_java_hash_utf8_from(0, k, len(k))
        if h == -2147483648:
            h = 0
        elif h < 0:
            h = -h
        return self.put_hashed(h, phy_offset, store_timestamp) == 1

    # -- reading -----------------------------------------------------------------------------

    cdef Py_ssize_t _walk(self, int32_t key_hash, Py_ssize_t max_num, long long begin, long long end,
                          int64_t *out, RecordLayout *lays, Py_ssize_t *sizes, Py_ssize_t n, bint verify,
                          list files, long long file_size, const char *topic, Py_ssize_t topic_len,
                          const char *key, Py_ssize_t key_len) except -1:
        """Walk the chain of ``key_hash`` newest first, appending matches to ``out[n:]``
        (``max_num`` at most in all); returns the new count. A verified walk also keeps
        each match's record layout and size in ``lays`` / ``sizes``."""
        cdef char *base = self._base()
        cdef int32_t count, slot_value, nxt, prev, diff, h
        cdef int64_t phy, time_read, begin_ts = pymq_get_i64(base)
        cdef Py_ssize_t pos, steps = 0, j, rel, size
        cdef MappedFile seg
        cdef bint matched
        # entry numbers are 1 .. indexCount-1 (RocketMQ also accepts a link equal to
        # indexCount); never beyond the file, whatever a damaged header says
        count = pymq_get_i32(base + 36)
        if count <= 0:
            count = 1                       # a fresh file (see index_count)
        if count > self.index_num - 1:
            count = self.index_num - 1
        slot_value = pymq_get_i32(base + HEADER_SIZE + <Py_ssize_t>(key_hash % self.hash_slot_num) * SLOT_SIZE)
        if slot_value <= 0 or slot_value > count or count <= 1:
            return n
        nxt = slot_value
        while n < max_num and steps < count:
            steps += 1
            pos = self.entries_pos + <Py_ssize_t>nxt * ENTRY_SIZE
            h = pymq_get_i32(base + pos)
            phy = pymq_get_i64(base + pos + 4)
            diff = pymq_get_i32(base + pos + 12)
            prev = pymq_get_i32(base + pos + 16)
            if diff < 0:
                break
            time_read = begin_ts + <int64_t>diff * 1000
            if h == key_hash:
                if not verify:
                    matched = begin <= time_read <= end
                else:
                    matched = False
                    seg = segment_for(files, phy, file_size)
                    if seg is not None and seg.base != NULL and phy - seg.file_from_offset < seg.wrote:
                        rel = <Py_ssize_t>(phy - seg.file_from_offset)
                        size = _record_has_key(seg.base + rel, seg.wrote - rel, topic, topic_len,
                                               key, key_len, begin, end, &lays[n])
                        matched = size > 0
                        sizes[n] = size
                        for j in range(n):
                            if out[j] == phy:
                                matched = False
                if matched:
                    out[n] = phy
                    n += 1
            if prev <= 0 or prev > count or prev == nxt:
                break
            # the entry's real time is in [time_read, time_read + 1000): RocketMQ stops at
            # time_read < begin; the verified walk only when the entry is surely older
            if (time_read < begin) if not verify else (time_read + 1000 <= begin):
                break
            nxt = prev
        return n

    def select_phy_offset(self, key, int max_num, long long begin, long long end) -> list:
        """RocketMQ's ``selectPhyOffset`` for a raw key: offsets whose key hash matches
        (collisions included), newest first."""
        cdef bytes k = key.encode("utf-8") if isinstance(key, str) else bytes(key)
        cdef int32_t h = <int32_t>pymq_java_hash_utf8_from(0, k, len(k))
        cdef int64_t found[64]
        cdef Py_ssize_t n
        h = 0 if h == -2147483648 else (-h if h < 0 else h)
        n = self._walk(h, min(max_num, 64), begin, end, found, NULL, NULL, 0, False, None, 0, NULL, 0, NULL, 0)
        return [found[i] for i in range(n)]

    def query(self, str topic, str key, int max_num, long long begin, long long end,
              list commitlog_files, long long commitlog_file_size) -> list:
        """Commit-log offsets (at most min(max_num, 64)) of messages of ``topic`` whose key
        or unique key is ``key`` and store time is in [begin, end], newest first, each
        checked against its record."""
        cdef bytes t = topic.encode("utf-8"), k = key.encode("utf-8")
        cdef int64_t found[64]
        cdef RecordLayout lays[64]
        cdef Py_ssize_t sizes[64]
        cdef Py_ssize_t n = self._walk(index_hash(t, len(t), k, len(k)), min(max_num, 64), begin, end,
                                       found, lays, sizes, 0, True, commitlog_files, commitlog_file_size,
                                       t, len(t), k, len(k))
        return [found[i] for i in range(n)]

    def flush(self):
        """Force the whole file to disk."""
        self.mapped_file.set_positions(self.mapped_file.file_size)
        self.mapped_file.flushed_position = 0
        self.mapped_file.flush(0)


cdef inline Py_ssize_t _key_words(const char *rec, Py_ssize_t pos, Py_ssize_t n) noexcept nogil:
    """How many non-empty space-separated words ``rec[pos:pos + n]`` holds."""
    cdef Py_ssize_t i, words = 0
    cdef bint in_word = False
    for i in range(pos, pos + n):
        if rec[i] == 32:
            in_word = False
        elif not in_word:
            in_word = True
            words += 1
    return words


cdef class IndexBuilder(DispatchSink):
    """Builds the index from dispatched records (``CommitLogDispatcherBuildIndex``).

    Every record but rolled-back transactions is indexed under ``topic#UNIQ_KEY`` and
    ``topic#word`` for each space-separated word of KEYS, unless it is older than the
    current file's end offset (already indexed). ``roll()`` (Python) returns the file to
    continue in when the current one is full, or None when there is no room for one: the
    builder then disables itself and keeps in ``paused_at`` the offset of the first record
    it could not index.

    The dispatcher's common case runs without the GIL (``accept_fast``): records whose
    entries all fit the current file, hashed with the topic's ``topic#`` prefix hash
    computed once per run of records of one topic. A record that needs a new file goes
    to ``accept`` (with the GIL).
    """
    cdef IndexFile current
    cdef object roll
    cdef public bint enabled
    cdef readonly long long indexed
    cdef public long long paused_at
    cdef MappedFile pinned          # the current file's mapping, pinned for a GIL-free stretch
    cdef char last_topic[128]
    cdef Py_ssize_t last_topic_len
    cdef uint32_t last_topic_hash   # hash of "topic#"

    def __init__(self, IndexFile current, roll):
        self.current = current
        self.roll = roll
        self.enabled = True
        self.paused_at = -1
        self.last_topic_len = -1

    def set_current(self, IndexFile f):
        self.current = f

    cdef int _put(self, int32_t h, int64_t phy, int64_t ts) except -1:
        cdef object nxt
        if self.current is None or self.current.put_hashed(h, phy, ts) == 0:
            nxt = self.roll()
            if nxt is None:
                # no room on the disk for a new index file: indexing pauses at this record
                # (the index service resumes it, from here, when space returns)
                self.enabled = False
                self.paused_at = phy
                return 0
            self.current = <IndexFile?>nxt
            if self.current.put_hashed(h, phy, ts) == 0:
                raise RuntimeError("a new index file is already full")
        self.indexed += 1
        return 0

    cdef int accept(self, const char *base, int64_t file_from, DispatchRequest *reqs, Py_ssize_t n) except -1:
        cdef Py_ssize_t i, w, we, end
        cdef DispatchRequest *r
        cdef const char *rec
        cdef const char *topic
        for i in range(n):
            if not self.enabled:
                return 0
            r = &reqs[i]
            if (r.sys_flag & TRANSACTION_TYPE_MASK) == TRANSACTION_ROLLBACK_TYPE:
                continue
            if self.current is not None and r.commitlog_offset < self.current.end_phy():
                continue
            rec = base + (r.commitlog_offset - file_from)
            topic = rec + r.topic_pos
            if r.uniq_pos >= 0:
                self._put(index_hash(topic, r.topic_len, rec + r.uniq_pos, r.uniq_len),
                          r.commitlog_offset, r.store_timestamp)
            if r.keys_pos >= 0:
                w = r.keys_pos
                end = r.keys_pos + r.keys_len
                while w < end:
                    we = w
                    while we < end and rec[we] != 32:
                        we += 1
                    if we > w:
                        self._put(index_hash(topic, r.topic_len, rec + w, we - w),
                                  r.commitlog_offset, r.store_timestamp)
                    w = we + 1
        return 0

    cdef int fast_begin(self) except -1:
        cdef MappedFile mf
        self.pinned = None
        if self.enabled and self.current is not None:
            mf = self.current.mapped_file
            if mf.base != NULL and mf.writable:
                try:
                    mf.pin()
                except Exception:
                    return 0                # closing: accept() reports it
                self.pinned = mf
        return 0

    cdef void fast_end(self) noexcept:
        if self.pinned is not None:
            self.pinned.unpin()
            self.pinned = None

    cdef inline uint32_t _prefix_hash(self, const char *topic, Py_ssize_t n) noexcept nogil:
        """Java hash state after ``topic + "#"``, cached for the last topic."""
        if n != self.last_topic_len or memcmp(topic, self.last_topic, n) != 0:
            self.last_topic_hash = 31u * pymq_java_hash_utf8_from(0, topic, n) + 35u
            memcpy(self.last_topic, topic, n)
            self.last_topic_len = n
        return self.last_topic_hash

    cdef Py_ssize_t accept_fast(self, const char *base, int64_t file_from, DispatchRequest *reqs,
                                Py_ssize_t n) noexcept nogil:
        cdef Py_ssize_t i, w, we, end, need
        cdef DispatchRequest *r
        cdef const char *rec
        cdef const char *sp
        cdef char *ibase
        cdef int32_t count, first, new_slots
        cdef uint32_t prefix
        cdef Py_ssize_t entries_pos
        cdef int slots, index_num
        if not self.enabled:
            return n
        if self.pinned is None:
            return 0
        # ``current`` changes only with the GIL (a roll in ``accept``); ``pinned`` is its
        # mapping, kept mapped for this stretch by ``fast_begin``
        ibase = self.pinned.base
        entries_pos = self.current.entries_pos
        slots = self.current.hash_slot_num
        index_num = self.current.index_num
        for i in range(n):
            r = &reqs[i]
            if r.uniq_pos < 0 and r.keys_pos < 0:
                continue
            if (r.sys_flag & TRANSACTION_TYPE_MASK) == TRANSACTION_ROLLBACK_TYPE:
                continue
            if r.commitlog_offset < pymq_get_i64(ibase + 24):
                continue
            rec = base + (r.commitlog_offset - file_from)
            count = pymq_get_i32(ibase + 36)
            if count <= 0:
                count = 1
            # room for every entry of the record: at most one per two bytes of KEYS
            need = (1 if r.uniq_pos >= 0 else 0) + ((r.keys_len + 1) // 2 if r.keys_pos >= 0 else 0)
            if count + need > index_num:
                need = (1 if r.uniq_pos >= 0 else 0) + (_key_words(rec, r.keys_pos, r.keys_len)
                                                        if r.keys_pos >= 0 else 0)
                if count + need > index_num:
                    return i
            prefix = self._prefix_hash(rec + r.topic_pos, r.topic_len)
            first = count
            new_slots = 0
            if r.uniq_pos >= 0:
                new_slots += _link_entry(ibase, entries_pos, slots, count,
                                         _abs_hash(pymq_java_hash_utf8_from(prefix, rec + r.uniq_pos, r.uniq_len)),
                                         r.commitlog_offset, r.store_timestamp)
                count += 1
            if r.keys_pos >= 0:
                w = r.keys_pos
                end = r.keys_pos + r.keys_len
                while w < end:
                    sp = <const char *>memchr(rec + w, 32, <size_t>(end - w))
                    we = end if sp == NULL else sp - rec
                    if we > w:
                        new_slots += _link_entry(ibase, entries_pos, slots, count,
                                                 _abs_hash(pymq_java_hash_utf8_from(prefix, rec + w, we - w)),
                                                 r.commitlog_offset, r.store_timestamp)
                        count += 1
                    w = we + 1
            if count > first:
                _put_header(ibase, count, new_slots, r.commitlog_offset, r.store_timestamp)
                self.indexed += count - first
        return n


cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL


cdef class IndexQuerier:
    """``query_message`` in one compiled call: hash the key, walk the index files newest
    to oldest (skipping files whose time range misses the query, stopping at one that
    begins before it), verify each candidate against its record, decode the matches.

    ``files`` is the index service's list of files, which the service replaces (never
    changes in place) whenever files roll or go; the commit log's ``mapped_files`` is
    read on each call.
    """
    cdef object service
    cdef public list files
    cdef object commit_log_queue
    cdef long long cl_file_size
    cdef int max_batch
    cdef public bint closed

    def __init__(self, service, commit_log_queue, long long commitlog_file_size, int max_msgs_num_batch):
        self.service = service
        self.files = []
        self.commit_log_queue = commit_log_queue
        self.cl_file_size = commitlog_file_size
        self.max_batch = max_msgs_num_batch
        self.closed = False

    def query_message(self, str topic not None, str key not None, int max_num=32, long long begin=0, end=None):
        """Messages of ``topic`` whose key or unique key is ``key``, stored in [begin, end]
        (ms; ``end`` None: no limit), newest first, at most min(max_num, 64)."""
        cdef long long e = 9223372036854775807 if end is None else <long long>end
        cdef Py_ssize_t tl, kl, i, j, n = 0, total = 0, at
        cdef const char *t
        cdef const char *k
        cdef int32_t h
        cdef list files, cl_files, out
        cdef IndexFile f
        cdef MappedFile seg
        cdef long long fb, fe
        cdef int64_t found[64]
        cdef RecordLayout lays[64]
        cdef Py_ssize_t sizes[64]
        cdef int order[64]
        cdef int tmp
        cdef bytes page
        cdef char *dst
        cdef MessageExt m
        if self.closed:
            from pymq.errors import StoreStateError
            raise StoreStateError("the store is shut down")
        if max_num < 1:
            raise ValueError("max_num must be >= 1")
        if not key:
            return []
        if max_num > self.max_batch:
            max_num = self.max_batch
        if max_num > 64:
            max_num = 64
        t = PyUnicode_AsUTF8AndSize(topic, &tl)
        k = PyUnicode_AsUTF8AndSize(key, &kl)
        h = index_hash(t, tl, k, kl)
        files = self.files
        cl_files = self.commit_log_queue.mapped_files
        for i in range(len(files) - 1, -1, -1):
            if n >= max_num:
                break
            f = <IndexFile>files[i]
            if f.mapped_file.base == NULL:
                f._base()                     # raises: the file was closed
            fb = pymq_get_i64(f.mapped_file.base)
            fe = pymq_get_i64(f.mapped_file.base + 8)
            if (begin < fb and e > fe) or (fb <= begin <= fe) or (fb <= e <= fe):
                n = f._walk(h, max_num, begin, e, found, lays, sizes, n, True, cl_files, self.cl_file_size,
                            t, tl, k, kl)
            if fb < begin:
                break
        if n == 0:
            return []
        for i in range(n):                    # newest first: descending offset (n <= 64)
            order[i] = <int>i
            total += sizes[i]
        for i in range(1, n):
            tmp = order[i]
            j = i
            while j > 0 and found[order[j - 1]] < found[tmp]:
                order[j] = order[j - 1]
                j -= 1
            order[j] = tmp
        # one copy of the matched records (each checked in _walk, with the GIL held since:
        # no segment went away), then the messages over it
        page = PyBytes_FromStringAndSize(NULL, total)
        dst = PyBytes_AS_STRING(page)
        at = 0
        for i in range(n):
            seg = segment_for(cl_files, found[order[i]], self.cl_file_size)
            if (seg is None or seg.base == NULL
                    or found[order[i]] - seg.file_from_offset + sizes[order[i]] > seg.wrote):
                raise RuntimeError("a commit-log segment went away during a key lookup")
            memcpy(dst + at, seg.base + (found[order[i]] - seg.file_from_offset), sizes[order[i]])
            at += sizes[order[i]]
        out = PyList_New(n)
        at = 0
        for i in range(n):
            m = ext_from_page(page, at, &lays[order[i]], sizes[order[i]], None, topic)
            Py_INCREF(m)
            PyList_SET_ITEM(out, i, m)
            at += sizes[order[i]]
        return out
