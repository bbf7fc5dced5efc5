# cython: language_level=3
"""IndexFile: RocketMQ's hash index of message keys, over a mapped file.

Layout (big-endian)::

    +--------------------------------------------------------------+  0
    | header (40): beginTimestamp i64 | endTimestamp i64 |           |
    |              beginPhyOffset i64 | endPhyOffset i64 |           |
    |              hashSlotCount i32  | indexCount i32               |
    +--------------------------------------------------------------+  40
    | slot table: hashSlotNum x i32, the index number of the newest |
    | entry of that slot (0 = empty)                                 |
    +--------------------------------------------------------------+  40 + slots*4
    | entries: indexNum x 20 bytes; entry n at 40 + slots*4 + n*20:  |
    |   keyHash i32 | phyOffset i64 | timeDiff i32 (s) | prevIndex i32 |
    +--------------------------------------------------------------+

A key is ``topic#key``; its hash is ``abs(String.hashCode)`` (0 for Integer.MIN_VALUE) and
its slot ``hash % hashSlotNum``. Entries of one slot form a chain from the newest back
through ``prevIndex``. Entry number 0 is never used: ``indexCount`` starts at 1, and a
file is full at ``indexCount >= indexNum``, so it holds ``indexNum - 1`` entries. The
header in the file is the state: every put updates it in place.

Walking a chain (``selectPhyOffset``) stops at ``max_num`` results, at an invalid or
self-referencing ``prevIndex``, at an entry older than the range asked for, and, in pymq,
after ``indexCount`` steps at most, so a damaged chain cannot loop. ``select_phy_offset``
is RocketMQ's walk (hash comparison only: "Aa" and "BB" collide). ``query`` is what the
store uses: it reads each candidate's record from the commit log and keeps it only when
the topic, the real key (a KEYS word or the UNIQ_KEY) and the real store time match, so
collisions never leak and RocketMQ's whole-second ``timeDiff`` cannot drop a message that
is inside the range.

The dispatcher's index step (``index_builder``) and ``query_message`` (``index_query``)
live in their own modules; the hashing and linking steps they share are inline functions
of ``index_file.pxd``. An entry is linked in the order a lock-free reader needs: entry,
release fence, slot, then the header.
"""

cimport cython
from libc.stdint cimport uint8_t
from libc.stdlib cimport calloc, free
from libc.string cimport memcmp, strerror

from pymq._core.mapped_file cimport GRANULE, granules_reserved, segment_for
from pymq._core.record cimport key_word_end, next_property, record_layout

from pymq.errors import DiskFullError

INDEX_HEADER_SIZE = HEADER_SIZE


def index_file_size(int hash_slot_num, int index_num) -> int:
    """Bytes of an index file: 40 + slots*4 + entries*20."""
    return HEADER_SIZE + hash_slot_num * SLOT_SIZE + index_num * ENTRY_SIZE


cdef Py_ssize_t _record_has_key(const char *rec, Py_ssize_t avail, const char *topic, Py_ssize_t topic_len,
                                const char *key, Py_ssize_t key_len, long long begin, long long end,
                                RecordLayout *out) noexcept:
    """The record's size when its topic is ``topic``, its store time is in [begin, end]
    and ``key`` is its UNIQ_KEY or one of the space-separated words of its KEYS (its
    checked layout in ``out``); 0 otherwise."""
    cdef RecordLayout lay
    cdef Py_ssize_t s, e, k, stop, w, we, total
    total = record_layout(rec, avail, &lay)
    if total <= 0:
        return 0
    out[0] = lay
    if lay.topic_len != topic_len or memcmp(rec + lay.topic_pos, topic, topic_len) != 0:
        return 0
    if lay.store_timestamp < begin or lay.store_timestamp > end:
        return 0
    s = lay.props_pos
    stop = s + lay.props_len
    while s < stop:
        if next_property(rec, s, stop, &k, &e):
            if k - s == 8 and memcmp(rec + s, b"UNIQ_KEY", 8) == 0:
                if e - k - 1 == key_len and memcmp(rec + k + 1, key, key_len) == 0:
                    return total
            elif k - s == 4 and memcmp(rec + s, b"KEYS", 4) == 0:
                w = k + 1
                while w < e:
                    we = key_word_end(rec, w, e)
                    if we - w == key_len and memcmp(rec + w, key, key_len) == 0:
                        return total
                    w = we + 1
        s = e + 1
    return 0


