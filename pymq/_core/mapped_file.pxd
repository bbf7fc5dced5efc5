cdef class MappedFile:
    cdef char *base
    cdef readonly str file_name
    cdef readonly long long file_from_offset
    cdef readonly Py_ssize_t file_size
    cdef readonly bint writable
    cdef Py_ssize_t wrote
    cdef Py_ssize_t flushed
    cdef public long long store_timestamp     # newest store timestamp appended (checkpoint)
    cdef public bint first_create_in_queue
    cdef readonly Py_ssize_t reserved         # bytes from 0 known allocated on disk
    cdef readonly Py_ssize_t reserve_chunk    # 0: allocated whole; else sparse, reserved by this much
    cdef unsigned char *granted               # sparse files: bitmap of GRANULE-sized runs reserved
    cdef Py_ssize_t granted_count             # ... past ``reserved`` (random writes); NULL: none yet
    cdef char *_cpath                         # the path, encoded, for GIL-free reservations
    cdef int _fd                              # kept open for reservations when hold_fd, else -1
    cdef public bint hold_fd                  # many reservations ahead (the index being written)
    cdef bint _random_access                  # MADV_RANDOM (sparse, not read in order)
    cdef int _exports
    cdef int _pins
    cdef bint _closing
    cdef bint _evicted                        # unmapped by a map cache, mapped again on access
    cdef public bint used                     # read since the map cache's last look (readers set it)
    cdef public object map_cache              # told of each map again and of the close (or None)
    # the write window (pymq.store.prefault_service): pages ahead of the writes populated
    cdef readonly Py_ssize_t populated_to     # populated for writing up to here
    cdef readonly Py_ssize_t reserve_ahead    # sparse, while populated: reserve this much early
    cdef int wake_fd                          # eventfd of the populating thread (-1: none)
    cdef Py_ssize_t wake_at                   # tell it once a reservation asks for this much
    cdef object __weakref__

    cpdef int reserve(self, Py_ssize_t upto) except -1
    cdef int _reserve_to(self, Py_ssize_t upto) except -1
    cpdef int reserve_range(self, Py_ssize_t start, Py_ssize_t end) except -1
    cdef int reserve_nogil(self, Py_ssize_t upto) noexcept nogil
    cdef int reserve_range_nogil(self, Py_ssize_t start, Py_ssize_t end) noexcept nogil
    cdef void _ungrant(self, Py_ssize_t start, Py_ssize_t end) noexcept nogil
    cdef inline int pin(self) except -1
    cdef inline void unpin(self) noexcept
    cdef int _check_open(self) except -1
    cdef void _unmap(self) noexcept
    cpdef bint evict(self)
    cdef int map_again(self) except -1
    cdef int _remap(self) except -1
    cdef void _wake(self) noexcept
    cdef int _populate_loop(self, Py_ssize_t window, int timeout_ms) noexcept nogil


cdef enum:
    GRANULE = 4096      # bytes reserved at a time for random writes into a sparse file


cdef inline bint granules_reserved(const unsigned char *granted, Py_ssize_t reserved, Py_ssize_t file_size,
                                   Py_ssize_t start, Py_ssize_t end) noexcept nogil:
    """``range_reserved`` on a file's fields (for callers without the GIL)."""
    cdef Py_ssize_t g, last
    if end <= reserved:
        return True
    if granted == NULL or start < 0 or end > file_size:
        return False
    if start < reserved:
        start = reserved
    g = start // GRANULE
    last = (end - 1) // GRANULE
    while g <= last:
        if not (granted[g >> 3] & (1 << (g & 7))):
            return False
        g += 1
    return True


cdef inline bint range_reserved(MappedFile mf, Py_ssize_t start, Py_ssize_t end) noexcept:
    """Whether the disk blocks of bytes ``[start, end)`` of ``mf`` are known allocated
    (``reserve``d from 0, or ``reserve_range``d): a bit test."""
    return granules_reserved(mf.granted, mf.reserved, mf.file_size, start, end)


cdef inline MappedFile segment_for(list files, long long offset, long long file_size):
    """The segment of ``files`` (ordered, gap-free, each ``file_size`` bytes) holding
    ``offset``, or None. No Python call: list indexing only."""
    cdef Py_ssize_t n = len(files), index
    cdef MappedFile first
    if n == 0 or offset < 0:
        return None
    first = <MappedFile>files[0]
    index = <Py_ssize_t>(offset // file_size - first.file_from_offset // file_size)
    if index < 0 or index >= n:
        return None
    first = <MappedFile>files[index]
    if first.file_from_offset <= offset < first.file_from_offset + file_size:
        return first
    return None
