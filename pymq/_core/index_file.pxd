# The index file's layout constants, the shared hashing and linking steps (inline, so the
# builder and the querier compile them in) and the IndexFile class (see index_file.pyx).
from libc.stdint cimport int32_t, int64_t, uint32_t

from pymq._core.atomic cimport pymq_release_fence
from pymq._core.hton cimport pymq_get_i32, pymq_get_i64, pymq_put_i32, pymq_put_i64
from pymq._core.mapped_file cimport MappedFile, range_reserved
from pymq._core.record cimport RecordLayout

cdef extern from "pymq_javahash.h" nogil:
    uint32_t pymq_java_hash_utf8_from(uint32_t h, const char *buf, size_t n)

cdef enum:
    HEADER_SIZE = 40
    SLOT_SIZE = 4
    ENTRY_SIZE = 20
    ENTRY_RUN = 65536       # bytes of entries reserved at a time (the slots: 4 KiB granules)


cdef inline int32_t _abs_hash(uint32_t h) noexcept nogil:
    """``indexKeyHashMethod``: ``abs(hashCode)``, 0 for ``Integer.MIN_VALUE``."""
    cdef int32_t v = <int32_t>h
    if v == -2147483648:
        return 0
    return -v if v < 0 else v


cdef inline int32_t index_hash(const char *topic, Py_ssize_t topic_len, const char *key, Py_ssize_t key_len) noexcept nogil:
    """``indexKeyHashMethod(topic + "#" + key)``."""
    cdef uint32_t h = pymq_java_hash_utf8_from(0, topic, topic_len)
    h = 31u * h + 35u                       # '#'
    return _abs_hash(pymq_java_hash_utf8_from(h, key, key_len))


cdef inline bint _link_entry(char *base, Py_ssize_t entries_pos, int hash_slot_num, int32_t count,
                             int32_t key_hash, int64_t phy, int64_t store_ts) noexcept nogil:
    """Write entry number ``count`` (1 <= count < indexNum, checked by the caller) and
    link it into its slot; True when the slot was empty. The entry is published before
    the slot points to it (a reader may walk the chain at the same time, without a
    lock); the header is the caller's (``_put_header``)."""
    cdef Py_ssize_t slot_pos = HEADER_SIZE + <Py_ssize_t>(key_hash % hash_slot_num) * SLOT_SIZE
    cdef Py_ssize_t entry_pos = entries_pos + <Py_ssize_t>count * ENTRY_SIZE
    cdef int32_t slot_value = pymq_get_i32(base + slot_pos)
    cdef int64_t begin_ts = pymq_get_i64(base)
    cdef int64_t diff
    if slot_value <= 0 or slot_value > count:
        slot_value = 0
    diff = store_ts - begin_ts
    diff = diff // 1000 if diff >= 0 else -((-diff) // 1000)     # Java's truncating division
    if begin_ts <= 0 or diff < 0:
        diff = 0
    elif diff > 2147483647:
        diff = 2147483647
    pymq_put_i32(base + entry_pos, key_hash)
    pymq_put_i64(base + entry_pos + 4, phy)
    pymq_put_i32(base + entry_pos + 12, <int32_t>diff)
    pymq_put_i32(base + entry_pos + 16, slot_value)
    pymq_release_fence()
    pymq_put_i32(base + slot_pos, count)
    if count <= 1:
        pymq_put_i64(base + 16, phy)
        pymq_put_i64(base, store_ts)
    return slot_value == 0


cdef inline void _put_header(char *base, int32_t next_count, int32_t new_slots, int64_t phy,
                             int64_t store_ts) noexcept nogil:
    """After entries up to ``next_count - 1`` were linked: the header's counts and ends."""
    if new_slots:
        pymq_put_i32(base + 32, pymq_get_i32(base + 32) + new_slots)
    pymq_put_i32(base + 36, next_count)
    pymq_put_i64(base + 24, phy)
    pymq_put_i64(base + 8, store_ts)


cdef class IndexFile:
    cdef readonly MappedFile mapped_file
    cdef readonly int hash_slot_num
    cdef readonly int index_num
    cdef Py_ssize_t entries_pos
    cdef public bint verified       # first_problem() found the file whole (see IndexService)

    cdef char *_base(self) except NULL
    cdef void _put64(self, Py_ssize_t pos, int64_t v) except *
    cdef int64_t end_phy(self) except? -1
    cdef int put_hashed(self, int32_t key_hash, int64_t phy, int64_t store_ts) except -1
    cdef int reserve_link(self, int32_t count, int32_t key_hash) noexcept nogil
    cdef Py_ssize_t _walk(self, int32_t key_hash, Py_ssize_t max_num, long long begin, long long end,
                          int64_t *out, RecordLayout *lays, Py_ssize_t *sizes, Py_ssize_t n, bint verify,
                          list files, long long file_size, const char *topic, Py_ssize_t topic_len,
                          const char *key, Py_ssize_t key_len) except -1
    cdef Py_ssize_t _walk_from(self, int32_t key_hash, int64_t phy, int32_t prev, Py_ssize_t max_num,
                               long long begin, long long end, int64_t *out, RecordLayout *lays,
                               Py_ssize_t *sizes, Py_ssize_t n, list files, long long file_size,
                               const char *topic, Py_ssize_t topic_len, const char *key,
                               Py_ssize_t key_len) except -1
    cdef int32_t _count(self, const char *base) noexcept
    cdef Py_ssize_t _chain(self, const char *base, int32_t count, int32_t nxt, Py_ssize_t steps,
                           int32_t key_hash, Py_ssize_t max_num, long long begin, long long end,
                           int64_t *out, RecordLayout *lays, Py_ssize_t *sizes, Py_ssize_t n, bint verify,
                           list files, long long file_size, const char *topic, Py_ssize_t topic_len,
                           const char *key, Py_ssize_t key_len) except -1
