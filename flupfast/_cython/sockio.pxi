# The compiled twin of flupfast/sockio.py: receive into a buffer and close a connection's
# socket with the same results, errors and timeouts, but without giving up the GIL when the
# call need not wait. Python's sock.recv_into and sock.close release the GIL around the
# syscall; with 16 serving threads every release hands the GIL to a waiting thread and puts
# this one back in line for up to the switch interval (bench/profile-new-connection.md). After
# accept the request head is normally in the socket buffer already, and close(2) of a socket
# does not block (no SO_LINGER time is ever set on a connection), so both stay GIL-held.
# The GIL-held try is made in a process whose threads contend for the GIL (leader.pxi's
# _threads_contend, set by the threaded mode's Leader), and anywhere for bytes that are
# expected (a request's first, a body's); not for a kept connection's wait for its next
# request, where it would find nothing and cost a recv. Python's own socket class is read in
# place (fd, timeout: leader.pxi's layout check), so a receive that must wait on a blocking
# socket waits here, the GIL released, without the method call; one with a timeout, or
# interrupted by a signal, goes through sock.recv_into, which honours both. (errno, EAGAIN,
# EINTR, EWOULDBLOCK, ECONNRESET and c_close come from prefork.pxi; MSG_DONTWAIT from
# output.pxi, both included before.)

cdef extern from "<sys/socket.h>" nogil:
    ssize_t c_recv "recv" (int fd, void *buf, size_t n, int flags)

import socket as _socket_module
# sock.recv_into through Python, its answer checked (the pure twin's): the callers copy or
# parse as many bytes of the buffer in C as it says.
from flupfast.sockio import recv_into as _checked_recv_into
from _socket import socket as _c_socket

# Only Python's own socket class takes the short path: a subclass (ssl.SSLSocket) has its
# own receive and close.
cdef object _SocketClass = _socket_module.socket
cdef object _c_detach = _c_socket.detach  # the fd let go of, without socket.py's wrapper


# socket.py's class at import, as the layout check knows it: _socket's (a wrapper that is
# not, gevent's, is left alone).
cdef bint _socket_class_is_known = isinstance(_SocketClass, type) and \
    issubclass(_SocketClass, _c_socket)


cdef flupfast_socket_state *_socket_state_of(sock) except? NULL:
    """The state of ``sock`` read in place (leader.pxi's flupfast_socket_state): NULL unless
    it is Python's own socket class and the layout check agreed (up to 3.13)."""
    if type(sock) is not _SocketClass or not _socket_class_is_known or \
            not _socket_layout_known():
        return NULL
    return <flupfast_socket_state *><PyObject *>sock


cdef bint _has_no_timeout(sock) except -1:
    """``sock.gettimeout() is None``."""
    cdef flupfast_socket_state *state = _socket_state_of(sock)
    if state != NULL:
        return state.sock_timeout < 0
    return sock.gettimeout() is None


def recv_into(sock, buf, Py_ssize_t limit=0):
    """The bytes received into ``buf`` (0 at EOF); see sockio.recv_into."""
    return _recv_into(sock, buf, limit, False)


