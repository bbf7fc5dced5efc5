# The appender's classes, declared for the modules that append beside it (``bodies``:
# put_bodies encodes raw bodies under the same put lock, table and UNIQ_KEY counter).
from libc.stdint cimport int64_t, uint16_t, uint32_t

from pymq._core.mapped_file cimport MappedFile
from pymq._core.message cimport Message, PropsBuf

cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    int pthread_mutex_init(pthread_mutex_t *m, const void *attr)
    int pthread_mutex_destroy(pthread_mutex_t *m)
    int pthread_mutex_lock(pthread_mutex_t *m)
    int pthread_mutex_trylock(pthread_mutex_t *m)
    int pthread_mutex_unlock(pthread_mutex_t *m)


cdef enum:
    # Copies (and CRCs) at least this large run with the GIL released.
    NOGIL_BYTES = 32 * 1024


cdef int64_t now_ms() noexcept nogil
cdef void put_hex(char *out, const unsigned char *src, Py_ssize_t n) noexcept nogil


cdef class TopicQueues:
    cdef bytes encoded
    cdef bint store_only            # a topic only the store writes (NOT_ALLOWED_SEND_TOPICS)
    cdef int64_t *offsets
    cdef Py_ssize_t cap
    cdef dict big

    cdef int64_t get(self, int qid)
    cdef int set(self, int qid, int64_t value) except -1


cdef class PutMessageResult:
    cdef object _status
    cdef readonly long long commitlog_offset
    cdef readonly long long queue_offset
    cdef readonly long long wrote_bytes
    cdef readonly long long store_timestamp
    cdef readonly int msg_num
    cdef readonly str error
    cdef bytes _host
    cdef int64_t *_offsets          # commit-log offset of each message (a batch), or NULL
    cdef Py_ssize_t _stride         # ... or, NULL with a batch of records of one size, that size
    cdef object _uniq
    cdef uint32_t _uniq_time
    cdef uint16_t _uniq_counter
    cdef bint _uniq_generated
    cdef int _uniq_run              # a batch whose messages got consecutive generated UNIQ_KEYs: how many

    cpdef set_status(self, status)
    cdef long long _offset_of(self, Py_ssize_t i)
    cdef str _uniq_at(self, Py_ssize_t i)


cdef PutMessageResult failed(object status, str error)


cdef class CommitLogAppender:
    cdef pthread_mutex_t lock       # the put lock (taken without the GIL when contended)
    cdef bint lock_ready
    cdef MappedFile cur
    cdef object roll
    cdef dict topics
    cdef readonly bytes store_host
    cdef bytes born_host
    cdef bint strict_topics
    cdef readonly int max_message_size
    cdef readonly Py_ssize_t file_size
    cdef bint _writeable
    cdef str _unwriteable_reason
    cdef bint closed
    cdef char uniq_prefix[44]
    cdef Py_ssize_t uniq_prefix_len
    cdef str uniq_prefix_str
    cdef uint16_t uniq_counter
    cdef char uniq_tmpl[9 + 44 + 8]     # the last _uniq_template, for puts in the same ms
    cdef Py_ssize_t uniq_tmpl_len
    cdef uint32_t uniq_tmpl_time
    cdef int64_t month_start
    cdef int64_t next_month
    cdef readonly long long put_count
    cdef public int max_delay_level
    cdef public long long timer_max_delay_ms
    cdef bint _timers_open
    cdef str _timers_reason
    # called while timer puts are refused: None once the timer files can take them again
    # (and it reopened them with set_timers_writeable), else why not
    cdef public object timer_gate
    # each record ends with its own CRC (``__CRC32#``, covering every field), as RocketMQ 5
    # writes with enabledAppendPropCRC
    cdef public bint prop_crc
    # called (under the put lock) when reserving blocks of a sparse segment met a full
    # disk, so the disk guard can refuse puts until space returns; None: nobody to tell
    cdef public object on_disk_full

    cdef _init_uniq(self)
    cdef _set_month(self)
    cdef TopicQueues _topic(self, str topic)
    cdef TopicQueues _system_topic(self, str topic)
    cdef object _timer_deliver_ms(self, Message msg, int64_t now)
    cdef PutMessageResult _roll_failed(self, object e)
    cdef void _acquire(self) noexcept
    cdef uint32_t _uniq_time(self, int64_t now) except? 0
    cdef Py_ssize_t _uniq_template(self, char *buf, uint32_t t) noexcept
    cdef int _append_uniq(self, PropsBuf *props, const char *template, Py_ssize_t n) except -1
    cdef int _add_uniq(self, PropsBuf *props, int64_t now, PutMessageResult r) except -1
    cdef object _check_props(self, PropsBuf *props)
    cdef object _check_sizes(self, Py_ssize_t body_len, Py_ssize_t total)
    cdef bytes _born_host_of(self, Message msg)
    cdef MappedFile _writable_segment(self, Py_ssize_t need)
    cdef PutMessageResult _put(self, Message msg, bint internal)
    cdef PutMessageResult _put_batch(self, list msgs)
