# cython: language_level=3
"""The CommitLog record, message format v1: encoder, decoder, CRC, Java hash, message ids.

Record layout (big-endian; offsets for an IPv4 born host and IPv4 store host, a v6
address takes 20 bytes instead of 8 and shifts every later field)::

    off  size  field
      0     4  TOTALSIZE                   whole record, this field included
      4     4  MAGICCODE                   0xDAA320A7 (v1)
      8     4  BODYCRC                     crc32(body) & 0x7FFFFFFF
     12     4  QUEUEID
     16     4  FLAG
     20     8  QUEUEOFFSET                 index in the consume queue
     28     8  PHYSICALOFFSET              commit-log offset of this record
     36     4  SYSFLAG                     0x10 born host v6, 0x20 store host v6, 0xC tx type
     40     8  BORNTIMESTAMP               ms
     48   8|20 BORNHOST                    address (4|16) + port (i32)
     56     8  STORETIMESTAMP              ms
     64   8|20 STOREHOSTADDRESS
     72     4  RECONSUMETIMES
     76     8  PREPARED TRANSACTION OFFSET
     84     4  BODYLENGTH, then the body
    88+b    1  TOPICLENGTH (signed, <= 127), then the topic (UTF-8)
       +    2  PROPERTIESLENGTH (signed, <= 32767), then the properties string (UTF-8)

The record's own checksum (RocketMQ 5's ``enabledAppendPropCRC``), when written: the
properties end with one more entry, 20 bytes, the last of the record::

    ... \x02 | "__CRC32#" | \x01 | d0 d1 ... d9 | \x02
               crc32(record[0 : TOTALSIZE - 20]) & 0x7FFFFFFF in decimal, least
               significant digit first (d0), padded with '0'

It covers every field (queue id, queue offset, topic, properties), where BODYCRC covers
the body only. A record that carries it is accepted by it; one without (RocketMQ 4's,
older pymq stores) by its BODYCRC. Decoded messages do not show it among their properties.

End of a segment (written when a record does not fit with 8 bytes to spare)::

      0     4  bytes left in the file (maxBlank)
      4     4  BLANK_MAGIC_CODE 0xCBD43194

The encoder writes into a caller-provided raw buffer (an mmap'd segment) whose capacity
the caller has checked. The decoder checks every length against the buffer before it
reads, and raises ``CorruptRecordError`` instead of reading past it.
"""

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memchr, memcmp, memcpy
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeUTF8

from pymq._core.clayout cimport (
    BLANK_MAGIC_CODE, BORNHOST_V6_FLAG, IPV4_HOST_LENGTH, IPV6_HOST_LENGTH,
    MAX_PROPERTIES_LENGTH, MAX_TOPIC_LENGTH, MESSAGE_MAGIC_CODE, STOREHOSTADDRESS_V6_FLAG,
)
from pymq._core.hton cimport pymq_get_i16, pymq_get_i32, pymq_get_i64, pymq_put_i16, pymq_put_i32, pymq_put_i64
from pymq._core.message cimport (LAZY_BODY, LAZY_BORN_V6, LAZY_HOSTS, LAZY_PROPS, LAZY_STORE_V6,
                                 MessageExt)
from pymq._core.mapped_file cimport MappedFile

import socket

from pymq.errors import CorruptRecordError


cdef extern from "pymq_crc32.h" nogil:
    uint32_t pymq_crc32(uint32_t crc, const unsigned char *buf, size_t len)
    const char *pymq_crc32_impl()

cdef extern from "pymq_crc_entry.h" nogil:
    int64_t pymq_crc_digits(const char *p)
    void pymq_crc_put_digits(char *p, uint32_t v)

cdef extern from "pymq_javahash.h" nogil:
    uint32_t pymq_java_hash_cp(uint32_t h, uint32_t cp)
    int32_t pymq_java_hash_utf8(const char *buf, size_t n)

cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL
    Py_ssize_t PyUnicode_GET_LENGTH(object o)
    int PyUnicode_KIND(object o)
    void *PyUnicode_DATA(object o)
    Py_UCS4 PyUnicode_READ(int kind, void *data, Py_ssize_t index)



# exported for tests (test_layout compares them with layout.py)
MESSAGE_MAGIC_CODE_C = MESSAGE_MAGIC_CODE
BLANK_MAGIC_CODE_C = BLANK_MAGIC_CODE


# -- sizes and checksums -----------------------------------------------------------------------

cdef Py_ssize_t cal_msg_length(int32_t sys_flag, Py_ssize_t body_len, Py_ssize_t topic_len,
                               Py_ssize_t props_len) noexcept nogil:
    cdef Py_ssize_t born = IPV6_HOST_LENGTH if sys_flag & BORNHOST_V6_FLAG else IPV4_HOST_LENGTH
    cdef Py_ssize_t store = IPV6_HOST_LENGTH if sys_flag & STOREHOSTADDRESS_V6_FLAG else IPV4_HOST_LENGTH
    if body_len < 0:
        body_len = 0
    if props_len < 0:
        props_len = 0
    return (4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + born + 8 + store + 4 + 8
            + 4 + body_len + 1 + topic_len + 2 + props_len)


cdef const char *PROP_CRC_HEAD = b"__CRC32#\x01"


cdef bint record_crc_ok(const char *rec, const RecordLayout *lay, Py_ssize_t total) noexcept nogil:
    """The record's checksum holds: its own CRC when it carries one (every field), else
    its BODYCRC (the body)."""
    cdef int64_t v
    if lay.prop_crc:
        v = pymq_crc_digits(rec + total - 11)           # ten digits, least significant first
        return v >= 0 and v == <int64_t>(
            pymq_crc32(0, <const unsigned char *>rec, <size_t>(total - PROP_CRC_LEN)) & 0x7FFFFFFFu)
    return lay.body_len <= 0 or body_crc32(rec + lay.body_pos, lay.body_len) == pymq_get_i32(rec + 8)


cdef void write_prop_crc(char *rec, Py_ssize_t total) noexcept nogil:
    """Fill in the record's checksum: the record at ``rec`` is written whole, its last 20
    bytes the ``__CRC32#`` entry (whose digits this writes)."""
    cdef uint32_t crc = pymq_crc32(0, <const unsigned char *>rec, <size_t>(total - PROP_CRC_LEN)) & 0x7FFFFFFFu
    memcpy(rec + total - PROP_CRC_LEN, PROP_CRC_HEAD, 9)
    pymq_crc_put_digits(rec + total - 11, crc)
    rec[total - 1] = 2


cdef int32_t body_crc32(const char *p, Py_ssize_t n) noexcept nogil:
    if n <= 0:
        return 0
    return <int32_t>(pymq_crc32(0, <const unsigned char *>p, <size_t>n) & 0x7FFFFFFFu)


def body_crc(data) -> int:
    """RocketMQ's ``UtilAll.crc32``: CRC-32 of ``data`` masked with ``0x7FFFFFFF``."""
    cdef const unsigned char[::1] view = memoryview(data).cast("B")
    if view.shape[0] == 0:
        return 0
    return body_crc32(<const char *>&view[0], view.shape[0])


def crc32(data, unsigned int value=0) -> int:
    """Unmasked CRC-32, zlib-compatible (``zlib.crc32(data, value)``)."""
    cdef const unsigned char[::1] view = memoryview(data).cast("B")
    if view.shape[0] == 0:
        return value
    return pymq_crc32(value, &view[0], view.shape[0])


def crc32_impl() -> str:
    """Which CRC-32 implementation this CPU runs (e.g. ``pclmulqdq``)."""
    return pymq_crc32_impl().decode()


# -- Java String.hashCode --------------------------------------------------------------------