cdef object _recv_into(sock, buf, Py_ssize_t limit, bint expected):
    """sock.recv_into(buf, limit). ``expected``: the bytes are likely there already (a new
    connection's request head), so a GIL-held try pays even where no thread contends."""
    cdef Py_buffer view
    cdef Py_ssize_t got
    cdef int fd, err
    cdef bint blocking
    cdef flupfast_socket_state *state = _socket_state_of(sock)
    if limit < 0 or (state == NULL and not (_threads_contend and type(sock) is _SocketClass)):
        return _checked_recv_into(sock, buf, limit)  # a bad limit is Python's own error
    try:
        PyObject_GetBuffer(buf, &view, PyBUF_WRITABLE)
    except (BufferError, TypeError):
        return _checked_recv_into(sock, buf, limit)  # not a writable buffer: Python's own error
    try:
        # The socket's state after the buffer's (whose export may have run Python code).
        if state != NULL:
            # Python's socket read in place (leader.pxi's layout check): no method call, and
            # no timeout to honour when sock_timeout says blocking.
            fd = state.sock_fd
            blocking = state.sock_timeout < 0
        else:
            fd = sock.fileno()
            blocking = False
        if fd < 0:
            return _checked_recv_into(sock, buf, limit)  # closed: Python's own error
        if limit == 0 or limit > view.len:
            if limit > view.len:
                raise ValueError("buffer too small for requested bytes")
            limit = view.len
        if expected or _threads_contend:
            got = c_recv(fd, view.buf, <size_t>limit, MSG_DONTWAIT)
            if got >= 0:
                return got
            err = errno
            if err != EAGAIN and err != EWOULDBLOCK and err != EINTR:
                PyErr_SetFromErrno(OSError)  # errno is still recv's
                return None
            if err == EINTR:
                PyErr_CheckSignals()  # as below
                blocking = False
        if blocking:
            # Nothing there yet: wait as sock_recv_into waits on a blocking socket, the GIL
            # released.
            with nogil:
                got = c_recv(fd, view.buf, <size_t>limit, 0)
            if got >= 0:
                return got
            if errno != EINTR:
                PyErr_SetFromErrno(OSError)
                return None
            # A signal: its handlers run now (one may raise, or close the socket), as
            # sock_recv_into runs them, then Python's method waits on.
            PyErr_CheckSignals()
    finally:
        PyBuffer_Release(&view)
    # A timeout to honour, or a signal handled: Python's own method from here.
    return _checked_recv_into(sock, buf, limit)


def close_socket(sock):
    """``sock.close()``; see sockio.close_socket."""
    cdef int fd, err
    cdef flupfast_socket_state *state
    # socket.socket.close() closes the fd only when no makefile() stream holds it.
    if type(sock) is not _SocketClass or sock._io_refs > 0:
        sock.close()
        return
    sock._closed = True      # what socket.socket.close() sets before closing
    state = _socket_state_of(sock)
    if state != NULL:        # what detach() does, without its call
        fd = state.sock_fd
        state.sock_fd = -1
    else:
        fd = _c_detach(sock)  # the object lets go of the fd: -1 if already closed
    if fd < 0:
        return
    if c_close(fd) < 0:
        err = errno
        # CPython's sock_close: ECONNRESET means the peer reset it; the fd is closed anyway.
        if err != ECONNRESET:
            PyErr_SetFromErrno(OSError)


# The parked set's two epoll calls (serving/parking.py), also without giving up the GIL: with
# 16 or more serving threads, Python's epoll.modify() and poll(0) each hand the GIL to a
# waiting thread and put this one back in line (context switches and futex calls per request
# on a kept connection, bench/profile-new-connection.md section 8), although neither waits:
# epoll_ctl never blocks, and a zero timeout returns at once. (EPOLL_CTL_ADD, epoll_ctl and
# epoll_wait come from prefork.pxi.)

cdef extern from *:
    """
    #ifndef EPOLL_CTL_MOD
    #define EPOLL_CTL_MOD 3
    #endif
    """
    int EPOLL_CTL_MOD

from libc.errno cimport ENOENT, EEXIST


def epoll_arm(epoll, int fd, unsigned int mask, bint again):
    """Arm ``fd`` in ``epoll`` for ``mask`` (see sockio.epoll_arm), keeping the GIL."""
    cdef epoll_event ev
    cdef int epfd = epoll.fileno()  # ValueError once closed, as Python's methods raise
    ev.events = mask
    ev.data.fd = fd
    if epoll_ctl(epfd, EPOLL_CTL_MOD if again else EPOLL_CTL_ADD, fd, &ev) == 0:
        return
    # The guess was wrong (re-armed after the set forgot it, or added twice): the other call.
    if (again and errno == ENOENT) or (not again and errno == EEXIST):
        if epoll_ctl(epfd, EPOLL_CTL_ADD if again else EPOLL_CTL_MOD, fd, &ev) == 0:
            return
    PyErr_SetFromErrno(OSError)


def epoll_ready_now(epoll):
    """The fd of one event ready in ``epoll`` now, or -1 (see sockio.epoll_ready_now)."""
    cdef epoll_event ev
    cdef int n = epoll_wait(epoll.fileno(), &ev, 1, 0)
    if n > 0:
        return ev.data.fd
    if n < 0 and errno != EINTR:
        PyErr_SetFromErrno(OSError)
    return -1
