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
    cdef int _exports
    cdef int _pins
    cdef bint _closing
    cdef object __weakref__

    cdef inline int pin(self) except -1
    cdef inline void unpin(self) noexcept
    cdef int _check_open(self) except -1
    cdef void _unmap(self) noexcept