cpdef int java_hash_code(str s):
    """Java's ``String.hashCode`` (UTF-16 units, int32 wrap-around)."""
    cdef uint32_t h = 0
    cdef Py_ssize_t i, n = PyUnicode_GET_LENGTH(s)
    cdef int kind = PyUnicode_KIND(s)
    cdef void *data = PyUnicode_DATA(s)
    for i in range(n):
        h = pymq_java_hash_cp(h, PyUnicode_READ(kind, data, i))
    return <int32_t>h


def java_hash_code_utf8(data) -> int:
    """``String.hashCode`` of UTF-8 bytes as Java would decode them."""
    cdef const unsigned char[::1] view = memoryview(data).cast("B")
    if view.shape[0] == 0:
        return 0
    return pymq_java_hash_utf8(<const char *>&view[0], view.shape[0])


def index_key_hash(str key) -> int:
    """``IndexFile.indexKeyHashMethod``: ``abs(hashCode)``, 0 for ``Integer.MIN_VALUE``."""
    cdef int32_t h = java_hash_code(key)
    if h == -2147483648:
        return 0
    return -h if h < 0 else h


# -- hosts and message ids ------------------------------------------------------------------

cdef dict _host_cache = {}


def pack_host(str host) -> bytes:
    """``"ip:port"`` or ``"[ipv6]:port"`` -> the on-disk 8- or 20-byte host field.

    Raises ``ValueError`` for anything else."""
    host = host.strip()
    try:
        if host.startswith("["):
            addr, sep, port = host[1:].partition("]:")
            if not sep:
                raise ValueError("expected [ipv6]:port")
            raw = socket.inet_pton(socket.AF_INET6, addr)
        else:
            addr, sep, port = host.rpartition(":")
            if not sep:
                raise ValueError("expected ip:port")
            try:
                raw = socket.inet_pton(socket.AF_INET, addr)
            except OSError:
                raw = socket.inet_pton(socket.AF_INET6, addr)
        p = int(port)
    except (OSError, ValueError) as e:
        raise ValueError(f"bad host {host!r}: {e}") from None
    if not 0 <= p <= 65535:
        raise ValueError(f"bad port in {host!r}")
    return raw + p.to_bytes(4, "big")


cdef bytes pack_host_cached(object host):
    cdef object raw = _host_cache.get(host)
    if raw is None:
        if not isinstance(host, str):
            raise TypeError("a host is 'ip:port' or '[ipv6]:port'")
        raw = pack_host(host)
        if len(_host_cache) < 4096:
            _host_cache[host] = raw
    return <bytes>raw


def create_message_id(store_host, long long commitlog_offset) -> str:
    """``MessageDecoder.createMessageId``: uppercase hex of host ip, port and offset."""
    raw = store_host if isinstance(store_host, bytes) else pack_host_cached(store_host)
    return (raw + commitlog_offset.to_bytes(8, "big", signed=True)).hex().upper()


def decode_message_id(str msg_id):
    """-> ``("ip:port", commitlog_offset)``; 32 hex chars are IPv4, others IPv6."""
    from pymq._core.message import format_host
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise ValueError(f"not a message id: {msg_id!r}") from None
    if len(raw) not in (16, 28):
        raise ValueError(f"not a message id: {msg_id!r}")
    return format_host(raw[:-8]), int.from_bytes(raw[-8:], "big", signed=True)


# -- encoder ---------------------------------------------------------------------------------

