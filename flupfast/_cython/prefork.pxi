# The prefork child's accept -> serve -> report loop, compiled twin of
# flupfast/serving/prefork.py:serve_child (same signature, same behaviour).
#
# What it does in C: the wait (epoll_wait with EPOLLEXCLUSIVE on the shared listening socket, or
# poll(2) where there is no epoll; the GIL released) and the one-byte status reports to the
# parent (send(2)), and the accept (leader.pxi's _accept_built: accept4, the socket built without
# socket.py's __init__, the address in socket.accept()'s format). The job is Python.

cdef extern from *:
    """
    #include <sys/socket.h>
    #if defined(__linux__) && !defined(FLUPFAST_NO_EPOLL)
    #include <sys/epoll.h>
    #else
    /* No epoll (macOS, the BSDs; or forced with -DFLUPFAST_NO_EPOLL to test this on Linux): the
       three calls serve_child makes, over poll(2). An "epoll fd" is a descriptor of /dev/null
       that keys a set of at most FLUPFAST_POLL_SET descriptors (serve_child adds two). Every
       child then wakes for a new connection, as flup's children do. */
    #include <errno.h>
    #include <fcntl.h>
    #include <poll.h>
    #include <stdint.h>
    #include <unistd.h>
    #define EPOLLIN POLLIN
    #define EPOLLOUT POLLOUT
    #define EPOLL_CTL_ADD 1
    #define EPOLL_CLOEXEC O_CLOEXEC
    typedef union epoll_data { void *ptr; int fd; uint32_t u32; uint64_t u64; } epoll_data_t;
    struct epoll_event { uint32_t events; epoll_data_t data; };
    #define FLUPFAST_POLL_SETS 1024
    #define FLUPFAST_POLL_SET 4
    static struct flupfast_poll_set {
        int n;
        struct pollfd fds[FLUPFAST_POLL_SET];
        epoll_data_t data[FLUPFAST_POLL_SET];
    } flupfast_poll_sets[FLUPFAST_POLL_SETS];
    static int epoll_create1(int flags) {
        int fd = open("/dev/null", O_RDONLY | flags);
        if (fd >= FLUPFAST_POLL_SETS) { close(fd); errno = EMFILE; return -1; }
        if (fd >= 0) flupfast_poll_sets[fd].n = 0;
        return fd;
    }
    static int epoll_ctl(int epfd, int op, int fd, struct epoll_event *event) {
        struct flupfast_poll_set *set;
        if (op != EPOLL_CTL_ADD || epfd < 0 || epfd >= FLUPFAST_POLL_SETS
                || flupfast_poll_sets[epfd].n == FLUPFAST_POLL_SET) { errno = EINVAL; return -1; }
        set = &flupfast_poll_sets[epfd];
        set->fds[set->n].fd = fd;
        set->fds[set->n].events = (short)event->events;
        set->data[set->n] = event->data;
        set->n++;
        return 0;
    }
    static int epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout) {
        struct flupfast_poll_set *set;
        int i, ready, out = 0;
        if (epfd < 0 || epfd >= FLUPFAST_POLL_SETS) { errno = EBADF; return -1; }
        set = &flupfast_poll_sets[epfd];
        ready = poll(set->fds, (nfds_t)set->n, timeout);
        if (ready <= 0) return ready;
        for (i = 0; i < set->n && out < maxevents; i++) {
            if (set->fds[i].revents) {
                events[out].events = (uint32_t)set->fds[i].revents;
                events[out].data = set->data[i];
                out++;
            }
        }
        return out;
    }
    #endif
    #ifndef EPOLLEXCLUSIVE
    #define EPOLLEXCLUSIVE 0
    #endif
    #ifndef MSG_NOSIGNAL
    #define MSG_NOSIGNAL 0
    #endif
    """
    cdef union epoll_data_t "epoll_data":
        int fd
    cdef struct epoll_event:
        unsigned int events
        epoll_data_t data
    int epoll_create1(int flags) nogil
    int epoll_ctl(int epfd, int op, int fd, epoll_event *event) nogil
    int epoll_wait(int epfd, epoll_event *events, int maxevents, int timeout) nogil
    int EPOLL_CTL_ADD
    int EPOLL_CLOEXEC
    unsigned int EPOLLIN
    unsigned int EPOLLOUT
    unsigned int EPOLLEXCLUSIVE
    int MSG_NOSIGNAL
    void __sync_synchronize() nogil

