# cython: language_level=3
"""MappedFile: one fixed-size segment file mapped into memory (RocketMQ's ``MappedFile``).

A segment is named by the offset of its first byte in its queue (20 digits), has a fixed
size, and tracks how far it is written (``wrote_position``) and forced to disk
(``flushed_position``). New segments are allocated on disk with ``posix_fallocate`` before
they are mapped, so a full disk is an error at creation (``DiskFullError``), never a SIGBUS
inside a mapped write. A file opened with a ``reserve_chunk`` is sparse instead: it gets
its full length at once but disk blocks only ahead of the writes, ``reserve_chunk`` bytes
at a time (``reserve``, which every write path calls first), so a file holding a few
entries takes a few blocks and a full disk is still an error before the write. Files
written at scattered places (an index's slot table, the timer wheel) reserve the
4 KiB granules they touch instead (``reserve_range``, checked by ``range_reserved``),
so they take blocks where they hold data, not up to the farthest write.

Differences from RocketMQ: there is no transient store pool (the committed position is the
wrote position), and the reference counting of ``ReferenceResource`` is replaced by
``pin``/``unpin`` around work done without the GIL plus a count of exported buffers:
``close()`` unmaps only when neither is held, and otherwise defers the unmap to the last
release.

A file may also be *evicted* (``evict``, by ``pymq.store.map_cache``, which keeps the
number of consume-queue files mapped under a cap): its mapping goes, the file and every
position stay, and the next access maps it again (``pin``, every Python-level method, and
``map_again`` for C callers, which check ``base != NULL`` first). A pinned or exported file
is never evicted.
"""

from libc.errno cimport EAGAIN, EBADF, EFBIG, EINTR, ENOENT, ENOMEM, ENOSPC, errno
from libc.stdlib cimport calloc, free
from libc.string cimport memcpy, memset, strerror
from posix.fcntl cimport O_CREAT, O_RDONLY, O_RDWR, open as c_open
from posix.unistd cimport close as c_close, ftruncate
from posix.stat cimport struct_stat, fstat
from posix.mman cimport (MAP_FAILED, MAP_SHARED, MS_SYNC, PROT_READ, PROT_WRITE, madvise,
                         mmap, msync, munmap)
from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_FillInfo
from cpython.bytes cimport PyBytes_FromStringAndSize

from pymq._core.clayout cimport OS_PAGE_SIZE
from pymq._core.hton cimport pymq_get_i32, pymq_get_i64

import os

from pymq.errors import DiskFullError, SegmentSizeError, StoreStateError


cdef extern from "fcntl.h" nogil:
    int posix_fallocate(int fd, long offset, long length)
    int fallocate(int fd, int mode, long offset, long length)
    int FALLOC_FL_KEEP_SIZE
    int FALLOC_FL_PUNCH_HOLE

cdef extern from *:
    """
    #include <sys/mman.h>
    #include <poll.h>
    #include <sys/eventfd.h>
    #ifndef MADV_POPULATE_READ
    #define MADV_POPULATE_READ 22
    #endif
    #ifndef MADV_POPULATE_WRITE
    #define MADV_POPULATE_WRITE 23
    #endif
    /* added to the populating thread's eventfd to stop it (a writer adds 1s) */
    #define PYMQ_POPULATE_STOP (1ULL << 40)
    """
    Py_ssize_t PY_SSIZE_T_MAX
    unsigned long long PYMQ_POPULATE_STOP
    int MADV_POPULATE_READ
    int MADV_POPULATE_WRITE
    int MADV_RANDOM
    ctypedef unsigned long long eventfd_t
    int eventfd_read(int fd, eventfd_t *value) nogil
    int eventfd_write(int fd, eventfd_t value) nogil
    struct pollfd:
        int fd
        short events
        short revents
    short POLLIN
    int poll(pollfd *fds, unsigned long nfds, int timeout) nogil

cdef enum:
    POPULATE_CHUNK = 256 * 1024     # bytes populated per madvise (the write position is read between)


cdef extern from "<sys/vfs.h>" nogil:
    struct statfs:
        long f_type
    int fstatfs(int fd, statfs *buf)