cdef void write_record(char *dst, const RecordFields *f, Py_ssize_t total) noexcept nogil:
    cdef Py_ssize_t pos
    pymq_put_i32(dst, <int32_t>total)
    pymq_put_i32(dst + 4, MESSAGE_MAGIC_CODE)
    pymq_put_i32(dst + 8, f.body_crc)
    pymq_put_i32(dst + 12, f.queue_id)
    pymq_put_i32(dst + 16, f.flag)
    pymq_put_i64(dst + 20, f.queue_offset)
    pymq_put_i64(dst + 28, f.physical_offset)
    pymq_put_i32(dst + 36, f.sys_flag)
    pymq_put_i64(dst + 40, f.born_timestamp)
    memcpy(dst + 48, f.born_host, f.born_host_len)
    pos = 48 + f.born_host_len
    pymq_put_i64(dst + pos, f.store_timestamp)
    pos += 8
    memcpy(dst + pos, f.store_host, f.store_host_len)
    pos += f.store_host_len
    pymq_put_i32(dst + pos, f.reconsume_times)
    pymq_put_i64(dst + pos + 4, f.prepared_transaction_offset)
    pymq_put_i32(dst + pos + 12, <int32_t>f.body_len)
    pos += 16
    if f.body_len > 0:
        memcpy(dst + pos, f.body, f.body_len)
        pos += f.body_len
    dst[pos] = <char>f.topic_len
    memcpy(dst + pos + 1, f.topic, f.topic_len)
    pos += 1 + f.topic_len
    pymq_put_i16(dst + pos, <int16_t>f.props_len)
    if f.props_len > 0:
        memcpy(dst + pos + 2, f.props, f.props_len)


cdef void write_blank(char *dst, int32_t max_blank) noexcept nogil:
    pymq_put_i32(dst, max_blank)
    pymq_put_i32(dst + 4, BLANK_MAGIC_CODE)


def encode_message(topic, body, properties=b"", *, int queue_id=0, int flag=0,
                   long long queue_offset=0, long long physical_offset=0, int sys_flag=0,
                   long long born_timestamp=0, born_host="127.0.0.1:0",
                   long long store_timestamp=0, store_host="127.0.0.1:10911",
                   int reconsume_times=0, long long prepared_transaction_offset=0,
                   body_crc=None) -> bytes:
    """Encode one v1 record to ``bytes`` (tools and tests; the store writes into segments).

    ``topic`` and ``properties`` are ``str`` or UTF-8 ``bytes``. The v6 sysflag bits are
    set from the host fields. Raises ``ValueError`` for fields that do not fit v1.
    """
    cdef RecordFields f
    cdef bytes t = topic.encode() if isinstance(topic, str) else bytes(topic)
    cdef bytes b = bytes(body)
    cdef bytes p = properties.encode() if isinstance(properties, str) else bytes(properties)
    cdef bytes bh = born_host if isinstance(born_host, bytes) else pack_host_cached(born_host)
    cdef bytes sh = store_host if isinstance(store_host, bytes) else pack_host_cached(store_host)
    if len(t) > MAX_TOPIC_LENGTH:
        raise ValueError("v1 topics are at most 127 bytes")
    if len(p) > MAX_PROPERTIES_LENGTH:
        raise ValueError("properties are at most 32767 bytes")
    if len(bh) not in (8, 20) or len(sh) not in (8, 20):
        raise ValueError("host fields are 8 or 20 bytes")
    sys_flag &= ~(BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG)
    if len(bh) == 20:
        sys_flag |= BORNHOST_V6_FLAG
    if len(sh) == 20:
        sys_flag |= STOREHOSTADDRESS_V6_FLAG
    f.topic = PyBytes_AS_STRING(t); f.topic_len = len(t)
    f.body = PyBytes_AS_STRING(b); f.body_len = len(b)
    f.props = PyBytes_AS_STRING(p); f.props_len = len(p)
    f.born_host = PyBytes_AS_STRING(bh); f.born_host_len = len(bh)
    f.store_host = PyBytes_AS_STRING(sh); f.store_host_len = len(sh)
    f.queue_id = queue_id; f.flag = flag; f.sys_flag = sys_flag
    f.reconsume_times = reconsume_times
    f.body_crc = body_crc32(f.body, f.body_len) if body_crc is None else <int32_t>body_crc
    f.queue_offset = queue_offset; f.physical_offset = physical_offset
    f.born_timestamp = born_timestamp; f.store_timestamp = store_timestamp
    f.prepared_transaction_offset = prepared_transaction_offset
    cdef Py_ssize_t total = cal_msg_length(sys_flag, f.body_len, f.topic_len, f.props_len)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, total)
    write_record(PyBytes_AS_STRING(out), &f, total)
    return out


