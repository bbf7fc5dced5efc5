# cython: language_level=3
"""ReadBatch: a pull whose bodies are views of the mapped commit log, not copies.

``QueueReader.read_batch`` runs ``get_message``'s scan (the same statuses, offsets, page
limits, tag filter and CRC check on read) and, instead of copying the picked records and
making a ``MessageExt`` of each, keeps where they lie: a ``ReadBatch``.

- ``bodies``: a ``Bodies`` sequence of ``BodyView`` objects, one per message, each the
  body inside the mapped segment (no copy): read-only bytes through the buffer protocol,
  with ``len``, indexing, slicing (a ``memoryview``) and ``==`` as a memoryview has. A
  ``BodyView`` is one freelisted object (a ``memoryview`` costs a managed buffer and a
  view, two garbage-collected objects: about five times as much), and iterating the
  bodies makes two of them in all when the loop lets each go before the next: a view
  nobody else refers to is set to the next body.
- columns, as ``memoryview`` objects over C arrays (NumPy takes them with
  ``numpy.frombuffer``): ``queue_offsets``, ``commitlog_offsets``, ``store_timestamps``,
  ``tags_codes`` (int64, the consume-queue entries' tag hash codes), ``store_sizes`` and
  ``body_sizes`` (int32).
- per message, decoded on demand: ``tags(i)``, ``keys(i)``, ``properties(i)``,
  ``uniq_key(i)``, ``message(i)`` (the ``MessageExt`` get_message would have made).
- ``to_arrow()``: a ``pyarrow.RecordBatch`` with the Spark source's columns (but
  ``store``), decoded in C by ``columns.record_columns``.

Lifetime. The batch pins the segments its records lie in (``MappedFile`` pins): a cleaning
pass or a topic deletion may delete such a segment meanwhile (the file is unlinked, never
truncated), but its mapping stays until the batch is released, so a body never points at
unmapped memory. ``release()`` (or leaving a ``with`` block) ends the batch: its accessors
and its bodies raise ``ValueError`` from then on, and its segments are unpinned, unless a
buffer exported from a body before (a ``memoryview`` or slice of it, a NumPy array over
it) is still alive: that keeps its segment mapped, and valid, until it goes.
"""

cimport cython
from cpython.buffer cimport PyBuffer_FillInfo
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.ref cimport Py_INCREF, Py_REFCNT
from libc.stdint cimport int32_t, int64_t
from libc.string cimport memcmp, memcpy

from pymq._core.columns cimport record_columns
from pymq._core.mapped_file cimport MappedFile
from pymq._core.message cimport MessageExt, decode_properties
from pymq._core.record cimport RecordLayout, ext_from_page, visible_props_len
from pymq._core.hton cimport pymq_get_i64


cdef char EMPTY[1]


# The rows of a batch: a pull of the usual size takes its array from a few kept ones
# instead of malloc (about 600 instructions a pull: 32 rows are above PyMem's small sizes).
# Only touched with the GIL held.
cdef enum:
    ROWS_KEPT_CAP = 32              # the capacity of a kept array (a pull of the default size)
    ROWS_KEPT = 8                   # how many are kept
cdef Picked *_rows_kept[ROWS_KEPT]
cdef int _rows_kept_n = 0


cdef Picked *rows_alloc(Py_ssize_t cap) except NULL:
    """An array of at least ``cap`` rows (``rows_free`` gives it back)."""
    global _rows_kept_n
    cdef Picked *rows
    if cap <= ROWS_KEPT_CAP and _rows_kept_n:
        _rows_kept_n -= 1
        return _rows_kept[_rows_kept_n]
    rows = <Picked *>PyMem_Malloc(max(cap, <Py_ssize_t>ROWS_KEPT_CAP) * sizeof(Picked))
    if rows == NULL:
        raise MemoryError()
    return rows


cdef void rows_free(Picked *rows, Py_ssize_t cap) noexcept:
    global _rows_kept_n
    if rows == NULL:
        return
    if cap <= ROWS_KEPT_CAP and _rows_kept_n < ROWS_KEPT:
        _rows_kept[_rows_kept_n] = rows
        _rows_kept_n += 1
    else:
        PyMem_Free(rows)


