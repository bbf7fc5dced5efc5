# cython: language_level=3
"""Message value types and the properties string codec.

Properties string (``MessageDecoder.messageProperties2String``), UTF-8 on disk::

    name1 \\x01 value1 \\x02 name2 \\x01 value2      (no trailing \\x02)

``Message`` is what applications build and ``put_message`` takes; ``MessageExt`` is what
reads return. Both are C classes: building one costs a fraction of a Python object, which
matters when an application builds millions of them.

A read copies the record bytes once (one page of bytes for all the records of a pull) and
makes each ``MessageExt`` from its record's fixed fields; ``body``, the properties map
(``properties`` / ``tags`` / ``keys``) and the hosts are decoded from that copy on first
access, so a consumer that reads ``.body`` pays for the body and nothing else. Once all
of them are decoded the message drops its reference to the copy.
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memchr, memcmp, memcpy

import ipaddress


cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL


# -- PropsBuf: a growable byte buffer, on the stack for the common small case ----------------

cdef void props_init(PropsBuf *b) noexcept nogil:
    b.data = b.inline_
    b.length = 0
    b.start = 0
    b.capacity = sizeof(b.inline_)


cdef void props_free(PropsBuf *b) noexcept nogil:
    if b.data != b.inline_:
        free(b.data)
    b.data = b.inline_
    b.length = 0
    b.capacity = sizeof(b.inline_)


cdef int props_reserve(PropsBuf *b, Py_ssize_t extra) except -1:
    cdef Py_ssize_t need = b.length + extra
    cdef Py_ssize_t cap = b.capacity
    cdef char *p
    if need <= cap:
        return 0
    while cap < need:
        cap *= 2
    if b.data == b.inline_:
        p = <char *>malloc(cap)
        if p == NULL:
            raise MemoryError()
        memcpy(p, b.data, b.length)
    else:
        p = <char *>realloc(b.data, cap)
        if p == NULL:
            raise MemoryError()
    b.data = p
    b.capacity = cap
    return 0


cdef int props_append(PropsBuf *b, const char *s, Py_ssize_t n) except -1:
    if b.length + n > b.capacity:
        props_reserve(b, n)
    memcpy(b.data + b.length, s, n)
    b.length += n
    return 0


cdef inline int _check_part(const char *s, Py_ssize_t n, str what) except -1:
    if n == 0:
        raise ValueError(f"property {what} must not be empty")
    if memchr(s, 1, n) != NULL or memchr(s, 2, n) != NULL:
        raise ValueError(f"property {what} must not contain the separators \\x01 or \\x02")
    return 0


cdef int props_add_str(PropsBuf *b, str name, str value) except -1:
    """Append ``name\\x01value``, preceded by ``\\x02`` unless it is the current message's first."""
    cdef Py_ssize_t nn, nv
    cdef const char *pn = PyUnicode_AsUTF8AndSize(name, &nn)
    cdef const char *pv = PyUnicode_AsUTF8AndSize(value, &nv)
    _check_part(pn, nn, "name")
    _check_part(pv, nv, "value")
    props_reserve(b, nn + nv + 2)
    if b.length > b.start:
        b.data[b.length] = 2
        b.length += 1
    memcpy(b.data + b.length, pn, nn)
    b.length += nn
    b.data[b.length] = 1
    b.length += 1
    memcpy(b.data + b.length, pv, nv)
    b.length += nv
    return 0


cdef int props_add_named(PropsBuf *b, const char *pn, Py_ssize_t nn, str value) except -1:
    """``props_add_str`` for a name known to be valid (the system names: TAGS, KEYS)."""
    cdef Py_ssize_t nv
    cdef const char *pv = PyUnicode_AsUTF8AndSize(value, &nv)
    _check_part(pv, nv, "value")
    props_reserve(b, nn + nv + 2)
    if b.length > b.start:
        b.data[b.length] = 2
        b.length += 1
    memcpy(b.data + b.length, pn, nn)
    b.length += nn
    b.data[b.length] = 1
    b.length += 1
    memcpy(b.data + b.length, pv, nv)
    b.length += nv
    return 0


cdef bint props_has_name(PropsBuf *b, const char *name, Py_ssize_t n) noexcept:
    """True if some entry of the buffer is named ``name``."""
    cdef Py_ssize_t i = b.start
    while i + n < b.length:
        if memcmp(b.data + i, name, n) == 0 and b.data[i + n] == 1:
            return True
        while i < b.length and b.data[i] != 2:
            i += 1
        i += 1
    return False