def message_length(int sys_flag, Py_ssize_t body_len, Py_ssize_t topic_len, Py_ssize_t props_len) -> int:
    """``CommitLog.calMsgLength``."""
    return cal_msg_length(sys_flag, body_len, topic_len, props_len)


# -- decoder ---------------------------------------------------------------------------------

cdef inline int _need(Py_ssize_t pos, Py_ssize_t n, Py_ssize_t limit) except -1:
    if n < 0 or pos + n > limit:
        raise CorruptRecordError(f"record field at {pos} (+{n}) runs past the record end {limit}")
    return 0


cdef Py_ssize_t record_size_at(const char *buf, Py_ssize_t avail) except -2:
    """Size of the record at ``buf``: > 0 for a record, 0 for the end-of-file blank,
    -1 when fewer than 8 bytes are available. Raises on a bad magic or size."""
    cdef int32_t total, magic
    if avail < 8:
        return -1
    total = pymq_get_i32(buf)
    magic = pymq_get_i32(buf + 4)
    if magic == BLANK_MAGIC_CODE:
        return 0
    if magic != MESSAGE_MAGIC_CODE:
        raise CorruptRecordError(f"bad magic code 0x{<uint32_t>magic:08X}")
    if total < 91 or total > avail:
        raise CorruptRecordError(f"record size {total} outside [91, {avail}]")
    return total


cdef class DecodeCache:
    """What the messages of one read share: the topic string (with its UTF-8 bytes), so
    a page of messages from one queue does not decode it once per message."""

    def __init__(self, str topic=None):
        if topic is not None:
            self.topic = topic
            self.topic_raw = topic.encode("utf-8")


cdef MessageExt ext_from_page(bytes page, Py_ssize_t rec_pos, const RecordLayout *lay, Py_ssize_t total,
                              DecodeCache cache, str topic=None):
    """A ``MessageExt`` of the record at ``page[rec_pos:rec_pos + total]``, whose layout
    ``lay`` was checked. Fixed fields are read now; body, properties and hosts are left
    to decode from ``page`` on first access. The topic string of ``cache`` (or else
    ``topic``) is shared when it names the record's topic."""
    cdef const char *buf = PyBytes_AS_STRING(page) + rec_pos
    cdef MessageExt m = MessageExt.__new__(MessageExt)
    cdef int32_t sys_flag = lay.sys_flag
    cdef int lazy = LAZY_BODY | LAZY_PROPS | LAZY_HOSTS
    cdef const char *t
    cdef Py_ssize_t tn
    m._store_size = <int>total
    m._body_crc = pymq_get_i32(buf + 8)
    m.queue_id = pymq_get_i32(buf + 12)
    m.flag = pymq_get_i32(buf + 16)
    m._queue_offset = pymq_get_i64(buf + 20)
    m._commitlog_offset = pymq_get_i64(buf + 28)
    m.sys_flag = sys_flag
    m.born_timestamp = pymq_get_i64(buf + 40)
    m._store_timestamp = lay.store_timestamp
    m.reconsume_times = pymq_get_i32(buf + lay.body_pos - 16)
    m.prepared_transaction_offset = pymq_get_i64(buf + lay.body_pos - 12)
    if sys_flag & BORNHOST_V6_FLAG:
        lazy |= LAZY_BORN_V6
    if sys_flag & STOREHOSTADDRESS_V6_FLAG:
        lazy |= LAZY_STORE_V6
    if (cache is not None and cache.topic_raw is not None and PyBytes_GET_SIZE(cache.topic_raw) == lay.topic_len
            and memcmp(PyBytes_AS_STRING(cache.topic_raw), buf + lay.topic_pos, lay.topic_len) == 0):
        m._topic = cache.topic
    elif topic is not None:
        t = PyUnicode_AsUTF8AndSize(topic, &tn)
        if tn == lay.topic_len and memcmp(t, buf + lay.topic_pos, tn) == 0:
            m._topic = topic
        else:
            m._topic = PyUnicode_DecodeUTF8(buf + lay.topic_pos, lay.topic_len, "replace")
    else:
        m._topic = PyUnicode_DecodeUTF8(buf + lay.topic_pos, lay.topic_len, "replace")
    m._page = page
    m._rec = rec_pos
    m._body_off = <int>lay.body_pos
    m._body_len = <int>lay.body_len
    m._props_off = <int>lay.props_pos
    # the record's own CRC entry (and the separator before it) is not a property of the message
    m._props_len = <int>visible_props_len(lay)
    m._lazy = lazy
    return m


