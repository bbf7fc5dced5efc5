# cython: language_level=3
"""The commit log's append path: put lock, topic-queue offset table, records into segments.

This is RocketMQ's ``CommitLog.asyncPutMessage`` + ``DefaultAppendMessageCallback`` hot
path, in C so that one put costs a few hundred nanoseconds:

1. outside the lock: validate the topic (once per topic, then cached), serialize the
   properties (adding ``UNIQ_KEY`` like a producer would), check sizes, compute the body
   CRC (without the GIL for large bodies);
2. under the put lock: take the current segment; if the record does not fit with
   ``END_FILE_MIN_BLANK_LENGTH`` (8) bytes to spare, write the 8-byte blank and roll to the
   next segment (a Python callback into the MappedFileQueue); stamp the store time, the
   physical offset and the queue offset; copy the record (without the GIL for large ones);
   advance the segment's wrote position and the queue's offset.

The put lock is a plain C lock. It is taken without the GIL when contended, so a thread
copying a large body with the GIL released never blocks the other threads' Python work.
Readers see a record only once ``wrote_position`` moves past it.
"""

cimport cython
from cpython.object cimport PyObject
from cpython.ref cimport Py_DECREF, Py_INCREF
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from libc.stdint cimport int32_t, int64_t, uint16_t, uint32_t
from libc.string cimport memcpy, memset
from posix.time cimport CLOCK_REALTIME, clock_gettime, timespec

from pymq._core.clayout cimport (
    BORNHOST_V6_FLAG, END_FILE_MIN_BLANK_LENGTH, MAX_PROPERTIES_LENGTH, MAX_RECORD_OVER_BODY,
    MAX_TOPIC_LENGTH, STOREHOSTADDRESS_V6_FLAG, TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
)
from pymq._core.mapped_file cimport MappedFile
from pymq._core.message cimport LAZY_ALL, Message, PropsBuf, props_add_str, props_append, props_free, props_init, props_reserve
from pymq._core.record cimport (PROP_CRC_LEN, RecordFields, body_crc32, cal_msg_length, pack_host_cached,
                               write_blank, write_prop_crc, write_record)

import datetime
import os
import random

from pymq.errors import DiskFullError
from pymq.status import PutMessageStatus

cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL

cdef object PUT_OK = PutMessageStatus.PUT_OK
#: stored, but not confirmed by the flush or a slave in time (``PutMessageResult.is_ok``)
cdef frozenset _STORED_UNCONFIRMED = frozenset({PutMessageStatus.FLUSH_DISK_TIMEOUT,
                                               PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
                                               PutMessageStatus.SLAVE_NOT_AVAILABLE})
cdef object MESSAGE_ILLEGAL = PutMessageStatus.MESSAGE_ILLEGAL
cdef object PROPERTIES_SIZE_EXCEEDED = PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
cdef object SERVICE_NOT_AVAILABLE = PutMessageStatus.SERVICE_NOT_AVAILABLE
cdef object CREATE_MAPEDFILE_FAILED = PutMessageStatus.CREATE_MAPEDFILE_FAILED
cdef object WHEEL_TIMER_MSG_ILLEGAL = PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL
cdef object WHEEL_TIMER_NOT_ENABLE = PutMessageStatus.WHEEL_TIMER_NOT_ENABLE

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"          # TopicValidator.RMQ_SYS_SCHEDULE_TOPIC
# properties the put-time transforms set themselves (and the record's own CRC entry, which
# every put writes itself)
STORE_SET_PROPERTIES = ("DELAY", "REAL_TOPIC", "REAL_QID", "__CRC32#")
TIMER_TOPIC = "rmq_sys_wheel_timer"             # TimerMessageStore.TIMER_TOPIC (5.x)
TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"         # a recall's delete mark: "{topic}+{uniq key}" (5.x)
# topics only the store itself writes to (TopicValidator's not-allowed-send set and 5.x's timer)
NOT_ALLOWED_SEND_TOPICS = frozenset({SCHEDULE_TOPIC, TIMER_TOPIC, "RMQ_SYS_TRANS_HALF_TOPIC",
                                     "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC"})

NOT_WRITEABLE = "the store is not writeable"

cdef enum:
    FAST_QUEUE_IDS = 1024

cdef const char *HEX = b"0123456789ABCDEF"


cdef int64_t now_ms() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_REALTIME, &ts)
    return <int64_t>ts.tv_sec * 1000 + ts.tv_nsec // 1000000


def current_millis() -> int:
    """The store's clock: ms since the epoch (CLOCK_REALTIME)."""
    return now_ms()


