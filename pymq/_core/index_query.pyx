# cython: language_level=3
"""IndexQuerier: ``query_message`` over the index files (layout in ``index_file``).

Hash the key, walk the files newest to oldest (``IndexFile._walk``, which verifies each
candidate against its record), copy the matched records once, then make the messages over
the copy: one compiled call, no Python object before the result. In the newest file the
walk starts from the key's newest entry as the in-memory table of recent keys holds it
(``recent_keys``), which saves the reads of the slot and the entry; a key the table knows
to be absent skips the file.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.ref cimport Py_INCREF
from libc.stdint cimport int32_t, int64_t
from libc.string cimport memcpy

from pymq._core.hton cimport pymq_get_i32, pymq_get_i64
from pymq._core.index_file cimport IndexFile, index_hash
from pymq._core.mapped_file cimport MappedFile, segment_for
from pymq._core.message cimport MessageExt
from pymq._core.recent_keys cimport RecentKeys
from pymq._core.record cimport RecordLayout, ext_from_page, record_crc_ok

cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL


cdef class IndexQuerier:
    """``query_message`` in one compiled call: hash the key, walk the index files newest
    to oldest (skipping files whose time range misses the query, stopping at one that
    begins before it), verify each candidate against its record, decode the matches.

    A file not checked yet is checked the first time a query reaches it
    (``service.check_file``: the file's structure, once); a damaged one is rebuilt from
    the log by the service before the query goes on, so damage never hides a key.

    ``files`` is the index service's list of files, which the service replaces (never
    changes in place) whenever files roll or go; the commit log's ``mapped_files`` is
    read on each call.

    ``recent`` is the table of the newest file's key hashes (``RecentKeys``, filled by
    the queries themselves; ``recent_keys`` ways, 0: none): a query that does not begin
    after the newest file's first store time starts its walk there from the key's newest
    entry (or skips the file when the table knows the key is absent).
    """
    cdef object service
    cdef public list files
    cdef object commit_log_queue
    cdef list cl_cache                  # its mapped_files as last read (see query_message)
    cdef long long cl_file_size
    cdef int max_batch
    cdef public bint closed
    cdef public bint check_crc          # a hit whose body fails its CRC is reported, not returned
    cdef public object damage           # the DamageLedger told about it
    cdef readonly RecentKeys recent     # None: every query walks from the slot

    def __init__(self, service, commit_log_queue, long long commitlog_file_size, int max_msgs_num_batch,
                 size_t recent_keys=0):
        self.recent = RecentKeys(recent_keys) if recent_keys > 0 else None
        self.service = service
        self.files = []
        self.commit_log_queue = commit_log_queue
        self.cl_file_size = commitlog_file_size
        self.max_batch = max_msgs_num_batch
        self.closed = False
        self.check_crc = True
        self.damage = None

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
        cdef bint good[64]
        cdef Py_ssize_t bad
        cdef int tmp, known
        cdef int64_t first_phy
        cdef int32_t first_prev
        cdef RecentKeys recent = self.recent
        cdef bint fresh
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
        if recent is not None:
            recent.prefetch(h)
        files = self.files
        cl_files = self.cl_cache
        fresh = False
        for i in range(len(files) - 1, -1, -1):
            if n >= max_num:
                break
            f = <IndexFile>files[i]
            if f.mapped_file.base == NULL:
                f._base()                     # raises: the file was closed
            if not f.verified and self.service is not None and not self.service.check_file(f):
                # the file was damaged and the service rebuilt it from the log: start over
                return self.query_message(topic, key, max_num, begin, end)
            fb = pymq_get_i64(f.mapped_file.base)
            fe = pymq_get_i64(f.mapped_file.base + 8)
            if (begin < fb and e > fe) or (fb <= begin <= fe) or (fb <= e <= fe):
                known = -1
                if recent is not None and i == len(files) - 1 and begin <= fb:
                    recent.catch_up(f)
                    known = recent.find(h, &first_phy, &first_prev)
                if known > 0:
                    # the commit log's list of segments as a query last read it will do when it
                    # holds the newest entry's segment: every older live one is in it too
                    seg = segment_for(cl_files, first_phy, self.cl_file_size) if cl_files is not None else None
                    if seg is None or seg.base == NULL:
                        cl_files = self.cl_cache = self.commit_log_queue.mapped_files
                        fresh = True
                    n = f._walk_from(h, first_phy, first_prev, max_num, begin, e, found, lays, sizes, n, cl_files,
                                     self.cl_file_size, t, tl, k, kl)
                elif known < 0:
                    if not fresh:
                        cl_files = self.cl_cache = self.commit_log_queue.mapped_files
                        fresh = True
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
        at = 0
        bad = 0
        for i in range(n):
            good[i] = not self.check_crc or record_crc_ok(dst + at, &lays[order[i]], sizes[order[i]])
            if not good[i]:
                bad += 1
                if self.damage is not None:
                    self.damage.crc_error(found[order[i]], topic)
            at += sizes[order[i]]
        out = PyList_New(n - bad)             # made at its final length
        at = 0
        j = 0
        for i in range(n):
            if good[i]:
                m = ext_from_page(page, at, &lays[order[i]], sizes[order[i]], None, topic)
                Py_INCREF(m)
                PyList_SET_ITEM(out, j, m)
                j += 1
            at += sizes[order[i]]
        return out
