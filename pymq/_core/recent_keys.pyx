# cython: language_level=3
"""RecentKeys: the newest index file's key hashes, in memory, for key lookups.

A lookup in the index file reads three places that lie far apart: the key's slot, the
entry the slot points to, and the record. Each is a cache and TLB miss on a large
mapping (about 150-250 ns on the project's VMs). The table keeps, for each key hash of
the newest index file, where its newest entry points (record offset and chain link), in
buckets of four 16-byte ways, one cache line each, in an anonymous mapping asked for
huge pages. A hash has two buckets (two choices: a new hash takes the emptier one, so
few keys get pushed out before the table is three quarters full); a lookup loads both
lines at once, then reads the record.

It is filled lazily, by the querier, from the index file's own entries: each query first
takes in the entries published since the last one (``catch_up``, reading them in order),
so it holds exactly what the file holds and costs nothing when nobody queries. A full
pair of buckets pushes out its oldest way (the smallest record offset), and the bucket
remembers that it did.

What a hit stands for, in a file the index service checked (``IndexFile.first_problem``,
so every entry is reachable from its slot by chains that only go to older entries): the
walk from the key's slot passes only entries of other keys until it reaches the newest
entry of this key hash, so starting there gives the walk's result, as long as no lower
time bound can stop the walk before it (the querier uses the table only when the query
begins at or before the file's first store time). A key hash the table does not hold is
absent from the file when the table took in every entry since the file's first and
neither of its buckets ever pushed a way out; otherwise the querier walks the file from
the slot.

The table grows with the file: it starts at ``INITIAL_WAYS`` (or its most, if less) and,
when the file holds more entries than three quarters of its ways, is made anew as large
as they need (a power of two, at most the ways it was given) and taken in again from the
file's first entry (reading them all again: what each doubling costs, in all about two
passes over the entries). Its memory follows the keys: 1 MiB at first, 16 bytes a way
(64 MiB for 4,194,304 ways) only once a file holds that many.

The table is reset when the newest file changes (a roll, a rebuild, a truncation) or
its count goes back, and when more entries arrived since the last query than it has
ways (it then takes in only the newest and claims nothing about older ones). An entry it
cannot stand for (a negative hash or time, a chain link that is not to an older entry)
makes it step aside for that file: every query then walks the file.
"""

from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t, uintptr_t
from libc.stdlib cimport calloc, free
from libc.string cimport memset
from posix.mman cimport (MADV_DONTNEED, MAP_ANONYMOUS, MAP_FAILED, MAP_PRIVATE, PROT_READ, PROT_WRITE, madvise,
                         mmap, munmap)

from pymq._core.atomic cimport pymq_acquire_fence
from pymq._core.hton cimport pymq_get_i32, pymq_get_i64
from pymq._core.index_file cimport ENTRY_SIZE, IndexFile
from pymq._core.mapped_file cimport MappedFile

cdef extern from *:
    """
    #include <sys/mman.h>
    #ifndef MADV_HUGEPAGE
    #define MADV_HUGEPAGE 14
    #endif
    #define pymq_prefetch(p) __builtin_prefetch((p), 1, 3)
    """
    int MADV_HUGEPAGE
    void pymq_prefetch(const void *p) nogil

cdef size_t INITIAL_WAYS = 65536    # 1 MiB: the table of a file holding few entries


def _set_initial_ways(size_t ways) -> int:
    """For tests: the ways a table starts with (tables made from now on). Returns the
    setting before."""
    global INITIAL_WAYS
    before = INITIAL_WAYS
    INITIAL_WAYS = max(<size_t>4, ways)
    return before


cdef enum:
    WAYS = 4                    # 4 x 16 bytes: one cache line per bucket
    HUGE = 2 * 1024 * 1024
    AHEAD = 8                   # entries whose buckets are prefetched ahead of the insert
    NOGIL_FILL = 16384          # a catch-up of this many entries or more releases the GIL


cdef inline uint64_t _mix(int32_t key_hash) noexcept nogil:
    """The hash's bits spread over 64 (a multiply-xorshift finalizer): Java's string hashes
    of similar keys ("key-1", "key-2", ...) form lattices that a multiplication alone maps
    onto a third of the buckets (24,000 such hashes took 7,767 of 16,384 first buckets)."""
    cdef uint64_t z = <uint64_t><uint32_t>key_hash * 0x9E3779B97F4A7C15ULL
    z ^= z >> 32
    z *= 0xD6E8FEB86659FD93ULL
    return z ^ (z >> 32)


cdef inline size_t _bucket(int32_t key_hash, size_t mask) noexcept nogil:
    """The first bucket of a hash: the low bits of its mix."""
    return <size_t>_mix(key_hash) & mask


cdef inline size_t _bucket2(int32_t key_hash, size_t mask) noexcept nogil:
    """Its second bucket: the high half of its mix."""
    return <size_t>(_mix(key_hash) >> 32) & mask


