# cython: language_level=3
"""Bodies for ``put_bodies``: a pointer and a length per body, from whatever holds them.

``load_bodies(obj)`` takes any of

- a list or tuple (or any other iterable) of bytes-like objects: ``bytes`` directly,
  anything else with the buffer protocol (``bytearray``, ``memoryview``, ``array``, a
  NumPy array...) as its raw contiguous bytes, held (``Py_buffer``) until the put is over;
- a NumPy array: a 2-D array of one-byte items (each row a body of the row's width), a
  1-D ``S`` (bytes) array (each item a body, as NumPy gives it: trailing NUL bytes
  dropped) or an object array of bytes-like items;
- a pyarrow ``Array`` or ``ChunkedArray`` of ``binary``, ``large_binary``, ``string``,
  ``large_string`` (the UTF-8 bytes) or ``fixed_size_binary``, read in place from its
  offsets and data buffers (``*_view`` types are cast first); nulls are refused.

Nothing is copied: the ``BodySource`` keeps every object it points into alive (and every
buffer exported) until it is deallocated, so the put may copy from it without the GIL.
Neither NumPy nor pyarrow is imported here unless the object came from it.
"""

cimport cython
from cpython.buffer cimport (PyBUF_RECORDS_RO, PyBUF_SIMPLE, PyBuffer_Release, PyObject_CheckBuffer,
                             PyObject_GetBuffer)
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport int32_t, int64_t
from libc.string cimport memcpy


@cython.final
cdef class BodySource:
    """``n`` bodies as ``ptr[i]`` / ``size[i]``, and what keeps them valid."""

    def __cinit__(self):
        self.n = 0
        self.ptr = NULL
        self.size = NULL
        self.views = NULL
        self.nviews = 0
        self.cap_views = 0
        self.owners = []

    def __dealloc__(self):
        cdef Py_ssize_t i
        for i in range(self.nviews):
            PyBuffer_Release(&self.views[i])
        PyMem_Free(self.views)
        PyMem_Free(self.ptr)
        PyMem_Free(self.size)

    def __len__(self):
        return self.n

    def body(self, Py_ssize_t i) -> bytes:
        """A copy of body ``i`` (tests)."""
        if i < 0 or i >= self.n:
            raise IndexError(i)
        return (<const char *>self.ptr[i])[:self.size[i]]

    cdef int _alloc(self, Py_ssize_t n) except -1:
        self.n = n
        self.ptr = <const char **>PyMem_Malloc(max(n, 1) * sizeof(const char *))
        self.size = <Py_ssize_t *>PyMem_Malloc(max(n, 1) * sizeof(Py_ssize_t))
        if self.ptr == NULL or self.size == NULL:
            raise MemoryError()
        return 0

    cdef Py_buffer *_hold(self, object obj, int flags) except NULL:
        """Export ``obj``'s buffer into the next slot (released at deallocation)."""
        cdef Py_buffer *p
        if self.nviews == self.cap_views:
            self.cap_views = max(8, 2 * self.cap_views)
            p = <Py_buffer *>PyMem_Malloc(self.cap_views * sizeof(Py_buffer))
            if p == NULL:
                raise MemoryError()
            if self.nviews:
                memcpy(p, self.views, self.nviews * sizeof(Py_buffer))
            PyMem_Free(self.views)
            self.views = p
        p = &self.views[self.nviews]
        PyObject_GetBuffer(obj, p, flags)
        self.nviews += 1
        return p


cdef char EMPTY[1]


cdef str _kind(object o):
    return type(o).__name__


cdef BodySource _from_sequence(tuple items):
    cdef BodySource src = BodySource.__new__(BodySource)
    cdef Py_ssize_t n = len(items), i
    cdef object item
    cdef Py_buffer *view
    src._alloc(n)
    src.owners.append(items)
    for i in range(n):
        item = items[i]
        if type(item) is bytes:
            src.ptr[i] = PyBytes_AS_STRING(item)
            src.size[i] = PyBytes_GET_SIZE(item)
            continue
        if not PyObject_CheckBuffer(item) or isinstance(item, str):
            raise TypeError(f"bodies[{i}] is a {_kind(item)}, not a bytes-like object")
        try:
            view = src._hold(item, PyBUF_SIMPLE)
        except BufferError as e:
            raise TypeError(f"bodies[{i}] ({_kind(item)}) is not contiguous bytes: {e}") from None
        src.ptr[i] = <const char *>view.buf
        src.size[i] = view.len
    return src


cdef BodySource _from_array(object arr, Py_buffer *view):
    """A NumPy-style array already exported into ``view`` (which this takes over)."""
    cdef BodySource src = BodySource.__new__(BodySource)
    cdef Py_ssize_t n, width, i, k
    cdef const char *base
    cdef bytes fmt = view.format if view.format != NULL else b"B"
    if view.ndim == 2 and view.itemsize == 1 and view.strides[1] == 1 and view.strides[0] == view.shape[1]:
        n = view.shape[0]
        width = view.shape[1]
        strip = False
    elif (view.ndim == 1 and fmt.endswith(b"s") and view.strides[0] == view.itemsize):
        n = view.shape[0]
        width = view.itemsize
        strip = True
    else:
        shape = tuple(view.shape[i] for i in range(view.ndim))
        PyBuffer_Release(view)
        raise TypeError(f"array bodies are the rows of a C-contiguous 2-D array of bytes (uint8), the items "
                        f"of a 1-D bytes ('S') array or of an object array; not a {_kind(arr)} of shape "
                        f"{shape} and format {fmt.decode('ascii', 'replace')!r}")
    # the view moves into the source, which releases it
    src.cap_views = 1
    src.views = <Py_buffer *>PyMem_Malloc(sizeof(Py_buffer))
    if src.views == NULL:
        PyBuffer_Release(view)
        raise MemoryError()
    memcpy(src.views, view, sizeof(Py_buffer))
    src.nviews = 1
    src._alloc(n)
    base = <const char *>view.buf
    for i in range(n):
        src.ptr[i] = base + i * width
        k = width
        if strip:
            while k > 0 and base[i * width + k - 1] == 0:
                k -= 1
        src.size[i] = k
    return src


