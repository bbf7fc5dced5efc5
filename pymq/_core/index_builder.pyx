# cython: language_level=3
"""IndexBuilder: the index step of the dispatcher (``CommitLogDispatcherBuildIndex``).

For every dispatched record but rolled-back transactions, an entry under ``topic#UNIQ_KEY``
and one under ``topic#word`` for each space-separated word of KEYS goes into the current
index file (layout in ``index_file``). The common case runs without the GIL, as a
``DispatchSink``'s ``accept_fast``; a record that needs a new file goes to ``accept``,
which rolls it (Python) and writes it with the GIL.
"""

from libc.stdint cimport int32_t, int64_t, uint32_t
from libc.string cimport memchr, memcmp, memcpy

from pymq._core.clayout cimport TRANSACTION_ROLLBACK_TYPE, TRANSACTION_TYPE_MASK
from pymq._core.dispatch cimport DispatchRequest, DispatchSink
from pymq._core.hton cimport pymq_get_i32, pymq_get_i64
from pymq._core.index_file cimport (IndexFile, _abs_hash, _link_entry, _put_header, index_hash,
                                    pymq_java_hash_utf8_from)
from pymq._core.mapped_file cimport MappedFile
from pymq._core.record cimport key_word_end

from pymq.errors import DiskFullError

cdef enum:
    FAST_KEYS = 64          # keys of one record the GIL-free path hashes ahead; more: accept()


cdef class IndexBuilder(DispatchSink):
    """Builds the index from dispatched records (``CommitLogDispatcherBuildIndex``).

    Every record but rolled-back transactions is indexed under ``topic#UNIQ_KEY`` and
    ``topic#word`` for each space-separated word of KEYS, unless it is older than the
    current file's end offset (already indexed). The record at that offset (a replay at
    open meets it again) gets only the entries it lacks: ``boundary_phy`` and
    ``boundary_hashes``, set at open, say which it has (a full file may have taken only
    some of its keys). ``roll()`` (Python) returns the file to
    continue in when the current one is full, or None when there is no room for one: the
    builder then disables itself and keeps in ``paused_at`` the offset of the first record
    it could not index. The same happens when the disk has no room for the blocks of an
    entry (index files are sparse): ``on_full(error)`` is told, and the keys the record
    already has become the boundary, so the replay after ``resume`` adds only the others.

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
    cdef public long long boundary_phy   # the newest record indexed at open (-1: none) ...
    cdef public object boundary_hashes   # ... and the key hashes it has entries for (a set)
    cdef MappedFile pinned          # the current file's mapping, pinned for a GIL-free stretch
    cdef char last_topic[128]
    cdef Py_ssize_t last_topic_len
    cdef uint32_t last_topic_hash   # hash of "topic#"
    cdef public object on_full      # on_full(DiskFullError): blocks for an entry could not be had

    def __init__(self, IndexFile current, roll):
        self.current = current
        self.roll = roll
        self.enabled = True
        self.paused_at = -1
        self.boundary_phy = -1
        self.boundary_hashes = None
        self.last_topic_len = -1

    def set_current(self, IndexFile f):
        self.current = f

    cdef int _put(self, int32_t h, int64_t phy, int64_t ts) except -1:
        cdef object nxt
        if not self.enabled:
            return 0                        # paused on an earlier key of this record
        if phy == self.boundary_phy and self.boundary_hashes is not None and h in self.boundary_hashes:
            return 0                        # a replay met the newest record indexed before the open
        try:
            added = self.current is not None and self.current.put_hashed(h, phy, ts) == 1
        except DiskFullError as e:
            # no blocks for the entry: pause here; what the record has is the boundary
            self.enabled = False
            self.paused_at = phy
            self.boundary_phy = phy
            self.boundary_hashes = set(self.current.hashes_at_end(phy))
            if self.on_full is not None:
                self.on_full(e)
            return 0
        if not added:
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
                    we = key_word_end(rec, w, end)
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
        cdef Py_ssize_t i, k, nh, w, we, end
        cdef DispatchRequest *r
        cdef const char *rec
        cdef const char *sp
        cdef char *ibase
        cdef int32_t count, first, new_slots
        cdef int32_t hashes[FAST_KEYS]
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
            if r.commitlog_offset == self.boundary_phy:
                return i                    # its keys may be there already: accept() sorts it out
            rec = base + (r.commitlog_offset - file_from)
            # the record's key hashes first: its entries are linked all or none
            prefix = self._prefix_hash(rec + r.topic_pos, r.topic_len)
            nh = 0
            if r.uniq_pos >= 0:
                hashes[0] = _abs_hash(pymq_java_hash_utf8_from(prefix, rec + r.uniq_pos, r.uniq_len))
                nh = 1
            if r.keys_pos >= 0:
                w = r.keys_pos
                end = r.keys_pos + r.keys_len
                while w < end:
                    sp = <const char *>memchr(rec + w, 32, <size_t>(end - w))
                    we = end if sp == NULL else sp - rec
                    if we > w:
                        if nh == FAST_KEYS:
                            return i        # a record of very many keys: accept()
                        hashes[nh] = _abs_hash(pymq_java_hash_utf8_from(prefix, rec + w, we - w))
                        nh += 1
                    w = we + 1
            if nh == 0:
                continue
            count = pymq_get_i32(ibase + 36)
            if count <= 0:
                count = 1
            if count + nh > index_num:
                return i                    # a new file: accept() rolls
            for k in range(nh):
                if self.current.reserve_link(count + <int32_t>k, hashes[k]) != 0:
                    return i                # no blocks: accept() pauses, with the GIL
            first = count
            new_slots = 0
            for k in range(nh):
                new_slots += _link_entry(ibase, entries_pos, slots, count, hashes[k],
                                         r.commitlog_offset, r.store_timestamp)
                count += 1
            _put_header(ibase, count, new_slots, r.commitlog_offset, r.store_timestamp)
            self.indexed += count - first
        return n
