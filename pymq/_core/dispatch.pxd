from libc.stdint cimport int32_t, int64_t


cdef struct DispatchRequest:
    int64_t commitlog_offset
    int64_t queue_offset
    int64_t store_timestamp
    int64_t tags_code
    int64_t prepared_transaction_offset
    int32_t msg_size
    int32_t queue_id
    int32_t sys_flag
    int32_t topic_pos          # positions relative to the record's first byte
    int32_t topic_len
    int32_t props_pos
    int32_t props_len
    int32_t keys_pos           # -1 when the property is absent
    int32_t keys_len
    int32_t uniq_pos
    int32_t uniq_len
    int32_t multi_pos          # INNER_MULTI_DISPATCH value (LMQ names), -1 when absent
    int32_t multi_len
    int32_t multi_offset_pos   # INNER_MULTI_QUEUE_OFFSET value (their queue offsets)
    int32_t multi_offset_len


cdef Py_ssize_t parse_request(const char *rec, Py_ssize_t avail, int64_t phys, DispatchRequest *out,
                              const int64_t *delay_ms, int max_delay_level) noexcept nogil


cdef class DispatchSink:
    """A consumer of dispatch requests besides the consume queues (the index)."""
    cdef int accept(self, const char *base, int64_t file_from, DispatchRequest *reqs, Py_ssize_t n) except -1
    cdef int fast_begin(self) except -1
    cdef Py_ssize_t accept_fast(self, const char *base, int64_t file_from, DispatchRequest *reqs,
                                Py_ssize_t n) noexcept nogil
    cdef void fast_end(self) noexcept