cdef MessageExt decode_at(const char *buf, Py_ssize_t avail, bint check_crc, DecodeCache cache=None,
                          str topic=None):
    """Decode the record at ``buf`` (``avail`` readable bytes). ``None`` at a blank.

    The record must pass ``record_layout`` (the one acceptance rule of every path) and,
    when asked, its body CRC; ``CorruptRecordError`` says which check failed. The record is
    then copied (one ``bytes``) and the message decodes its body and properties from the
    copy when they are first asked for."""
    cdef RecordLayout lay
    cdef Py_ssize_t total
    if avail >= 8 and pymq_get_i32(buf + 4) == BLANK_MAGIC_CODE:
        return None
    total = record_layout(buf, avail, &lay)
    if total <= 0:
        raise CorruptRecordError(_rejection(buf, avail))
    if check_crc and not record_crc_ok(buf, &lay, total):
        raise CorruptRecordError(f"{'record' if lay.prop_crc else 'body'} CRC mismatch in the record at "
                                 f"{pymq_get_i64(buf + 28)}")
    return ext_from_page(PyBytes_FromStringAndSize(buf, total), 0, &lay, total, cache, topic)


cdef str _rejection(const char *buf, Py_ssize_t avail):
    """Why ``record_layout`` refused the bytes at ``buf`` (for error messages only)."""
    cdef int32_t total, magic
    if avail < 8:
        return "fewer than 8 bytes left for a record header"
    total = pymq_get_i32(buf)
    magic = pymq_get_i32(buf + 4)
    if magic == BLANK_MAGIC_CODE:
        return f"end-of-file blank of {total} bytes with {avail} left"
    if magic != MESSAGE_MAGIC_CODE:
        return f"bad magic code 0x{<uint32_t>magic:08X}"
    if total < 91 or total > avail:
        return f"record size {total} outside [91, {avail}]"
    return "record fields inconsistent with its size"


def decode_message(data, Py_ssize_t offset=0, bint check_crc=False):
    """Decode the record at ``offset`` of a bytes-like ``data`` into a ``MessageExt``.

    Returns ``None`` at an end-of-file blank; raises ``CorruptRecordError`` when the
    record is malformed or runs past the end of ``data``.
    """
    cdef const unsigned char[::1] view = memoryview(data).cast("B")
    cdef Py_ssize_t n = view.shape[0]
    if offset < 0 or offset > n:
        raise ValueError("offset outside the buffer")
    if n == 0:
        raise CorruptRecordError("empty buffer")
    return decode_at(<const char *>&view[0] + offset, n - offset, check_crc)


# -- validation without decoding (recovery, dispatch) -----------------------------------------

# ``record_layout``, the acceptance rule of every path, is inline in record.pxd.


cdef tuple _layout_tuple(Py_ssize_t total, const RecordLayout *lay):
    if total <= 0:
        return (total,)
    return (total, lay.sys_flag, lay.store_timestamp, lay.body_pos, lay.body_len, lay.topic_pos, lay.topic_len,
            lay.props_pos, lay.props_len, bool(lay.prop_crc))


