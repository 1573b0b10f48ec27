# The threaded mode's leader/follower accept, compiled twin of flupfast/serving/leader.py
# (same class name, same methods, same behaviour).
#
# What it does in C, without the GIL: the followers' wait for the leader lock, the leader's
# epoll_wait on the listening socket and the wakeup pipe, and accept4(SOCK_CLOEXEC). Only a
# thread that got a connection (or a wakeup) takes the GIL, so promoting a follower costs no
# GIL hand-off. When no leader waits (every other worker busy, as under load), the worker that
# comes back first tries accept4 while holding the GIL: a connection already there then costs
# no GIL release at all. Uses prefork.pxi's epoll declarations (included before this file).

from cpython.pythread cimport (
    PyThread_type_lock, PyThread_allocate_lock, PyThread_free_lock, PyThread_acquire_lock,
    PyThread_release_lock, NOWAIT_LOCK, WAIT_LOCK)

cdef extern from *:
    """
    #include <fcntl.h>
    #include <sys/socket.h>
    /* accept4(SOCK_CLOEXEC) where it exists; elsewhere accept, then close-on-exec and blocking
       set by hand (BSD sockets inherit the listener's O_NONBLOCK). */
    static int flupfast_accept_cloexec(int fd) {
        struct sockaddr_storage addr;
        socklen_t len = sizeof(addr);
    #if defined(__linux__)
        return accept4(fd, (struct sockaddr *)&addr, &len, SOCK_CLOEXEC);
    #else
        int flags, client = accept(fd, (struct sockaddr *)&addr, &len);
        if (client >= 0) {
            fcntl(client, F_SETFD, FD_CLOEXEC);
            flags = fcntl(client, F_GETFL);
            if (flags >= 0 && (flags & O_NONBLOCK)) fcntl(client, F_SETFL, flags & ~O_NONBLOCK);
        }
        return client;
    #endif
    }
    """
    int flupfast_accept_cloexec(int fd) nogil

cdef extern from "<unistd.h>" nogil:
    ssize_t c_read "read" (int fd, void *buf, size_t n)

from libc.errno cimport ECONNABORTED


cdef class Leader:
    """Leader/follower accept on ``listen_sock`` (non-blocking; see the pure twin)."""

    cdef PyThread_type_lock _lock
    cdef int _epfd
    cdef int _listen_fd
    cdef object _sock
    cdef object _socket_class
    cdef object _family, _type, _proto
    cdef bint _unix
    cdef Py_ssize_t _users
    cdef object _wake
    cdef public bint closed

    def __cinit__(self, listen_sock):
        self._lock = NULL
        self._epfd = -1

    def __init__(self, listen_sock):
        import os
        import socket
        self._sock = listen_sock
        self._socket_class = socket.socket
        self._family = listen_sock.family
        self._type = listen_sock.type
        self._proto = listen_sock.proto
        self._unix = self._family == socket.AF_UNIX
        self._listen_fd = listen_sock.fileno()
        self._users = 0
        self.closed = False
        self._lock = PyThread_allocate_lock()
        if self._lock == NULL:
            raise MemoryError()
        self._wake = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._epfd = epoll_create1(EPOLL_CLOEXEC)
        if self._epfd < 0:
            PyErr_SetFromErrno(OSError)
        _epoll_add(self._epfd, self._listen_fd, EPOLLIN)
        _epoll_add(self._epfd, self._wake[0], EPOLLIN)

    def lead(self):
        cdef int fd = -1, err = 0, n, i, epfd = self._epfd, listen_fd = self._listen_fd
        cdef int wake_r = self._wake[0]
        cdef bint woken = False, listener, locked = False
        cdef epoll_event events[2]
        cdef char byte
        self._users += 1
        try:
            # No leader waits (every other worker is busy, as under load): accept while
            # holding the GIL; a connection that is there already costs no GIL hand-off.
            if not self.closed and PyThread_acquire_lock(self._lock, NOWAIT_LOCK):
                locked = True
                fd = flupfast_accept_cloexec(listen_fd)
                if fd < 0 and not (errno == EAGAIN or errno == EWOULDBLOCK or errno == EINTR
                                   or errno == ECONNABORTED):
                    err = errno
                if fd >= 0 or err:
                    PyThread_release_lock(self._lock)
            if fd < 0 and not err:
                with nogil:
                    if not locked:
                        PyThread_acquire_lock(self._lock, WAIT_LOCK)
                    while not self.closed:
                        n = epoll_wait(epfd, events, 2, -1)
                        if n < 0:
                            if errno == EINTR:
                                continue
                            err = errno
                            break
                        listener = False
                        for i in range(n):
                            if events[i].data.fd == wake_r:
                                if c_read(wake_r, &byte, 1) == 1:  # one wakeup for one wait
                                    woken = True
                            else:
                                listener = True
                        if woken:
                            break
                        if not listener or self.closed:
                            continue
                        fd = flupfast_accept_cloexec(listen_fd)
                        if fd >= 0:
                            break
                        if errno == EAGAIN or errno == EWOULDBLOCK or errno == EINTR \
                                or errno == ECONNABORTED:
                            continue  # another thread took it
                        err = errno
                        break
                    PyThread_release_lock(self._lock)  # the next leader (a follower) goes on
            if err:
                import os
                raise OSError(err, os.strerror(err))
            if fd < 0:
                return None
            try:
                client = self._socket_class(self._family, self._type, self._proto, fileno=fd)
            except BaseException:
                c_close(fd)
                raise
            # Python's accept() gives '' for an unnamed AF_UNIX peer; a TCP peer's address
            # (what the allow-list checks) in the format accept() gives.
            return client, ('' if self._unix else client.getpeername())
        finally:
            self._users -= 1
            if self.closed and not self._users:
                self._release()

    def wake(self):
        """End one leader's wait (the next one's, if none waits now)."""
        import os
        try:
            os.write(self._wake[1], b"\0")
        except OSError:
            pass  # full: plenty of wakeups pending; closed: nobody waits any more

    def close(self):
        """End every wait, now and to come; the fds go with the last thread inside lead()."""
        if self.closed:
            return
        self.closed = True
        self.wake()
        if not self._users:
            self._release()

    cdef _release(self):
        import os
        if self._epfd < 0:
            return
        c_close(self._epfd)
        self._epfd = -1
        for fd in self._wake:
            try:
                os.close(fd)
            except OSError:
                pass

    def __dealloc__(self):
        if self._lock != NULL:
            PyThread_free_lock(self._lock)