cdef BodySource _from_arrow(object arr):
    import pyarrow as pa
    cdef BodySource src
    cdef Py_ssize_t n = 0, i, j, at = 0, length, first
    cdef Py_buffer *offs
    cdef Py_buffer *data
    cdef const char *base
    cdef const char *obuf
    cdef int64_t start, end
    cdef int32_t s32, e32
    cdef Py_ssize_t width, coff, data_len
    if isinstance(arr, pa.ChunkedArray):
        chunks = list(arr.chunks)
    elif isinstance(arr, pa.Array):
        chunks = [arr]
    else:
        raise TypeError(f"bodies must be a pyarrow Array or ChunkedArray of binary data, not {_kind(arr)}")
    views = getattr(pa.types, "is_binary_view", None), getattr(pa.types, "is_string_view", None)
    for j in range(len(chunks)):
        c = chunks[j]
        if any(f is not None and f(c.type) for f in views):
            chunks[j] = c.cast(pa.large_binary())
    for c in chunks:
        n += len(c)
        if c.null_count:
            nulls = c.is_null()
            first = nulls.index(True).as_py()
            raise ValueError(f"bodies[{n - len(c) + first}] is null")
    src = BodySource.__new__(BodySource)
    src._alloc(n)
    src.owners.append(chunks)
    for c in chunks:
        t = c.type
        length = len(c)
        coff = c.offset
        if length == 0:
            continue
        buffers = c.buffers()
        if pa.types.is_fixed_size_binary(t):
            width = t.byte_width
            data = src._hold(buffers[1], PyBUF_SIMPLE) if buffers[1] is not None else NULL
            base = <const char *>data.buf if data != NULL else EMPTY
            data_len = data.len if data != NULL else 0
            if width < 0 or (width > 0 and (coff + length) > data_len // width):
                raise ValueError(f"Arrow bodies: a {t} array of {length} items at offset {coff} "
                                 f"with a data buffer of {data_len} bytes")
            for i in range(length):
                src.ptr[at] = base + (coff + i) * width
                src.size[at] = width
                at += 1
            continue
        if pa.types.is_binary(t) or pa.types.is_string(t):
            width = 4
        elif pa.types.is_large_binary(t) or pa.types.is_large_string(t):
            width = 8
        else:
            raise TypeError(f"Arrow bodies are binary, large_binary, string, large_string or "
                            f"fixed_size_binary, not {t}")
        if buffers[1] is None:
            raise ValueError(f"Arrow bodies: a {t} array without its offsets buffer")
        offs = src._hold(buffers[1], PyBUF_SIMPLE)
        obuf = <const char *>offs.buf
        data = src._hold(buffers[2], PyBUF_SIMPLE) if buffers[2] is not None else NULL
        base = <const char *>data.buf if data != NULL else EMPTY
        data_len = data.len if data != NULL else 0
        # pyarrow checks an array's first and last offsets only (``validate(full=True)``
        # checks the others): every body is checked to lie inside the data buffer
        if coff < 0 or (coff + length + 1) > offs.len // width:
            raise ValueError(f"Arrow bodies: a {t} array of {length} items at offset {coff} "
                             f"with an offsets buffer of {offs.len} bytes")
        for i in range(coff, coff + length):
            if width == 4:
                memcpy(&s32, obuf + 4 * i, 4)
                memcpy(&e32, obuf + 4 * (i + 1), 4)
                start, end = s32, e32
            else:
                memcpy(&start, obuf + 8 * i, 8)
                memcpy(&end, obuf + 8 * (i + 1), 8)
            if start < 0 or end < start or end > data_len:
                raise ValueError(f"bodies[{at}]: Arrow offsets [{start}, {end}) outside the data buffer "
                                 f"of {data_len} bytes")
            src.ptr[at] = base + start
            src.size[at] = <Py_ssize_t>(end - start)
            at += 1
    return src


cpdef BodySource load_bodies(object bodies):
    """The bodies of a ``put_bodies`` call (see the module's docstring); ``TypeError``
    for anything that is not one body per item."""
    cdef Py_buffer view
    if isinstance(bodies, (bytes, bytearray, memoryview, str)):
        raise TypeError(f"bodies must be a sequence of bytes-like objects, one per message, not one "
                        f"{_kind(bodies)}")
    if type(bodies) is tuple:
        return _from_sequence(<tuple>bodies)
    if type(bodies) is list:
        return _from_sequence(tuple(bodies))     # a snapshot: another thread may change the list
    if type(bodies).__module__.startswith("pyarrow"):
        return _from_arrow(bodies)
    if PyObject_CheckBuffer(bodies):
        PyObject_GetBuffer(bodies, &view, PyBUF_RECORDS_RO)
        if view.format != NULL and view.format[0] == b"O" and view.format[1] == 0:
            PyBuffer_Release(&view)                  # an object array: its items are the bodies
        else:
            return _from_array(bodies, &view)
    try:
        items = tuple(bodies)
    except TypeError:
        raise TypeError(f"bodies must be a sequence of bytes-like objects, not {_kind(bodies)}") from None
    return _from_sequence(items)
