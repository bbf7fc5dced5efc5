# cython: language_level=3
"""Column reader: a consume-queue range decoded into Arrow-layout column buffers.

``read_range`` walks the 20-byte entries of one (topic, queue) from queue offset
``start`` towards ``end``, checks each record it points to (``record_layout``: magic, every
length inside the record, total == calMsgLength, all within the segment's written bytes;
plus the record's topic and queue id against the queue's), and appends its fields to
column buffers laid out as Apache Arrow expects them, without one Python object per row::

    fixed width     int64 / int32 values, little-endian, one after another
    string/binary   int32 offsets (n + 1, from 0) + the bytes back to back
    nullable        + a validity bitmap (bit i, LSB first, set when row i has a value)
    list<string>    int32 list offsets (n + 1) into the child string column
    map<str, str>   int32 entry offsets (n + 1) into a key and a value string column

The caller (``pymq.spark.arrow``) wraps the buffers with ``pyarrow.Array.from_buffers``;
this module imports neither pyarrow nor numpy. Buffers are ``ColumnBuffer`` objects that
own their memory and export it through the buffer protocol, so the wrap is zero-copy.

Properties follow ``string2messageProperties`` (RocketMQ 4.9.7, as
``pymq._core.message.decode_properties``): entries split on \\x02, name and value split at
the first \\x01, entries with an empty name or value skipped, and a repeated name keeps
its first position with its last value (a dict's semantics). ``tags`` is the TAGS
property, ``keys`` KEYS split on spaces (empty parts dropped), ``uniq_key`` UNIQ_KEY; each
is null when absent. The map column holds the other entries, so it equals
``MessageExt.properties`` without TAGS, KEYS and UNIQ_KEY (they have their columns). ``msg_id`` is the
offset message id (hex of the store host field and the commit-log offset).

A read stops early, never past what it can check, and says why (``status``):

    READ_OK           the range or the row / byte limit was reached
    READ_CQ_END       the next entry is not written (yet) in the consume queue
    READ_UNREADABLE   the next record is not mapped, not written yet, or not a whole
                      record (retention removed it, or a follower has not caught up)
    READ_MISMATCH     the next record belongs to another topic or queue (damage)
"""

cimport cython
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcmp, memcpy, memset
from cpython.buffer cimport PyBuffer_FillInfo
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE

from pymq._core.clayout cimport (BORNHOST_V6_FLAG, CQ_STORE_UNIT_SIZE, IPV4_HOST_LENGTH, IPV6_HOST_LENGTH,
                                 STOREHOSTADDRESS_V6_FLAG)
from pymq._core.hton cimport pymq_get_i32, pymq_get_i64
from pymq._core.cq_unit cimport CqAppender
from pymq._core.mapped_file cimport MappedFile, segment_for
from pymq._core.message cimport Message, format_host
from pymq._core.record cimport (RecordLayout, key_word_end, next_property, record_crc_ok, record_layout,
                               visible_props_len)

READ_OK = 0
READ_CQ_END = 1
READ_UNREADABLE = 2
READ_MISMATCH = 3

cdef enum:
    ST_OK = 0
    ST_CQ_END = 1
    ST_UNREADABLE = 2
    ST_MISMATCH = 3
    MAX_PROPERTY_ENTRIES = 8192        # a 32767-byte properties string holds fewer
    INT32_LIMIT = 2147483647

cdef long long MAX_QUEUE_INDEX = (1LL << 62) // CQ_STORE_UNIT_SIZE

cdef char *HEX = b"0123456789ABCDEF"
cdef char EMPTY[1]


# -- buffers ------------------------------------------------------------------------------------

