from libc.stdint cimport int32_t

from pymq._core.record cimport RecordLayout


cdef dict record_columns(Py_ssize_t n, const char **recs, const int32_t *sizes, const RecordLayout *lays)
