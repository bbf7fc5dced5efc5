# cython: boundscheck=False, wraparound=False
"""The bytes of master/slave replication moved without the GIL (pymq/store/ha).

A master's connection thread and a slave's client thread share their process with
producers, the dispatcher and the flush services, all of which want the GIL. Moving a
replication frame from Python costs a GIL hand-back and re-take per system call, and a
re-take waits for whichever thread holds the GIL (up to the switch interval, 5 ms) when
it is busy. Here whole runs of frames move in one call with the GIL released:

* ``send_frames``: the master's frames (``[phyOffset i64][bodySize i32][body]``,
  big-endian, bodies of at most ``batch`` bytes) from a mapped segment to the socket:
  each header with ``MSG_MORE`` and its body written from the mapping (as RocketMQ's
  ``HAConnection`` writes the mapped buffer's slice), waiting (``poll``) while the socket
  is full. ``sendfile`` of the segment's file was the first way: on loopback it moved
  2.3-2.5 GB/s where a write from the mapping moved 3.2-3.5 (docs/replication.md,
  "Figures"): the page references it puts in each packet cost more than the copy;
* ``receive_frames``: the slave's side: the socket's bytes spliced into a pipe, each
  header read out of it and each body spliced on into the segment file at its offset,
  for as long as frames continue the same segment.

Both return to Python at the first thing they do not decide themselves (a frame for
another segment, a heartbeat, an offset that does not continue, the end of the data).
"""

import os

from libc.errno cimport EAGAIN, EINTR, errno
from libc.stdint cimport int32_t, int64_t
from libc.string cimport memcpy

from .hton cimport pymq_get_i32, pymq_get_i64, pymq_put_i32, pymq_put_i64
from .mapped_file cimport MappedFile


cdef extern from "<sys/types.h>":
    ctypedef long off_t
    ctypedef long loff_t
    ctypedef long ssize_t

cdef extern from "<sys/socket.h>" nogil:
    ssize_t send(int fd, const void *buf, size_t n, int flags)
    int MSG_MORE
    int MSG_NOSIGNAL

cdef extern from "<poll.h>" nogil:
    struct pollfd:
        int fd
        short events
        short revents
    int poll(pollfd *fds, unsigned long nfds, int timeout)
    short POLLIN
    short POLLOUT

cdef extern from "<unistd.h>" nogil:
    ssize_t read(int fd, void *buf, size_t n)

cdef extern from "<fcntl.h>" nogil:
    ssize_t splice(int fd_in, loff_t *off_in, int fd_out, loff_t *off_out, size_t len, unsigned int flags)
    unsigned int SPLICE_F_MOVE

cdef extern from "<time.h>" nogil:
    ctypedef long time_t
    struct timespec:
        time_t tv_sec
        long tv_nsec
    int clock_gettime(int clk, timespec *ts)
    int CLOCK_MONOTONIC

DEF HEADER_SIZE = 12


cdef inline int64_t now_ms() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec * 1000 + ts.tv_nsec // 1000000


cdef int wait_fd(int fd, short events, int64_t deadline) noexcept nogil:
    """Wait for ``events`` on ``fd`` until ``deadline`` (ms, monotonic): 1 ready, 0 timed
    out, -1 error (errno)."""
    cdef pollfd p
    cdef int rc
    cdef int64_t left
    while True:
        left = deadline - now_ms()
        if left <= 0:
            return 0
        p.fd = fd
        p.events = events
        p.revents = 0
        rc = poll(&p, 1, <int>(left if left < 200 else 200))
        if rc > 0:
            return 1
        if rc < 0 and errno != EINTR:
            return -1


cdef int send_all(int sock, const char *buf, Py_ssize_t n, int flags, int stall_ms) noexcept nogil:
    """0 when all ``n`` bytes went, 1 on a stall (nothing went for ``stall_ms``), -1 on an
    error (errno)."""
    cdef ssize_t k
    cdef int rc
    while n > 0:
        k = send(sock, buf, n, flags | MSG_NOSIGNAL)
        if k > 0:
            buf += k
            n -= k
        elif k < 0 and errno == EAGAIN:
            rc = wait_fd(sock, POLLOUT, now_ms() + stall_ms)
            if rc <= 0:
                return 1 if rc == 0 else -1
        elif k < 0 and errno != EINTR:
            return -1
    return 0


def send_frames(int sock, MappedFile mf, int64_t phy_offset, int64_t file_pos, int64_t count,
                int64_t batch, int stall_ms):
    """Send ``count`` bytes of segment ``mf`` from ``file_pos`` (commit-log offset
    ``phy_offset``) to the non-blocking socket ``sock`` as frames of at most ``batch``
    body bytes, without the GIL; the segment stays mapped meanwhile (pinned). Returns the
    body bytes sent: ``count``, or fewer when the peer read nothing for ``stall_ms`` (the
    connection is then unusable: a frame may be cut). OSError when a send fails,
    StoreStateError when the segment is closed, ValueError for a range outside it."""
    cdef char header[HEADER_SIZE]
    cdef const char *base
    cdef int64_t sent = 0, size
    cdef int rc = 0, err = 0
    if batch <= 0 or count < 0 or file_pos < 0 or file_pos + count > mf.file_size:
        raise ValueError("batch must be positive and the range within the segment")
    mf.pin()
    try:
        base = mf.base
        with nogil:
            while sent < count:
                size = count - sent
                if size > batch:
                    size = batch
                pymq_put_i64(header, phy_offset + sent)
                pymq_put_i32(header + 8, <int32_t>size)
                rc = send_all(sock, header, HEADER_SIZE, MSG_MORE, stall_ms)
                if rc == 0:
                    rc = send_all(sock, base + file_pos + sent, size, 0, stall_ms)
                if rc != 0:
                    err = errno
                    break
                sent += size
    finally:
        mf.unpin()
    if rc == -1:
        raise OSError(err, f"sending replication frames failed: {os.strerror(err)}")
    return sent


