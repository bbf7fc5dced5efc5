from libc.stdint cimport int32_t, int64_t

cdef struct PropsBuf:
    char *data          # points at inline_ or at a heap block
    Py_ssize_t length
    Py_ssize_t capacity
    Py_ssize_t start    # where the current message's properties begin (batches share a buffer)
    char inline_[256]


cdef void props_init(PropsBuf *b) noexcept nogil
cdef void props_free(PropsBuf *b) noexcept nogil
cdef int props_append(PropsBuf *b, const char *s, Py_ssize_t n) except -1
cdef int props_reserve(PropsBuf *b, Py_ssize_t extra) except -1
cdef int props_add_str(PropsBuf *b, str name, str value) except -1
cdef bint props_has_name(PropsBuf *b, const char *name, Py_ssize_t n) noexcept


cdef class Message:
    cdef str _topic
    cdef bytes _body
    cdef object _tags
    cdef object _keys
    cdef object _properties
    cdef public int queue_id
    cdef public int flag
    cdef public int delay_level
    cdef public object deliver_time_ms
    cdef public long long born_timestamp
    cdef object _born_host
    cdef public int sys_flag
    cdef public int reconsume_times
    cdef public long long prepared_transaction_offset
    cdef bytes _props_raw          # MessageExt: undecoded properties, None once decoded

    cdef int _decode_props(self) except -1
    cdef int write_properties(self, PropsBuf *out) except -1
    cdef int write_properties_except(self, PropsBuf *out, tuple skip) except -1


cdef class MessageExt(Message):
    cdef public long long queue_offset
    cdef public long long commitlog_offset
    cdef public int store_size
    cdef public long long store_timestamp
    cdef public int body_crc
    cdef object _store_host


cpdef dict decode_properties(object raw)
cpdef bytes encode_properties(dict properties)
cpdef str format_host(bytes raw)
