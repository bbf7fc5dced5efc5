# Big-endian loads/stores (src/pymq_hton.h); memcpy-based, any alignment.
from libc.stdint cimport int16_t, int32_t, int64_t

cdef extern from "pymq_hton.h" nogil:
    void pymq_put_i16(char *p, int16_t v)
    void pymq_put_i32(char *p, int32_t v)
    void pymq_put_i64(char *p, int64_t v)
    int16_t pymq_get_i16(const char *p)
    int32_t pymq_get_i32(const char *p)
    int64_t pymq_get_i64(const char *p)