cdef int splice_all(int src, int dst, loff_t *off_out, Py_ssize_t n) noexcept nogil:
    """Move ``n`` bytes that are in the pipe ``src`` to ``dst`` (at ``*off_out``, which
    advances): 0, or -1 on an error (errno)."""
    cdef ssize_t k
    while n > 0:
        k = splice(src, NULL, dst, off_out, n, SPLICE_F_MOVE)
        if k > 0:
            n -= k
        elif k == 0 or errno != EINTR:
            return -1
    return 0


cdef int read_all(int fd, char *buf, Py_ssize_t n) noexcept nogil:
    cdef ssize_t k
    while n > 0:
        k = read(fd, buf, n)
        if k > 0:
            buf += k
            n -= k
        elif k == 0 or errno != EINTR:
            return -1
    return 0


# what ``receive_frames`` stopped at
cdef enum:
    S_RECEIVED = 0  # the socket had nothing more at once, or ``limit`` bytes were read
    S_HEADER = 1    # a frame header it does not take itself (returned, already read)
    S_CLOSED = 2    # the peer closed the connection

RECEIVED = S_RECEIVED
HEADER = S_HEADER
CLOSED = S_CLOSED


def receive_frames(int sock, int pipe_r, int pipe_w, Py_ssize_t pipe_size, int fd, int64_t seg_from,
                   int64_t write_limit, int64_t received_end, int64_t body_left, Py_ssize_t in_pipe,
                   int64_t limit, int wait_ms):
    """Read frames off the non-blocking socket ``sock`` without the GIL: its bytes are
    spliced into the pipe (``pipe_w``, ``pipe_size`` bytes), each header read out of it
    (``pipe_r``), each body spliced into file ``fd`` (the segment starting at commit-log
    offset ``seg_from``) at ``received_end``. A header is taken only when its frame
    continues ``received_end`` with a body that ends within ``write_limit`` (the segment's
    end, or its blocks reserved so far); any other header is returned to the caller, as
    are ``body_left`` (the current frame's bytes still to come) and ``in_pipe`` (bytes in
    the pipe, fewer than a header unless a header was returned). Waits up to ``wait_ms``
    for a first byte; reads about ``limit`` bytes at most.

    Returns ``(status, received_end, body_left, in_pipe, bytes_read, frames, phy, size)``,
    ``status`` one of RECEIVED, HEADER (``phy``, ``size``: the header), CLOSED. OSError on
    a socket, pipe or file error."""
    cdef char header[HEADER_SIZE]
    cdef int64_t nread = 0, frames = 0, phy = -1, size = 0, k
    cdef ssize_t n
    cdef loff_t off
    cdef int status = S_RECEIVED, err = 0, rc
    cdef int64_t deadline = now_ms() + wait_ms
    with nogil:
        while True:
            # the pipe's bytes first: bodies to the file, headers parsed
            while in_pipe > 0:
                if body_left > 0:
                    k = body_left if body_left < in_pipe else in_pipe
                    off = <loff_t>(received_end - seg_from)
                    if splice_all(pipe_r, fd, &off, k) < 0:
                        err = errno
                        break
                    body_left -= k
                    in_pipe -= k
                    received_end += k
                elif in_pipe >= HEADER_SIZE:
                    if read_all(pipe_r, header, HEADER_SIZE) < 0:
                        err = errno
                        break
                    in_pipe -= HEADER_SIZE
                    phy = pymq_get_i64(header)
                    size = pymq_get_i32(header + 8)
                    if size > 0 and phy == received_end and fd >= 0 and phy + size <= write_limit:
                        body_left = size
                        frames += 1
                    else:
                        status = S_HEADER
                        break
                else:
                    break
            if err or status == S_HEADER or nread >= limit:
                break
            # at most the burst's rest: the pipe may hold far more (see FrameReader)
            k = pipe_size - in_pipe
            if k > limit - nread:
                k = limit - nread
            n = splice(sock, NULL, pipe_w, NULL, <size_t>k, SPLICE_F_MOVE)
            if n > 0:
                in_pipe += n
                nread += n
            elif n == 0:
                status = S_CLOSED
                break
            elif errno == EAGAIN:
                if nread > 0:
                    break
                rc = wait_fd(sock, POLLIN, deadline)
                if rc == 0:
                    break
                if rc < 0:
                    err = errno
                    break
            elif errno != EINTR:
                err = errno
                break
    if err:
        raise OSError(err, f"receiving replication frames failed: {os.strerror(err)}")
    return status, received_end, body_left, in_pipe, nread, frames, phy, size
