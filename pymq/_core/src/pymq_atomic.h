/* Publication order for data written without the GIL and read by other threads.
 *
 * The dispatcher appends consume-queue entries and index entries with the GIL released
 * while readers (pulls, key lookups) hold it. A writer fills the bytes first and then
 * moves the position (or the slot) that makes them visible, with a release store; a
 * reader loads that position with an acquire load before it reads the bytes below it.
 * On x86-64 both are plain moves; what they forbid is the compiler (and weaker CPUs)
 * reordering the two. */
#ifndef PYMQ_ATOMIC_H
#define PYMQ_ATOMIC_H

#include <stddef.h>
#include <Python.h>

static inline void pymq_store_release_ssize(Py_ssize_t *p, Py_ssize_t v) {
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}

static inline Py_ssize_t pymq_load_acquire_ssize(const Py_ssize_t *p) {
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static inline void pymq_release_fence(void) {
    __atomic_thread_fence(__ATOMIC_RELEASE);
}

static inline void pymq_acquire_fence(void) {
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
}

#endif