def _layouts(bytes rec, bytes like_rec):
    """For tests: ``record_layout`` of ``rec`` and ``record_layout_like`` of it after
    ``like_rec`` (laid out first: it must be a whole record), each as a tuple (size, then
    the layout's fields when the size is > 0). They must be equal for every input."""
    cdef RecordLayout like, a, b
    cdef Py_ssize_t like_total = record_layout(like_rec, len(like_rec), &like)
    if like_total <= 0:
        raise ValueError("like_rec is not a record")
    return (_layout_tuple(record_layout(rec, len(rec), &a), &a),
            _layout_tuple(record_layout_like(rec, len(rec), &b, &like, like_total), &b))


cdef Py_ssize_t check_record(const char *buf, Py_ssize_t avail, bint check_crc) noexcept nogil:
    """``record_layout`` plus, when asked, the body CRC: the record's size when whole and
    consistent, 0 at an end-of-file blank, -1 otherwise."""
    cdef RecordLayout lay
    cdef Py_ssize_t total = record_layout(buf, avail, &lay)
    if total > 0 and check_crc and not record_crc_ok(buf, &lay, total):
        return -1
    return total


cdef Py_ssize_t record_at(const char *base, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t file_size,
                          int64_t file_from, bint check_crc) noexcept nogil:
    """THE acceptance rule of a record in its segment, shared by recovery, dispatch,
    followers, reads and ``pymq check``: ``record_layout`` (magic, sizes, every length
    inside the record), the record's own PHYSICALOFFSET equal to where it lies, and, when
    ``check_crc``, the body CRC. An end-of-file blank counts only when it runs exactly to
    the end of the file. Returns the record's size, 0 for a blank, -1 otherwise."""
    cdef RecordLayout lay
    cdef Py_ssize_t total
    if pos < 0 or pos >= end:
        return -1
    total = record_layout(base + pos, end - pos, &lay)
    if total == 0:
        return 0 if pymq_get_i32(base + pos) == file_size - pos else -1
    if total < 0 or pymq_get_i64(base + pos + 28) != file_from + pos:
        return -1
    if check_crc and not record_crc_ok(base + pos, &lay, total):
        return -1
    return total


cdef Py_ssize_t next_record_at(const char *base, Py_ssize_t start, Py_ssize_t end, Py_ssize_t file_size,
                               int64_t file_from) noexcept nogil:
    """Resynchronisation: the first position in ``[start, end)`` where a record passes
    ``record_at`` with its CRC, or a blank running to the file's end starts; -1 if none.
    Candidates are found by the first byte of their magic code (at +4) with ``memchr``,
    so a damaged or empty stretch is crossed at memory speed."""
    cdef const char *da = NULL
    cdef const char *cb = NULL
    cdef const char *q
    cdef Py_ssize_t p = start, lo
    while p + 8 <= end:
        lo = p + 4
        if da == NULL or da < base + lo:
            da = <const char *>memchr(base + lo, 0xDA, <size_t>(end - 3 - lo))
        if cb == NULL or cb < base + lo:
            cb = <const char *>memchr(base + lo, 0xCB, <size_t>(end - 3 - lo))
        if da == NULL and cb == NULL:
            return -1
        q = da if cb == NULL or (da != NULL and da < cb) else cb
        p = (q - base) - 4
        if record_at(base, p, end, file_size, file_from, True) >= 0:
            return p
        p += 1
    return -1


cdef Py_ssize_t last_nonzero_at(const char *base, Py_ssize_t start, Py_ssize_t end) noexcept nogil:
    """Position of the last non-zero byte in ``[start, end)``, -1 when all are zero
    (read backwards eight bytes a step)."""
    cdef Py_ssize_t p = end
    cdef uint64_t w
    while p - 8 >= start:
        memcpy(&w, base + p - 8, 8)
        if w != 0:
            break
        p -= 8
    while p > start:
        if base[p - 1] != 0:
            return p - 1
        p -= 1
    return -1


