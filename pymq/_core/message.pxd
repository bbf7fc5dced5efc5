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


cdef enum:
    # what a MessageExt still has to decode from the record copy it keeps (``_lazy``)
    LAZY_BODY = 1
    LAZY_PROPS = 2
    LAZY_HOSTS = 4
    LAZY_ALL = 7
    LAZY_BORN_V6 = 8           # host field sizes, as the record's sysflag said
    LAZY_STORE_V6 = 16


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
    # MessageExt's state. It lives here so that both classes have one size and share
    # Message's freelist (a MessageExt is made for every message read); a Message
    # leaves it zero. ``_page`` holds the record bytes (alone, or with the other records
    # of one pull) that body, properties and hosts are decoded from on first access.
    cdef int _lazy
    cdef int _store_size
    cdef int _body_crc
    cdef long long _queue_offset
    cdef long long _commitlog_offset
    cdef long long _store_timestamp
    cdef object _store_host
    cdef bytes _page
    cdef Py_ssize_t _rec            # the record's first byte in _page
    cdef int _body_off              # field offsets and lengths within the record
    cdef int _body_len
    cdef int _props_off
    cdef int _props_len

    cdef int _load(self, int what) except -1
    cdef int write_properties(self, PropsBuf *out) except -1
    cdef int write_properties_except(self, PropsBuf *out, tuple skip) except -1


cdef class MessageExt(Message):
    pass


cpdef dict decode_properties(object raw)
cpdef bytes encode_properties(dict properties)
cpdef str format_host(bytes raw)