@cython.final
cdef class ColumnBuffer:
    """A growable block of memory exported read-only through the buffer protocol.

    It only grows while nobody holds a view of it; ``len()`` is the number of bytes used."""
    cdef char *data
    cdef Py_ssize_t length
    cdef Py_ssize_t capacity
    cdef int exports

    def __dealloc__(self):
        free(self.data)

    def __len__(self):
        return self.length

    def __getbuffer__(self, Py_buffer *view, int flags):
        PyBuffer_FillInfo(view, self, self.data if self.data != NULL else EMPTY, self.length, 1, flags)
        self.exports += 1

    def __releasebuffer__(self, Py_buffer *view):
        self.exports -= 1

    cdef int reserve(self, Py_ssize_t extra) except -1:
        cdef Py_ssize_t need = self.length + extra, cap = self.capacity if self.capacity else 64
        cdef char *p
        if need <= self.capacity:
            return 0
        if self.exports:
            raise BufferError("a ColumnBuffer cannot grow while it is exported")
        while cap < need:
            cap *= 2
        p = <char *>realloc(self.data, cap)
        if p == NULL:
            raise MemoryError()
        self.data = p
        self.capacity = cap
        return 0

    cdef inline int append(self, const char *p, Py_ssize_t n) except -1:
        if self.length + n > self.capacity:
            self.reserve(n)
        memcpy(self.data + self.length, p, n)
        self.length += n
        return 0


cdef ColumnBuffer new_buffer(Py_ssize_t capacity):
    cdef ColumnBuffer b = ColumnBuffer.__new__(ColumnBuffer)
    if capacity > 0:
        b.reserve(capacity)
    return b


cdef inline void put_i64(ColumnBuffer b, Py_ssize_t i, int64_t v) noexcept:
    (<int64_t *>b.data)[i] = v


cdef inline void put_i32(ColumnBuffer b, Py_ssize_t i, int32_t v) noexcept:
    (<int32_t *>b.data)[i] = v