# -- the properties string codec ---------------------------------------------------------------

cpdef dict decode_properties(object raw):
    """Parse a properties string as RocketMQ 4.9.7's ``string2messageProperties`` does.

    Entries are split on ``\\x02``; an entry shorter than 3 characters, or whose first
    ``\\x01`` is at its start or its last character, is skipped. The value may contain
    further ``\\x01``. ``raw`` is ``bytes`` (UTF-8, as on disk) or ``str``.
    """
    cdef str s
    cdef dict out = {}
    cdef Py_ssize_t index = 0, new_index, kv, n
    if raw is None:
        return out
    if isinstance(raw, str):
        s = <str>raw
    else:
        s = bytes(raw).decode("utf-8", "replace")
    n = len(s)
    while index < n:
        new_index = s.find("\x02", index)
        if new_index < 0:
            new_index = n
        if new_index - index >= 3:
            kv = s.find("\x01", index)
            if index < kv < new_index - 1:
                out[s[index:kv]] = s[kv + 1:new_index]
        index = new_index + 1
    return out


cdef str _TAGS = "TAGS"
cdef str _KEYS = "KEYS"
cdef str _UNIQ_KEY = "UNIQ_KEY"


cdef inline str _prop_name(const char *p, Py_ssize_t n):
    """The name of a property; the system names every message carries are shared."""
    if n == 4 and memcmp(p, b"TAGS", 4) == 0:
        return _TAGS
    if n == 4 and memcmp(p, b"KEYS", 4) == 0:
        return _KEYS
    if n == 8 and memcmp(p, b"UNIQ_KEY", 8) == 0:
        return _UNIQ_KEY
    return PyUnicode_DecodeUTF8(p, n, "replace")


cdef dict decode_properties_utf8(const char *p, Py_ssize_t n):
    """``decode_properties`` of the UTF-8 bytes ``p[:n]``, without a str of the whole.

    Splitting the bytes on \\x02 and \\x01 and decoding each name and value is what
    decoding first and splitting the string does: the separators are ASCII, and an ASCII
    byte is never part of a replaced (malformed) sequence. An entry is kept when its name
    and value are both non-empty, which also makes it at least 3 characters long."""
    cdef dict out = {}
    cdef Py_ssize_t s = 0, e, k
    cdef const char *q
    while s < n:
        q = <const char *>memchr(p + s, 2, <size_t>(n - s))
        e = n if q == NULL else q - p
        q = <const char *>memchr(p + s, 1, <size_t>(e - s))
        k = e if q == NULL else q - p
        if s < k < e - 1:
            out[_prop_name(p + s, k - s)] = PyUnicode_DecodeUTF8(p + k + 1, e - k - 1, "replace")
        s = e + 1
    return out


cpdef bytes encode_properties(dict properties):
    """``messageProperties2String`` as UTF-8: entries in dict order, ``None`` values skipped."""
    cdef PropsBuf buf
    props_init(&buf)
    try:
        for k, v in properties.items():
            if v is None:
                continue
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError("property names and values must be str")
            props_add_str(&buf, k, v)
        return PyBytes_FromStringAndSize(buf.data, buf.length)
    finally:
        props_free(&buf)


cpdef str format_host(bytes raw):
    """``ip:port`` (``[ip]:port`` for IPv6) of an on-disk 8- or 20-byte host field."""
    cdef Py_ssize_t n = len(raw)
    if n == 8:
        port = int.from_bytes(raw[4:8], "big", signed=True)
        return f"{raw[0]}.{raw[1]}.{raw[2]}.{raw[3]}:{port}"
    if n == 20:
        port = int.from_bytes(raw[16:20], "big", signed=True)
        return f"[{ipaddress.IPv6Address(raw[:16]).compressed}]:{port}"
    raise ValueError(f"a host field has 8 or 20 bytes, not {n}")


cdef inline object _as_bytes(object body):
    if type(body) is bytes:
        return body
    if isinstance(body, (bytearray, memoryview)):
        return bytes(body)
    raise TypeError(f"body must be bytes, bytearray or memoryview, not {type(body).__name__}")