@cython.final
@cython.no_gc
@cython.freelist(16)
cdef class SegmentHold:
    """The pins of a batch's segments: held until the batch is released and no buffer
    exported from its bodies is left (a memoryview, a NumPy array made from one)."""

    def __dealloc__(self):
        self._unpin()
        rows_free(self.rows, self.cap)
        self.rows = NULL

    cdef void _unpin(self) noexcept:
        cdef MappedFile mf
        if self.first is not None:
            mf, self.first = self.first, None
            mf.unpin()
        if self.more is not None:
            for mf in self.more:
                mf.unpin()
            self.more = None

    cdef int unpin_if_done(self) except -1:
        if self.released and self.exports == 0:
            self._unpin()
        return 0


@cython.final
@cython.no_gc
@cython.freelist(256)
cdef class BodyView:
    """A message body where it lies in the mapped commit log: read-only bytes, not copied.

    It exports the buffer protocol (``bytes(v)``, ``memoryview(v)``, ``numpy.frombuffer(v)``,
    ``hashlib``, ``file.write(v)`` take it as they take ``bytes``), has ``len``, indexing
    and slicing as a memoryview has (a slice is a ``memoryview`` of the same bytes), and
    compares equal to bytes-like objects of the same content. Once its batch is released
    every use raises ``ValueError``; what was made from it before (a memoryview, an array)
    stays valid and keeps the segment mapped until it goes."""

    cdef inline int _check(self) except -1:
        if self.hold.released:
            raise ValueError("the ReadBatch of this body was released")
        return 0

    def __len__(self):
        self._check()
        return self.size

    @property
    def nbytes(self):
        self._check()
        return self.size

    @property
    def readonly(self):
        return True

    def __getbuffer__(self, Py_buffer *view, int flags):
        self._check()
        PyBuffer_FillInfo(view, self, <void *>self.ptr if self.size else EMPTY, self.size, 1, flags)
        self.hold.exports += 1

    def __releasebuffer__(self, Py_buffer *view):
        self.hold.exports -= 1
        self.hold.unpin_if_done()

    def __bytes__(self):
        self._check()
        return PyBytes_FromStringAndSize(self.ptr, self.size)

    def tobytes(self):
        """A copy of the body."""
        return self.__bytes__()

    def hex(self, *args):
        return self.__bytes__().hex(*args)

    def __getitem__(self, key):
        return memoryview(self)[key]

    def __iter__(self):
        return iter(self.__bytes__())

    def __eq__(self, other):
        cdef const unsigned char[::1] o
        self._check()
        if isinstance(other, BodyView):
            (<BodyView>other)._check()
            return self.size == (<BodyView>other).size and memcmp(self.ptr, (<BodyView>other).ptr, self.size) == 0
        try:
            o = memoryview(other).cast("B")
        except (TypeError, ValueError):
            return NotImplemented
        return o.shape[0] == self.size and (self.size == 0 or memcmp(self.ptr, &o[0], self.size) == 0)

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self):
        return hash(self.__bytes__())

    def __repr__(self):
        return f"<BodyView of {self.size} bytes{' (released)' if self.hold.released else ''}>"


cdef inline BodyView _new_view(SegmentHold hold, const Picked *row):
    cdef BodyView v = BodyView.__new__(BodyView)
    v.hold = hold
    v.ptr = row.src + row.lay.body_pos
    v.size = row.lay.body_len
    return v


@cython.final
@cython.no_gc
@cython.freelist(8)
cdef class Bodies:
    """A batch's bodies, in queue order: a sequence of ``BodyView`` objects (``len``,
    indexing, slicing to a list, ``==`` against a list of bytes-like objects).

    Iterating makes no list and, at most, two views: a view the loop has let go of (no
    reference to it is left but the iterator's) is set to the next body instead of a new
    one being made; a view kept (in a list, a variable, a buffer exported from it) stays
    as it is. Indexing makes a new view each time."""

    def __len__(self):
        return self.hold.count if self.hold is not None else 0

    cdef int _check(self) except -1:
        if self.hold is not None and self.hold.released:
            raise ValueError("the ReadBatch of these bodies was released")
        return 0

    def __iter__(self):
        cdef BodiesIter it = BodiesIter.__new__(BodiesIter)
        self._check()
        it.hold = self.hold
        it.count = self.hold.count if self.hold is not None else 0
        return it

    def __getitem__(self, key):
        cdef Py_ssize_t i, n = len(self)
        self._check()
        if isinstance(key, slice):
            return [_new_view(self.hold, &self.hold.rows[i]) for i in range(*key.indices(n))]
        i = key
        if i < 0:
            i += n
        if i < 0 or i >= n:
            raise IndexError("body index out of range")
        return _new_view(self.hold, &self.hold.rows[i])

    def __eq__(self, other):
        if isinstance(other, (Bodies, list, tuple)):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None

    def __repr__(self):
        return f"<Bodies of {len(self)} messages>"


