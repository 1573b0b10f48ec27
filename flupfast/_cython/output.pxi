# The compiled twin of flupfast/output.py's send_buffers: the same contract (every buffer sent
# in order, partial sends resumed by memoryview slicing, never by copying), plus one first
# sendmsg(MSG_DONTWAIT) made while holding the GIL. A small response fits the socket buffer
# and leaves in that one call, so the thread keeps the GIL: Python's sock.sendmsg releases
# and retakes it around the call, and with 16 busy worker threads that hand-off wakes a waiter
# and puts this thread back in line for the GIL (measured: futex calls and context switches
# per request behind nginx). Whatever does not fit goes through sock.sendmsg as before, which
# blocks with the GIL released and honours the socket's timeout.
# (errno, EAGAIN, EINTR, EWOULDBLOCK and MSG_NOSIGNAL come from prefork.pxi, included before.)

from flupfast.limits import MAX_IOVECS

cdef extern from "<sys/uio.h>" nogil:
    struct iovec:
        void *iov_base
        size_t iov_len

cdef extern from "<sys/socket.h>" nogil:
    struct msghdr:
        void *msg_name
        unsigned int msg_namelen
        iovec *msg_iov
        size_t msg_iovlen
        void *msg_control
        size_t msg_controllen
        int msg_flags
    ssize_t c_sendmsg "sendmsg" (int fd, const msghdr *msg, int flags)
    int MSG_DONTWAIT

cdef enum:
    _NOWAIT_IOVECS = 64     # buffers tried in the first, GIL-held sendmsg


cdef Py_ssize_t _send_nowait(int fd, list buffers, Py_ssize_t count) except -2:
    """sendmsg(MSG_DONTWAIT) of the first buffers (at most _NOWAIT_IOVECS); returns the bytes
    sent, or -1 when the socket would block or a signal interrupted the call (the caller's
    blocking path handles both). Other errors raise OSError, as sock.sendmsg does."""
    cdef iovec iov[_NOWAIT_IOVECS]
    cdef Py_buffer views[_NOWAIT_IOVECS]
    cdef msghdr msg
    cdef Py_ssize_t n = 0, i, sent
    cdef int err
    if count > _NOWAIT_IOVECS:
        count = _NOWAIT_IOVECS
    try:
        while n < count:
            PyObject_GetBuffer(buffers[n], &views[n], PyBUF_SIMPLE)
            iov[n].iov_base = views[n].buf
            iov[n].iov_len = <size_t>views[n].len
            n += 1
        memset(&msg, 0, sizeof(msg))
        msg.msg_iov = iov
        msg.msg_iovlen = <size_t>n
        sent = c_sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL)
        if sent < 0:
            err = errno
            if err == EAGAIN or err == EWOULDBLOCK or err == EINTR:
                return -1
            PyErr_SetFromErrno(OSError)  # errno is still sendmsg's
            return -2
        return sent
    finally:
        for i in range(n):
            PyBuffer_Release(&views[i])


def send_buffers(sock, list buffers):
    """Send every buffer in order with as few syscalls as possible; see output.send_buffers."""
    cdef Py_ssize_t index = 0, count = len(buffers), size, sent, end
    cdef object sendmsg_ = None
    cdef list batch
    cdef int fd
    if count == 0:
        return
    fd = sock.fileno()
    if fd >= 0:
        sent = _send_nowait(fd, buffers, count)
        if sent >= 0:
            while index < count:
                size = len(buffers[index])
                if sent >= size:
                    sent -= size
                    index += 1
                    continue
                if sent:
                    buffers[index] = memoryview(buffers[index])[sent:]
                break
    while index < count:
        if sendmsg_ is None:
            sendmsg_ = sock.sendmsg
        end = index + MAX_IOVECS
        batch = buffers[index:end]
        sent = sendmsg_(batch)
        for buf in batch:
            size = len(buf)
            if sent >= size:
                sent -= size
                index += 1
                continue
            if sent:
                buffers[index] = memoryview(buf)[sent:]
            break
