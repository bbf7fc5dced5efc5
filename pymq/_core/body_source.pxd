cdef class BodySource:
    cdef Py_ssize_t n
    cdef const char **ptr           # body i: ptr[i][:size[i]]
    cdef Py_ssize_t *size
    cdef Py_buffer *views           # exported buffers, released at deallocation
    cdef Py_ssize_t nviews
    cdef Py_ssize_t cap_views
    cdef list owners                # objects pointed into

    cdef int _alloc(self, Py_ssize_t n) except -1
    cdef Py_buffer *_hold(self, object obj, int flags) except NULL


cpdef BodySource load_bodies(object bodies)