def scan_segment(MappedFile mf, Py_ssize_t start, Py_ssize_t end, bint check_crc=False):
    """Walk records of ``mf`` that pass ``record_at`` from ``start`` up to ``end``,
    without the GIL.

    Returns ``(position, count, reached_blank)``: the position after the last accepted
    record (or the file size after a blank), the number of records, and whether an
    end-of-file blank was met.
    """
    cdef Py_ssize_t pos = start, size, count = 0
    cdef bint blank = False
    cdef long long file_from = mf.file_from_offset
    cdef Py_ssize_t file_size = mf.file_size
    cdef const char *base
    if start < 0 or end > mf.file_size or start > end:
        raise ValueError("scan range outside the segment")
    mf.pin()
    try:
        base = mf.base
        with nogil:
            while pos < end:
                size = record_at(base, pos, end, file_size, file_from, check_crc)
                if size > 0:
                    pos += size
                    count += 1
                elif size == 0:
                    blank = True
                    pos = file_size
                    break
                else:
                    break
    finally:
        mf.unpin()
    return pos, count, blank


def next_record(MappedFile mf, Py_ssize_t start, Py_ssize_t end):
    """The first position in ``[start, end)`` of ``mf`` where a record passing every check
    (CRC included) or an end-of-file blank starts, -1 when none does: where a walk that
    met damage at ``start - 1`` resumes. Reads nothing outside the segment."""
    cdef Py_ssize_t p
    cdef const char *base
    cdef Py_ssize_t file_size = mf.file_size
    cdef int64_t file_from = mf.file_from_offset
    if start < 0 or end > mf.file_size or start > end:
        raise ValueError("scan range outside the segment")
    mf.pin()
    try:
        base = mf.base
        with nogil:
            p = next_record_at(base, start, end, file_size, file_from)
    finally:
        mf.unpin()
    return p


def last_nonzero(MappedFile mf, Py_ssize_t start, Py_ssize_t end):
    """Position of the last non-zero byte of ``mf`` in ``[start, end)``, -1 when that
    stretch is all zeros (never written, or zeroed)."""
    cdef Py_ssize_t p
    cdef const char *base
    if start < 0 or end > mf.file_size or start > end:
        raise ValueError("range outside the segment")
    mf.pin()
    try:
        base = mf.base
        with nogil:
            p = last_nonzero_at(base, start, end)
    finally:
        mf.unpin()
    return p


def accept_record(MappedFile mf, Py_ssize_t pos, Py_ssize_t end=-1, bint check_crc=True):
    """``record_at`` for Python callers: the size of the record at ``pos`` of ``mf``
    when it passes every check (``end`` defaults to the readable end), 0 for an
    end-of-file blank, -1 otherwise."""
    cdef Py_ssize_t r
    if end < 0:
        end = mf.wrote
    if end > mf.file_size:
        end = mf.file_size
    mf.pin()
    try:
        r = record_at(mf.base, pos, end, mf.file_size, mf.file_from_offset, check_crc)
    finally:
        mf.unpin()
    return r


def read_message(MappedFile mf, Py_ssize_t pos, bint check_crc=False):
    """Decode the record at ``pos`` of a segment, reading only below its wrote position.
    ``None`` when ``pos`` is at or past the readable end, or at a blank."""
    cdef Py_ssize_t limit = mf.wrote
    mf._check_open()
    if pos < 0 or pos + 4 > limit:
        return None
    return decode_at(mf.base + pos, limit - pos, check_crc)


def read_record_bytes(MappedFile mf, Py_ssize_t pos):
    """The raw bytes of the whole record at ``pos`` (checked), or None past the end."""
    cdef Py_ssize_t limit = mf.wrote, size
    mf._check_open()
    if pos < 0 or pos + 8 > limit:
        return None
    size = record_size_at(mf.base + pos, limit - pos)
    if size <= 0:
        return None
    return PyBytes_FromStringAndSize(mf.base + pos, size)