cdef class RecentKeys:
    """``RecentKeys(ways)``: a table of at most ``ways`` key hashes (rounded up to a power
    of two, at least 4; 16 bytes each, mapped at the first ``catch_up``), starting smaller
    and grown as the newest file fills (see the module)."""

    def __init__(self, size_t ways):
        cdef size_t n = 4
        while n < ways:
            n <<= 1
        self.max_capacity = n
        self._size(min(n, INITIAL_WAYS))
        self.ways = NULL
        self.evicted = NULL
        self.file = None
        self.lo = self.hi = 1
        self.usable = True

    def __dealloc__(self):
        self._release()

    cdef void _size(self, size_t ways) noexcept:
        """Set the table's size (a power of two, at least 4 ways); nothing mapped yet."""
        cdef size_t n = 4
        while n < ways:
            n <<= 1
        self.capacity = n
        self.nbuckets = n // WAYS
        self.mask = self.nbuckets - 1

    cdef int _grow(self, size_t entries) except -1:
        """A table for ``entries`` (more than three quarters of its ways), empty: as large
        as they need, up to ``max_capacity``; taken in again from the file's first entry."""
        cdef size_t n = self.capacity
        while n < self.max_capacity and entries * 4 > n * 3:
            n <<= 1
        self._release()
        self._size(n)
        self._alloc()
        self.file = None
        self.lo = self.hi = 1
        return 0

    cdef void _release(self) noexcept:
        if self.map_base != NULL:
            munmap(self.map_base, self.map_bytes)
            self.map_base = NULL
            self.ways = NULL
        free(self.evicted)
        self.evicted = NULL

    cdef int _alloc(self) except -1:
        """Map the table: anonymous memory (zero: every way empty), aligned to and asked
        for 2 MiB pages where it is that large, so its lines cost no TLB misses."""
        cdef size_t size = self.nbuckets * WAYS * sizeof(RecentWay)
        cdef size_t extra = HUGE if size >= HUGE else 0
        cdef void *p = mmap(NULL, size + extra, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        cdef uintptr_t a
        if p == MAP_FAILED:
            raise MemoryError("cannot map the recent-keys table")
        self.map_bytes = size + extra
        if extra:
            a = (<uintptr_t>p + HUGE - 1) & ~(<uintptr_t>HUGE - 1)
            madvise(<void *>a, size, MADV_HUGEPAGE)
            # the table starts at the aligned address; the whole mapping is unmapped at the end
            self.ways = <RecentWay *>a
        else:
            self.ways = <RecentWay *>p
        self.map_base = p
        self.evicted = <uint8_t *>calloc(self.nbuckets, 1)
        if self.evicted == NULL:
            raise MemoryError()
        return 0

    cdef void _clear(self) noexcept:
        """Empty every way: the pages are given back and read as zeros again (no pass
        over the table); nothing to do for a table nothing was taken into."""
        if self.ways != NULL and self.taken:
            madvise(self.map_base, self.map_bytes, MADV_DONTNEED)    # keeps the huge-page advice
            memset(self.evicted, 0, self.nbuckets)

    cdef void _insert(self, int32_t key_hash, int64_t phy, int32_t prev) noexcept nogil:
        """Put the hash's newest entry in one of its two buckets: where it is already,
        else an empty way of the bucket with more of them (the first on a tie: two
        choices keep the buckets even, ~0.5 % of keys pushed out at three quarters full),
        else in place of the oldest way of the two (that bucket then remembers it pushed a
        key out)."""
        cdef size_t b1 = _bucket(key_hash, self.mask), b2 = _bucket2(key_hash, self.mask)
        cdef RecentWay *w
        cdef RecentWay *empty1 = NULL
        cdef RecentWay *empty2 = NULL
        cdef RecentWay *empty
        cdef RecentWay *oldest = NULL
        cdef size_t oldest_bucket = b1, b
        cdef int i, k, free1 = 0, free2 = 0
        for k in range(2):
            b = b1 if k == 0 else b2
            w = self.ways + b * WAYS
            for i in range(WAYS):
                if w[i].phy1 == 0:
                    if k == 0:
                        free1 += 1
                        if empty1 == NULL:
                            empty1 = &w[i]
                    else:
                        free2 += 1
                        if empty2 == NULL:
                            empty2 = &w[i]
                elif w[i].key_hash == key_hash:
                    w[i].phy1 = phy + 1
                    w[i].prev = prev
                    return
                elif oldest == NULL or w[i].phy1 < oldest.phy1:
                    oldest = &w[i]
                    oldest_bucket = b
        empty = empty1 if free1 >= free2 else empty2
        if empty == NULL:
            empty = oldest
            self.evicted[oldest_bucket] = 1
        empty.phy1 = phy + 1
        empty.key_hash = key_hash
        empty.prev = prev

    cdef int catch_up(self, IndexFile f) except -1:
        """Take in the entries ``f`` published since the last call (``f`` is the newest
        index file, checked by the index service). A long catch-up (a first query on a
        large file) runs without the GIL, the file pinned; a query meanwhile finds the
        table busy and walks the file."""
        cdef const char *base
        cdef int32_t count, start
        cdef MappedFile mf
        if self.filling:
            return 0
        if self.ways == NULL:
            self._alloc()
        base = f._base()
        count = pymq_get_i32(base + 36)
        pymq_acquire_fence()            # the entries below the count were written before it
        if count <= 0:
            count = 1
        if count > f.index_num:
            count = f.index_num
        if f is not self.file or count < self.hi:
            self._clear()
            self.file = f
            self.lo = self.hi = 1
            self.usable = True
        if not self.usable or count == self.hi:
            return 0
        if self.capacity < self.max_capacity and <size_t>(count - 1) * 4 > self.capacity * 3:
            self._grow(count - 1)
            self.file = f
        if <size_t>(count - self.hi) > self.capacity:
            self._clear()               # more arrived than the table holds: the newest only
            self.lo = self.hi = count - <int32_t>self.capacity
        start = self.hi
        base += f.entries_pos
        if count - start < NOGIL_FILL:
            self._fill(base, start, count)
        else:
            mf = f.mapped_file
            mf.pin()
            self.filling = True
            try:
                with nogil:
                    self._fill(base, start, count)
            finally:
                self.filling = False
                mf.unpin()
        self.taken += count - start
        self.hi = count
        return 0

    cdef void _fill(self, const char *entries, int32_t start, int32_t stop) noexcept nogil:
        """Insert entries ``[start, stop)``; an entry the builder never writes makes the
        table unusable for this file."""
        cdef const char *e
        cdef int32_t i, h, prev
        cdef int64_t phy
        for i in range(start, stop):
            if i + AHEAD < stop:
                h = pymq_get_i32(entries + <Py_ssize_t>(i + AHEAD) * ENTRY_SIZE)
                pymq_prefetch(self.ways + _bucket(h, self.mask) * WAYS)
                pymq_prefetch(self.ways + _bucket2(h, self.mask) * WAYS)
            e = entries + <Py_ssize_t>i * ENTRY_SIZE
            h = pymq_get_i32(e)
            phy = pymq_get_i64(e + 4)
            prev = pymq_get_i32(e + 16)
            if h < 0 or phy < 0 or pymq_get_i32(e + 12) < 0 or prev < 0 or prev >= i:
                self.usable = False
                return
            self._insert(h, phy, prev)

    cdef int find(self, int32_t key_hash, int64_t *phy, int32_t *prev) noexcept:
        """1: the newest entry of ``key_hash`` points at ``phy[0]``, chained to
        ``prev[0]``; 0: the file has no entry of it; -1: unknown (walk the file)."""
        cdef size_t b1, b2, b
        cdef RecentWay *w
        cdef int i, k
        if not self.usable or self.ways == NULL or self.filling:
            return -1
        b1 = _bucket(key_hash, self.mask)
        b2 = _bucket2(key_hash, self.mask)
        for k in range(2):
            b = b1 if k == 0 else b2
            w = self.ways + b * WAYS
            for i in range(WAYS):
                if w[i].phy1 != 0 and w[i].key_hash == key_hash:
                    phy[0] = w[i].phy1 - 1
                    prev[0] = w[i].prev
                    return 1
        if self.lo == 1 and not self.evicted[b1] and not self.evicted[b2]:
            return 0
        return -1

    cdef void prefetch(self, int32_t key_hash) noexcept:
        """Start loading the two buckets of ``key_hash`` (a lookup reads them a little
        later; the two loads overlap)."""
        if self.ways != NULL:
            pymq_prefetch(self.ways + _bucket(key_hash, self.mask) * WAYS)
            pymq_prefetch(self.ways + _bucket2(key_hash, self.mask) * WAYS)

    def held(self) -> int:
        """How many ways hold a key hash (for tests and stats)."""
        cdef size_t i, n = 0
        if self.ways == NULL:
            return 0
        for i in range(self.nbuckets * WAYS):
            if self.ways[i].phy1 != 0:
                n += 1
        return n

    def lookup(self, int key_hash):
        """``find`` from Python (tests): ``(record offset, chain link)``, False when the
        newest file has no entry of the hash, None when the table cannot tell."""
        cdef int64_t phy = 0
        cdef int32_t prev = 0
        cdef int r = self.find(key_hash, &phy, &prev)
        if r > 0:
            return (phy, prev)
        return False if r == 0 else None

    def reset(self):
        """Forget everything (the next ``catch_up`` starts again from the file's first entry)."""
        self._clear()
        self.file = None
        self.lo = self.hi = 1
        self.usable = True