cdef void put_hex(char *out, const unsigned char *src, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        out[2 * i] = HEX[src[i] >> 4]
        out[2 * i + 1] = HEX[src[i] & 15]


cdef void write_batch(char *dst, RecordFields *fs, const Py_ssize_t *sizes, int64_t *offsets,
                      Py_ssize_t n, int64_t phys, int64_t qbase, int64_t store_ts,
                      const unsigned char *crc_entry) noexcept nogil:
    cdef Py_ssize_t i, pos = 0, pending = -1
    for i in range(n):
        fs[i].store_timestamp = store_ts
        fs[i].queue_offset = qbase + i
        fs[i].physical_offset = phys + pos
        offsets[i] = phys + pos
        write_record(dst + pos, &fs[i], sizes[i])
        # the last record's CRC entry, now that its stores are done (``put_bodies.write_items``)
        if pending >= 0:
            write_prop_crc(dst + pending, sizes[i - 1])
            pending = -1
        if crc_entry[i]:
            pending = pos
        pos += sizes[i]
    if pending >= 0:
        write_prop_crc(dst + pending, sizes[n - 1])


cdef str PROP_CRC_NAME = "__CRC32#"
cdef tuple PROP_CRC_SKIP = ("__CRC32#",)


cdef bint add_crc_entry(PropsBuf *props) except -1:
    """Reserve the record's own CRC entry at the end of the message's properties (its digits
    are written with the record, ``record.write_prop_crc``): a separator first unless the
    properties are empty or end with one (RocketMQ 5's ``enabledAppendPropCRC`` layout).
    False, adding nothing, when the properties leave no room for it below the format's
    32767 bytes: that record is checked by its BODYCRC alone."""
    cdef bint sep = props.length > props.start and props.data[props.length - 1] != 2
    if props.length - props.start + sep + PROP_CRC_LEN > MAX_PROPERTIES_LENGTH:
        return False
    if sep:
        props_append(props, b"\x02", 1)
    props_append(props, b"__CRC32#\x010000000000\x02", PROP_CRC_LEN)
    return True


cdef object _JAVA_LONG = __import__("re").compile(r"[+-]?[0-9]{1,19}")


cdef long long java_long(object text) except? -1:
    """``Long.parseLong``: optional sign and decimal digits only (no spaces, no '_')."""
    if not isinstance(text, str) or _JAVA_LONG.fullmatch(text) is None:
        raise ValueError(f"not a number: {text!r}")
    return int(text)


cdef bint _has_store_set(dict props) except -1:
    """True when ``props`` names one of the properties the put-time transforms set."""
    cdef str k
    for k in STORE_SET_PROPERTIES:
        if k in props:
            return True
    return False


cdef int property_delay_level(Message msg) except -1:
    """RocketMQ's ``getDelayTimeLevel``: the ``delay_level`` attribute, else the DELAY
    property (a user may set it directly, as with RocketMQ's putUserProperty). A negative
    ``delay_level`` means no delay whatever DELAY says: the delivery of a delayed message,
    whose record keeps DELAY as RocketMQ's does (it clears the level, not the property
    text, before the put)."""
    cdef object v
    if msg.delay_level > 0:
        return msg.delay_level
    if msg.delay_level < 0:
        return 0
    if msg._properties:
        v = msg._properties.get("DELAY")
        if isinstance(v, str) and v.isdigit() and len(v) < 10:
            return int(v)
    return 0


# -- topic validation ------------------------------------------------------------------------

cdef bint _strict_char(Py_UCS4 c) noexcept:
    return (c == 37 or c == 124 or c == 95 or c == 45 or 48 <= c <= 57 or 65 <= c <= 90 or 97 <= c <= 122)


def validate_topic(str topic, str mode="strict"):
    """None if ``topic`` is a valid name, else the reason (RocketMQ's TopicValidator).

    ``strict``: ``^[%|a-zA-Z0-9_-]+$`` and at most 127 characters. ``utf8`` (pymq): any
    printable characters but ``/``, ``\\`` and controls, not ``.`` or ``..``, at most 127
    UTF-8 bytes. Neither admits a name that climbs out of ``consumequeue/``.
    """
    cdef Py_UCS4 c
    if not topic:
        return "the topic is empty"
    if mode == "strict":
        if len(topic) > MAX_TOPIC_LENGTH:
            return f"the topic is longer than {MAX_TOPIC_LENGTH} characters"
        for c in topic:
            if not _strict_char(c):
                return f"the topic {topic!r} has a character outside [%|a-zA-Z0-9_-]"
        return None
    if len(topic.encode("utf-8", "surrogatepass")) > MAX_TOPIC_LENGTH:
        return f"the topic is longer than {MAX_TOPIC_LENGTH} UTF-8 bytes"
    if topic in (".", ".."):
        return "the topic may not be '.' or '..'"
    for c in topic:
        if c < 32 or c == 127 or c == 47 or c == 92 or 0xD800 <= c <= 0xDFFF:
            return f"the topic {topic!r} has a path separator, a control character or a lone surrogate"
    return None


@cython.final
cdef class TopicQueues:
    """Next queue offset of each queue of one topic (the topicQueueTable)."""

    def __cinit__(self, bytes encoded):
        self.encoded = encoded
        self.store_only = encoded.decode("utf-8", "replace") in NOT_ALLOWED_SEND_TOPICS
        self.offsets = NULL
        self.cap = 0
        self.big = None

    def __dealloc__(self):
        PyMem_Free(self.offsets)

    cdef int64_t get(self, int qid):
        if qid < 0:
            return 0
        if qid < self.cap:
            return self.offsets[qid]
        if qid >= FAST_QUEUE_IDS:
            return self.big.get(qid, 0) if self.big is not None else 0
        return 0

    cdef int set(self, int qid, int64_t value) except -1:
        cdef Py_ssize_t newcap
        cdef int64_t *p
        if qid < 0:
            raise ValueError("queue ids are >= 0")
        if qid >= FAST_QUEUE_IDS:
            if self.big is None:
                self.big = {}
            self.big[qid] = value
            return 0
        if qid >= self.cap:
            newcap = max(8, self.cap * 2)
            while newcap <= qid:
                newcap *= 2
            newcap = min(newcap, <Py_ssize_t>FAST_QUEUE_IDS)
            p = <int64_t *>PyMem_Realloc(self.offsets, newcap * sizeof(int64_t))
            if p == NULL:
                raise MemoryError()
            memset(p + self.cap, 0, (newcap - self.cap) * sizeof(int64_t))
            self.offsets = p
            self.cap = newcap
        self.offsets[qid] = value
        return 0

    def items(self):
        for q in range(self.cap):
            if self.offsets[q]:
                yield q, self.offsets[q]
        if self.big:
            yield from self.big.items()


# -- results ---------------------------------------------------------------------------------

@cython.final
@cython.freelist(64)
cdef class PutMessageResult:
    """What ``put_message`` / ``put_messages`` return (RocketMQ's PutMessageResult with its
    AppendMessageResult folded in).

    ``status`` is a :class:`PutMessageStatus`; the offsets are meaningful when
    ``is_ok()``. ``msg_id`` is the offset message id (comma-joined for a batch),
    ``uniq_key`` the client id given to a single message.
    """

    def __cinit__(self):
        self._offsets = NULL

    def __dealloc__(self):
        PyMem_Free(self._offsets)

    @property
    def status(self):
        return self._status

    def is_ok(self):
        """True when the message is in the log, as RocketMQ's ``isOk`` (its append
        succeeded): also when the flush or a SYNC_MASTER's slave did not confirm it in time
        (FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE), whose ids and
        offsets are those of the stored record."""
        return self._status is PUT_OK or self._status in _STORED_UNCONFIRMED

    cpdef set_status(self, status):
        self._status = status

    cdef long long _offset_of(self, Py_ssize_t i):
        """Commit-log offset of message ``i`` of the batch (``i < msg_num``)."""
        if self._offsets != NULL:
            return self._offsets[i]
        return self.commitlog_offset + i * self._stride

    @property
    def msg_ids(self):
        """Offset message ids of every message written, in order (made on each call)."""
        if self._host is None or not self.is_ok():
            return []
        if self._offsets == NULL and self._stride == 0:
            return [(self._host + self.commitlog_offset.to_bytes(8, "big")).hex().upper()]
        return [(self._host + self._offset_of(i).to_bytes(8, "big")).hex().upper()
                for i in range(self.msg_num)]

    @property
    def commitlog_offsets(self):
        """Commit-log offset of every message written, in order."""
        if not self.is_ok():
            return []
        if self._offsets == NULL and self._stride == 0:
            return [self.commitlog_offset]
        return [self._offset_of(i) for i in range(self.msg_num)]

    @property
    def msg_id(self):
        ids = self.msg_ids
        return ",".join(ids) if ids else None

    @property
    def uniq_key(self):
        if not self._uniq_generated or self._uniq_run:
            return self._uniq if not self._uniq_run else None
        return self._uniq_at(0)

    @property
    def uniq_keys(self):
        """``put_bodies``: the ``UNIQ_KEY`` of every message, in order, when the store
        generated them all (no ``UNIQ_KEY`` in the properties given); else None."""
        if not self._uniq_run or not self.is_ok():
            return None
        return [self._uniq_at(i) for i in range(self._uniq_run)]

    cdef str _uniq_at(self, Py_ssize_t i):
        """The generated UNIQ_KEY ``i`` places after the first (its counter wraps at 16 bits)."""
        cdef char buf[12]
        cdef unsigned char raw[6]
        cdef uint16_t counter = <uint16_t>(self._uniq_counter + i)
        raw[0] = self._uniq_time >> 24; raw[1] = self._uniq_time >> 16
        raw[2] = self._uniq_time >> 8; raw[3] = self._uniq_time
        raw[4] = counter >> 8; raw[5] = counter
        put_hex(buf, raw, 6)
        return self._uniq + buf[:12].decode("ascii")

    def __repr__(self):
        return (f"PutMessageResult(status={self._status.name}, commitlog_offset={self.commitlog_offset}, "
                f"queue_offset={self.queue_offset}, wrote_bytes={self.wrote_bytes}, msg_num={self.msg_num})")


cdef PutMessageResult failed(object status, str error):
    cdef PutMessageResult r = PutMessageResult.__new__(PutMessageResult)
    r._status = status
    r.error = error
    r.commitlog_offset = -1
    r.queue_offset = -1
    return r


# -- the appender ----------------------------------------------------------------------------

@cython.final
cdef class CommitLogAppender:
    """Appends records to the last segment of a commit log under the put lock.

    ``roll(next_offset) -> MappedFile`` is called (under the put lock) when the current
    segment is full or there is none; it must return a writable segment starting at
    ``next_offset``.
    """

    def __cinit__(self):
        if pthread_mutex_init(&self.lock, NULL) != 0:
            raise MemoryError()
        self.lock_ready = True

    def __dealloc__(self):
        if self.lock_ready:
            pthread_mutex_destroy(&self.lock)

    def __init__(self, roll, Py_ssize_t file_size, str store_host, int max_message_size,
                 str topic_validation="strict"):
        self.roll = roll
        self.file_size = file_size
        self.store_host = pack_host_cached(store_host)
        self.born_host = self.store_host
        self.max_message_size = max_message_size
        self.strict_topics = topic_validation == "strict"
        self.topics = {}
        self._writeable = True
        self._unwriteable_reason = NOT_WRITEABLE
        self.closed = False
        self.max_delay_level = 18
        self.timer_max_delay_ms = 259200 * 1000      # timerMaxDelaySec
        self._timers_open = True
        self._timers_reason = NOT_WRITEABLE
        self.timer_gate = None
        self.prop_crc = True
        self._init_uniq()

    cdef _init_uniq(self):
        # MessageClientIDSetter: ip(4|16) + pid(2) + a per-process random int(4), then per
        # message: ms since the start of the month (4) + counter (2), uppercase hex.
        ip = self.store_host[:-4]
        prefix = ip + (os.getpid() & 0xFFFF).to_bytes(2, "big") + random.getrandbits(32).to_bytes(4, "big")
        self.uniq_prefix_len = 2 * len(prefix)
        put_hex(self.uniq_prefix, <const unsigned char *>PyBytes_AS_STRING(prefix), len(prefix))
        self.uniq_prefix_str = self.uniq_prefix[:self.uniq_prefix_len].decode("ascii")
        self.uniq_counter = <uint16_t>random.getrandbits(16)
        self._set_month()

    cdef _set_month(self):
        now = datetime.datetime.now().astimezone()
        start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        nxt = (start + datetime.timedelta(days=32)).replace(day=1)
        self.month_start = int(start.timestamp() * 1000)
        self.next_month = int(nxt.timestamp() * 1000)

    # -- table and state -------------------------------------------------------------------

    cdef TopicQueues _topic(self, str topic):
        cdef TopicQueues tq = self.topics.get(topic)
        if tq is not None:
            return tq
        if validate_topic(topic, "strict" if self.strict_topics else "utf8") is not None:
            return None
        tq = TopicQueues(topic.encode("utf-8"))
        self.topics[topic] = tq
        return tq

    cdef TopicQueues _system_topic(self, str topic):
        cdef TopicQueues tq = self.topics.get(topic)
        if tq is None:
            tq = TopicQueues(topic.encode("utf-8"))
            self.topics[topic] = tq
        return tq

    cdef object _timer_deliver_ms(self, Message msg, int64_t now):
        """When a timer message is due (RocketMQ 5's TIMER_DELAY_SEC, TIMER_DELAY_MS,
        TIMER_DELIVER_MS properties, in that priority, or ``deliver_time_ms``); None for
        an ordinary message. Raises ValueError for a property that is not a number."""
        props = msg._properties
        if props:
            v = props.get("TIMER_DELAY_SEC")
            if v is not None:
                return now + java_long(v) * 1000
            v = props.get("TIMER_DELAY_MS")
            if v is not None:
                return now + java_long(v)
            v = props.get("TIMER_DELIVER_MS")
            if v is not None:
                return java_long(v)
        return msg.deliver_time_ms

    def get_queue_offset(self, str topic, int queue_id) -> int:
        """Next queue offset of (topic, queue_id), 0 if unknown."""
        cdef TopicQueues tq = self.topics.get(topic)
        return tq.get(queue_id) if tq is not None else 0

    def set_queue_offset(self, str topic, int queue_id, long long offset):
        """Set the next queue offset (recovery's recoverTopicQueueTable)."""
        cdef TopicQueues tq
        if queue_id < 0 or offset < 0:
            raise ValueError("queue ids and offsets are >= 0")
        self._acquire()
        try:
            tq = self.topics.get(topic)
            if tq is None:
                tq = TopicQueues(topic.encode("utf-8"))
                self.topics[topic] = tq
            tq.set(queue_id, offset)
        finally:
            pthread_mutex_unlock(&self.lock)

    def queue_offset_table(self) -> dict:
        """``{(topic, queue_id): next queue offset}`` for every queue written."""
        out = {}
        for topic, tq in self.topics.items():
            for q, off in (<TopicQueues>tq).items():
                out[(topic, q)] = off
        return out

    def remove_topic(self, str topic):
        """Forget the queue offsets of ``topic`` (deleted): its next put starts at 0."""
        self._acquire()
        try:
            self.topics.pop(topic, None)
        finally:
            pthread_mutex_unlock(&self.lock)

    def clear_queue_offsets(self):
        self._acquire()
        try:
            self.topics.clear()
        finally:
            pthread_mutex_unlock(&self.lock)

    def set_current(self, MappedFile mf):
        """Make ``mf`` (or None) the segment appends go to."""
        self._acquire()
        try:
            self.cur = mf
        finally:
            pthread_mutex_unlock(&self.lock)

    @property
    def current(self):
        return self.cur

    @property
    def writeable(self):
        return self._writeable and not self.closed

    def set_writeable(self, bint value, str reason=None):
        """Accept puts or refuse them with SERVICE_NOT_AVAILABLE and ``reason`` (the
        result's ``error``; e.g. the disk guard names the disk and its usage)."""
        self._unwriteable_reason = reason if reason else NOT_WRITEABLE
        self._writeable = value

    @property
    def timers_writeable(self):
        return self._timers_open

    def set_timers_writeable(self, bint value, str reason=None):
        """Accept timer messages (the ones the wheel delivers) or refuse them with
        WHEEL_TIMER_NOT_ENABLE and ``reason``; other puts are not affected. While they
        are refused, each timer put first asks ``timer_gate()`` (when set), which returns
        None after it reopened them, or the reason to refuse."""
        self._timers_reason = reason if reason else NOT_WRITEABLE
        self._timers_open = value

    def close(self):
        """Refuse further puts; waits for a put in progress to finish."""
        self._acquire()
        self.closed = True
        pthread_mutex_unlock(&self.lock)

    def uniq_key_prefix(self) -> str:
        return self.uniq_prefix_str

    cdef PutMessageResult _roll_failed(self, object e):
        """A put that needed a new segment, or blocks of a sparse one, and got none:
        SERVICE_NOT_AVAILABLE when the store was made unwriteable meanwhile (the disk
        guard refuses puts on a full disk), else CREATE_MAPEDFILE_FAILED."""
        if isinstance(e, DiskFullError) and self.on_disk_full is not None:
            self.on_disk_full()
        if not self._writeable:
            return failed(SERVICE_NOT_AVAILABLE, self._unwriteable_reason)
        if isinstance(e, DiskFullError):
            return failed(CREATE_MAPEDFILE_FAILED, f"no room on the disk for the commit log: {e}")
        return failed(CREATE_MAPEDFILE_FAILED, f"cannot create a commit-log segment: {e}")

    cdef void _acquire(self) noexcept:
        if pthread_mutex_trylock(&self.lock) != 0:
            with nogil:
                pthread_mutex_lock(&self.lock)

    # -- preparing a record ----------------------------------------------------------------

    cdef uint32_t _uniq_time(self, int64_t now) except? 0:
        """Ms since the start of the month (MessageClientIDSetter's time field)."""
        if now >= self.next_month:
            self._set_month()
        return <uint32_t>(now - self.month_start)

    cdef Py_ssize_t _uniq_template(self, char *buf, uint32_t t) noexcept:
        """``UNIQ_KEY\\x01`` + prefix + hex(t) into ``buf``; the 4 counter digits follow."""
        cdef unsigned char raw[4]
        raw[0] = t >> 24; raw[1] = t >> 16; raw[2] = t >> 8; raw[3] = t
        memcpy(buf, b"UNIQ_KEY\x01", 9)
        memcpy(buf + 9, self.uniq_prefix, self.uniq_prefix_len)
        put_hex(buf + 9 + self.uniq_prefix_len, raw, 4)
        return 9 + self.uniq_prefix_len + 8

    cdef int _append_uniq(self, PropsBuf *props, const char *template, Py_ssize_t n) except -1:
        """Append a UNIQ_KEY entry from ``template`` (see _uniq_template) with the next counter."""
        cdef unsigned char raw[2]
        cdef char *p
        self.uniq_counter += 1
        raw[0] = self.uniq_counter >> 8
        raw[1] = self.uniq_counter
        if props.length + n + 5 > props.capacity:
            props_reserve(props, n + 5)
        p = props.data + props.length
        if props.length > props.start:
            p[0] = 2
            p += 1
        memcpy(p, template, n)
        put_hex(p + n, raw, 2)
        props.length = (p + n + 4) - props.data
        return 0

    cdef int _add_uniq(self, PropsBuf *props, int64_t now, PutMessageResult r) except -1:
        """Append ``UNIQ_KEY`` = prefix + hex(ms since the month began, counter)."""
        cdef uint32_t t = self._uniq_time(now)
        if self.uniq_tmpl_len == 0 or t != self.uniq_tmpl_time:
            self.uniq_tmpl_len = self._uniq_template(self.uniq_tmpl, t)
            self.uniq_tmpl_time = t
        self._append_uniq(props, self.uniq_tmpl, self.uniq_tmpl_len)
        if r is not None:
            r._uniq = self.uniq_prefix_str
            r._uniq_time = t
            r._uniq_counter = self.uniq_counter
            r._uniq_generated = True
        return 0

    cdef object _check_props(self, PropsBuf *props):
        """The status for an oversized properties string, or None."""
        cdef Py_ssize_t i, chars = 0
        cdef unsigned char c
        if props.length <= MAX_PROPERTIES_LENGTH:
            return None
        for i in range(props.length):          # UTF-16 length, as Java's String.length()
            c = <unsigned char>props.data[i]
            if (c & 0xC0) != 0x80:
                chars += 2 if c >= 0xF0 else 1
        return MESSAGE_ILLEGAL if chars > MAX_PROPERTIES_LENGTH else PROPERTIES_SIZE_EXCEEDED

    cdef object _check_sizes(self, Py_ssize_t body_len, Py_ssize_t total):
        if body_len > self.max_message_size:
            return f"body of {body_len} bytes exceeds max_message_size {self.max_message_size}"
        if total > <Py_ssize_t>self.max_message_size + MAX_RECORD_OVER_BODY:
            return f"record of {total} bytes exceeds max_message_size + 64 KiB"
        if total + END_FILE_MIN_BLANK_LENGTH > self.file_size:
            return f"record of {total} bytes cannot fit a commit-log segment of {self.file_size} bytes"
        return None

    cdef bytes _born_host_of(self, Message msg):
        h = msg._born_host
        if h is None:
            return self.born_host
        if type(h) is bytes:
            return <bytes>h
        return pack_host_cached(h)

    # -- appending ---------------------------------------------------------------------------

    cdef MappedFile _writable_segment(self, Py_ssize_t need):
        """Under the lock: the segment to write ``need`` bytes into, rolling if needed.
        Raises if no segment could be created."""
        cdef MappedFile cur = self.cur
        cdef Py_ssize_t remaining
        if cur is not None:
            remaining = self.file_size - cur.wrote
            if need + END_FILE_MIN_BLANK_LENGTH <= remaining:
                # a sparse segment: its blocks are reserved before the write (DiskFullError)
                cur.reserve(cur.wrote + need + END_FILE_MIN_BLANK_LENGTH)
                return cur
            if remaining >= END_FILE_MIN_BLANK_LENGTH:    # less: recovery fenced the end
                cur.reserve(cur.wrote + END_FILE_MIN_BLANK_LENGTH)
                write_blank(cur.base + cur.wrote, <int32_t>remaining)
                cur.wrote = self.file_size
            nxt = self.roll(cur.file_from_offset + self.file_size)
        else:
            nxt = self.roll(0)
        self.cur = <MappedFile?>nxt
        cur = self.cur
        if cur.wrote + need + END_FILE_MIN_BLANK_LENGTH > self.file_size:
            raise RuntimeError("the new segment has no room for the record")
        cur.reserve(cur.wrote + need + END_FILE_MIN_BLANK_LENGTH)
        return cur

    def put(self, Message msg not None):
        """Append one message. Returns a result; raises only for wrong argument types."""
        return self._put(msg, False)

    def put_system(self, Message msg not None):
        """``put`` for the broker's own records: also writes the topics users may not send
        to (the transaction half and op topics). The store's delivery services use ``put``."""
        return self._put(msg, True)

    def put_batch(self, list msgs not None):
        """Append messages of one topic and queue as one block (RocketMQ's MessageExtBatch).

        The whole batch lands in one segment with consecutive queue offsets, or nothing is
        written. Delay levels and transaction types are refused, as in RocketMQ.
        """
        return self._put_batch(msgs)

    cdef PutMessageResult _put(self, Message msg, bint internal):
        cdef TopicQueues tq
        cdef PropsBuf props
        cdef RecordFields f
        cdef PutMessageResult r
        cdef MappedFile cur
        cdef bytes body, born_host, topic_b
        cdef Py_ssize_t total
        cdef int tx
        cdef str why
        cdef bint big
        cdef int64_t now
        cdef int queue_id
        cdef int level
        cdef bint crc_entry = False

        if msg._lazy:
            msg._load(LAZY_ALL)     # a MessageExt put again: everything decoded first
        if not self._writeable or self.closed:
            return failed(SERVICE_NOT_AVAILABLE, self._unwriteable_reason)
        tq = self._topic(msg._topic)
        if tq is None:
            return failed(MESSAGE_ILLEGAL, validate_topic(msg._topic, "strict" if self.strict_topics else "utf8"))
        if msg.queue_id < 0:
            return failed(MESSAGE_ILLEGAL, "queue_id must be >= 0")
        if tq.store_only and not internal:
            return failed(MESSAGE_ILLEGAL, f"{msg._topic} is written by the store only")
        r = PutMessageResult.__new__(PutMessageResult)
        now = now_ms()
        queue_id = msg.queue_id
        tx = msg.sys_flag & TRANSACTION_TYPE_MASK
        props_init(&props)
        try:
            if msg._properties and PROP_CRC_NAME in msg._properties:
                msg.write_properties_except(&props, PROP_CRC_SKIP)   # the store writes the record's CRC
            else:
                msg.write_properties(&props)
            if tx != TRANSACTION_PREPARED_TYPE and tx != TRANSACTION_ROLLBACK_TYPE:
                # RocketMQ's put-time transforms: a delay level goes to SCHEDULE_TOPIC_XXXX
                # (queue level-1), a timer message to rmq_sys_wheel_timer; both keep their
                # real topic and queue in REAL_TOPIC / REAL_QID
                level = property_delay_level(msg)
                if level > 0:
                    level = min(level, self.max_delay_level)
                    if msg._properties and _has_store_set(msg._properties):
                        props.length = props.start      # rewrite without the store's own names
                        msg.write_properties_except(&props, STORE_SET_PROPERTIES)
                    props_add_str(&props, "REAL_TOPIC", msg._topic)
                    props_add_str(&props, "REAL_QID", str(queue_id))
                    props_add_str(&props, "DELAY", str(level))
                    tq = self._system_topic(SCHEDULE_TOPIC)
                    queue_id = level - 1
                else:
                    try:
                        deliver = self._timer_deliver_ms(msg, now)
                    except (TypeError, ValueError):
                        return failed(WHEEL_TIMER_MSG_ILLEGAL, "a TIMER_* property is not a number")
                    if deliver is not None and deliver > now:
                        if deliver - now > self.timer_max_delay_ms:
                            return failed(WHEEL_TIMER_MSG_ILLEGAL,
                                          f"timer delay above {self.timer_max_delay_ms // 1000} s")
                        if not self._timers_open:
                            why = self.timer_gate() if self.timer_gate is not None else self._timers_reason
                            if why is not None:
                                return failed(WHEEL_TIMER_NOT_ENABLE, why)
                            # the gate may have created the files (milliseconds): a relative
                            # delay counts from now
                            now = now_ms()
                            deliver = self._timer_deliver_ms(msg, now)
                        if msg._properties and _has_store_set(msg._properties):
                            props.length = props.start
                            msg.write_properties_except(&props, STORE_SET_PROPERTIES)
                        if msg.deliver_time_ms is not None and not (msg._properties and "TIMER_DELIVER_MS" in msg._properties):
                            props_add_str(&props, "TIMER_DELIVER_MS", str(msg.deliver_time_ms))
                        props_add_str(&props, "TIMER_OUT_MS", str(deliver))
                        props_add_str(&props, "REAL_TOPIC", msg._topic)
                        props_add_str(&props, "REAL_QID", str(queue_id))
                        tq = self._system_topic(TIMER_TOPIC)
                        queue_id = 0
                    elif deliver is not None and msg._properties and TIMER_DEL_UNIQKEY in msg._properties:
                        # a recall's delete mark is for the wheel only: its second passed
                        # (the message it recalls is delivered), so it must not land in the topic
                        return failed(WHEEL_TIMER_MSG_ILLEGAL, "the recalled message's delivery time has passed")
            if msg._properties is None or "UNIQ_KEY" not in msg._properties:
                self._add_uniq(&props, now, r)
            else:
                r._uniq = msg._properties["UNIQ_KEY"]
            crc_entry = self.prop_crc and add_crc_entry(&props)
            st = self._check_props(&props)
            if st is not None:
                return failed(st, f"properties of {props.length} bytes exceed 32767")
            body = msg._body
            topic_b = tq.encoded
            born_host = self._born_host_of(msg)
            f.sys_flag = msg.sys_flag & ~(BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG)
            if PyBytes_GET_SIZE(born_host) == 20:
                f.sys_flag |= BORNHOST_V6_FLAG
            if PyBytes_GET_SIZE(self.store_host) == 20:
                f.sys_flag |= STOREHOSTADDRESS_V6_FLAG
            f.topic = PyBytes_AS_STRING(topic_b)
            f.topic_len = PyBytes_GET_SIZE(topic_b)
            f.body = PyBytes_AS_STRING(body)
            f.body_len = PyBytes_GET_SIZE(body)
            f.props = props.data
            f.props_len = props.length
            f.born_host = PyBytes_AS_STRING(born_host)
            f.born_host_len = PyBytes_GET_SIZE(born_host)
            f.store_host = PyBytes_AS_STRING(self.store_host)
            f.store_host_len = PyBytes_GET_SIZE(self.store_host)
            f.queue_id = queue_id
            f.flag = msg.flag
            f.reconsume_times = msg.reconsume_times
            f.prepared_transaction_offset = msg.prepared_transaction_offset
            f.born_timestamp = msg.born_timestamp if msg.born_timestamp else now
            total = cal_msg_length(f.sys_flag, f.body_len, f.topic_len, f.props_len)
            why = self._check_sizes(f.body_len, total)
            if why is not None:
                return failed(MESSAGE_ILLEGAL, why)
            big = f.body_len >= NOGIL_BYTES
            if big:
                with nogil:
                    f.body_crc = body_crc32(f.body, f.body_len)
            else:
                f.body_crc = body_crc32(f.body, f.body_len)

            self._acquire()
            try:
                if self.closed or not self._writeable:
                    return failed(SERVICE_NOT_AVAILABLE, self._unwriteable_reason)
                try:
                    cur = self._writable_segment(total)
                except Exception as e:
                    return self._roll_failed(e)
                f.store_timestamp = now_ms()
                f.physical_offset = cur.file_from_offset + cur.wrote
                if tx == TRANSACTION_PREPARED_TYPE or tx == TRANSACTION_ROLLBACK_TYPE:
                    f.queue_offset = 0
                else:
                    f.queue_offset = tq.get(queue_id)
                if big:
                    cur.pin()
                    with nogil:
                        write_record(cur.base + cur.wrote, &f, total)
                    cur.unpin()
                else:
                    write_record(cur.base + cur.wrote, &f, total)
                if crc_entry:
                    write_prop_crc(cur.base + cur.wrote, total)
                cur.wrote += total
                cur.store_timestamp = f.store_timestamp
                if not (tx == TRANSACTION_PREPARED_TYPE or tx == TRANSACTION_ROLLBACK_TYPE):
                    tq.set(queue_id, f.queue_offset + 1)
                self.put_count += 1
            finally:
                pthread_mutex_unlock(&self.lock)
        finally:
            props_free(&props)
        r._status = PUT_OK
        r.commitlog_offset = f.physical_offset
        r.queue_offset = f.queue_offset
        r.wrote_bytes = total
        r.store_timestamp = f.store_timestamp
        r.msg_num = 1
        r._host = self.store_host
        return r

    cdef PutMessageResult _put_batch(self, list msgs):
        cdef Py_ssize_t n = len(msgs), i, total = 0, client_size = 0, pos
        cdef Message m, first
        cdef TopicQueues tq
        cdef PropsBuf props
        cdef RecordFields *fs = NULL
        cdef Py_ssize_t *prop_start = NULL
        cdef Py_ssize_t *sizes = NULL
        cdef int64_t *offsets = NULL
        cdef PutMessageResult r
        cdef MappedFile cur
        cdef bytes topic_b, body, bh
        cdef PyObject **refs = NULL
        cdef Py_ssize_t nrefs = 0
        cdef int64_t qbase, store_ts, phys
        cdef int32_t sys_flag_hosts = 0
        cdef char uniq_template[9 + 44 + 8]
        cdef Py_ssize_t uniq_len
        cdef str why
        cdef bint big
        cdef unsigned char *crc_entry = NULL

        if n == 0:
            return failed(MESSAGE_ILLEGAL, "an empty batch")
        for i in range(n):
            if not isinstance(msgs[i], Message):
                raise TypeError(f"put_messages takes pymq.Message objects, not {type(msgs[i]).__name__}")
        if not self._writeable or self.closed:
            return failed(SERVICE_NOT_AVAILABLE, self._unwriteable_reason)
        first = <Message>msgs[0]
        for i in range(n):
            m = <Message>msgs[i]
            if m._lazy:
                m._load(LAZY_ALL)
            if m._topic != first._topic or m.queue_id != first.queue_id:
                return failed(MESSAGE_ILLEGAL, "a batch holds messages of one topic and queue")
            if m.queue_id < 0:
                return failed(MESSAGE_ILLEGAL, "queue_id must be >= 0")
            if property_delay_level(m) > 0 or m.deliver_time_ms is not None:
                return failed(MESSAGE_ILLEGAL, "batch messages cannot be delayed")
            if m.sys_flag & TRANSACTION_TYPE_MASK:
                return failed(MESSAGE_ILLEGAL, "batch messages cannot be transactional")
        tq = self._topic(first._topic)
        if tq is None:
            return failed(MESSAGE_ILLEGAL, validate_topic(first._topic, "strict" if self.strict_topics else "utf8"))
        if tq.store_only:
            return failed(MESSAGE_ILLEGAL, f"{first._topic} is written by the store only")
        topic_b = tq.encoded
        if PyBytes_GET_SIZE(self.store_host) == 20:
            sys_flag_hosts |= STOREHOSTADDRESS_V6_FLAG

        r = PutMessageResult.__new__(PutMessageResult)
        store_ts = now_ms()
        uniq_len = self._uniq_template(uniq_template, self._uniq_time(store_ts))
        props_init(&props)
        try:
            refs = <PyObject **>PyMem_Malloc(2 * n * sizeof(PyObject *))
            fs = <RecordFields *>PyMem_Malloc(n * sizeof(RecordFields))
            prop_start = <Py_ssize_t *>PyMem_Malloc((n + 1) * sizeof(Py_ssize_t))
            sizes = <Py_ssize_t *>PyMem_Malloc(n * sizeof(Py_ssize_t))
            offsets = <int64_t *>PyMem_Malloc(n * sizeof(int64_t))
            crc_entry = <unsigned char *>PyMem_Malloc(n)
            if (refs == NULL or fs == NULL or prop_start == NULL or sizes == NULL or offsets == NULL
                    or crc_entry == NULL):
                raise MemoryError()
            for i in range(n):
                m = <Message>msgs[i]
                prop_start[i] = props.length
                props.start = props.length
                if m._properties is None and m._tags is None and m._keys is None:
                    self._append_uniq(&props, uniq_template, uniq_len)     # the common, bare message
                else:
                    if m._properties and PROP_CRC_NAME in m._properties:
                        m.write_properties_except(&props, PROP_CRC_SKIP)
                    else:
                        m.write_properties(&props)
                    if m._properties is None or "UNIQ_KEY" not in m._properties:
                        self._append_uniq(&props, uniq_template, uniq_len)
                client_size += props.length         # the client's encoding has no CRC entry
                crc_entry[i] = self.prop_crc and add_crc_entry(&props)
                client_size -= props.length
                if props.length - prop_start[i] > MAX_PROPERTIES_LENGTH:
                    return failed(PROPERTIES_SIZE_EXCEEDED, f"properties of message {i} exceed 32767 bytes")
                body = m._body
                bh = self.born_host if m._born_host is None else self._born_host_of(m)
                # hold the bytes we point into: another thread may rebind m.body meanwhile
                Py_INCREF(body)
                refs[nrefs] = <PyObject *>body
                Py_INCREF(bh)
                refs[nrefs + 1] = <PyObject *>bh
                nrefs += 2
                fs[i].sys_flag = sys_flag_hosts | (BORNHOST_V6_FLAG if PyBytes_GET_SIZE(bh) == 20 else 0)
                fs[i].topic = PyBytes_AS_STRING(topic_b)
                fs[i].topic_len = PyBytes_GET_SIZE(topic_b)
                fs[i].body = PyBytes_AS_STRING(body)
                fs[i].body_len = PyBytes_GET_SIZE(body)
                fs[i].props_len = props.length - prop_start[i]
                fs[i].born_host = PyBytes_AS_STRING(bh)
                fs[i].born_host_len = PyBytes_GET_SIZE(bh)
                fs[i].store_host = PyBytes_AS_STRING(self.store_host)
                fs[i].store_host_len = PyBytes_GET_SIZE(self.store_host)
                fs[i].queue_id = m.queue_id
                fs[i].flag = m.flag
                fs[i].reconsume_times = m.reconsume_times
                fs[i].prepared_transaction_offset = m.prepared_transaction_offset
                fs[i].born_timestamp = m.born_timestamp
                sizes[i] = cal_msg_length(fs[i].sys_flag, fs[i].body_len, fs[i].topic_len, fs[i].props_len)
                if (fs[i].body_len > self.max_message_size
                        or sizes[i] > <Py_ssize_t>self.max_message_size + MAX_RECORD_OVER_BODY
                        or sizes[i] + END_FILE_MIN_BLANK_LENGTH > self.file_size):
                    return failed(MESSAGE_ILLEGAL, f"message {i}: {self._check_sizes(fs[i].body_len, sizes[i])}")
                total += sizes[i]
                client_size += 20 + fs[i].body_len + 2 + fs[i].props_len
            prop_start[n] = props.length
            if client_size > self.max_message_size:
                return failed(MESSAGE_ILLEGAL, f"batch of {client_size} bytes exceeds max_message_size")
            if total + END_FILE_MIN_BLANK_LENGTH > self.file_size:
                return failed(MESSAGE_ILLEGAL, f"batch of {total} bytes cannot fit a commit-log segment")
            big = total >= NOGIL_BYTES
            for i in range(n):
                fs[i].props = props.data + prop_start[i]
                if fs[i].born_timestamp == 0:
                    fs[i].born_timestamp = store_ts
            if big:
                with nogil:
                    for i in range(n):
                        fs[i].body_crc = body_crc32(fs[i].body, fs[i].body_len)
            else:
                for i in range(n):
                    fs[i].body_crc = body_crc32(fs[i].body, fs[i].body_len)

            self._acquire()
            try:
                if self.closed or not self._writeable:
                    return failed(SERVICE_NOT_AVAILABLE, self._unwriteable_reason)
                try:
                    cur = self._writable_segment(total)
                except Exception as e:
                    return self._roll_failed(e)
                store_ts = now_ms()
                qbase = tq.get(first.queue_id)
                phys = cur.file_from_offset + cur.wrote
                cur.pin()
                try:
                    if big:
                        with nogil:
                            write_batch(cur.base + cur.wrote, fs, sizes, offsets, n, phys, qbase, store_ts,
                                        crc_entry)
                    else:
                        write_batch(cur.base + cur.wrote, fs, sizes, offsets, n, phys, qbase, store_ts,
                                    crc_entry)
                finally:
                    cur.unpin()
                cur.wrote += total
                cur.store_timestamp = store_ts
                tq.set(first.queue_id, qbase + n)
                self.put_count += n
            finally:
                pthread_mutex_unlock(&self.lock)
            r._offsets = offsets      # owned by the result from here on
            offsets = NULL
        finally:
            for i in range(nrefs):
                Py_DECREF(<object>refs[i])
            PyMem_Free(refs)
            props_free(&props)
            PyMem_Free(fs)
            PyMem_Free(prop_start)
            PyMem_Free(sizes)
            PyMem_Free(offsets)
            PyMem_Free(crc_entry)
        r._status = PUT_OK
        r.commitlog_offset = phys
        r.queue_offset = qbase
        r.wrote_bytes = total
        r.store_timestamp = store_ts
        r.msg_num = <int>n
        r._host = self.store_host
        return r