cdef extern from *:
    """
    #define pymq_prefetch_read(p) __builtin_prefetch((p), 0, 3)
    """
    void pymq_prefetch_read(const void *p) nogil


cdef inline void _prefetch_record(const char *rec, Py_ssize_t avail) noexcept nogil:
    """Ask for the first lines of a record at once: read one after the other, each would
    be a miss of its own (a key lookup's record is rarely in the cache)."""
    cdef Py_ssize_t off = 64
    while off < 320 and off < avail:
        pymq_prefetch_read(rec + off)
        off += 64


cdef inline Py_ssize_t _take(int64_t phy, int64_t *out, RecordLayout *lays, Py_ssize_t *sizes, Py_ssize_t n,
                              list files, long long file_size, const char *topic, Py_ssize_t topic_len,
                              const char *key, Py_ssize_t key_len, long long begin, long long end) noexcept:
    """Append ``phy`` to ``out[:n]`` (its layout and size to ``lays`` / ``sizes``) when
    the log holds there a record of ``topic`` with ``key``, stored in [begin, end], not
    taken already; returns the new count."""
    cdef MappedFile seg = segment_for(files, phy, file_size)
    cdef Py_ssize_t rel, size, j
    if seg is None or seg.base == NULL or phy - seg.file_from_offset >= seg.wrote:
        return n
    rel = <Py_ssize_t>(phy - seg.file_from_offset)
    _prefetch_record(seg.base + rel, seg.wrote - rel)
    size = _record_has_key(seg.base + rel, seg.wrote - rel, topic, topic_len, key, key_len, begin, end, &lays[n])
    # the acceptance rule: a record starts where its PHYSICALOFFSET says
    if size <= 0 or pymq_get_i64(seg.base + rel + 28) != phy:
        return n
    for j in range(n):
        if out[j] == phy:
            return n
    sizes[n] = size
    out[n] = phy
    return n + 1


cdef object _store_time_at(list files, long long file_size, int64_t phy):
    """The store time of the record at ``phy`` when the log holds a whole one there."""
    cdef MappedFile seg = segment_for(files, phy, file_size)
    cdef RecordLayout lay
    cdef Py_ssize_t rel
    if seg is None or seg.base == NULL or phy < seg.file_from_offset or phy - seg.file_from_offset >= seg.wrote:
        return None
    rel = <Py_ssize_t>(phy - seg.file_from_offset)
    if record_layout(seg.base + rel, seg.wrote - rel, &lay) <= 0:
        return None
    return lay.store_timestamp