@cython.final
@cython.no_gc
@cython.freelist(8)
cdef class BodiesIter:
    """Iterates a batch's bodies, recycling views nobody holds (``Bodies``)."""

    def __iter__(self):
        return self

    def __next__(self):
        cdef BodyView v
        cdef const Picked *row
        cdef Py_ssize_t i = self.i
        if i >= self.count:
            raise StopIteration
        if self.hold.released:
            raise ValueError("the ReadBatch of these bodies was released")
        row = &self.hold.rows[i]
        self.i = i + 1
        # the view yielded two steps ago: a loop's variable holds only the last one
        v = self.ring1 if i & 1 else self.ring0
        if v is not None and Py_REFCNT(v) == 2:         # ours and ``v``'s
            v.ptr = row.src + row.lay.body_pos
            v.size = row.lay.body_len
            return v
        v = _new_view(self.hold, row)
        if i & 1:
            self.ring1 = v
        else:
            self.ring0 = v
        return v


cdef object _int64_column(const int64_t *values, Py_ssize_t n):
    return memoryview(PyBytes_FromStringAndSize(<const char *>values, n * 8)).cast("q")


@cython.final
@cython.no_gc                   # refers to no object that could refer back to it
@cython.freelist(8)
cdef class ReadBatch:
    """Messages of one queue read in place (``MessageStore.read_batch``); see the module."""

    def __len__(self):
        return self.count

    def __iter__(self):
        return iter(self.bodies)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self._release()

    @property
    def released(self):
        return self._released

    def release(self):
        """End the batch: its accessors and its bodies raise ``ValueError`` from now on, and
        its segments are unpinned (once no buffer exported from a body is left)."""
        self._release()

    cdef int _release(self) except -1:
        if self._released:
            return 0
        self._released = True
        self._bodies = None
        if self.hold is not None:
            self.hold.released = True
            self.hold.unpin_if_done()
        return 0

    cdef int take(self, Picked *rows, Py_ssize_t cap, Py_ssize_t count, MappedFile first, list more) except -1:
        """Own ``rows`` (``rows_alloc(cap)``: ``count`` records lying in ``first`` and, if
        not None, the segments in ``more``, which this pins)."""
        cdef SegmentHold hold = SegmentHold.__new__(SegmentHold)
        cdef MappedFile mf
        hold.rows = rows
        hold.cap = cap
        hold.count = count
        first._pins += 1                # held mapped (no Python runs between the scan and here)
        hold.first = first
        if more is not None:
            for mf in more:
                mf._pins += 1
            hold.more = more
        self.hold = hold
        self.count = count
        return 0

    cdef int _check(self) except -1:
        if self._released:
            raise ValueError("the ReadBatch was released")
        return 0

    cdef Picked *_row(self, Py_ssize_t i) except NULL:
        self._check()
        if i < 0:
            i += self.count
        if i < 0 or i >= self.count:
            raise IndexError("message index out of range")
        return &self.hold.rows[i]

    # -- bodies and columns --------------------------------------------------------------------

    @property
    def bodies(self):
        """The bodies, in queue order: ``BodyView`` objects over the mapped log (no copy),
        as a ``Bodies`` sequence."""
        cdef Bodies out
        self._check()
        if self._bodies is None:
            out = Bodies.__new__(Bodies)
            out.hold = self.hold
            self._bodies = out
        return self._bodies

    cdef object _column(self, int which):
        cdef Py_ssize_t i, n = self.count
        cdef bytes raw
        cdef int64_t *v64
        cdef int32_t *v32
        cdef Picked *row
        self._check()
        raw = PyBytes_FromStringAndSize(NULL, n * (8 if which < 4 else 4))
        v64 = <int64_t *><char *>raw
        v32 = <int32_t *><char *>raw
        for i in range(n):
            row = &self.hold.rows[i]
            if which == 0:
                v64[i] = row.queue_offset
            elif which == 1:
                v64[i] = row.lay.store_timestamp
            elif which == 2:
                v64[i] = row.tags_code
            elif which == 3:
                v64[i] = pymq_get_i64(row.src + 28)
            elif which == 4:
                v32[i] = <int32_t>row.size
            else:
                v32[i] = <int32_t>row.lay.body_len
        return memoryview(raw).cast("q" if which < 4 else "i")

    @property
    def queue_offsets(self):
        """Queue offset of each message (int64)."""
        return self._column(0)

    @property
    def store_timestamps(self):
        """Store time of each message, ms (int64)."""
        return self._column(1)

    @property
    def tags_codes(self):
        """Tag hash code of each message's consume-queue entry (int64)."""
        return self._column(2)

    @property
    def commitlog_offsets(self):
        """Commit-log offset of each message's record (int64)."""
        return self._column(3)

    @property
    def store_sizes(self):
        """Size of each message's record, bytes (int32)."""
        return self._column(4)

    @property
    def body_sizes(self):
        """Size of each message's body, bytes (int32)."""
        return self._column(5)

    # -- per message, on demand ----------------------------------------------------------------

    def properties(self, Py_ssize_t i) -> dict:
        """The stored properties of message ``i`` (``MessageExt.properties``)."""
        cdef Picked *row = self._row(i)
        return decode_properties(PyBytes_FromStringAndSize(row.src + row.lay.props_pos,
                                                           visible_props_len(&row.lay)))

    def tags(self, Py_ssize_t i):
        """The TAGS of message ``i``, or None."""
        return self.properties(i).get("TAGS") or None

    def keys(self, Py_ssize_t i):
        """The KEYS of message ``i`` as a list, or None."""
        keys = self.properties(i).get("KEYS")
        return ([k for k in keys.split(" ") if k] or None) if keys else None

    def uniq_key(self, Py_ssize_t i):
        """The UNIQ_KEY of message ``i``, or None."""
        return self.properties(i).get("UNIQ_KEY")

    def message(self, Py_ssize_t i):
        """Message ``i`` as the ``MessageExt`` ``get_message`` makes (a copy of its record)."""
        cdef Picked *row = self._row(i)
        cdef MessageExt m = ext_from_page(PyBytes_FromStringAndSize(row.src, row.size), 0, &row.lay, row.size,
                                          None, self.topic)
        if self.topic.startswith("%LMQ%"):      # its place in the LMQ, not in its parent queue
            m._queue_offset = row.queue_offset
            m.queue_id = self.queue_id
        return m

    def messages(self) -> list:
        """Every message as a ``MessageExt``."""
        return [self.message(i) for i in range(self.count)]

    def to_arrow(self):
        """A ``pyarrow.RecordBatch`` of the messages (the Spark source's columns, but
        ``store``; ``pymq._core.arrow_columns.MESSAGE_SCHEMA``). Needs pyarrow."""
        from pymq._core.arrow_columns import record_batch
        cdef Py_ssize_t i, n = self.count
        cdef bytes recs_b, sizes_b, lays_b
        cdef const char **recs
        cdef int32_t *sizes
        cdef RecordLayout *lays
        self._check()
        recs_b = PyBytes_FromStringAndSize(NULL, max(n, 1) * sizeof(char *))
        sizes_b = PyBytes_FromStringAndSize(NULL, max(n, 1) * sizeof(int32_t))
        lays_b = PyBytes_FromStringAndSize(NULL, max(n, 1) * sizeof(RecordLayout))
        recs = <const char **><char *>recs_b
        sizes = <int32_t *><char *>sizes_b
        lays = <RecordLayout *><char *>lays_b
        for i in range(n):
            recs[i] = self.hold.rows[i].src
            sizes[i] = <int32_t>self.hold.rows[i].size
            memcpy(&lays[i], &self.hold.rows[i].lay, sizeof(RecordLayout))
        return record_batch(n, record_columns(n, recs, sizes, lays), self.topic, self.queue_id)

    def __repr__(self):
        return (f"ReadBatch(status={self.status.name if self.status is not None else None}, "
                f"messages={self.count}, next_begin_offset={self.next_begin_offset}, "
                f"released={self._released})")
