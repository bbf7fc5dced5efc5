# cython: language_level=3
"""ReadBatch: a pull whose bodies are views of the mapped commit log, not copies.

``QueueReader.read_batch`` runs ``get_message``'s scan (the same statuses, offsets, page
limits, tag filter and CRC check on read) and, instead of copying the picked records and
making a ``MessageExt`` of each, keeps where they lie: a ``ReadBatch``.

- ``bodies``: a list of read-only ``memoryview`` objects, one per message, each a view of
  the body inside the mapped segment (no copy). Made on first access.
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
truncated), but its mapping stays until the batch is released and no view of it is left, so
a view never points at unmapped memory. ``release()`` (or leaving a ``with`` block) ends the
batch: its accessors raise ``ValueError``, the body views still referenced elsewhere are
released (using one then raises ``ValueError``, the memoryview's own error), and the
segments are unpinned once the last view is gone. A view that cannot be released (a NumPy
array or a slice was made from it) keeps its segment mapped until it goes.
"""

cimport cython
from cpython.buffer cimport PyBuffer_FillInfo
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.mem cimport PyMem_Free
from cpython.ref cimport Py_INCREF
from libc.stdint cimport int32_t, int64_t
from libc.string cimport memcpy

from pymq._core.columns cimport record_columns
from pymq._core.mapped_file cimport MappedFile
from pymq._core.message cimport decode_properties
from pymq._core.record cimport RecordLayout, ext_from_page, visible_props_len
from pymq._core.hton cimport pymq_get_i64

cdef extern from "Python.h":
    object PyMemoryView_FromObject(object obj)
    Py_ssize_t Py_REFCNT(object o)

cdef char EMPTY[1]


@cython.final
cdef class SegmentHold:
    """The pins of a batch's segments, and the exporter of its body views."""

    def __cinit__(self):
        self.next_view = -1

    def __dealloc__(self):
        cdef MappedFile mf
        if self.segments is not None:
            for mf in self.segments:
                mf.unpin()
            self.segments = None
        PyMem_Free(self.rows)
        self.rows = NULL

    def __getbuffer__(self, Py_buffer *view, int flags):
        cdef Py_ssize_t i = self.next_view
        cdef Picked *row
        if i < 0 or i >= self.count or self.segments is None:
            raise BufferError("a ReadBatch's bodies are had through ReadBatch.bodies")
        row = &self.rows[i]
        PyBuffer_FillInfo(view, self, <void *>(row.src + row.lay.body_pos) if row.lay.body_len else EMPTY,
                          row.lay.body_len, 1, flags)
        self.exports += 1

    def __releasebuffer__(self, Py_buffer *view):
        self.exports -= 1
        self.unpin_if_done()

    cdef int unpin_if_done(self) except -1:
        cdef MappedFile mf
        if self.released and self.exports == 0 and self.segments is not None:
            segments, self.segments = self.segments, None
            for mf in segments:
                mf.unpin()
        return 0


cdef object _int64_column(const int64_t *values, Py_ssize_t n):
    return memoryview(PyBytes_FromStringAndSize(<const char *>values, n * 8)).cast("q")


@cython.final
cdef class ReadBatch:
    """Messages of one queue read in place (``MessageStore.read_batch``); see the module."""

    def __len__(self):
        return self.count

    def __iter__(self):
        return iter(self.bodies)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    @property
    def released(self):
        return self._released

    def release(self):
        """End the batch: drop its views and unpin its segments (once no view is left).
        Views still referenced elsewhere are released (they raise ``ValueError`` after)."""
        cdef list views
        cdef Py_ssize_t i
        if self._released:
            return
        self._released = True
        views = self._bodies
        self._bodies = None
        if views is not None:
            # a view referenced elsewhere than by this list (or all, when somebody holds
            # the list) is released now, so using it raises instead of reading on
            shared = Py_REFCNT(views) > 1
            for i in range(len(views)):
                v = views[i]
                if shared or Py_REFCNT(v) > 2:          # the list, ``v``, and somebody else
                    try:
                        v.release()
                    except BufferError:
                        pass                    # exported further: keeps its segment until it goes
            v = None
            views = None
        if self.hold is not None:
            self.hold.released = True
            self.hold.unpin_if_done()

    cdef int take(self, Picked *rows, Py_ssize_t count, list segments) except -1:
        """Own ``rows`` (``count`` records lying in ``segments``, which this pins)."""
        cdef SegmentHold hold = SegmentHold.__new__(SegmentHold)
        cdef MappedFile mf
        hold.rows = rows
        hold.count = count
        for mf in segments:
            mf._pins += 1               # held mapped (no Python runs between the scan and here)
        hold.segments = segments
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
        """The bodies as read-only memoryviews of the mapped log, in queue order."""
        cdef Py_ssize_t i
        cdef list out
        cdef SegmentHold hold = self.hold
        self._check()
        if self._bodies is not None:
            return self._bodies
        out = PyList_New(self.count)
        for i in range(self.count):
            hold.next_view = i
            v = PyMemoryView_FromObject(hold)
            Py_INCREF(v)
            PyList_SET_ITEM(out, i, v)
        hold = self.hold
        if hold is not None:
            hold.next_view = -1
        self._bodies = out
        return out

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
        return ext_from_page(PyBytes_FromStringAndSize(row.src, row.size), 0, &row.lay, row.size, None,
                             self.topic)

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
