from libc.stdint cimport int64_t

from pymq._core.mapped_file cimport MappedFile
from pymq._core.record cimport RecordLayout


cdef struct Picked:
    # a record a pull picked: where it lies in its mapped segment, and its checked layout
    const char *src
    Py_ssize_t size
    RecordLayout lay
    int64_t queue_offset
    int64_t tags_code               # the consume-queue entry's


cdef Picked *rows_alloc(Py_ssize_t cap) except NULL
cdef void rows_free(Picked *rows, Py_ssize_t cap) noexcept


cdef class SegmentHold:
    cdef MappedFile first           # the MappedFile the first rows lie in, pinned (None once unpinned)
    cdef list more                  # the others, pinned too (None: none, or unpinned)
    cdef Picked *rows               # owned (``rows_alloc``)
    cdef Py_ssize_t cap             # its capacity
    cdef Py_ssize_t count
    cdef Py_ssize_t exports         # buffers exported from the bodies, not released yet
    cdef bint released              # the batch let go: unpin once no export is left

    cdef void _unpin(self) noexcept
    cdef int unpin_if_done(self) except -1


cdef class BodyView:
    cdef SegmentHold hold
    cdef const char *ptr
    cdef Py_ssize_t size

    cdef int _check(self) except -1


cdef class Bodies:
    cdef SegmentHold hold           # None for an empty batch

    cdef int _check(self) except -1


cdef class BodiesIter:
    cdef SegmentHold hold
    cdef Py_ssize_t i, count
    cdef BodyView ring0, ring1      # the last two views yielded (even, odd positions)


cdef class ReadBatch:
    cdef readonly object status
    cdef readonly long long next_begin_offset
    cdef readonly long long min_offset
    cdef readonly long long max_offset
    cdef readonly str topic
    cdef readonly int queue_id
    cdef readonly int damaged
    cdef SegmentHold hold           # None for an empty batch
    cdef Py_ssize_t count
    cdef Bodies _bodies
    cdef bint _released

    cdef int take(self, Picked *rows, Py_ssize_t cap, Py_ssize_t count, MappedFile first, list more) except -1
    cdef int _release(self) except -1
    cdef int _check(self) except -1
    cdef Picked *_row(self, Py_ssize_t i) except NULL
    cdef object _column(self, int which)