@cython.final
cdef class IndexFile:
    """One index file: ``IndexFile(mapped_file, hash_slot_num, index_num)``.

    For a new file, ``end_phy_offset`` / ``end_timestamp`` seed the header from the
    previous file (as RocketMQ's ``getAndCreateLastIndexFile`` does).
    """
    def __init__(self, MappedFile mapped_file, int hash_slot_num, int index_num,
                 long long end_phy_offset=0, long long end_timestamp=0):
        if hash_slot_num < 1 or index_num < 2:
            raise ValueError("an index file needs >= 1 slot and >= 2 entries")
        if mapped_file.file_size != index_file_size(hash_slot_num, index_num):
            raise ValueError(f"{mapped_file.file_name}: {mapped_file.file_size} bytes, expected "
                             f"{index_file_size(hash_slot_num, index_num)} for these sizes")
        self.mapped_file = mapped_file
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.entries_pos = HEADER_SIZE + <Py_ssize_t>hash_slot_num * SLOT_SIZE
        mapped_file.set_positions(mapped_file.file_size)
        if (end_phy_offset > 0 or end_timestamp > 0) and not mapped_file.writable:
            raise ValueError("cannot seed a read-only index file")
        if mapped_file.writable:
            mapped_file.reserve_range(0, HEADER_SIZE)      # every put rewrites the header
        if end_phy_offset > 0:
            self._put64(16, end_phy_offset)
            self._put64(24, end_phy_offset)
        if end_timestamp > 0:
            self._put64(0, end_timestamp)
            self._put64(8, end_timestamp)

    cdef char *_base(self) except NULL:
        self.mapped_file._check_open()
        return self.mapped_file.base

    cdef void _put64(self, Py_ssize_t pos, int64_t v) except *:
        pymq_put_i64(self._base() + pos, v)

    cdef int64_t end_phy(self) except? -1:
        return pymq_get_i64(self._base() + 24)

    # -- header ------------------------------------------------------------------------------

    @property
    def begin_timestamp(self):
        return pymq_get_i64(self._base())

    @property
    def end_timestamp(self):
        return pymq_get_i64(self._base() + 8)

    @property
    def begin_phy_offset(self):
        return pymq_get_i64(self._base() + 16)

    @property
    def end_phy_offset(self):
        return pymq_get_i64(self._base() + 24)

    @property
    def hash_slot_count(self):
        return pymq_get_i32(self._base() + 32)

    @property
    def index_count(self):
        """Next entry number; values <= 0 on disk (a fresh file) read as 1."""
        cdef int32_t v = pymq_get_i32(self._base() + 36)
        return v if v > 0 else 1

    def is_write_full(self) -> bool:
        return self.index_count >= self.index_num

    def is_time_matched(self, long long begin, long long end) -> bool:
        """RocketMQ's overlap test of [begin, end] with the file's time range."""
        cdef long long fb = self.begin_timestamp, fe = self.end_timestamp
        return (begin < fb and end > fe) or (fb <= begin <= fe) or (fb <= end <= fe)

    # -- writing -----------------------------------------------------------------------------

    cdef int put_hashed(self, int32_t key_hash, int64_t phy, int64_t store_ts) except -1:
        """Add an entry; 1 when added, 0 when the file is full. Raises ``DiskFullError``,
        writing nothing, when the disk has no room for its blocks."""
        cdef char *base = self._base()
        cdef int rc
        cdef int32_t count = pymq_get_i32(base + 36)
        if not self.mapped_file.writable:
            raise ValueError("the index file is mapped read-only")
        if count <= 0:
            count = 1
        if count >= self.index_num:
            return 0
        rc = self.reserve_link(count, key_hash)
        if rc != 0:
            raise DiskFullError(rc, f"cannot reserve blocks of {self.mapped_file.file_name}: "
                                    f"{strerror(rc).decode()}")
        _put_header(base, count + 1, _link_entry(base, self.entries_pos, self.hash_slot_num, count, key_hash,
                                                 phy, store_ts), phy, store_ts)
        return 1

    cdef int reserve_link(self, int32_t count, int32_t key_hash) noexcept nogil:
        """Reserve the disk blocks entry ``count`` and its slot are written to (the file is
        sparse: a write into a hole of a full disk would be a SIGBUS): 0, or an errno.
        The slot takes a 4 KiB granule (the whole slot table once a quarter of it is
        reserved), the entries ``ENTRY_RUN`` bytes at a time."""
        cdef Py_ssize_t slot_pos = HEADER_SIZE + <Py_ssize_t>(key_hash % self.hash_slot_num) * SLOT_SIZE
        cdef Py_ssize_t entry_pos = self.entries_pos + <Py_ssize_t>count * ENTRY_SIZE
        cdef int rc
        if not granules_reserved(self.mapped_file.granted, self.mapped_file.reserved, self.mapped_file.file_size,
                                 slot_pos, slot_pos + SLOT_SIZE):
            if self.mapped_file.granted_count * GRANULE * 4 > self.entries_pos:
                # a quarter of the slot table has its blocks: a busy file, whose slots
                # will all be touched soon; reserve the rest at once, not page by page
                rc = self.mapped_file.reserve_range_nogil(HEADER_SIZE, self.entries_pos)
            else:
                rc = self.mapped_file.reserve_range_nogil(slot_pos, slot_pos + SLOT_SIZE)
            if rc != 0:
                return rc
        if not granules_reserved(self.mapped_file.granted, self.mapped_file.reserved, self.mapped_file.file_size,
                                 entry_pos, entry_pos + ENTRY_SIZE):
            rc = self.mapped_file.reserve_range_nogil(entry_pos, entry_pos + ENTRY_RUN)
            if rc != 0:
                return rc
        return 0

    def put_key(self, key, long long phy_offset, long long store_timestamp) -> bool:
        """``IndexFile.putKey`` for a raw key (``str``); False when the file is full."""
        cdef bytes k = key.encode("utf-8") if isinstance(key, str) else bytes(key)
        cdef int32_t h = <int32_t>pymq_java_hash_utf8_from(0, k, len(k))
        if h == -2147483648:
            h = 0
        elif h < 0:
            h = -h
        return self.put_hashed(h, phy_offset, store_timestamp) == 1

    # -- reading -----------------------------------------------------------------------------

    cdef Py_ssize_t _walk(self, int32_t key_hash, Py_ssize_t max_num, long long begin, long long end,
                          int64_t *out, RecordLayout *lays, Py_ssize_t *sizes, Py_ssize_t n, bint verify,
                          list files, long long file_size, const char *topic, Py_ssize_t topic_len,
                          const char *key, Py_ssize_t key_len) except -1:
        """Walk the chain of ``key_hash`` newest first, appending matches to ``out[n:]``
        (``max_num`` at most in all); returns the new count. A verified walk also keeps
        each match's record layout and size in ``lays`` / ``sizes``."""
        cdef char *base = self._base()
        cdef int32_t count = self._count(base), slot_value
        slot_value = pymq_get_i32(base + HEADER_SIZE + <Py_ssize_t>(key_hash % self.hash_slot_num) * SLOT_SIZE)
        if slot_value <= 0 or slot_value > count or count <= 1:
            return n
        return self._chain(base, count, slot_value, 0, key_hash, max_num, begin, end, out, lays, sizes, n, verify,
                           files, file_size, topic, topic_len, key, key_len)

    cdef Py_ssize_t _walk_from(self, int32_t key_hash, int64_t phy, int32_t prev, Py_ssize_t max_num,
                               long long begin, long long end, int64_t *out, RecordLayout *lays,
                               Py_ssize_t *sizes, Py_ssize_t n, list files, long long file_size,
                               const char *topic, Py_ssize_t topic_len, const char *key,
                               Py_ssize_t key_len) except -1:
        """The verified walk from the newest entry of ``key_hash`` (record ``phy``, chain
        link ``prev``: what ``RecentKeys`` holds) instead of from its slot: the same
        result in a file whose chains are whole, when ``begin`` is not after the file's
        begin time (no time stop before that entry)."""
        cdef char *base = self._base()
        cdef int32_t count = self._count(base)
        if n >= max_num or count <= 1:
            return n
        n = _take(phy, out, lays, sizes, n, files, file_size, topic, topic_len, key, key_len, begin, end)
        if prev <= 0 or prev > count:
            return n
        return self._chain(base, count, prev, 1, key_hash, max_num, begin, end, out, lays, sizes, n, True,
                           files, file_size, topic, topic_len, key, key_len)

    cdef int32_t _count(self, const char *base) noexcept:
        """Entry numbers are 1 .. count-1 (RocketMQ also accepts a link equal to
        indexCount); never beyond the file, whatever a damaged header says."""
        cdef int32_t count = pymq_get_i32(base + 36)
        if count <= 0:
            count = 1                       # a fresh file (see index_count)
        if count > self.index_num - 1:
            count = self.index_num - 1
        return count

    cdef Py_ssize_t _chain(self, const char *base, int32_t count, int32_t nxt, Py_ssize_t steps,
                           int32_t key_hash, Py_ssize_t max_num, long long begin, long long end,
                           int64_t *out, RecordLayout *lays, Py_ssize_t *sizes, Py_ssize_t n, bint verify,
                           list files, long long file_size, const char *topic, Py_ssize_t topic_len,
                           const char *key, Py_ssize_t key_len) except -1:
        """The walk from entry ``nxt`` on, ``steps`` taken already."""
        cdef int32_t prev, diff, h
        cdef int64_t phy, time_read, begin_ts = pymq_get_i64(base)
        cdef Py_ssize_t pos
        while n < max_num and steps < count:
            steps += 1
            pos = self.entries_pos + <Py_ssize_t>nxt * ENTRY_SIZE
            h = pymq_get_i32(base + pos)
            phy = pymq_get_i64(base + pos + 4)
            diff = pymq_get_i32(base + pos + 12)
            prev = pymq_get_i32(base + pos + 16)
            if diff < 0:
                break
            time_read = begin_ts + <int64_t>diff * 1000
            if h == key_hash:
                if not verify:
                    if begin <= time_read <= end:
                        out[n] = phy
                        n += 1
                else:
                    n = _take(phy, out, lays, sizes, n, files, file_size, topic, topic_len, key, key_len,
                              begin, end)
            if prev <= 0 or prev > count or prev == nxt:
                break
            # the entry's real time is in [time_read, time_read + 1000): RocketMQ stops at
            # time_read < begin; the verified walk only when the entry is surely older
            if (time_read < begin) if not verify else (time_read + 1000 <= begin):
                break
            nxt = prev
        return n

    def select_phy_offset(self, key, int max_num, long long begin, long long end) -> list:
        """RocketMQ's ``selectPhyOffset`` for a raw key: offsets whose key hash matches
        (collisions included), newest first."""
        cdef bytes k = key.encode("utf-8") if isinstance(key, str) else bytes(key)
        cdef int32_t h = <int32_t>pymq_java_hash_utf8_from(0, k, len(k))
        cdef int64_t found[64]
        cdef Py_ssize_t n
        h = 0 if h == -2147483648 else (-h if h < 0 else h)
        n = self._walk(h, min(max_num, 64), begin, end, found, NULL, NULL, 0, False, None, 0, NULL, 0, NULL, 0)
        return [found[i] for i in range(n)]

    def query(self, str topic, str key, int max_num, long long begin, long long end,
              list commitlog_files, long long commitlog_file_size) -> list:
        """Commit-log offsets (at most min(max_num, 64)) of messages of ``topic`` whose key
        or unique key is ``key`` and store time is in [begin, end], newest first, each
        checked against its record."""
        cdef bytes t = topic.encode("utf-8"), k = key.encode("utf-8")
        cdef int64_t found[64]
        cdef RecordLayout lays[64]
        cdef Py_ssize_t sizes[64]
        cdef Py_ssize_t n = self._walk(index_hash(t, len(t), k, len(k)), min(max_num, 64), begin, end,
                                       found, lays, sizes, 0, True, commitlog_files, commitlog_file_size,
                                       t, len(t), k, len(k))
        return [found[i] for i in range(n)]

    def hashes_at_end(self, long long phy) -> list:
        """Key hashes of the newest entries whose record is at ``phy``."""
        cdef char *base = self._base()
        cdef int32_t i = pymq_get_i32(base + 36) - 1
        cdef Py_ssize_t pos
        out = []
        if i >= self.index_num:
            return out
        while i >= 1:
            pos = self.entries_pos + <Py_ssize_t>i * ENTRY_SIZE
            if pymq_get_i64(base + pos + 4) != phy:
                break
            out.append(pymq_get_i32(base + pos))
            i -= 1
        return out

    def first_problem(self, list commitlog_files=None, long long commitlog_file_size=0):
        """The first way the file's structure is not one the builder writes, as a sentence,
        or None when it is whole. Checked (O(entries + slots), in C): the count within
        the file; every entry's hash >= 0, its record offset not below the previous
        entry's (entries are appended in log order) and its chain link to an older entry
        of the same slot, linked from one place only; every slot pointing at a counted
        entry of its own slot; every entry reachable from its slot; the header's begin and
        end offsets those of the first and last entries and, where the log still holds
        those records, its begin and end times their store times. A damaged file is
        rebuilt from the log by the index service."""
        cdef char *base = self._base()
        cdef int32_t count = pymq_get_i32(base + 36)
        cdef int32_t i, h, p, v, slots = self.hash_slot_num
        cdef int64_t phy, last_phy, first_phy = -1
        cdef Py_ssize_t pos, s, marked = 0
        cdef uint8_t *seen
        if count <= 0:
            count = 1
        if count > self.index_num:
            return f"indexCount {count} exceeds the file's {self.index_num} entries"
        seen = <uint8_t *>calloc(<size_t>count // 8 + 1, 1)
        if seen == NULL:
            raise MemoryError()
        try:
            last_phy = -1
            for i in range(1, count):
                pos = self.entries_pos + <Py_ssize_t>i * ENTRY_SIZE
                h = pymq_get_i32(base + pos)
                phy = pymq_get_i64(base + pos + 4)
                p = pymq_get_i32(base + pos + 16)
                if h < 0:
                    return f"entry {i}: negative key hash {h}"
                if phy < last_phy or phy < 0:
                    return f"entry {i}: record offset {phy} before the previous entry's {last_phy}"
                if pymq_get_i32(base + pos + 12) < 0:
                    return f"entry {i}: negative time difference"
                if p < 0 or p >= i:
                    return f"entry {i}: chain link {p} is not an older entry"
                if p > 0:
                    if seen[p >> 3] & (1 << (p & 7)):
                        return f"entry {i}: entry {p} is linked from two places"
                    seen[p >> 3] |= 1 << (p & 7)
                    marked += 1
                    if pymq_get_i32(base + self.entries_pos + <Py_ssize_t>p * ENTRY_SIZE) % slots != h % slots:
                        return f"entry {i}: chain link {p} is an entry of another slot"
                if i == 1:
                    first_phy = phy
                last_phy = phy
            for s in range(slots):
                v = pymq_get_i32(base + HEADER_SIZE + s * SLOT_SIZE)
                if v == 0:
                    continue
                if v < 0 or v >= count:
                    return f"slot {s}: points at entry {v}, not one of the {count - 1} counted"
                if seen[v >> 3] & (1 << (v & 7)):
                    return f"slot {s}: entry {v} is also linked from a newer entry"
                seen[v >> 3] |= 1 << (v & 7)
                marked += 1
                if pymq_get_i32(base + self.entries_pos + <Py_ssize_t>v * ENTRY_SIZE) % slots != s:
                    return f"slot {s}: entry {v} belongs to another slot"
            if marked != count - 1:
                return f"{count - 1 - marked} of {count - 1} entries cannot be reached from their slot"
        finally:
            free(seen)
        if count > 1:
            if pymq_get_i64(base + 16) != first_phy:
                return f"header: begin offset {pymq_get_i64(base + 16)}, first entry's {first_phy}"
            if pymq_get_i64(base + 24) != last_phy:
                return f"header: end offset {pymq_get_i64(base + 24)}, last entry's {last_phy}"
            if commitlog_files is not None:
                for phy, pos, what in ((first_phy, 0, "begin"), (last_phy, 8, "end")):
                    ts = _store_time_at(commitlog_files, commitlog_file_size, phy)
                    if ts is not None and ts != pymq_get_i64(base + pos):
                        return f"header: {what} time {pymq_get_i64(base + pos)}, its record's {ts}"
        return None

    def flush(self):
        """Force the whole file to disk."""
        self.mapped_file.set_positions(self.mapped_file.file_size)
        self.mapped_file.flushed_position = 0
        self.mapped_file.flush(0)