cdef inline object _as_keys(object keys):
    if keys is None:
        return None
    if isinstance(keys, str):
        out = [k for k in (<str>keys).split(" ") if k]   # RocketMQ's KEY_SEPARATOR only
    elif type(keys) is list:
        out = (<list>keys)[:]                            # a copy: the caller keeps its list
    else:
        out = list(keys)
        for k in out:
            if not isinstance(k, str):
                raise TypeError(f"keys must be str, not {type(k).__name__}")
    return out or None


MESSAGE_GROUP_PROPERTY = "__SHARDINGKEY"     # MessageConst.PROPERTY_SHARDING_KEY


@cython.freelist(2048)
cdef class Message:
    """A message to put: topic, body and optional tags, keys and user properties.

    ``keys`` is a list of strings (or one string of space-separated keys, as RocketMQ's
    ``KEYS`` property stores them). ``properties`` maps str to str. ``delay_level`` uses the
    store's delay levels (1..18 by default); ``deliver_time_ms`` asks for delivery at an
    absolute time in ms (RocketMQ 5's ``TIMER_DELIVER_MS``). ``born_timestamp`` and
    ``born_host`` default to the time of the put and the store's host, as RocketMQ's
    producer fills them in. ``sys_flag`` carries the transaction type bits.
    ``message_group`` (RocketMQ 5's FIFO message group) is kept in the ``__SHARDINGKEY``
    property. ``reconsume_times`` and ``prepared_transaction_offset`` are written to the
    record's fields of those names (the broker's retries and transaction commits set them).
    """

    def __init__(self, str topic not None, body=b"", tags=None, keys=None, properties=None,
                 int queue_id=0, int flag=0, int delay_level=0, deliver_time_ms=None,
                 long long born_timestamp=0, born_host=None, int sys_flag=0, message_group=None,
                 int reconsume_times=0, long long prepared_transaction_offset=0):
        self._topic = topic
        self._body = body if type(body) is bytes else _as_bytes(body)
        if tags is not None and not isinstance(tags, str):
            raise TypeError(f"tags must be str or None, not {type(tags).__name__}")
        self._tags = tags or None
        self._keys = None if keys is None else _as_keys(keys)
        if properties is not None and not isinstance(properties, dict):
            raise TypeError(f"properties must be a dict, not {type(properties).__name__}")
        self._properties = properties
        if queue_id < 0:
            raise ValueError(f"queue_id must be >= 0, not {queue_id}")
        self.queue_id = queue_id
        self.flag = flag
        self.delay_level = delay_level
        if deliver_time_ms is not None and not isinstance(deliver_time_ms, int):
            raise TypeError("deliver_time_ms must be an int (ms since the epoch) or None")
        self.deliver_time_ms = deliver_time_ms
        self.born_timestamp = born_timestamp
        if born_host is not None and not isinstance(born_host, str):
            raise TypeError("born_host must be 'ip:port' or None")
        self._born_host = born_host
        self.sys_flag = sys_flag
        if reconsume_times < 0:
            raise ValueError(f"reconsume_times must be >= 0, not {reconsume_times}")
        self.reconsume_times = reconsume_times
        self.prepared_transaction_offset = prepared_transaction_offset
        if message_group is not None:
            self.message_group = message_group

    cdef int _load(self, int what) except -1:
        """Decode ``what`` (LAZY_* bits) of a MessageExt from its record copy."""
        cdef int todo = self._lazy & what & LAZY_ALL
        cdef const char *rec
        cdef Py_ssize_t born_len, store_len
        cdef dict props
        if not todo:
            return 0
        rec = PyBytes_AS_STRING(self._page) + self._rec
        if todo & LAZY_BODY:
            self._body = PyBytes_FromStringAndSize(rec + self._body_off, self._body_len)
        if todo & LAZY_PROPS:
            props = decode_properties_utf8(rec + self._props_off, self._props_len)
            self._properties = props
            tags = props.get(_TAGS)
            self._tags = tags or None
            keys = props.get(_KEYS)
            self._keys = ([k for k in (<str>keys).split(" ") if k] or None) if keys else None
        if todo & LAZY_HOSTS:
            born_len = 20 if self._lazy & LAZY_BORN_V6 else 8
            store_len = 20 if self._lazy & LAZY_STORE_V6 else 8
            self._born_host = PyBytes_FromStringAndSize(rec + 48, born_len)
            self._store_host = PyBytes_FromStringAndSize(rec + 48 + born_len + 8, store_len)
        self._lazy &= ~todo
        if not (self._lazy & LAZY_ALL):
            self._page = None           # everything decoded: the copy may go
        return 0

    @property
    def topic(self):
        return self._topic

    @topic.setter
    def topic(self, str value not None):
        self._topic = value

    @property
    def body(self):
        if self._lazy & LAZY_BODY:
            self._load(LAZY_BODY)
        return self._body

    @body.setter
    def body(self, value):
        value = _as_bytes(value)
        if self._lazy & LAZY_BODY:
            self._lazy &= ~LAZY_BODY
            if not (self._lazy & LAZY_ALL):
                self._page = None
        self._body = value

    @property
    def tags(self):
        if self._lazy & LAZY_PROPS:
            self._load(LAZY_PROPS)
        return self._tags

    @tags.setter
    def tags(self, value):
        if value is not None and not isinstance(value, str):
            raise TypeError("tags must be str or None")
        if self._lazy & LAZY_PROPS:
            self._load(LAZY_PROPS)
        self._tags = value or None

    @property
    def keys(self):
        if self._lazy & LAZY_PROPS:
            self._load(LAZY_PROPS)
        return self._keys

    @keys.setter
    def keys(self, value):
        if self._lazy & LAZY_PROPS:
            self._load(LAZY_PROPS)
        self._keys = _as_keys(value)

    @property
    def properties(self):
        """User properties (``Message``) or the whole stored map (``MessageExt``)."""
        if self._lazy & LAZY_PROPS:
            self._load(LAZY_PROPS)
        if self._properties is None:
            self._properties = {}
        return self._properties

    @properties.setter
    def properties(self, value):
        if value is not None and not isinstance(value, dict):
            raise TypeError("properties must be a dict")
        if self._lazy & LAZY_PROPS:
            self._load(LAZY_PROPS)
        self._properties = value

    @property
    def message_group(self):
        """The FIFO message group (property ``__SHARDINGKEY``), or None."""
        return self.properties.get(MESSAGE_GROUP_PROPERTY) or None

    @message_group.setter
    def message_group(self, value):
        if value is None:
            self.properties.pop(MESSAGE_GROUP_PROPERTY, None)
            return
        if not isinstance(value, str) or not value:
            raise TypeError("message_group must be a non-empty str or None")
        self.properties[MESSAGE_GROUP_PROPERTY] = value

    @property
    def born_host(self):
        if self._lazy & LAZY_HOSTS:
            self._load(LAZY_HOSTS)
        if type(self._born_host) is bytes:
            self._born_host = format_host(self._born_host)
        return self._born_host

    @born_host.setter
    def born_host(self, value):
        if value is not None and not isinstance(value, str):
            raise TypeError("born_host must be 'ip:port' or None")
        if self._lazy & LAZY_HOSTS:
            self._load(LAZY_HOSTS)
        self._born_host = value

    cdef int write_properties(self, PropsBuf *out) except -1:
        """Serialize user properties, then TAGS and KEYS, into ``out``."""
        return self.write_properties_except(out, ())

    cdef int write_properties_except(self, PropsBuf *out, tuple skip) except -1:
        """``write_properties`` leaving out the property names in ``skip``."""
        cdef dict props
        if self._lazy & LAZY_PROPS:
            self._load(LAZY_PROPS)
        if self._properties:
            props = <dict?>self._properties
            for k, v in props.items():
                if v is None:
                    continue
                if type(k) is not str or type(v) is not str:
                    if not isinstance(k, str) or not isinstance(v, str):
                        raise TypeError("property names and values must be str")
                if self._tags is not None and k == "TAGS":
                    continue
                if self._keys is not None and k == "KEYS":
                    continue
                if skip and k in skip:
                    continue
                props_add_str(out, k, v)
        if self._tags is not None:
            props_add_named(out, b"TAGS", 4, self._tags)
        if self._keys is not None:
            keys = self._keys
            if type(keys) is list and len(<list>keys) == 1 and type((<list>keys)[0]) is str:
                props_add_named(out, b"KEYS", 4, (<list>keys)[0])
            else:
                props_add_named(out, b"KEYS", 4, " ".join(keys))
        return 0

    def __repr__(self):
        return (f"{type(self).__name__}(topic={self._topic!r}, body={len(self.body)} bytes, "
                f"tags={self.tags!r}, keys={self.keys!r}, queue_id={self.queue_id})")