cdef bint _holes_take_space(int fd) noexcept:
    """Whether reading a hole of this file system takes space (tmpfs, ramfs): sparse
    files there could fault (SIGBUS) on a read once it is full."""
    cdef statfs sf
    if fstatfs(fd, &sf) != 0:
        return False
    return sf.f_type == 0x01021994 or sf.f_type == <long>0x858458f6


cdef int _raise_alloc(int rc, Py_ssize_t nbytes, str path) except -1:
    if rc == ENOSPC or rc == EFBIG:
        raise DiskFullError(rc, f"cannot reserve {nbytes} bytes of {path}: {strerror(rc).decode()}")
    raise OSError(rc, f"posix_fallocate failed for {path}: {strerror(rc).decode()}")


cdef extern from "<unistd.h>" nogil:
    int syncfs(int fd)


def sync_file_system(str path) -> None:
    """``syncfs``: every dirty page of the file system holding ``path`` on disk, in one
    call (many small files at once cost one journal commit, not one each). Raises
    OSError when it fails."""
    cdef bytes bpath = os.fsencode(path)
    cdef int fd = c_open(bpath, O_RDONLY, 0)
    cdef int rc
    if fd < 0:
        raise OSError(errno, f"{strerror(errno).decode()}: {path}")
    with nogil:
        rc = syncfs(fd)
    err = errno
    c_close(fd)
    if rc != 0:
        raise OSError(err, f"syncfs failed for {path}: {strerror(err).decode()}")


def offset_to_file_name(long long offset) -> str:
    """``UtilAll.offset2FileName``: the offset, zero-padded to 20 digits."""
    return f"{offset:020d}"