@cython.final
cdef class StringColumn:
    """Offsets, bytes and (when nullable) a validity bitmap of a string or binary column."""
    cdef ColumnBuffer offsets
    cdef ColumnBuffer data
    cdef ColumnBuffer validity
    cdef Py_ssize_t n
    cdef Py_ssize_t nulls

    def __cinit__(self, Py_ssize_t rows, Py_ssize_t data_capacity, bint nullable):
        self.offsets = new_buffer((rows + 1) * 4)
        self.data = new_buffer(data_capacity)
        self.validity = new_buffer((rows + 7) // 8 + 1) if nullable else None
        if nullable:
            memset(self.validity.data, 0, self.validity.capacity)
        put_i32(self.offsets, 0, 0)
        self.offsets.length = 4

    cdef inline int push(self, const char *p, Py_ssize_t n) except -1:
        if self.data.length + n > INT32_LIMIT:
            raise OverflowError("a string column passed 2 GiB in one batch")
        self.data.append(p, n)
        if self.validity is not None:
            self.validity.data[self.n >> 3] |= <char>(1 << (self.n & 7))
        self._next()
        return 0

    cdef inline int push_null(self) except -1:
        self.nulls += 1
        self._next()
        return 0

    cdef inline int _next(self) except -1:
        if self.offsets.length + 4 > self.offsets.capacity:
            self.offsets.reserve(4)
        self.n += 1
        put_i32(self.offsets, self.n, <int32_t>self.data.length)
        self.offsets.length += 4
        return 0

    cdef dict export(self):
        if self.validity is not None:
            self.validity.length = (self.n + 7) // 8
        return {"offsets": self.offsets, "data": self.data, "validity": self.validity,
                "length": self.n, "null_count": self.nulls}


# -- hosts and ids ------------------------------------------------------------------------------

cdef struct HostCache:
    char raw[20]
    Py_ssize_t raw_len
    char text[80]
    Py_ssize_t text_len


cdef inline Py_ssize_t _put_uint(char *out, unsigned long long v) noexcept:
    cdef char tmp[24]
    cdef Py_ssize_t n = 0, i
    while True:
        tmp[n] = <char>(48 + v % 10)
        n += 1
        v //= 10
        if v == 0:
            break
    for i in range(n):
        out[i] = tmp[n - 1 - i]
    return n


cdef int _format_host(HostCache *c, const char *raw, Py_ssize_t n) except -1:
    """``ip:port`` of an 8- or 20-byte host field (``format_host``), cached for runs of
    records from the same host."""
    cdef Py_ssize_t pos = 0, i
    cdef int32_t port
    cdef bytes text
    if c.raw_len == n and memcmp(c.raw, raw, n) == 0:
        return 0
    if n == IPV4_HOST_LENGTH:
        for i in range(4):
            pos += _put_uint(c.text + pos, <uint8_t>raw[i])
            c.text[pos] = 46 if i < 3 else 58        # '.' then ':'
            pos += 1
        port = pymq_get_i32(raw + 4)
        if port < 0:
            c.text[pos] = 45                         # '-'
            pos += 1
            pos += _put_uint(c.text + pos, <unsigned long long>(-<long long>port))
        else:
            pos += _put_uint(c.text + pos, <unsigned long long>port)
    else:
        text = format_host(PyBytes_FromStringAndSize(raw, n)).encode("utf-8")
        pos = min(PyBytes_GET_SIZE(text), <Py_ssize_t>sizeof(c.text))
        memcpy(c.text, PyBytes_AS_STRING(text), pos)
    memcpy(c.raw, raw, n)
    c.raw_len = n
    c.text_len = pos
    return 0


cdef inline Py_ssize_t _hex(char *out, const char *p, Py_ssize_t n) noexcept:
    cdef Py_ssize_t i
    cdef uint8_t b
    for i in range(n):
        b = <uint8_t>p[i]
        out[2 * i] = HEX[b >> 4]
        out[2 * i + 1] = HEX[b & 15]
    return 2 * n


# -- properties ---------------------------------------------------------------------------------

cdef struct Span:
    Py_ssize_t ks        # name start, relative to the record
    Py_ssize_t kl
    Py_ssize_t vs
    Py_ssize_t vl


cdef inline bint _named(const char *rec, Span *s, const char *name, Py_ssize_t n) noexcept:
    return s.kl == n and memcmp(rec + s.ks, name, n) == 0


cdef Py_ssize_t _parse_properties(const char *rec, Py_ssize_t start, Py_ssize_t length, Span *spans) noexcept:
    """Entries of the properties string as spans, repeated names merged (first position,
    last value). Returns how many."""
    cdef Py_ssize_t s = start, end = start + length, k, e, count = 0, j
    while s < end:
        if next_property(rec, s, end, &k, &e):
            for j in range(count):
                if spans[j].kl == k - s and memcmp(rec + spans[j].ks, rec + s, k - s) == 0:
                    spans[j].vs = k + 1
                    spans[j].vl = e - k - 1
                    break
            else:
                if count < MAX_PROPERTY_ENTRIES:
                    spans[count].ks = s
                    spans[count].kl = k - s
                    spans[count].vs = k + 1
                    spans[count].vl = e - k - 1
                    count += 1
        s = e + 1
    return count


# -- rows to columns -------------------------------------------------------------------------

@cython.final
cdef class RowColumns:
    """The column buffers of up to ``rows`` records, filled one checked record at a time."""
    cdef Py_ssize_t n, rows
    cdef ColumnBuffer queue_offset, commitlog_offset, store_ts, born_ts, flag, sys_flag, reconsume, store_size
    cdef StringColumn body, tags, msg_id, uniq_key, born_host, store_host, key_items, prop_names, prop_values
    cdef ColumnBuffer keys_offsets, keys_validity, props_offsets
    cdef Py_ssize_t keys_nulls, list_children, map_entries
    cdef HostCache born_cache, store_cache
    cdef Span *spans

    def __cinit__(self, Py_ssize_t rows, Py_ssize_t body_capacity):
        self.spans = <Span *>malloc(MAX_PROPERTY_ENTRIES * sizeof(Span))
        if self.spans == NULL:
            raise MemoryError()
        self.rows = rows
        self.born_cache.raw_len = -1
        self.store_cache.raw_len = -1
        self.queue_offset = new_buffer(rows * 8)
        self.commitlog_offset = new_buffer(rows * 8)
        self.store_ts = new_buffer(rows * 8)
        self.born_ts = new_buffer(rows * 8)
        self.flag = new_buffer(rows * 4)
        self.sys_flag = new_buffer(rows * 4)
        self.reconsume = new_buffer(rows * 4)
        self.store_size = new_buffer(rows * 4)
        self.body = StringColumn(rows, body_capacity, False)
        self.tags = StringColumn(rows, rows * 8, True)
        self.msg_id = StringColumn(rows, rows * 32, False)
        self.uniq_key = StringColumn(rows, rows * 32, True)
        self.born_host = StringColumn(rows, rows * 16, False)
        self.store_host = StringColumn(rows, rows * 16, False)
        self.key_items = StringColumn(rows, rows * 8, False)
        self.prop_names = StringColumn(rows * 4, rows * 32, False)
        self.prop_values = StringColumn(rows * 4, rows * 48, False)
        self.keys_offsets = new_buffer((rows + 1) * 4)
        self.keys_validity = new_buffer((rows + 7) // 8 + 1)
        self.props_offsets = new_buffer((rows + 1) * 4)
        memset(self.keys_validity.data, 0, self.keys_validity.capacity)
        put_i32(self.keys_offsets, 0, 0)
        put_i32(self.props_offsets, 0, 0)

    def __dealloc__(self):
        free(self.spans)

    cdef int push(self, const char *rec, const RecordLayout *lay, int32_t size) except -1:
        """Append the record at ``rec`` (checked: ``lay`` is its layout) as row ``n``."""
        cdef Py_ssize_t n = self.n, i, nspan, ks, kpos, kend, born_len, store_len, store_pos, before
        cdef char idbuf[64]
        cdef Span *sp
        cdef Span *tags_sp
        cdef Span *keys_sp
        cdef Span *uniq_sp
        if n >= self.rows:
            raise OverflowError("more rows than the columns were made for")
        # fixed-width fields
        put_i64(self.queue_offset, n, pymq_get_i64(rec + 20))
        put_i64(self.commitlog_offset, n, pymq_get_i64(rec + 28))
        put_i64(self.born_ts, n, pymq_get_i64(rec + 40) * 1000)
        put_i64(self.store_ts, n, lay.store_timestamp * 1000)
        put_i32(self.flag, n, pymq_get_i32(rec + 16))
        put_i32(self.sys_flag, n, lay.sys_flag)
        put_i32(self.store_size, n, size)
        born_len = IPV6_HOST_LENGTH if lay.sys_flag & BORNHOST_V6_FLAG else IPV4_HOST_LENGTH
        store_len = IPV6_HOST_LENGTH if lay.sys_flag & STOREHOSTADDRESS_V6_FLAG else IPV4_HOST_LENGTH
        store_pos = 48 + born_len + 8
        put_i32(self.reconsume, n, pymq_get_i32(rec + store_pos + store_len))

        self.body.push(rec + lay.body_pos, lay.body_len)
        _format_host(&self.born_cache, rec + 48, born_len)
        self.born_host.push(self.born_cache.text, self.born_cache.text_len)
        _format_host(&self.store_cache, rec + store_pos, store_len)
        self.store_host.push(self.store_cache.text, self.store_cache.text_len)
        i = _hex(idbuf, rec + store_pos, store_len)
        i += _hex(idbuf + i, rec + 28, 8)
        self.msg_id.push(idbuf, i)

        # properties, and the TAGS / KEYS / UNIQ_KEY columns drawn from them
        nspan = _parse_properties(rec, lay.props_pos, visible_props_len(lay), self.spans)
        tags_sp = keys_sp = uniq_sp = NULL
        for i in range(nspan):
            sp = &self.spans[i]
            if _named(rec, sp, b"TAGS", 4):
                tags_sp = sp
            elif _named(rec, sp, b"KEYS", 4):
                keys_sp = sp
            elif _named(rec, sp, b"UNIQ_KEY", 8):
                uniq_sp = sp
            else:
                self.prop_names.push(rec + sp.ks, sp.kl)
                self.prop_values.push(rec + sp.vs, sp.vl)
                self.map_entries += 1
        if self.map_entries > INT32_LIMIT:
            raise OverflowError("too many property entries in one batch")
        put_i32(self.props_offsets, n + 1, <int32_t>self.map_entries)
        if tags_sp != NULL:
            self.tags.push(rec + tags_sp.vs, tags_sp.vl)
        else:
            self.tags.push_null()
        if uniq_sp != NULL:
            self.uniq_key.push(rec + uniq_sp.vs, uniq_sp.vl)
        else:
            self.uniq_key.push_null()
        before = self.list_children
        if keys_sp != NULL:
            ks = keys_sp.vs
            kend = keys_sp.vs + keys_sp.vl
            while ks < kend:
                kpos = key_word_end(rec, ks, kend)
                if kpos > ks:
                    self.key_items.push(rec + ks, kpos - ks)
                    self.list_children += 1
                ks = kpos + 1
        if self.list_children > before:
            self.keys_validity.data[n >> 3] |= <char>(1 << (n & 7))
        else:
            self.keys_nulls += 1
        put_i32(self.keys_offsets, n + 1, <int32_t>self.list_children)
        self.n = n + 1
        return 0

    cdef dict export(self, long long total_bytes):
        """The columns of the rows pushed (see ``read_range``)."""
        cdef Py_ssize_t n = self.n
        for b in (self.queue_offset, self.commitlog_offset, self.store_ts, self.born_ts):
            (<ColumnBuffer>b).length = n * 8
        for b in (self.flag, self.sys_flag, self.reconsume, self.store_size):
            (<ColumnBuffer>b).length = n * 4
        self.keys_offsets.length = (n + 1) * 4
        self.keys_validity.length = (n + 7) // 8
        self.props_offsets.length = (n + 1) * 4
        return {
            "queue_offset": self.queue_offset, "commitlog_offset": self.commitlog_offset,
            "store_timestamp": self.store_ts, "born_timestamp": self.born_ts,
            "flag": self.flag, "sys_flag": self.sys_flag, "reconsume_times": self.reconsume,
            "store_size": self.store_size,
            "body": self.body.export(), "tags": self.tags.export(), "msg_id": self.msg_id.export(),
            "uniq_key": self.uniq_key.export(), "born_host": self.born_host.export(),
            "store_host": self.store_host.export(),
            "keys": {"offsets": self.keys_offsets, "validity": self.keys_validity, "null_count": self.keys_nulls,
                     "length": n, "items": self.key_items.export()},
            "properties": {"offsets": self.props_offsets, "length": n, "names": self.prop_names.export(),
                           "values": self.prop_values.export()},
            "bytes": total_bytes,
        }


cdef dict record_columns(Py_ssize_t n, const char **recs, const int32_t *sizes, const RecordLayout *lays):
    """The columns of ``n`` records already checked (``lays[i]`` the layout of ``recs[i]``,
    ``sizes[i]`` bytes): what ``read_range`` returns for them, as one batch."""
    cdef RowColumns cols
    cdef Py_ssize_t i, body_bytes = 0
    cdef long long total = 0
    for i in range(n):
        body_bytes += lays[i].body_len
        total += sizes[i]
    cols = RowColumns(n, body_bytes)
    for i in range(n):
        cols.push(recs[i], &lays[i], sizes[i])
    return cols.export(total)


# -- the reader ---------------------------------------------------------------------------------

def read_range(CqAppender app, list commitlog_files not None, long long commitlog_file_size,
               str topic not None, int queue_id, long long start, long long end,
               Py_ssize_t max_rows, Py_ssize_t max_bytes, bint check_crc=True):
    """Decode the messages of one queue from offset ``start`` (inclusive) towards ``end``
    (exclusive) into column buffers, at most ``max_rows`` rows and, once one row is in,
    ``max_bytes`` bytes of records. A record is read only when it passes the store's
    acceptance rule for an entry (its layout, PHYSICALOFFSET, queue offset and, with
    ``check_crc``, its checksum); one that does not stops the read (``READ_UNREADABLE``).

    Returns ``(count, status, columns)``: ``count`` rows were read (the next offset is
    ``start + count``), ``status`` is one of the ``READ_*`` codes (why the read stopped
    before ``end`` when it did), ``columns`` maps column names to buffers (int64 and int32
    ``ColumnBuffer`` objects; dicts of buffers for the variable-length columns).
    """
    cdef Py_ssize_t rows, n = 0
    cdef long long offset, pos, cq_fs, total_bytes = 0
    cdef int64_t phy
    cdef int32_t size
    cdef int status = ST_OK
    cdef list cq_files = app.mapped_file_queue.mapped_files
    cdef MappedFile cq = None, seg = None
    cdef long long cq_from = 0, cq_to = 0, seg_from = 0, seg_to = 0
    cdef const char *rec
    cdef RecordLayout lay
    cdef bytes topic_b = topic.encode("utf-8")
    cdef const char *topic_p = PyBytes_AS_STRING(topic_b)
    cdef Py_ssize_t topic_n = PyBytes_GET_SIZE(topic_b)
    cdef RowColumns cols

    if max_rows < 1 or max_bytes < 1:
        raise ValueError("max_rows and max_bytes must be >= 1")
    if start < 0:
        raise ValueError("start must be >= 0")
    rows = <Py_ssize_t>min(max(end - start, 0), <long long>max_rows)
    if start > MAX_QUEUE_INDEX and rows > 0:
        rows = 0                        # no consume queue reaches it (its byte position would overflow)
        status = ST_CQ_END
    cq_fs = app.file_size
    cols = RowColumns(rows, min(max_bytes, 1 << 20))
    offset = start
    while n < rows:
        # the consume-queue entry
        pos = offset * CQ_STORE_UNIT_SIZE
        if cq is None or pos < cq_from or pos + CQ_STORE_UNIT_SIZE > cq_to:
            cq = segment_for(cq_files, pos, cq_fs)
            if cq is None:
                status = ST_CQ_END
                break
            cq_from = cq.file_from_offset
            cq_to = cq_from + cq.wrote
            if pos + CQ_STORE_UNIT_SIZE > cq_to:
                status = ST_CQ_END
                break
        if cq.base == NULL and not cq.map_again():      # evicted: mapped again; closed
            status = ST_CQ_END
            break
        phy = pymq_get_i64(cq.base + (pos - cq_from))
        size = pymq_get_i32(cq.base + (pos - cq_from) + 8)
        if n and total_bytes + size > max_bytes:
            break
        # the record, checked whole within the segment's written bytes
        # (``size > seg_to - phy``, not ``phy + size > seg_to``: a damaged entry's offset
        # near 2**63 would overflow past the check and be read as lying in the segment)
        if seg is None or phy < seg_from or phy >= seg_to or size > seg_to - phy:
            seg = segment_for(commitlog_files, phy, commitlog_file_size)
            if seg is None or seg.base == NULL:
                status = ST_UNREADABLE
                break
            seg_from = seg.file_from_offset
            seg_to = seg_from + seg.wrote
        if size <= 0 or phy < seg_from or phy >= seg_to or size > seg_to - phy:
            status = ST_UNREADABLE
            break
        rec = seg.base + (phy - seg_from)
        if (record_layout(rec, size, &lay) != size or pymq_get_i64(rec + 28) != phy
                or pymq_get_i64(rec + 20) != offset or (check_crc and not record_crc_ok(rec, &lay, size))):
            status = ST_UNREADABLE
            break
        if (lay.topic_len != topic_n or memcmp(rec + lay.topic_pos, topic_p, topic_n) != 0
                or pymq_get_i32(rec + 12) != queue_id):
            status = ST_MISMATCH
            break
        cols.push(rec, &lay, size)
        total_bytes += size
        n += 1
        offset += 1
    return n, status, cols.export(total_bytes)


def queue_bounds(CqAppender app):
    """``(min offset, max offset)`` of a consume queue as its appender sees it now."""
    cdef list files = app.mapped_file_queue.mapped_files
    cdef MappedFile last
    if not files:
        return 0, 0
    last = <MappedFile>files[len(files) - 1]
    return app.min_logic_offset // CQ_STORE_UNIT_SIZE, (last.file_from_offset + last.wrote) // CQ_STORE_UNIT_SIZE


# -- the other way: staged columns to Messages ------------------------------------------------------

def build_messages(list topics not None, list bodies not None, list tags not None, list keys not None,
                   list names not None, list values not None, list offsets not None, list queue_ids not None,
                   list flags not None, list uniq_keys not None, list rows not None, str uniq_prefix not None):
    """``Message`` objects for rows of a Spark write's staging table (``pymq.spark.commit``).

    The lists are the staged columns of the rows to build (``to_pylist``), properties as
    flattened ``names`` / ``values`` with ``offsets`` (n + 1) into them. ``UNIQ_KEY`` is the
    row's ``uniq_keys`` entry, else its UNIQ_KEY property, else ``uniq_prefix`` + its index
    in ``rows`` as 10 hex digits.
    ``keys`` holds each row's keys as one space-separated string. Types are checked as
    ``Message()`` checks them; the values were validated when they were staged."""
    cdef Py_ssize_t n = len(rows), i, j, a, b
    cdef list out = [None] * n
    cdef Message m
    cdef dict p
    cdef object t, body, tg, k, v
    cdef long long row
    cdef char hexbuf[10]
    if not (len(topics) == len(bodies) == len(tags) == len(keys) == len(queue_ids) == len(flags)
            == len(uniq_keys) == n and len(offsets) == n + 1):
        raise ValueError("build_messages: the columns differ in length")
    for i in range(n):
        t = topics[i]
        body = bodies[i]
        if type(t) is not str or type(body) is not bytes:
            raise TypeError("a staged row needs a str topic and a bytes body")
        m = Message.__new__(Message)
        m._topic = t
        m._body = body
        tg = tags[i]
        if tg is not None and type(tg) is not str:
            raise TypeError("tags must be str or None")
        m._tags = tg if tg else None
        k = keys[i]
        if k:
            m._keys = [x for x in (<str?>k).split(" ") if x] or None
        a = offsets[i]
        b = offsets[i + 1]
        if a < 0 or b < a or b > len(names) or b > len(values):
            raise ValueError("build_messages: bad property offsets")
        p = {}
        for j in range(a, b):
            v = values[j]
            if v is not None:
                p[names[j]] = v
        v = uniq_keys[i]
        if v is not None:
            p["UNIQ_KEY"] = v
        elif "UNIQ_KEY" not in p:
            row = rows[i]
            for j in range(10):
                hexbuf[9 - j] = HEX[(row >> (4 * j)) & 15]
            p["UNIQ_KEY"] = uniq_prefix + PyBytes_FromStringAndSize(hexbuf, 10).decode("ascii")
        m._properties = p
        m.queue_id = queue_ids[i]
        if m.queue_id < 0:
            raise ValueError("queue_id must be >= 0")
        m.flag = flags[i]
        out[i] = m
    return out
