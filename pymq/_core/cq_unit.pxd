from libc.stdint cimport int32_t, int64_t

from pymq._core.mapped_file cimport MappedFile


cdef class CqAppender:
    cdef MappedFile cur
    cdef object queue
    cdef public object mapped_file_queue
    cdef public long long min_logic_offset
    cdef readonly long long max_physic_offset
    cdef readonly long long last_store_timestamp
    cdef Py_ssize_t file_size
    cdef public bint routed         # in the dispatcher's table of routes (written without the GIL)

    cdef int put_fast(self, int64_t offset, int32_t size, int64_t tags_code, int64_t cq_offset,
                      int64_t store_timestamp) except -1
    cdef int put_nogil(self, int64_t offset, int32_t size, int64_t tags_code, int64_t cq_offset,
                       int64_t store_timestamp) noexcept nogil


cdef int64_t pickup_store_timestamp(list files, long long file_size, int64_t offset, int32_t size) noexcept

cdef long long queue_max_offset(CqAppender app)
cdef long long lookup_by_time(CqAppender app, long long timestamp, bint upper, list commitlog_files,
                              long long commitlog_file_size) except? -2