cdef class MappedFile:
    """One segment of a commit log, consume queue or index (``MappedFile``).

    ``MappedFile(path, file_size, create=False, writable=True, reserve_chunk=0,
    readahead=False)`` maps an existing file whose length must equal ``file_size``
    (``SegmentSizeError`` otherwise), or with ``create=True`` allocates a new one
    (sparse with a ``reserve_chunk``; a sparse file gets ``MADV_RANDOM`` unless it is
    read in order, ``readahead``). The file's start offset is its name when the name
    is a number, else 0. Positions are in bytes from the start of this file.
    """

    def __cinit__(self, str path, Py_ssize_t file_size, bint create=False, bint writable=True,
                  Py_ssize_t reserve_chunk=0, bint readahead=False):
        self.base = NULL
        self.granted = NULL
        self.wake_fd = -1
        self.wake_at = PY_SSIZE_T_MAX
        self.file_name = path
        self._cpath = NULL
        self._fd = -1
        self.file_size = file_size
        self.writable = writable
        name = os.path.basename(path)
        self.file_from_offset = int(name) if name.isdigit() else 0
        cdef int fd, rc, flags = O_RDWR if writable else O_RDONLY
        cdef struct_stat st
        cdef void *p
        cdef bint fresh
        cdef Py_ssize_t alloc
        if file_size <= 0:
            raise ValueError("file_size must be positive")
        if create and not writable:
            raise ValueError("cannot create a read-only segment")
        # A new segment is allocated under a temporary name and renamed into place once
        # it has its full size, so a crash never leaves a short segment behind.
        fresh = create and not os.path.exists(path)
        open_path = path + ".tmp" if fresh else path
        cdef bytes bpath = os.fsencode(open_path)
        cdef bytes fpath = os.fsencode(path)
        self._cpath = <char *>calloc(len(fpath) + 1, 1)
        if self._cpath == NULL:
            raise MemoryError()
        memcpy(self._cpath, <char *>fpath, len(fpath))
        if fresh:
            flags |= O_CREAT
        fd = c_open(bpath, flags, 0o644)
        if fd < 0:
            raise OSError(errno, f"{strerror(errno).decode()}: {open_path}")
        try:
            if fstat(fd, &st) != 0:
                raise OSError(errno, f"{strerror(errno).decode()}: {open_path}")
            self.reserve_chunk = reserve_chunk if 0 < reserve_chunk < file_size else 0
            if self.reserve_chunk and writable and _holes_take_space(fd):
                # tmpfs: a read fault on a hole allocates memory (a SIGBUS once it is full),
                # so files there are allocated whole, holes of an existing file included
                self.reserve_chunk = 0
                if not fresh and st.st_blocks * 512 < file_size:
                    with nogil:
                        rc = posix_fallocate(fd, 0, file_size)
                        while rc == EINTR:
                            rc = posix_fallocate(fd, 0, file_size)
                    if rc != 0:
                        _raise_alloc(rc, file_size, path)
            # an existing sparse file: what is allocated is not known, the first write
            # reserves from 0 (already allocated blocks cost nothing)
            self.reserved = file_size if self.reserve_chunk == 0 or not writable else 0
            if fresh:
                if self.reserve_chunk:
                    if ftruncate(fd, file_size) != 0:
                        raise OSError(errno, f"{strerror(errno).decode()}: {open_path}")
                    alloc = self.reserve_chunk
                else:
                    alloc = file_size
                with nogil:
                    rc = posix_fallocate(fd, 0, alloc)
                    while rc == EINTR:
                        rc = posix_fallocate(fd, 0, alloc)
                self.reserved = alloc
                if rc != 0:
                    if rc == ENOSPC or rc == EFBIG:
                        raise DiskFullError(rc, f"cannot allocate {file_size} bytes for {path}: {strerror(rc).decode()}")
                    raise OSError(rc, f"posix_fallocate failed for {path}: {strerror(rc).decode()}")
            elif st.st_size != file_size:
                raise SegmentSizeError(f"{path}: {st.st_size} bytes, expected {file_size}")
            p = mmap(NULL, file_size, PROT_READ | PROT_WRITE if writable else PROT_READ,
                     MAP_SHARED, fd, 0)
            if p == MAP_FAILED:
                raise OSError(errno, f"mmap failed for {path}: {strerror(errno).decode()}")
            self.base = <char *>p
            self._random_access = self.reserve_chunk and not readahead
            if self._random_access:
                # a sparse file is mostly holes: a fault must not read (zero-fill) megabytes
                # around it, or opening thousands of nearly empty queues pages in gigabytes
                # (a commit-log segment, read in order, keeps the kernel's readahead)
                madvise(p, file_size, MADV_RANDOM)
            if fresh:
                os.rename(open_path, path)
        except BaseException:
            if self.base != NULL:
                munmap(self.base, file_size)
                self.base = NULL
            if fresh:
                try:
                    os.unlink(open_path)
                except OSError:
                    pass
            raise
        finally:
            c_close(fd)

    def __dealloc__(self):
        if self.base != NULL:
            munmap(self.base, self.file_size)
            self.base = NULL
        free(self.granted)
        self.granted = NULL
        free(self._cpath)
        self._cpath = NULL
        if self._fd >= 0:
            c_close(self._fd)
            self._fd = -1

    # -- lifetime --------------------------------------------------------------------------

    cdef inline int pin(self) except -1:
        if self.base == NULL or self._closing:
            self._check_open()              # maps an evicted file again; raises when closed
        self._pins += 1
        return 0

    cdef inline void unpin(self) noexcept:
        self._pins -= 1
        if self._closing and self._pins == 0 and self._exports == 0:
            self._unmap()

    cdef int _check_open(self) except -1:
        if self.base == NULL and self._evicted and not self._closing:
            self._remap()
        if self.base == NULL or self._closing:
            raise StoreStateError(f"segment {self.file_name} is closed")
        return 0

    # -- eviction (pymq.store.map_cache) ---------------------------------------------------

    cpdef bint evict(self):
        """Unmap the file but keep it: positions, reservation and the file stay, and the
        next access maps it again. False, doing nothing, when it is pinned, exported,
        closed or not mapped. The caller makes sure no C code writes it without the GIL."""
        if self.base == NULL or self._closing or self._pins or self._exports:
            return False
        munmap(self.base, self.file_size)
        self.base = NULL
        self._evicted = True
        return True

    cdef int map_again(self) except -1:
        """For C callers that found ``base == NULL``: 1 when the file is mapped now (an
        evicted file is mapped again), 0 when it is closed or its file is gone."""
        if self.base != NULL:
            return 1
        if self._closing or not self._evicted:
            return 0
        self._remap()
        return self.base != NULL

    cdef int _remap(self) except -1:
        """Map an evicted file again and tell ``map_cache`` (the file is pinned meanwhile,
        so the cache cannot take it back). Leaves ``base`` NULL when the file is gone (a
        writer in another process deleted it); other failures raise OSError."""
        cdef bytes bpath = os.fsencode(self.file_name)
        cdef int fd, err
        cdef void *p
        fd = c_open(bpath, O_RDWR if self.writable else O_RDONLY, 0)
        if fd < 0:
            if errno == ENOENT:
                return 0
            raise OSError(errno, f"{strerror(errno).decode()}: {self.file_name}")
        p = mmap(NULL, self.file_size, PROT_READ | PROT_WRITE if self.writable else PROT_READ, MAP_SHARED, fd, 0)
        err = errno
        c_close(fd)
        if p == MAP_FAILED:
            raise OSError(err, f"mmap failed for {self.file_name}: {strerror(err).decode()}")
        if self._random_access:
            madvise(p, self.file_size, MADV_RANDOM)
        self.base = <char *>p
        self._evicted = False
        if self.map_cache is not None:
            self._pins += 1
            try:
                self.map_cache.mapped(self)
            finally:
                self.unpin()
        return 0

    @property
    def evicted(self):
        """Unmapped by the map cache; mapped again on the next access."""
        return self._evicted and self.base == NULL and not self._closing

    cdef void _unmap(self) noexcept:
        if self.base != NULL:
            munmap(self.base, self.file_size)
            self.base = NULL
        if self._fd >= 0:
            c_close(self._fd)
            self._fd = -1

    def close(self):
        """Unmap now, or as soon as the last pin or exported buffer is released."""
        self._closing = True
        if self._pins == 0 and self._exports == 0:
            self._unmap()
        cache = self.map_cache
        if cache is not None:
            self.map_cache = None
            cache.closed(self)

    def destroy(self):
        """Close and delete the file."""
        self.close()
        try:
            os.unlink(self.file_name)
        except FileNotFoundError:
            pass

    @property
    def closed(self):
        return (self.base == NULL and not self._evicted) or self._closing

    @property
    def available(self):
        return not self.closed

    # -- positions -------------------------------------------------------------------------

    @property
    def wrote_position(self):
        return self.wrote

    @wrote_position.setter
    def wrote_position(self, Py_ssize_t value):
        if value < 0 or value > self.file_size:
            raise ValueError("position outside the file")
        self.wrote = value

    @property
    def flushed_position(self):
        return self.flushed

    @flushed_position.setter
    def flushed_position(self, Py_ssize_t value):
        if value < 0 or value > self.file_size:
            raise ValueError("position outside the file")
        self.flushed = value

    @property
    def committed_position(self):
        return self.wrote

    @property
    def read_position(self):
        """Bytes readable by consumers: the wrote position (no write buffer in pymq)."""
        return self.wrote

    def set_positions(self, Py_ssize_t value):
        """Set wrote and flushed positions together (load and truncation)."""
        if value < 0 or value > self.file_size:
            raise ValueError("position outside the file")
        self.wrote = value
        self.flushed = value

    def is_full(self):
        return self.wrote == self.file_size

    # -- writing ---------------------------------------------------------------------------

    cpdef int reserve(self, Py_ssize_t upto) except -1:
        """Make sure the disk blocks of bytes ``[0, upto)`` are allocated (sparse files:
        through the next ``reserve_chunk`` boundary). Raises ``DiskFullError`` when the
        disk has no room: the write that asked for it must not happen.

        The appends call it before each write, so it also serves the thread populating
        the write window, when one is armed on this file (``populate_ahead``): it wakes
        the thread once the writes come within half a window of what it populated, and
        when more blocks were reserved (it populates only reserved blocks); and it
        reserves the next chunk half a chunk early (``reserve_ahead``), so the thread has
        reserved pages ahead of the writer when it crosses a chunk boundary. That early
        part is best effort: if the disk has no room for it, only ``upto`` is reserved
        (and nothing early any more in this file)."""
        cdef Py_ssize_t want, before = self.reserved
        if upto + self.reserve_ahead > before:
            want = upto + self.reserve_ahead
            if want > self.file_size:
                want = self.file_size
            if want > upto:
                try:
                    self._reserve_to(want)
                except OSError:                     # DiskFullError too
                    self.reserve_ahead = 0
                    self._reserve_to(upto)
            else:
                self._reserve_to(upto)
            if self.reserved > before and self.wake_fd >= 0:
                self._wake()
                return 0
        if upto >= self.wake_at:
            self._wake()
        return 0

    cdef int _reserve_to(self, Py_ssize_t upto) except -1:
        """``reserve``'s allocation: ``[reserved, upto)``, to the next ``reserve_chunk`` boundary."""
        cdef int fd, rc
        cdef Py_ssize_t start = self.reserved, end
        cdef bytes bpath
        if upto <= self.reserved:
            return 0
        self._check_open()
        end = (upto + self.reserve_chunk - 1) // self.reserve_chunk * self.reserve_chunk
        if end > self.file_size:
            end = self.file_size
        bpath = os.fsencode(self.file_name)
        fd = c_open(bpath, O_RDWR, 0)
        if fd < 0:
            raise OSError(errno, f"{strerror(errno).decode()}: {self.file_name}")
        try:
            with nogil:
                rc = posix_fallocate(fd, start, end - start)
                while rc == EINTR:
                    rc = posix_fallocate(fd, start, end - start)
        finally:
            c_close(fd)
        if rc != 0:
            _raise_alloc(rc, end - start, self.file_name)
        self._ungrant(start // GRANULE * GRANULE, end // GRANULE * GRANULE)   # now in the prefix
        self.reserved = end
        return 0

    cdef int reserve_nogil(self, Py_ssize_t upto) noexcept nogil:
        """``reserve`` without the GIL (the dispatcher's consume-queue appends): 0, or the
        errno of the failed open or allocation (EBADF: the file is closed). Reservations
        of a file come from its one writer, one after the other."""
        cdef Py_ssize_t start = self.reserved, end
        cdef int fd, rc
        if upto <= start:
            return 0
        if self.base == NULL or self._closing or self.reserve_chunk <= 0:
            return EBADF
        end = (upto + self.reserve_chunk - 1) // self.reserve_chunk * self.reserve_chunk
        if end > self.file_size:
            end = self.file_size
        fd = self._fd
        if fd < 0:
            fd = c_open(self._cpath, O_RDWR, 0)
            if fd < 0:
                return errno
        rc = posix_fallocate(fd, start, end - start)
        while rc == EINTR:
            rc = posix_fallocate(fd, start, end - start)
        if fd != self._fd:
            c_close(fd)
        if rc != 0:
            return rc
        self._ungrant(start // GRANULE * GRANULE, end // GRANULE * GRANULE)   # now in the prefix
        self.reserved = end
        return 0

    cdef int reserve_range_nogil(self, Py_ssize_t start, Py_ssize_t end) noexcept nogil:
        """``reserve_range`` without the GIL: 0, or the errno of the failed allocation.
        Writes to one file are serialized by its writer, and so are its reservations."""
        cdef Py_ssize_t s, e, g
        cdef int fd, rc
        if start < 0 or start >= end or granules_reserved(self.granted, self.reserved, self.file_size,
                                                           start, end):
            return 0
        if end > self.file_size:
            end = self.file_size
        if self.granted == NULL:
            self.granted = <unsigned char *>calloc((self.file_size + GRANULE - 1) // GRANULE // 8 + 1, 1)
            if self.granted == NULL:
                return ENOMEM
        s = start // GRANULE * GRANULE
        e = (end + GRANULE - 1) // GRANULE * GRANULE
        if e > self.file_size:
            e = self.file_size
        fd = self._fd
        if fd < 0:
            fd = c_open(self._cpath, O_RDWR, 0)
            if fd < 0:
                return errno
            if self.hold_fd:
                self._fd = fd
        rc = posix_fallocate(fd, s, e - s)
        while rc == EINTR:
            rc = posix_fallocate(fd, s, e - s)
        if fd != self._fd:
            c_close(fd)
        if rc != 0:
            return rc
        g = s // GRANULE
        while g * GRANULE < e:
            if not (self.granted[g >> 3] & (1 << (g & 7))):
                self.granted[g >> 3] |= <unsigned char>(1 << (g & 7))
                self.granted_count += 1
            g += 1
        return 0

    cpdef int reserve_range(self, Py_ssize_t start, Py_ssize_t end) except -1:
        """Make sure the disk blocks of bytes ``[start, end)`` are allocated, whole 4 KiB
        granules at a time, without reserving what lies before them (random writes into
        a sparse file). Raises ``DiskFullError`` when the disk has no room."""
        cdef int rc
        if range_reserved(self, start, end):
            return 0
        self._check_open()
        with nogil:
            rc = self.reserve_range_nogil(start, end)
        if rc != 0:
            _raise_alloc(rc, end - start, self.file_name)
        return 0

    cdef void _ungrant(self, Py_ssize_t start, Py_ssize_t end) noexcept nogil:
        """Forget the granules overlapping ``[start, end)`` (their blocks were punched)."""
        cdef Py_ssize_t g
        if self.granted == NULL or start >= end:
            return
        g = start // GRANULE
        while g * GRANULE < end and g * GRANULE < self.file_size:
            if self.granted[g >> 3] & (1 << (g & 7)):
                self.granted[g >> 3] &= <unsigned char>~(1 << (g & 7))
                self.granted_count -= 1
            g += 1

    @property
    def reserved_bytes(self):
        """Bytes of this file known allocated on disk (the whole file unless sparse)."""
        cdef Py_ssize_t n = self.reserved + self.granted_count * GRANULE
        return n if n < self.file_size else self.file_size

    def append_message(self, data) -> bool:
        """Append ``data`` if it fits entirely (consume queues); False, writing nothing, else."""
        cdef const unsigned char[::1] view = memoryview(data).cast("B")
        cdef Py_ssize_t n = view.shape[0]
        self._check_open()
        if not self.writable:
            raise StoreStateError("segment is read-only")
        if self.wrote + n > self.file_size:
            return False
        if self.wrote + n > self.reserved:
            self.reserve(self.wrote + n)
            self._check_open()              # evicted or closed meanwhile (reserve runs Python)
        if n:
            memcpy(self.base + self.wrote, &view[0], n)
        self.wrote += n
        return True

    def write_at(self, Py_ssize_t pos, data):
        """Overwrite bytes at ``pos`` (headers, fault injection); positions unchanged."""
        cdef const unsigned char[::1] view = memoryview(data).cast("B")
        cdef Py_ssize_t n = view.shape[0]
        self._check_open()
        if not self.writable:
            raise StoreStateError("segment is read-only")
        if pos < 0 or pos + n > self.file_size:
            raise ValueError("write outside the file")
        if n and not range_reserved(self, pos, pos + n):
            self.reserve_range(pos, pos + n)
            self._check_open()              # evicted or closed meanwhile (reserve runs Python)
        if n:
            memcpy(self.base + pos, &view[0], n)

    def zero_range(self, Py_ssize_t start, Py_ssize_t end=-1):
        """Make bytes ``[start, end)`` zero on disk and in the mapping (recovery's cut).

        Punches a hole and allocates again what was reserved of it (two metadata
        operations, however large the range), so the disk space stays reserved; where the
        file system cannot punch holes, reserves the range and writes zeros. Positions
        are not changed.
        """
        cdef int fd, rc = -1, rc2 = 0
        cdef bint punched = False
        cdef Py_ssize_t upto
        self._check_open()
        if not self.writable:
            raise StoreStateError("segment is read-only")
        if end < 0 or end > self.file_size:
            end = self.file_size
        if start < 0 or start >= end:
            return
        upto = end if end < self.reserved else self.reserved
        fd = c_open(self._cpath, O_RDWR, 0)
        if fd >= 0:
            with nogil:
                rc = fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, start, end - start)
                if rc == 0:
                    punched = True
                    self._ungrant(start, end)
                    if start < upto:
                        rc2 = posix_fallocate(fd, start, upto - start)
            c_close(fd)
        if punched:
            if rc2 != 0 and start < self.reserved:
                self.reserved = start         # the next write reserves the rest again
            return
        # no hole punching here: zeros are written, into blocks reserved first (a write
        # into a hole of a full disk would be a SIGBUS)
        self.reserve_range(start, end)
        self.pin()
        try:
            with nogil:
                memset(self.base + start, 0, end - start)
        finally:
            self.unpin()

    def is_able_to_flush(self, int flush_least_pages) -> bool:
        """RocketMQ's rule: full, or enough dirty pages, or anything dirty when 0 pages."""
        cdef Py_ssize_t write = self.wrote, flushed = self.flushed
        if self.wrote == self.file_size and write > flushed:
            return True
        if flush_least_pages > 0:
            return (write // OS_PAGE_SIZE - flushed // OS_PAGE_SIZE) >= flush_least_pages
        return write > flushed

    def flush(self, int flush_least_pages=0) -> int:
        """``msync`` the written, unflushed pages if ``is_able_to_flush``; returns the
        flushed position. The GIL is released during the sync."""
        cdef Py_ssize_t write = self.wrote
        cdef Py_ssize_t start, length
        cdef int rc
        if not self.is_able_to_flush(flush_least_pages) or not self.writable:
            return self.flushed
        if self.base == NULL and self._evicted and not self._closing:
            # no mapping to sync: the kernel holds the pages written through the last one
            try:
                fd = os.open(self.file_name, os.O_RDONLY)
            except FileNotFoundError:
                return self.flushed
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)
            if write > self.flushed:
                self.flushed = write
            return self.flushed
        self.pin()
        try:
            start = (self.flushed // OS_PAGE_SIZE) * OS_PAGE_SIZE
            length = write - start
            with nogil:
                rc = msync(self.base + start, length, MS_SYNC)
            if rc != 0:
                raise OSError(errno, f"msync failed for {self.file_name}: {strerror(errno).decode()}")
            if write > self.flushed:
                self.flushed = write
        finally:
            self.unpin()
        return self.flushed

    def warm(self, Py_ssize_t start=0, Py_ssize_t end=-1):
        """Fault pages ``[start, end)`` into memory, off the hot path (RocketMQ's warm-up).

        Uses ``MADV_POPULATE_READ`` (Linux 5.14+): the page cache pages exist afterwards,
        so a first write costs a cheap write-protect fault instead of an allocation, and
        nothing is dirtied (no zeros written back to disk). Older kernels read one byte
        per page instead. Writes nothing; safe while appends go on. The GIL is released.
        A sparse file is warmed only as far as it is reserved: a hole has no blocks to
        read, and on tmpfs faulting one in would take the space the file does not hold.
        """
        cdef Py_ssize_t i, s0, e0
        cdef int rc
        cdef volatile char sink
        if end < 0 or end > self.file_size:
            end = self.file_size
        if self.reserve_chunk and end > self.reserved:
            end = self.reserved
        s0 = (max(start, 0) // OS_PAGE_SIZE) * OS_PAGE_SIZE
        e0 = end
        if s0 >= e0:
            return
        self.pin()
        try:
            with nogil:
                rc = madvise(self.base + s0, e0 - s0, MADV_POPULATE_READ)
                if rc != 0:
                    i = s0
                    while i < e0:
                        sink = (<volatile char *>self.base)[i]
                        i += OS_PAGE_SIZE
        finally:
            self.unpin()

    # -- the write window (pymq.store.prefault_service) -------------------------------------

    cdef void _wake(self) noexcept:
        """Tell the populating thread the writes moved on (once until it arms again). The
        caller holds the GIL, as ``disarm`` does, so the descriptor is never used closed."""
        self.wake_at = PY_SSIZE_T_MAX
        if self.wake_fd >= 0:
            eventfd_write(self.wake_fd, 1)

    def disarm(self):
        """Stop telling a populating thread about this file's writes (its descriptor is
        forgotten) and reserving early for it."""
        self.wake_fd = -1
        self.wake_at = PY_SSIZE_T_MAX
        self.reserve_ahead = 0

    def populate_ahead(self, int wake_fd, Py_ssize_t window, int timeout_ms=1000):
        """Keep the pages just ahead of the writes populated for writing, without the GIL.

        Populates (``MADV_POPULATE_WRITE``, Linux 5.14+) the pages of
        ``[wrote_position, wrote_position + window)``, never past the file's end nor, in a
        sparse file, past its reserved blocks, so the writer's first store into each of
        them takes no page fault. Populating writes no byte: the pages are made present,
        writable and dirty as a write fault would make them (their zeros are written
        back, at most ``window`` bytes ahead of the data). Then waits on ``wake_fd`` (an
        eventfd) for the writes to come within half a window of the populated end
        (``reserve`` tells it, and also when it reserved more blocks), and goes on.

        Returns 0 once the file is full or closed, 1 after a wait that brought nothing to
        populate (the timeout, or a wake-up of the caller's), 2 when ``wake_fd`` was given
        the stop value (``1 << 40``), or ``-errno`` when madvise failed (``-EINVAL``: the
        kernel has no ``MADV_POPULATE_WRITE``). The file stays armed (``disarm``).
        """
        cdef int rc
        if window <= 0:
            raise ValueError("window must be positive")
        if self.closed or not self.writable:
            return 0
        self.pin()
        try:
            if self.wake_fd != wake_fd:
                self.wake_fd = wake_fd
                self.reserve_ahead = self.reserve_chunk // 2
            if self.populated_to < self.wrote:
                self.populated_to = self.wrote
            with nogil:
                rc = self._populate_loop(window, timeout_ms)
        finally:
            self.unpin()
        return rc

    cdef int _populate_loop(self, Py_ssize_t window, int timeout_ms) noexcept nogil:
        cdef Py_ssize_t w, start, end, limit, half = window // 2
        cdef pollfd pfd
        cdef eventfd_t value
        cdef bint waited = False
        cdef int n
        pfd.fd = self.wake_fd
        pfd.events = POLLIN
        while True:
            if self._closing or self.base == NULL:
                return 0
            w = self.wrote
            if w >= self.file_size:
                return 0
            limit = w + window
            if limit > self.reserved:
                limit = self.reserved
            if limit >= self.file_size:
                limit = self.file_size          # the last page, even if the file ends inside it
            else:
                limit = limit // OS_PAGE_SIZE * OS_PAGE_SIZE   # no page reaching past the reserved blocks
            start = (w + OS_PAGE_SIZE - 1) // OS_PAGE_SIZE * OS_PAGE_SIZE  # the writer's page is in
            if start < self.populated_to:
                start = self.populated_to
            if start < limit:
                end = start + POPULATE_CHUNK
                if end > limit:
                    end = limit
                if madvise(self.base + start, end - start, MADV_POPULATE_WRITE) != 0:
                    if errno == EINTR or errno == EAGAIN:
                        continue
                    return -errno
                # madvise rounds the length up to whole pages
                self.populated_to = (end + OS_PAGE_SIZE - 1) // OS_PAGE_SIZE * OS_PAGE_SIZE
                waited = False
                continue
            if waited:
                return 1
            # caught up: be told when the writes come within half a window of the end
            # populated; when that end is the reserved blocks' or the file's, ``reserve``
            # tells of more blocks, the queue of the next segment
            self.wake_at = self.populated_to - half if self.populated_to - half > w else PY_SSIZE_T_MAX
            if self.wrote >= self.wake_at:
                continue                    # it moved meanwhile
            n = poll(&pfd, 1, timeout_ms)
            if n > 0:
                eventfd_read(pfd.fd, &value)
                if value >= PYMQ_POPULATE_STOP:
                    return 2
            elif n < 0 and errno != EINTR:
                return -errno
            waited = True

    # -- reading ---------------------------------------------------------------------------

    def read(self, Py_ssize_t pos, Py_ssize_t size) -> bytes:
        """A copy of ``size`` bytes at ``pos``, clipped to the file."""
        self._check_open()
        if pos < 0 or size < 0 or pos > self.file_size:
            raise ValueError("read outside the file")
        if pos + size > self.file_size:
            size = self.file_size - pos
        return PyBytes_FromStringAndSize(self.base + pos, size)

    def get_int(self, Py_ssize_t pos) -> int:
        """Big-endian i32 at ``pos``."""
        self._check_open()
        if pos < 0 or pos + 4 > self.file_size:
            raise ValueError("read outside the file")
        return pymq_get_i32(self.base + pos)

    def get_long(self, Py_ssize_t pos) -> int:
        """Big-endian i64 at ``pos``."""
        self._check_open()
        if pos < 0 or pos + 8 > self.file_size:
            raise ValueError("read outside the file")
        return pymq_get_i64(self.base + pos)

    def __getbuffer__(self, Py_buffer *view, int flags):
        self._check_open()
        if (flags & PyBUF_WRITABLE) and not self.writable:
            raise BufferError("segment is read-only")
        PyBuffer_FillInfo(view, self, self.base, self.file_size, not self.writable, flags)
        self._exports += 1

    def __releasebuffer__(self, Py_buffer *view):
        self._exports -= 1
        if self._closing and self._pins == 0 and self._exports == 0:
            self._unmap()

    def __repr__(self):
        return (f"MappedFile({self.file_name!r}, from={self.file_from_offset}, size={self.file_size}, "
                f"wrote={self.wrote}, flushed={self.flushed})")