cdef extern from "<sys/socket.h>" nogil:
    ssize_t c_send "send" (int fd, const void *buf, size_t n, int flags)

cdef extern from "<unistd.h>" nogil:
    int c_close "close" (int fd)

from libc.errno cimport errno, EINTR, EAGAIN, EPIPE, EINVAL

cdef extern from "<errno.h>":
    int EWOULDBLOCK
    int ECONNRESET

import time as _time

cdef object _monotonic = _time.monotonic  # also fastcgi_serve.pxi's


cdef int _epoll_add(int epfd, int fd, unsigned int events) except -1:
    cdef epoll_event ev
    ev.events = events
    ev.data.fd = fd
    if epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) == 0:
        return 0
    if errno == EINVAL and events & EPOLLEXCLUSIVE:
        # Kernels before 4.5 reject EPOLLEXCLUSIVE: fall back to waking every child.
        ev.events = events & ~EPOLLEXCLUSIVE
        if epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) == 0:
            return 0
    PyErr_SetFromErrno(OSError)
    return -1


cdef int _wait_for(int epfd, int fd, unsigned int events) except -1:
    """Block (without the GIL) until ``fd`` is ready; used when the parent is behind."""
    cdef epoll_event ev
    cdef int n
    while True:
        with nogil:
            n = epoll_wait(epfd, &ev, 1, -1)
        if n >= 0:
            return 0
        if errno != EINTR:
            PyErr_SetFromErrno(OSError)
            return -1
        PyErr_CheckSignals()


cdef bint _report(int parent_fd, unsigned char status, int wait_epfd) except -1:
    """Send one status byte; False when the parent is gone (EPIPE), as notify_parent."""
    cdef ssize_t sent
    while True:
        with nogil:
            sent = c_send(parent_fd, &status, 1, MSG_NOSIGNAL)
        if sent == 1:
            return True
        if errno == EPIPE or errno == ECONNRESET:
            return False
        if errno == EAGAIN or errno == EWOULDBLOCK:
            _wait_for(wait_epfd, parent_fd, EPOLLOUT)
            continue
        if errno == EINTR:
            PyErr_CheckSignals()
            continue
        PyErr_SetFromErrno(OSError)


cdef struct _Board:
    unsigned char *buf   # the scoreboard (shared mmap); NULL: report every change by byte
    Py_ssize_t size
    Py_ssize_t slot
    Py_ssize_t min_spare
    Py_ssize_t max_spare
    const unsigned char *state  # the parent's word (ChildBoard.pool_state), or NULL
    Py_ssize_t state_len
    # policy.py's layout of it
    Py_ssize_t state_size
    Py_ssize_t full_at
    Py_ssize_t no_guard_at
    Py_ssize_t next_look_at
    double sample
    double excess_check


cdef bint _pool_full(_Board *board) noexcept:
    return board.state != NULL and board.state_len > board.full_at and board.state[board.full_at]


cdef bint _parent_is_watching(_Board *board) except -1:
    """ChildBoard.parent_is_watching: an exhausted full pool needs no wake-up now."""
    if board.state_len < board.state_size or not _pool_full(board):
        return False
    return board.state[board.no_guard_at] or _parent_looks_within(board, board.sample)


cdef bint _parent_looks_within(_Board *board, double seconds) except -1:
    """ChildBoard.parent_looks_within."""
    cdef double next_look = 0
    if board.state == NULL or board.state_len < board.state_size:
        return False
    memcpy(&next_look, board.state + board.next_look_at, sizeof(double))
    return next_look - <double>_monotonic() <= seconds


