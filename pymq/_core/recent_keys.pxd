# The in-memory table of the newest index file's key hashes (see recent_keys.pyx).
from libc.stdint cimport int32_t, int64_t, uint8_t

from pymq._core.index_file cimport IndexFile


cdef struct RecentWay:
    int64_t phy1        # the entry's record offset + 1; 0: an empty way
    int32_t key_hash
    int32_t prev        # the entry's chain link in the index file


cdef class RecentKeys:
    cdef RecentWay *ways            # nbuckets x WAYS, in one anonymous mapping ...
    cdef void *map_base             # ... mapped from here (ways is aligned within it)
    cdef uint8_t *evicted           # per bucket: a key was ever pushed out of it
    cdef size_t map_bytes
    cdef size_t nbuckets
    cdef size_t mask                # nbuckets - 1 (a power of two)
    cdef readonly size_t capacity   # ways now
    cdef readonly size_t max_capacity   # the most it grows to
    cdef readonly object file       # the IndexFile the table holds the entries of
    cdef readonly int32_t lo        # the first entry number taken in since the last reset
    cdef readonly int32_t hi        # the next entry number to take in
    cdef readonly bint usable       # False: an entry the table cannot stand for (damage)
    cdef bint filling               # a catch-up runs without the GIL: nobody else touches it
    cdef readonly long long taken   # entries taken in since the table was made (stats)

    cdef void _release(self) noexcept
    cdef void _size(self, size_t ways) noexcept
    cdef int _grow(self, size_t entries) except -1
    cdef int _alloc(self) except -1
    cdef void _clear(self) noexcept
    cdef void _insert(self, int32_t key_hash, int64_t phy, int32_t prev) noexcept nogil
    cdef int catch_up(self, IndexFile f) except -1
    cdef void _fill(self, const char *entries, int32_t start, int32_t stop) noexcept nogil
    cdef int find(self, int32_t key_hash, int64_t *phy, int32_t *prev) noexcept
    cdef void prefetch(self, int32_t key_hash) noexcept
