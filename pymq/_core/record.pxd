from libc.stdint cimport int32_t, int64_t, uint32_t
from libc.string cimport memchr

from pymq._core.message cimport MessageExt
from pymq._core.mapped_file cimport MappedFile


cdef struct RecordFields:
    const char *topic
    Py_ssize_t topic_len
    const char *body
    Py_ssize_t body_len
    const char *props
    Py_ssize_t props_len
    const char *born_host          # 8 (IPv4) or 20 (IPv6) bytes: address + i32 port
    Py_ssize_t born_host_len
    const char *store_host
    Py_ssize_t store_host_len
    int32_t queue_id
    int32_t flag
    int32_t sys_flag
    int32_t reconsume_times
    int32_t body_crc
    int64_t queue_offset
    int64_t physical_offset
    int64_t born_timestamp
    int64_t store_timestamp
    int64_t prepared_transaction_offset


cdef Py_ssize_t cal_msg_length(int32_t sys_flag, Py_ssize_t body_len, Py_ssize_t topic_len,
                               Py_ssize_t props_len) noexcept nogil
cdef void write_record(char *dst, const RecordFields *f, Py_ssize_t total) noexcept nogil
cdef void write_blank(char *dst, int32_t max_blank) noexcept nogil
cdef int32_t body_crc32(const char *p, Py_ssize_t n) noexcept nogil
cdef class DecodeCache:
    cdef bytes topic_raw
    cdef str topic

cdef MessageExt decode_at(const char *buf, Py_ssize_t avail, bint check_crc, DecodeCache cache=*, str topic=*)
cdef Py_ssize_t record_size_at(const char *buf, Py_ssize_t avail) except -2
cdef bytes pack_host_cached(object host)
cdef Py_ssize_t check_record(const char *buf, Py_ssize_t avail, bint check_crc) noexcept nogil
cdef Py_ssize_t record_at(const char *base, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t file_size,
                          int64_t file_from, bint check_crc) noexcept nogil
cdef Py_ssize_t next_record_at(const char *base, Py_ssize_t start, Py_ssize_t end, Py_ssize_t file_size,
                               int64_t file_from) noexcept nogil


cdef struct RecordLayout:
    int32_t sys_flag
    int64_t store_timestamp
    Py_ssize_t body_pos
    Py_ssize_t body_len
    Py_ssize_t topic_pos
    Py_ssize_t topic_len
    Py_ssize_t props_pos
    Py_ssize_t props_len
    bint prop_crc                  # the properties end with the record's CRC (``__CRC32#``)


cdef Py_ssize_t record_layout(const char *rec, Py_ssize_t avail, RecordLayout *out) noexcept nogil
cdef bint record_crc_ok(const char *rec, const RecordLayout *lay, Py_ssize_t total) noexcept nogil
cdef void write_prop_crc(char *rec, Py_ssize_t total) noexcept nogil
cdef enum:
    PROP_CRC_LEN = 20              # "__CRC32#" \x01 ten digits \x02


cdef inline Py_ssize_t visible_props_len(const RecordLayout *lay) noexcept nogil:
    """The length of the record's properties as a message shows them: without the record's
    own CRC entry and the separator before it."""
    if not lay.prop_crc:
        return lay.props_len
    return lay.props_len - PROP_CRC_LEN - (1 if lay.props_len > PROP_CRC_LEN else 0)
cdef MessageExt ext_from_page(bytes page, Py_ssize_t rec_pos, const RecordLayout *lay, Py_ssize_t total,
                              DecodeCache cache, str topic=*)


cdef inline bint next_property(const char *p, Py_ssize_t s, Py_ssize_t end, Py_ssize_t *k,
                               Py_ssize_t *e) noexcept nogil:
    """The properties entry starting at ``s``: ``e`` = its end (the next \\x02 or ``end``),
    ``k`` = its first \\x01. True when name and value are both non-empty (RocketMQ
    4.9.7's ``string2messageProperties`` rule); the next entry starts at ``e + 1``.
    Reads only ``p[s:end]`` (``memchr`` finds the separators, many bytes a step)."""
    cdef const char *q
    cdef Py_ssize_t i
    if s >= end:
        e[0] = end
        k[0] = end
        return False
    q = <const char *>memchr(p + s, 2, <size_t>(end - s))
    i = end if q == NULL else q - p
    e[0] = i
    q = <const char *>memchr(p + s, 1, <size_t>(i - s))
    i = e[0] if q == NULL else q - p
    k[0] = i
    return s < i < e[0] - 1


cdef inline Py_ssize_t key_word_end(const char *p, Py_ssize_t w, Py_ssize_t end) noexcept nogil:
    """Where the KEYS word starting at ``w`` ends: the next space in ``p[w:end]``, or ``end``.
    The next word starts after it; an empty word (two spaces) ends where it starts."""
    while w < end and p[w] != 32:
        w += 1
    return w