@cython.final
cdef class MessageExt(Message):
    """A stored message as reads return it (``MessageExt`` in RocketMQ).

    ``properties`` is the whole stored map, system properties (``TAGS``, ``KEYS``,
    ``UNIQ_KEY``, ...) included. ``msg_id`` is the offset message id: the hex of the
    store host and the commit-log offset. ``body``, ``properties`` (with ``tags`` and
    ``keys``) and the hosts are decoded from the read's copy of the record on first
    access; the other fields when the message is made.
    """

    def __init__(self, *args, **kwargs):
        raise TypeError("MessageExt is created by the store's reads")

    @property
    def queue_offset(self):
        return self._queue_offset

    @queue_offset.setter
    def queue_offset(self, long long value):
        self._queue_offset = value

    @property
    def commitlog_offset(self):
        return self._commitlog_offset

    @commitlog_offset.setter
    def commitlog_offset(self, long long value):
        self._commitlog_offset = value

    @property
    def store_size(self):
        return self._store_size

    @store_size.setter
    def store_size(self, int value):
        self._store_size = value

    @property
    def store_timestamp(self):
        return self._store_timestamp

    @store_timestamp.setter
    def store_timestamp(self, long long value):
        self._store_timestamp = value

    @property
    def body_crc(self):
        return self._body_crc

    @body_crc.setter
    def body_crc(self, int value):
        self._body_crc = value

    @property
    def store_host(self):
        if self._lazy & LAZY_HOSTS:
            self._load(LAZY_HOSTS)
        if type(self._store_host) is bytes:
            return format_host(self._store_host)
        return self._store_host

    @property
    def msg_id(self):
        """Offset message id: uppercase hex of store host ip, port and commit-log offset."""
        if self._lazy & LAZY_HOSTS:
            self._load(LAZY_HOSTS)
        raw = self._store_host
        if type(raw) is not bytes:
            return None
        return ((<bytes>raw) + self._commitlog_offset.to_bytes(8, "big", signed=True)).hex().upper()

    @property
    def uniq_key(self):
        """The client message id (``UNIQ_KEY`` property) or ``None``."""
        return self.properties.get("UNIQ_KEY")

    @property
    def transaction_type(self):
        return self.sys_flag & 0xC

    @property
    def receipt_handle(self):
        """The receipt handle of a popped message (property ``POP_CK``), or ``None``."""
        return self.properties.get("POP_CK")

    @property
    def delivery_attempt(self):
        """How many times this message has been delivered, this time included
        (``reconsume_times + 1``, as RocketMQ 5's clients count it)."""
        return self.reconsume_times + 1

    def __reduce__(self):
        self._load(LAZY_ALL)
        return (_rebuild_ext, (self.topic, self.body, self.properties, self.queue_id, self.flag,
                               self.born_timestamp, self.born_host, self.sys_flag,
                               self._queue_offset, self._commitlog_offset, self._store_size,
                               self._store_timestamp, self._store_host, self.reconsume_times,
                               self.prepared_transaction_offset, self._body_crc))


def _rebuild_ext(topic, body, properties, queue_id, flag, born_ts, born_host, sys_flag,
                 queue_offset, commitlog_offset, store_size, store_ts, store_host,
                 reconsume_times, prepared_tx, body_crc):
    cdef MessageExt m = MessageExt.__new__(MessageExt)
    cdef dict props = dict(properties)
    m._topic = topic
    m._body = body
    m._properties = props
    tags = props.get("TAGS")
    m._tags = tags or None
    keys = props.get("KEYS")
    m._keys = ([k for k in keys.split(" ") if k] or None) if keys else None
    m.queue_id = queue_id
    m.flag = flag
    m.born_timestamp = born_ts
    m._born_host = born_host
    m.sys_flag = sys_flag
    m._queue_offset = queue_offset
    m._commitlog_offset = commitlog_offset
    m._store_size = store_size
    m._store_timestamp = store_ts
    m._store_host = store_host
    m.reconsume_times = reconsume_times
    m.prepared_transaction_offset = prepared_tx
    m._body_crc = body_crc
    return m