cdef bint _board_report(_Board *board, int parent_fd, unsigned char status,
                        int wait_epfd) except -1:
    """ChildBoard.report: mark the slot, wake the parent only when this change crossed
    min_spare downwards (unless the pool is full), left no child idle (unless the parent is
    watching), or crossed max_spare upwards (unless the parent looks within EXCESS_CHECK);
    without a board, always the status byte."""
    cdef Py_ssize_t i, idle = 0
    cdef bint crossed
    if board.buf == NULL:
        return _report(parent_fd, status, wait_epfd)
    board.buf[board.slot] = status
    __sync_synchronize()  # our mark visible before we count the others'
    for i in range(board.size):
        if board.buf[i] == 0xff:
            idle += 1
    if status == 0xff:
        crossed = idle == board.max_spare + 1 and not _parent_looks_within(
            board, board.excess_check)
    elif idle == 0:
        crossed = not _parent_is_watching(board)
    else:
        crossed = idle == board.min_spare - 1 and not _pool_full(board)
    if crossed:
        return _report(parent_fd, status, wait_epfd)
    return True


cdef void _release_board(_Board *board, Py_buffer *board_view, Py_buffer *state_view) noexcept:
    if board.state != NULL:
        PyBuffer_Release(state_view)
        board.state = NULL
    if board.buf != NULL:
        PyBuffer_Release(board_view)
        board.buf = NULL


