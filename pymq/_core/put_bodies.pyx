# cython: language_level=3
"""``put_bodies``: a batch of raw bodies into the commit log, without a Message per record.

The records are the ones ``put_messages`` writes for ``Message(topic, body, tags=, keys=,
properties=, queue_id=)`` of the same values, byte for byte except the times and ids that
are the put's own (the born and store timestamps, the generated ``UNIQ_KEY``, and with them
the record's CRC). The same rules apply: one topic and queue, one append under the put
lock (the whole batch lands in one segment with consecutive queue offsets, or nothing is
written), RocketMQ's batch limits (``max_message_size`` over the client encoding), no
delay, ``UNIQ_KEY`` generated unless the properties name one, ``__CRC32#`` written by the
store.

How it is fast: the bodies are read where they lie (``body_source``: bytes, buffers,
NumPy rows, Arrow buffers); properties that are the same for every message (a shared
dict) are encoded once; each record is written straight into the mapped segment, its
fixed header fields from one template, its body CRC computed as the body is copied, its
properties assembled in place (user properties, ``TAGS``, ``KEYS``, ``UNIQ_KEY`` from a
template and a counter, the ``__CRC32#`` entry), with the GIL released for batches of a
megabyte or more. A list of keys is read where it lies (not copied): a plain key (an exact,
compact ASCII str without a space or a separator, ``pymq_plain_key.h``) is checked and its
bytes copied into the batch's key buffer in one pass, eight bytes at a time; other keys
take ``Message(keys=)``'s rules in Python.
The result holds the first offsets; per-message offsets and ids are computed when asked
for (a stride when every record has the same size).
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.object cimport PyObject
from libc.stdint cimport int16_t, int32_t, int64_t, uint16_t, uint32_t
from libc.string cimport memchr, memcpy

from pymq._core.appender cimport (CommitLogAppender, PutMessageResult, TopicQueues, failed, now_ms,
                                  pthread_mutex_unlock, put_hex)
from pymq._core.body_source cimport BodySource, load_bodies
from pymq._core.clayout cimport (BORNHOST_V6_FLAG, END_FILE_MIN_BLANK_LENGTH, MAX_PROPERTIES_LENGTH,
                                 MAX_RECORD_OVER_BODY, MESSAGE_MAGIC_CODE, STOREHOSTADDRESS_V6_FLAG)
from pymq._core.hton cimport pymq_put_i16, pymq_put_i32, pymq_put_i64
from pymq._core.mapped_file cimport MappedFile
from pymq._core.message cimport PropsBuf, props_add_str, props_append, props_free, props_init, props_reserve
from pymq._core.record cimport PROP_CRC_LEN, body_crc32, write_prop_crc

from pymq._core.appender import validate_topic
from pymq.status import PutMessageStatus

cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL
    Py_ssize_t PyUnicode_FindChar(object s, Py_UCS4 ch, Py_ssize_t start, Py_ssize_t end, int direction) except -2
    Py_ssize_t PyUnicode_GET_LENGTH(object o)
    PyObject *PyList_GET_ITEM(object o, Py_ssize_t i)          # borrowed
    str PyUnicode_FromObject(object o)                          # a str subclass's characters, as a str
    Py_ssize_t PyList_GET_SIZE(object o)

cdef extern from "pymq_plain_key.h" nogil:
    Py_ssize_t pymq_plain_key_len(PyObject *o)
    const char *pymq_plain_key_data(PyObject *o)
    int pymq_plain_copy(char *dst, const char *src, Py_ssize_t n)
    void pymq_copy_short(char *dst, const char *src, Py_ssize_t n)
    void pymq_plain_key_prefetch(PyObject *o)

cdef object PUT_OK = PutMessageStatus.PUT_OK
cdef object MESSAGE_ILLEGAL = PutMessageStatus.MESSAGE_ILLEGAL
cdef object PROPERTIES_SIZE_EXCEEDED = PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
cdef object SERVICE_NOT_AVAILABLE = PutMessageStatus.SERVICE_NOT_AVAILABLE

cdef enum:
    HEAD_MAX = 4 + 8 + 20 + 8 + 20 + 4 + 8     # SYSFLAG .. PREPAREDTRANSACTIONOFFSET, v6 hosts
    # Batches at least this large are written with the GIL released. Not from 32 KiB as a
    # single put's body: a writer that lets go of the GIL for a batch has to queue behind
    # whichever thread took it meanwhile (the dispatcher, at the end of its chunk) before
    # it returns. Measured on 1,000 100-byte bodies (190 KB): 278 ns a message with the
    # GIL released for the copy, 151 ns holding it (the dispatcher running beside both).
    NOGIL_WRITE = 1 << 20
    # How many keys ahead of the one being read its object is prefetched.
    KEY_PREFETCH = 8


cdef struct Item:
    const char *body
    Py_ssize_t body_len
    const char *uprops          # the user properties, encoded (NULL: none)
    Py_ssize_t uprops_len
    const char *tags            # the TAGS value, UTF-8 (NULL: none)
    Py_ssize_t tags_len
    Py_ssize_t keys_at          # the KEYS value, UTF-8: where in the batch's key bytes (-1: none)
    Py_ssize_t keys_len
    Py_ssize_t total            # the record's size
    uint16_t uniq_counter       # the generated UNIQ_KEY's counter
    bint uniq                   # a UNIQ_KEY is generated
    bint crc_entry              # the record ends with its __CRC32# entry


cdef struct Common:
    const char *topic
    Py_ssize_t topic_len
    int32_t queue_id
    char head[HEAD_MAX]         # SYSFLAG .. PREPAREDTRANSACTIONOFFSET, the same in every record
    Py_ssize_t head_len
    Py_ssize_t store_ts_pos     # where STORETIMESTAMP lies in ``head``
    char uniq[9 + 44 + 8]       # "UNIQ_KEY\x01" + prefix + time; the counter's 4 digits follow
    Py_ssize_t uniq_len


cdef inline char *_entry(char *q, const char *start, const char *name, const char *value,
                         Py_ssize_t n) noexcept nogil:
    """``NAME\\x01value`` at ``q`` (``name`` is 4 bytes), after a separator unless first."""
    if q > start:
        q[0] = 2
        q += 1
    memcpy(q, name, 4)
    q[4] = 1
    pymq_copy_short(q + 5, value, n)
    return q + 5 + n


cdef void write_items(char *dst, Item *items, Py_ssize_t n, const Common *c, const char *key_bytes,
                      int64_t phys, int64_t qbase, int64_t *offsets) noexcept nogil:
    """Write the ``n`` records back to back at ``dst`` (the segment's wrote position);
    ``key_bytes`` holds the KEYS values. A record's CRC entry is filled in once the next
    record is written: the CRC then reads bytes whose stores have left the store buffer
    (taken right away, its loads wait for them: 28.6 against 18.5 ns a record for the two
    CRCs and the write in a C loop)."""
    cdef Py_ssize_t i, pos = 0, props_len, pending_total = 0
    cdef char *pending = NULL         # the record whose CRC entry is still to fill in
    cdef Item *it
    cdef char *rec
    cdef char *p
    cdef char *q
    cdef unsigned char raw[2]
    for i in range(n):
        it = &items[i]
        rec = dst + pos
        pymq_put_i32(rec, <int32_t>it.total)
        pymq_put_i32(rec + 4, MESSAGE_MAGIC_CODE)
        pymq_put_i32(rec + 8, body_crc32(it.body, it.body_len))
        pymq_put_i32(rec + 12, c.queue_id)
        pymq_put_i32(rec + 16, 0)                          # FLAG
        pymq_put_i64(rec + 20, qbase + i)
        pymq_put_i64(rec + 28, phys + pos)
        memcpy(rec + 36, c.head, c.head_len)
        p = rec + 36 + c.head_len
        pymq_put_i32(p, <int32_t>it.body_len)
        p += 4
        if it.body_len > 0:
            memcpy(p, it.body, it.body_len)
            p += it.body_len
        p[0] = <char>c.topic_len
        memcpy(p + 1, c.topic, c.topic_len)
        p += 1 + c.topic_len
        props_len = it.total - (p + 2 - rec)
        pymq_put_i16(p, <int16_t>props_len)
        p += 2
        q = p
        if it.uprops_len:
            memcpy(q, it.uprops, it.uprops_len)
            q += it.uprops_len
        if it.tags != NULL:
            q = _entry(q, p, b"TAGS", it.tags, it.tags_len)
        if it.keys_at >= 0:
            q = _entry(q, p, b"KEYS", key_bytes + it.keys_at, it.keys_len)
        if it.uniq:
            if q > p:
                q[0] = 2
                q += 1
            memcpy(q, c.uniq, c.uniq_len)
            raw[0] = it.uniq_counter >> 8
            raw[1] = <unsigned char>it.uniq_counter
            put_hex(q + c.uniq_len, raw, 2)
            q += c.uniq_len + 4
        if pending != NULL:
            write_prop_crc(pending, pending_total)
            pending = NULL
        if it.crc_entry:
            if q > p:
                q[0] = 2
            pending = rec
            pending_total = it.total
        if offsets != NULL:
            offsets[i] = phys + pos
        pos += it.total
    if pending != NULL:
        write_prop_crc(pending, pending_total)


# -- the Python-side values: keys, tags, properties -----------------------------------------------

cdef inline str _kind(object o):
    return type(o).__name__


cdef list _per_message(object values, Py_ssize_t n, str what):
    """``values`` as a list of ``n`` entries (a list, tuple, NumPy or Arrow array)."""
    if type(values) is list:
        values = (<list>values)[:]                # ours: the strings in it are pointed into
    else:
        if type(values) is tuple:
            values = list(values)
        elif hasattr(values, "to_pylist"):
            values = values.to_pylist()           # Arrow
        elif hasattr(values, "tolist") and not isinstance(values, (str, bytes)):
            values = values.tolist()              # NumPy
        elif isinstance(values, (str, bytes, dict)):
            raise TypeError(f"{what} must be a sequence with one entry per body, not a {_kind(values)}")
        else:
            values = list(values)
    if len(<list>values) != n:
        raise ValueError(f"{what} has {len(<list>values)} entries for {n} bodies")
    return <list>values


cdef object _keys_text(object k):
    """The KEYS value ``Message(keys=k)`` writes, or None (no KEYS)."""
    cdef list out
    if k is None:
        return None
    if type(k) is str:
        if PyUnicode_FindChar(k, 32, 0, PyUnicode_GET_LENGTH(k), 1) < 0:
            return k if PyUnicode_GET_LENGTH(k) else None
        out = [w for w in (<str>k).split(" ") if w]
        return " ".join(out) if out else None
    if isinstance(k, str):
        # its characters, as Message splits them: not str(k), which runs an overridden __str__
        return _keys_text(PyUnicode_FromObject(k))
    if type(k) is list:
        out = (<list>k)[:]
    else:
        out = list(k)
        for w in out:
            if not isinstance(w, str):
                raise TypeError(f"keys must be str, not {_kind(w)}")
    if not out:
        return None
    if len(out) == 1 and type(out[0]) is str:
        return out[0]
    return " ".join(out)


cdef object _tag_text(object t):
    if t is None:
        return None
    if not isinstance(t, str):
        raise TypeError(f"tags must be str or None, not {_kind(t)}")
    return t or None


cdef int _check_value(const char *p, Py_ssize_t n) except -1:
    """A TAGS or KEYS value, as ``props_add_named`` checks it."""
    if n == 0:
        raise ValueError("property value must not be empty")
    if memchr(p, 1, n) != NULL or memchr(p, 2, n) != NULL:
        raise ValueError("property value must not contain the separators \\x01 or \\x02")
    return 0


cdef int _encode_user(PropsBuf *out, dict props, bint skip_tags, bint skip_keys) except -1:
    """The user properties as ``Message.write_properties`` writes them (values None left
    out; TAGS / KEYS when the message has its own; the store's ``__CRC32#``)."""
    for k, v in props.items():
        if v is None:
            continue
        if type(k) is not str or type(v) is not str:
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError("property names and values must be str")
        if skip_tags and k == "TAGS":
            continue
        if skip_keys and k == "KEYS":
            continue
        if k == "__CRC32#":
            continue
        props_add_str(out, k, v)
    return 0


cdef bint _delayed(dict props) except -1:
    """``property_delay_level`` of a message without ``delay_level``: DELAY > 0."""
    v = props.get("DELAY")
    return isinstance(v, str) and v.isdigit() and len(v) < 10 and int(v) > 0


@cython.final
cdef class _UserProps:
    """Encoded user properties: one dict shared by every message (up to four encodings:
    with or without TAGS / KEYS), or one dict (or None) per message."""
    cdef dict shared
    cdef list per
    cdef list variants              # [keys? + 2 * tags?]: the shared dict encoded
    cdef bint shared_has_uniq

    cdef bytes variant(self, bint tags, bint keys):
        cdef int v = (2 if tags else 0) | (1 if keys else 0)
        if self.variants is None:
            self.variants = [None, None, None, None]
        if self.variants[v] is None:
            self.variants[v] = _encode_one(self.shared, tags, keys)
        return self.variants[v]


cdef bytes _encode_one(dict props, bint tags, bint keys):
    cdef PropsBuf buf
    props_init(&buf)
    try:
        _encode_user(&buf, props, tags, keys)
        return (<const char *>buf.data)[:buf.length]
    finally:
        props_free(&buf)


# -- put_bodies ---------------------------------------------------------------------------------

def put_bodies(CommitLogAppender app not None, topic, bodies, queue_id=None, keys=None, tags=None,
               properties=None):
    """Append ``bodies`` to (``topic``, ``queue_id``) as one batch; see
    ``MessageStore.put_bodies``. Returns a ``PutMessageResult``; raises ``TypeError`` /
    ``ValueError`` for arguments of the wrong type or length (nothing written)."""
    cdef BodySource src
    cdef Py_ssize_t n, i, total = 0, client_size = 0, props_len, tl, kl
    cdef const char *kp
    cdef PyObject *ko
    cdef PropsBuf kb             # the batch's KEYS values, back to back
    cdef int qid
    cdef TopicQueues tq
    cdef list key_list = None, tag_list = None, prop_list = None, texts
    cdef object shared_tag = None, t, k
    cdef _UserProps up = None
    cdef dict d
    cdef bytes enc, topic_b, born_host
    cdef Item *items = NULL
    cdef Item *it
    cdef int64_t *offsets = NULL
    cdef Common c
    cdef int64_t store_ts, qbase, phys
    cdef uint32_t utime
    cdef uint16_t counter0
    cdef Py_ssize_t generated = 0
    cdef bint uniform = True, big, crc
    cdef PutMessageResult r
    cdef MappedFile cur
    cdef int32_t sys_flag = 0
    cdef Py_ssize_t born_len, store_len, fixed

    if not isinstance(topic, str):
        raise TypeError(f"topic must be a str, not {_kind(topic)}")
    if queue_id is None:
        qid = 0
    elif type(queue_id) is int or (isinstance(queue_id, int) and not isinstance(queue_id, bool)):
        if queue_id < 0:
            return failed(MESSAGE_ILLEGAL, "queue_id must be >= 0")
        if queue_id > 0x7FFFFFFF:
            raise OverflowError("queue_id must fit a Java int")
        qid = queue_id
    else:
        raise TypeError(f"queue_id must be an int or None, not {_kind(queue_id)}")
    src = load_bodies(bodies)
    n = src.n
    if keys is not None:
        if type(keys) is list:
            # read in place, not copied: each key's bytes are copied out as it is read
            if PyList_GET_SIZE(keys) != n:
                raise ValueError(f"keys has {PyList_GET_SIZE(keys)} entries for {n} bodies")
            key_list = <list>keys
        else:
            key_list = _per_message(keys, n, "keys")
    if tags is not None:
        if isinstance(tags, str):
            shared_tag = _tag_text(tags)
        else:
            tag_list = _per_message(tags, n, "tags")
    if properties is not None:
        up = _UserProps.__new__(_UserProps)
        if isinstance(properties, dict):
            up.shared = <dict>properties
            up.shared_has_uniq = "UNIQ_KEY" in up.shared
        else:
            prop_list = _per_message(properties, n, "properties")
            for i in range(n):
                if prop_list[i] is not None and not isinstance(prop_list[i], dict):
                    raise TypeError(f"properties[{i}] must be a dict or None, not {_kind(prop_list[i])}")
            up.per = prop_list
    if n == 0:
        return failed(MESSAGE_ILLEGAL, "an empty batch")
    if not app._writeable or app.closed:
        return failed(SERVICE_NOT_AVAILABLE, app._unwriteable_reason)
    if up is not None:
        if up.shared is not None:
            if up.shared and _delayed(up.shared):
                return failed(MESSAGE_ILLEGAL, "batch messages cannot be delayed")
        else:
            for i in range(n):
                d = up.per[i]
                if d and _delayed(d):
                    return failed(MESSAGE_ILLEGAL, "batch messages cannot be delayed")
    tq = app._topic(topic)
    if tq is None:
        return failed(MESSAGE_ILLEGAL, validate_topic(topic, "strict" if app.strict_topics else "utf8"))
    if tq.store_only:
        return failed(MESSAGE_ILLEGAL, f"{topic} is written by the store only")
    topic_b = tq.encoded
    born_host = app.born_host

    # the fixed part of every record: hosts, times, the UNIQ_KEY template
    store_ts = now_ms()
    utime = app._uniq_time(store_ts)
    c.uniq_len = app._uniq_template(c.uniq, utime)
    c.topic = PyBytes_AS_STRING(topic_b)
    c.topic_len = PyBytes_GET_SIZE(topic_b)
    c.queue_id = qid
    born_len = PyBytes_GET_SIZE(born_host)
    store_len = PyBytes_GET_SIZE(app.store_host)
    if born_len == 20:
        sys_flag |= BORNHOST_V6_FLAG
    if store_len == 20:
        sys_flag |= STOREHOSTADDRESS_V6_FLAG
    pymq_put_i32(c.head, sys_flag)
    pymq_put_i64(c.head + 4, store_ts)                   # BORNTIMESTAMP: the put's
    memcpy(c.head + 12, PyBytes_AS_STRING(born_host), born_len)
    c.store_ts_pos = 12 + born_len
    memcpy(c.head + c.store_ts_pos + 8, PyBytes_AS_STRING(app.store_host), store_len)
    pymq_put_i32(c.head + c.store_ts_pos + 8 + store_len, 0)          # RECONSUMETIMES
    pymq_put_i64(c.head + c.store_ts_pos + 12 + store_len, 0)         # PREPAREDTRANSACTIONOFFSET
    c.head_len = c.store_ts_pos + 20 + store_len
    # TOTALSIZE .. QUEUEOFFSET .. PHYSICALOFFSET, head, BODYLENGTH, TOPICLENGTH + topic, PROPERTIESLENGTH
    fixed = 36 + c.head_len + 4 + 1 + c.topic_len + 2

    texts = []                  # what the items point into beyond the lists held (encodings)
    props_init(&kb)
    items = <Item *>PyMem_Malloc(n * sizeof(Item))
    if items == NULL:
        raise MemoryError()
    try:
        if key_list is not None:
            props_reserve(&kb, n * 24)
        counter0 = app.uniq_counter
        for i in range(n):
            it = &items[i]
            it.body = src.ptr[i]
            it.body_len = src.size[i]
            t = shared_tag
            if tag_list is not None:
                t = tag_list[i]
                if t is not None and (type(t) is not str or PyUnicode_GET_LENGTH(t) == 0):
                    t = _tag_text(t)
            k = None
            it.keys_at = -1
            if key_list is not None:
                if PyList_GET_SIZE(key_list) != n:      # the general path below ran Python code
                    raise RuntimeError("keys changed size during put_bodies")
                if i + KEY_PREFETCH < n:
                    pymq_plain_key_prefetch(PyList_GET_ITEM(key_list, i + KEY_PREFETCH))
                ko = PyList_GET_ITEM(key_list, i)
                # as Message(keys=k) takes it: a str without spaces is the KEYS value as it is;
                # a plain one (pymq_plain_key.h) is copied and checked in one pass
                kl = pymq_plain_key_len(ko)
                if kl > 0:
                    if kb.length + kl > kb.capacity:
                        props_reserve(&kb, kl)
                    if pymq_plain_copy(kb.data + kb.length, pymq_plain_key_data(ko), kl) == 0:
                        it.keys_at = kb.length
                        it.keys_len = kl
                        kb.length += kl
                if it.keys_at < 0 and <object>ko is not None:
                    k = _keys_text(<object>ko)
            it.tags = NULL
            it.uprops = NULL
            it.uprops_len = 0
            it.uniq = True
            if up is not None:
                if up.shared is not None:
                    enc = up.variant(t is not None, k is not None or it.keys_at >= 0)
                    it.uniq = not up.shared_has_uniq
                else:
                    d = up.per[i]
                    enc = _encode_one(d, t is not None, k is not None or it.keys_at >= 0) if d else None
                    it.uniq = d is None or "UNIQ_KEY" not in d
                if enc is not None and PyBytes_GET_SIZE(enc):
                    texts.append(enc)
                    it.uprops = PyBytes_AS_STRING(enc)
                    it.uprops_len = PyBytes_GET_SIZE(enc)
            props_len = it.uprops_len
            if t is not None:
                it.tags = PyUnicode_AsUTF8AndSize(t, &tl)
                it.tags_len = tl
                _check_value(it.tags, tl)
                props_len += (1 if props_len else 0) + 5 + tl
            if k is not None:
                kp = PyUnicode_AsUTF8AndSize(k, &kl)
                _check_value(kp, kl)
                it.keys_at = kb.length
                it.keys_len = kl
                props_append(&kb, kp, kl)
            if it.keys_at >= 0:
                props_len += (1 if props_len else 0) + 5 + it.keys_len
            if it.uniq:
                generated += 1
                it.uniq_counter = <uint16_t>(counter0 + generated)
                props_len += (1 if props_len else 0) + c.uniq_len + 4
            client_size += 22 + it.body_len + props_len      # the client's encoding: no CRC entry
            crc = app.prop_crc and props_len + (1 if props_len else 0) + PROP_CRC_LEN <= MAX_PROPERTIES_LENGTH
            it.crc_entry = crc
            if crc:
                props_len += (1 if props_len else 0) + PROP_CRC_LEN
            if props_len > MAX_PROPERTIES_LENGTH:
                app.uniq_counter = <uint16_t>(counter0 + generated)
                return failed(PROPERTIES_SIZE_EXCEEDED, f"properties of message {i} exceed 32767 bytes")
            it.total = fixed + it.body_len + props_len
            if (it.body_len > app.max_message_size
                    or it.total > <Py_ssize_t>app.max_message_size + MAX_RECORD_OVER_BODY
                    or it.total + END_FILE_MIN_BLANK_LENGTH > app.file_size):
                app.uniq_counter = <uint16_t>(counter0 + generated)
                return failed(MESSAGE_ILLEGAL, f"message {i}: {app._check_sizes(it.body_len, it.total)}")
            if it.total != items[0].total:
                uniform = False
            total += it.total
        app.uniq_counter = <uint16_t>(counter0 + generated)
        if client_size > app.max_message_size:
            return failed(MESSAGE_ILLEGAL, f"batch of {client_size} bytes exceeds max_message_size")
        if total + END_FILE_MIN_BLANK_LENGTH > app.file_size:
            return failed(MESSAGE_ILLEGAL, f"batch of {total} bytes cannot fit a commit-log segment")
        if not uniform:
            offsets = <int64_t *>PyMem_Malloc(n * sizeof(int64_t))
            if offsets == NULL:
                raise MemoryError()
        big = total >= NOGIL_WRITE
        r = PutMessageResult.__new__(PutMessageResult)

        app._acquire()
        try:
            if app.closed or not app._writeable:
                return failed(SERVICE_NOT_AVAILABLE, app._unwriteable_reason)
            try:
                cur = app._writable_segment(total)
            except Exception as e:
                return app._roll_failed(e)
            store_ts = now_ms()
            pymq_put_i64(c.head + c.store_ts_pos, store_ts)
            qbase = tq.get(qid)
            phys = cur.file_from_offset + cur.wrote
            cur.pin()
            try:
                if big:
                    with nogil:
                        write_items(cur.base + cur.wrote, items, n, &c, kb.data, phys, qbase, offsets)
                else:
                    write_items(cur.base + cur.wrote, items, n, &c, kb.data, phys, qbase, offsets)
            finally:
                cur.unpin()
            cur.wrote += total
            cur.store_timestamp = store_ts
            tq.set(qid, qbase + n)
            app.put_count += n
        finally:
            pthread_mutex_unlock(&app.lock)
        r._offsets = offsets        # owned by the result from here on
        offsets = NULL
    finally:
        PyMem_Free(items)
        PyMem_Free(offsets)
        props_free(&kb)
    r._status = PUT_OK
    r.commitlog_offset = phys
    r.queue_offset = qbase
    r.wrote_bytes = total
    r.store_timestamp = store_ts
    r.msg_num = <int>n
    r._host = app.store_host
    if r._offsets == NULL:
        r._stride = total // n
    if generated == n:
        r._uniq = app.uniq_prefix_str
        r._uniq_time = utime
        r._uniq_counter = <uint16_t>(counter0 + 1)
        r._uniq_generated = True
        r._uniq_run = <int>n
    return r
