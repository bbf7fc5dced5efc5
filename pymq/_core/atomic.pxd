# Release/acquire publication for data written without the GIL (src/pymq_atomic.h).

cdef extern from "pymq_atomic.h" nogil:
    void pymq_store_release_ssize(Py_ssize_t *p, Py_ssize_t v)
    Py_ssize_t pymq_load_acquire_ssize(const Py_ssize_t *p)
    void pymq_release_fence()
    void pymq_acquire_fence()