def serve_child(listen_sock, parent_sock, job_class, job_args, is_client_allowed,
                max_requests=0, client_timeout=None, board=None):
    """The child's loop (compiled twin of serving.prefork.serve_child): wait for a connection
    or word from the parent, accept, check the allow-list, report busy, run the job, count its
    requests, report idle. Returns when the parent closes its end, when the parent is gone, or
    after ``max_requests`` requests (if positive). ``board``: a ChildBoard (scoreboard
    reports) or None (a status byte at every change).
    """
    # Imported here, not at module level: serving.prefork picks this function through _impl.
    import os
    import socket
    import time
    import flupfast.serving.prefork.child as policy
    from flupfast.serving.listen import ACCEPT_EXHAUSTION_ERRNOS, is_tcp, set_nodelay
    cdef int listen_fd = listen_sock.fileno()
    cdef int parent_fd = parent_sock.fileno()
    cdef unsigned char busy = (<bytes>policy.STATUS_BUSY)[0]
    cdef unsigned char idle = (<bytes>policy.STATUS_IDLE)[0]
    cdef epoll_event events[2]
    cdef int n, i, epfd, out_epfd
    cdef bint tcp = is_tcp(listen_sock)
    cdef bint linux = policy._ACCEPT_GIVES_BLOCKING
    cdef bint limited = max_requests > 0
    cdef Py_ssize_t left = max_requests if limited else 0
    cdef Py_buffer board_view, state_view
    cdef _Board cboard
    cdef bint unix = listen_sock.family == socket.AF_UNIX
    socket_class = socket.socket
    cdef bint direct = _can_build_socket(socket_class)
    family, type_, proto = listen_sock.family, listen_sock.type, listen_sock.proto
    cdef ChildJobs jobs = job_class if type(job_class) is ChildJobs else None
    job_args = tuple(job_args)
    if policy.STATUS_IDLE != b'\xff':
        raise AssertionError('the scoreboard counts 0xff as idle')
    cboard.buf = NULL
    cboard.state = NULL
    cboard.state_len = 0
    if board is not None:
        # Everything read from the board before its buffers are taken (a read that raises
        # then leaves nothing exported), the slot checked against the buffer's own length.
        slot, pool_state = board.slot, board.pool_state
        cboard.min_spare = board.min_spare
        cboard.max_spare = board.max_spare
        cboard.state_size = policy.POOL_STATE_SIZE
        cboard.full_at = policy.FULL_AT
        cboard.no_guard_at = policy.NO_GUARD_AT
        cboard.next_look_at = policy.NEXT_LOOK_AT
        cboard.sample = policy.PARENT_SAMPLE
        cboard.excess_check = policy.EXCESS_CHECK
        if policy.NEXT_LOOK.format != 'd':
            raise AssertionError('the next look is a native double')
        PyObject_GetBuffer(board.buffer, &board_view, PyBUF_WRITABLE)
        if not 0 <= slot < board_view.len:
            PyBuffer_Release(&board_view)
            raise ValueError('scoreboard slot %d out of range' % slot)
        cboard.slot = slot
        cboard.buf = <unsigned char *>board_view.buf
        cboard.size = board_view.len
        if pool_state is not None:
            try:
                PyObject_GetBuffer(pool_state, &state_view, PyBUF_SIMPLE)
            except BaseException:
                PyBuffer_Release(&board_view)
                raise
            cboard.state = <const unsigned char *>state_view.buf
            cboard.state_len = state_view.len

    epfd = epoll_create1(EPOLL_CLOEXEC)
    if epfd < 0:
        _release_board(&cboard, &board_view, &state_view)
        PyErr_SetFromErrno(OSError)
    out_epfd = epoll_create1(EPOLL_CLOEXEC)
    if out_epfd < 0:
        c_close(epfd)
        _release_board(&cboard, &board_view, &state_view)
        PyErr_SetFromErrno(OSError)
    try:
        _epoll_add(epfd, listen_fd, EPOLLIN | EPOLLEXCLUSIVE)
        _epoll_add(epfd, parent_fd, EPOLLIN)
        _epoll_add(out_epfd, parent_fd, EPOLLOUT)
        if cboard.buf != NULL:
            _board_report(&cboard, parent_fd, idle, out_epfd)
        while True:
            with nogil:
                n = epoll_wait(epfd, events, 2, -1)
            if n < 0:
                if errno == EINTR:
                    PyErr_CheckSignals()  # a Python handler may raise (SIGINT at shutdown)
                    continue
                PyErr_SetFromErrno(OSError)
            for i in range(n):
                if events[i].data.fd == parent_fd:
                    return  # any activity from the parent (EOF) means: exit (flup :390-395)
            try:
                accepted = _accept_built(listen_fd, socket_class, direct, family, type_, proto,
                                         unix)
            except OSError as exc:
                if exc.errno not in ACCEPT_EXHAUSTION_ERRNOS:
                    raise
                policy.logger.error("accept() failed in child %d: %s", os.getpid(), exc)
                time.sleep(policy.ACCEPT_BACKOFF)
                continue
            if accepted is None:
                continue  # another child won the race for this connection
            client, addr = accepted
            if not (linux and client_timeout is None and _has_no_timeout(client)):
                client.settimeout(client_timeout)  # else already blocking: no ioctl
            if tcp:
                set_nodelay(client)
            # Before reporting busy, as flup (:409-411); None: every peer is admitted.
            if is_client_allowed is not None and not is_client_allowed(addr):
                client.close()
                continue
            _board_report(&cboard, parent_fd, busy, out_epfd)
            if jobs is not None:
                job = jobs._make(client, addr, job_args)
            else:
                job = job_class(client, addr, *job_args)
            if _state_in_place_of(job):
                (<ConnectionState>job).max_requests = left if limited else None
            else:
                job.max_requests = left if limited else None
            try:
                served = _run_job(job)  # job.run() (fastcgi_serve.pxi)
            except Exception:
                policy.logger.exception("unhandled exception in job %r", job)
                client.close()
                served = 1
            if limited:
                served = policy.served_count(served)  # None (a flup-era run()'s) is one
                left -= left if served >= left else served
                if left <= 0:
                    return  # retire; the parent sees EOF and replaces us
            if not _board_report(&cboard, parent_fd, idle, out_epfd):
                return  # parent gone
    finally:
        c_close(epfd)
        c_close(out_epfd)
        _release_board(&cboard, &board_view, &state_view)


cdef class ChildJobs:
    """serve_child's job factory in a prefork child (see the pure twin in
    serving/prefork/child.py)."""

    cdef readonly object new_job
    cdef readonly object drain
    cdef object _may_keep
    cdef object _on_idle

    def __init__(self, new_job, drain):
        self.new_job = new_job
        self.drain = drain
        self._may_keep = drain.may_keep
        self._on_idle = drain.on_idle

    def __call__(self, client, addr, *args):
        return self._make(client, addr, args)

    cdef object _make(self, client, addr, tuple args):
        job = _new_job(self.new_job, client, addr, args)  # connection.pxi
        drain = self.drain
        drain.job = job
        drain.client = client
        if _state_in_place_of(job):  # state.pxi
            (<ConnectionState>job).may_keep = self._may_keep
            if drain.draining:
                (<ConnectionState>job).on_idle = self._on_idle
            return job
        job.may_keep = self._may_keep
        if drain.draining:
            job.on_idle = self._on_idle
        return job
