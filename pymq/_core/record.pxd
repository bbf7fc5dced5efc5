from libc.stdint cimport int8_t, int32_t, int64_t, uint32_t
from libc.string cimport memchr

from pymq._core.clayout cimport (BLANK_MAGIC_CODE, BORNHOST_V6_FLAG, IPV4_HOST_LENGTH, IPV6_HOST_LENGTH,
                                 MESSAGE_MAGIC_CODE, STOREHOSTADDRESS_V6_FLAG)
from pymq._core.hton cimport pymq_get_i16, pymq_get_i32, pymq_get_i64

cdef extern from "pymq_crc_entry.h" nogil:
    bint pymq_is_crc_head(const char *p)

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


cdef bint record_crc_ok(const char *rec, const RecordLayout *lay, Py_ssize_t total) noexcept nogil
cdef void write_prop_crc(char *rec, Py_ssize_t total) noexcept nogil
cdef enum:
    PROP_CRC_LEN = 20              # "__CRC32#" \x01 ten digits \x02


cdef inline Py_ssize_t record_layout(const char *rec, Py_ssize_t avail, RecordLayout *out) noexcept nogil:
    """Validate the record at ``rec`` as ``checkMessageAndReturnSize`` does (magic, sizes,
    every length inside the record, total == calMsgLength) and say where its variable
    fields are. Returns its size (> 0), 0 at an end-of-file blank, -1 when the bytes are
    not a whole, consistent record. Reads nothing beyond ``avail``.

    Inline (here, not in record.pyx): a pull runs it once per record, and the reader's scan
    keeps its fields in registers instead of calling across modules."""
    cdef int32_t total, magic, sys_flag
    cdef int64_t queue_offset
    cdef Py_ssize_t pos
    if avail < 8:
        return -1
    total = pymq_get_i32(rec)
    magic = pymq_get_i32(rec + 4)
    if magic != MESSAGE_MAGIC_CODE:
        if magic == BLANK_MAGIC_CODE:
            return 0 if 8 <= total <= avail else -1
        return -1
    if total < 91 or total > avail:
        return -1
    # a queue id or queue offset no writer produces is damage (they name consume-queue files;
    # 2**50 messages in one queue is taken as the most a real one holds)
    queue_offset = pymq_get_i64(rec + 20)
    if pymq_get_i32(rec + 12) < 0 or queue_offset < 0 or queue_offset > (<int64_t>1 << 50):
        return -1
    sys_flag = pymq_get_i32(rec + 36)
    out.sys_flag = sys_flag
    pos = 48 + (IPV6_HOST_LENGTH if sys_flag & BORNHOST_V6_FLAG else IPV4_HOST_LENGTH)
    out.store_timestamp = pymq_get_i64(rec + pos)
    pos += 8 + (IPV6_HOST_LENGTH if sys_flag & STOREHOSTADDRESS_V6_FLAG else IPV4_HOST_LENGTH) + 12
    if pos + 4 > total:
        return -1
    out.body_len = pymq_get_i32(rec + pos)
    out.body_pos = pos + 4
    if out.body_len < 0 or out.body_pos + out.body_len + 1 > total:
        return -1
    pos = out.body_pos + out.body_len
    out.topic_len = <int8_t>rec[pos]
    out.topic_pos = pos + 1
    if out.topic_len < 0 or out.topic_pos + out.topic_len + 2 > total:
        return -1
    pos = out.topic_pos + out.topic_len
    out.props_len = pymq_get_i16(rec + pos)
    out.props_pos = pos + 2
    # the fields tile the record exactly: calMsgLength(sysFlag, body, topic, props) == total
    if out.props_len < 0 or out.props_pos + out.props_len != total:
        return -1
    out.prop_crc = (out.props_len >= PROP_CRC_LEN and rec[total - 1] == 2
                    and pymq_is_crc_head(rec + total - PROP_CRC_LEN)
                    and (out.props_len == PROP_CRC_LEN or rec[total - PROP_CRC_LEN - 1] == 2))
    return total


cdef inline Py_ssize_t record_layout_like(const char *rec, Py_ssize_t avail, RecordLayout *out,
                                          const RecordLayout *like, Py_ssize_t like_total) noexcept nogil:
    """``record_layout``, with the same result for every input, sooner for a record shaped
    as one laid out before (``like``, of ``like_total`` bytes; NULL: none): a batch's
    records mostly are. Where ``record_layout`` finds each length at the end of the field
    before it (four loads, each waiting on the last), this reads the four lengths where
    ``like`` has them, at once; when they are ``like``'s (with its size, magic and flags),
    ``record_layout`` would walk the same positions and pass the same checks, so only the
    queue fields, the store time and the CRC entry are read and checked anew."""
    cdef int64_t queue_offset
    if (like == NULL or avail < like_total or pymq_get_i32(rec) != like_total
            or pymq_get_i32(rec + 4) != MESSAGE_MAGIC_CODE or pymq_get_i32(rec + 36) != like.sys_flag
            or pymq_get_i32(rec + like.body_pos - 4) != like.body_len
            or <int8_t>rec[like.topic_pos - 1] != like.topic_len
            or pymq_get_i16(rec + like.props_pos - 2) != like.props_len):
        return record_layout(rec, avail, out)
    queue_offset = pymq_get_i64(rec + 20)
    if pymq_get_i32(rec + 12) < 0 or queue_offset < 0 or queue_offset > (<int64_t>1 << 50):
        return -1
    out[0] = like[0]
    out.store_timestamp = pymq_get_i64(rec + 48 + (IPV6_HOST_LENGTH if like.sys_flag & BORNHOST_V6_FLAG
                                                     else IPV4_HOST_LENGTH))
    out.prop_crc = (out.props_len >= PROP_CRC_LEN and rec[like_total - 1] == 2
                    and pymq_is_crc_head(rec + like_total - PROP_CRC_LEN)
                    and (out.props_len == PROP_CRC_LEN or rec[like_total - PROP_CRC_LEN - 1] == 2))
    return like_total


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
