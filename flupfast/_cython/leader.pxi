# The threaded mode's leader/follower accept, compiled twin of flupfast/serving/leader.py
# (same class name, same methods, same behaviour).
#
# What it does in C, without the GIL: the idle workers' wait (epoll_wait on the listening
# socket and the wakeup pipe) and accept4(SOCK_CLOEXEC). Only a thread that got a connection
# (or a wakeup) takes the GIL. Where the kernel has EPOLLEXCLUSIVE (Linux 4.5+), up to
# _LEADER_SETS workers wait at once, each on an epoll set of its own taken from a fixed pool,
# with the listener and the wakeup pipe added exclusive: the kernel wakes one waiting worker per
# connection, and no leader lock passes from thread to thread while few workers are idle (that
# hand-off was two futex calls and a thread wake-up per request: perf stat in
# bench/profile-new-connection.md). Workers beyond them, and every worker without
# EPOLLEXCLUSIVE, take turns on one more set under the leader lock, as the pure twin does. The
# sets are made once: the descriptors do not grow with the pool's threads. Uses prefork.pxi's
# epoll declarations (included before).

from cpython.pythread cimport (
    PyThread_type_lock, PyThread_allocate_lock, PyThread_free_lock, PyThread_acquire_lock,
    PyThread_release_lock, WAIT_LOCK)

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
    ssize_t c_write "write" (int fd, const void *buf, size_t n)

from libc.errno cimport ECONNABORTED


from _socket import socket as _c_socket_base
from types import FunctionType as _FunctionType

cdef object _c_socket_init = _c_socket_base.__init__
# What socket.py's socket class holds besides _socket's state: its __init__ sets the last two
# after _socket's own init (the same in CPython 3.6-3.13).
_KNOWN_SOCKET_SLOTS = ["__weakref__", "_io_refs", "_closed"]

# _socket's own init of an accepted fd calls getsockname() to check that the fd is a socket:
# a syscall per connection for what accept4 has just said. Its object's state is four ints, an
# error handler and a timeout (Modules/socketmodule.h, PySocketSockObject, not in the public
# headers), and from CPython 3.12 on a pointer to the module's state, which only the init
# sets. Where the layout below reads back what _socket itself set on real sockets
# (_socket_layout_holds, checked once; up to 3.13, the layouts known), an accepted fd's socket
# gets its fd, family, type and protocol written there directly, and from 3.12 on the module
# state the check's sockets hold, after _socket's __new__ has set the rest (no fd, blocking,
# its error handler). Without the check's agreement, or with a default timeout set (init then
# sets the fd non-blocking), _socket's init runs. What is skipped besides the syscall: the
# "socket.__new__" audit event, which socket.accept() raises.
cdef extern from *:
    """
    typedef struct {
        PyObject_HEAD
        int sock_fd;
        int sock_family;
        int sock_type;
        int sock_proto;
        void *errorhandler;
        long long sock_timeout;  /* nanoseconds; negative: blocking, no timeout */
    #if PY_VERSION_HEX >= 0x030C0000
        void *module_state;      /* 3.12+: set by the init alone */
    #endif
    } flupfast_socket_state;
    #define flupfast_direct_socket_state (PY_VERSION_HEX < 0x030E0000)
    static inline void *flupfast_socket_module_state(PyObject *sock) {
    #if PY_VERSION_HEX >= 0x030C0000
        return ((flupfast_socket_state *)sock)->module_state;
    #else
        (void)sock;
        return NULL;
    #endif
    }
    static inline void flupfast_set_socket_module_state(PyObject *sock, void *state) {
    #if PY_VERSION_HEX >= 0x030C0000
        ((flupfast_socket_state *)sock)->module_state = state;
    #else
        (void)sock; (void)state;
    #endif
    }
    #define FLUPFAST_SOCKET_HAS_MODULE_STATE (PY_VERSION_HEX >= 0x030C0000)
    """
    ctypedef struct flupfast_socket_state:
        int sock_fd
        int sock_family
        int sock_type
        int sock_proto
        long long sock_timeout
    bint flupfast_direct_socket_state
    bint FLUPFAST_SOCKET_HAS_MODULE_STATE
    void *flupfast_socket_module_state(object sock)
    void flupfast_set_socket_module_state(object sock, void *state)

cdef int _layout_known = -1  # -1: not checked yet


cdef bint _socket_layout_known() except -1:
    """_socket_layout_holds, checked once per process (the accept's build and sockio.pxi's
    reads in place ask it)."""
    global _layout_known
    if _layout_known < 0:
        _layout_known = _socket_layout_holds()
    return _layout_known
cdef void *_socket_module_state = NULL  # 3.12+: what every socket of this interpreter holds


cdef bint _state_is(sock, int fd, family, type_, proto, long long timeout):
    cdef flupfast_socket_state *state = <flupfast_socket_state *><PyObject *>sock
    return state.sock_fd == fd and state.sock_family == family and \
        state.sock_type == type_ and state.sock_proto == proto and \
        state.sock_timeout == timeout


cdef bint _socket_layout_holds():
    """Whether flupfast_socket_state is _socket's layout here: what _socket set in a new
    object and in two real sockets (blocking, then with a timeout) reads back through it;
    from 3.12 on also no module state in the new object, and one and the same in the two
    (kept for the sockets built here)."""
    global _socket_module_state
    cdef void *module_state
    import socket
    if not flupfast_direct_socket_state or type(_c_socket_base.__basicsize__) is not int or \
            _c_socket_base.__basicsize__ < sizeof(flupfast_socket_state):
        return False
    fresh = _c_socket_base.__new__(_c_socket_base)
    try:
        one, two = socket.socketpair()
    except OSError:
        return False  # no socket pair to check with here: _socket's init, as before
    try:
        one.settimeout(None)  # a default timeout may be set: the check is of the layout
        if not _state_is(fresh, -1, 0, 0, 0, -1000000000):
            return False
        if not _state_is(
                one, one.fileno(), one.family, one.type, one.proto, -1000000000):
            return False
        two.settimeout(1.5)
        if not _state_is(two, two.fileno(), two.family, two.type, two.proto, 1500000000):
            return False
        if FLUPFAST_SOCKET_HAS_MODULE_STATE:
            module_state = flupfast_socket_module_state(one)
            if flupfast_socket_module_state(fresh) != NULL or module_state == NULL or \
                    flupfast_socket_module_state(two) != module_state:
                return False
            _socket_module_state = module_state
        return True
    finally:
        one.close()
        two.close()


cdef extern from *:
    """
    /* cls.__new__(cls) without the call through its Python wrapper: the class's tp_new (an
       override's too) with no arguments. For the accepted socket and connection.pxi's
       connections. */
    static PyObject *flupfast_type_new(PyObject *cls) {
        static PyObject *no_args = NULL;
        if (no_args == NULL && (no_args = PyTuple_New(0)) == NULL)
            return NULL;
        return ((PyTypeObject *)cls)->tp_new((PyTypeObject *)cls, no_args, NULL);
    }
    """
    object flupfast_type_new(object cls)


cdef bint _can_build_socket(cls):
    """Whether _new_socket may build ``cls`` itself: socket.py's class as this module knows it,
    with socket.py's own ``__init__``. Anything else (a later CPython's, a replaced class, a
    subclass, an instrumented ``__init__``) is built by calling it."""
    if not (isinstance(cls, type) and issubclass(cls, _c_socket_base)
            and list((<type>cls).__dict__.get("__slots__", ())) == _KNOWN_SOCKET_SLOTS):
        return False
    init = (<type>cls).__dict__.get("__init__")
    code = getattr(init, "__code__", None)
    return type(init) is _FunctionType and code is not None \
        and code.co_filename == _socket_module.__file__ and code.co_name == "__init__"


cdef object _new_socket(cls, bint direct, family, type_, proto, int fd):
    """``cls(family, type_, proto, fileno=fd)``; when ``direct``, without socket.py's Python
    ``__init__`` (a frame and its keyword parsing per accepted connection): _socket's own
    state (see flupfast_socket_state), then the two attributes socket.py's init sets."""
    cdef flupfast_socket_state *state
    if not direct or not _socket_plan.get(cls, _work_out_socket):  # as then, or patched since
        return cls(family, type_, proto, fileno=fd)
    cdef bint layout_known = _socket_layout_known()
    sock = flupfast_type_new(cls)
    if layout_known and _socket_module.getdefaulttimeout() is None:
        state = <flupfast_socket_state *><PyObject *>sock
        if state.sock_fd != -1:
            raise AssertionError('a new socket object holds an fd')
        state.sock_family = family
        state.sock_type = type_
        state.sock_proto = proto
        state.sock_fd = fd
        flupfast_set_socket_module_state(sock, _socket_module_state)
    else:
        _c_socket_init(sock, family, type_, proto, fd)
    sock._io_refs = 0
    sock._closed = False
    return sock


cdef object _accept_built(int listen_fd, socket_class, bint direct, family, type_, proto,
                          bint unix):
    """One accept4(SOCK_CLOEXEC) on a non-blocking listening socket, the socket built as
    _new_socket builds it: (client, addr) in the format socket.accept() gives ('' for an
    unnamed AF_UNIX peer), or None when nothing is to be taken (another process took it, the
    peer left first, a signal); OSError for anything else. The prefork child's accept: Python's
    socket.accept() runs socket.py's __init__ and reads the listener's family and type through
    properties that build enums, twice the chain's Python per connection."""
    cdef int fd = flupfast_accept_cloexec(listen_fd)
    cdef int err
    if fd < 0:
        err = errno
        if err == EAGAIN or err == EWOULDBLOCK or err == ECONNABORTED:
            return None
        if err == EINTR:
            PyErr_CheckSignals()  # a Python handler may raise (SIGINT at shutdown)
            return None
        import os
        raise OSError(err, os.strerror(err))
    return _accepted(fd, socket_class, direct, family, type_, proto, unix)


cdef object _accepted(int fd, socket_class, bint direct, family, type_, proto, bint unix):
    """The accepted ``fd`` as socket.accept() gives it: (client, addr), the address '' for an
    unnamed AF_UNIX peer, a TCP peer's as getpeername() gives it (the allow-list checks it);
    None when the peer reset before its address was read: nothing to take (the pure twins'
    accept() gives the address with the connection, and the job finds it reset)."""
    try:
        client = _new_socket(socket_class, direct, family, type_, proto, fd)
    except BaseException:
        c_close(fd)
        raise
    if unix:
        return client, ''
    try:
        return client, client.getpeername()
    except OSError:
        client.close()
        return None


cdef enum:
    _LEADER_SETS = 8  # workers waiting at once on sets of their own (EPOLLEXCLUSIVE)

# Set once a Leader exists in this process: serving threads then contend for the GIL, and
# sockio.pxi's receive tries the data already there without giving the GIL up at every
# receive. A fork child (one serving thread) tries only where bytes are expected: between the
# requests of a kept connection it finds nothing and would cost a recv per request.
cdef bint _threads_contend = False


cdef class Leader:
    """Leader/follower accept on ``listen_sock`` (non-blocking; see the pure twin)."""

    cdef PyThread_type_lock _lock  # one waiting leader at a time on the shared set
    cdef bint _exclusive
    cdef int _epfd                 # the shared set
    cdef list _free                # sets of their own free for a waiting worker (EXCLUSIVE)
    cdef list _sets                # all of them, closed with the leader
    cdef int _listen_fd
    cdef object _sock
    cdef object _socket_class
    cdef bint _build_socket         # _new_socket builds it without socket.py's __init__
    cdef object _family, _type, _proto
    cdef bint _unix
    cdef Py_ssize_t _users
    cdef object _wake
    cdef object _stop              # readable once closed, never drained: wakes every wait
    cdef public bint closed

    def __cinit__(self, listen_sock):
        self._lock = NULL
        self._epfd = -1

    def __init__(self, listen_sock):
        global _threads_contend
        import os
        import socket
        _threads_contend = True
        self._sock = listen_sock
        self._socket_class = socket.socket
        self._build_socket = _can_build_socket(socket.socket)
        self._family = listen_sock.family
        self._type = listen_sock.type
        self._proto = listen_sock.proto
        self._unix = self._family == socket.AF_UNIX
        self._listen_fd = listen_sock.fileno()
        self._users = 0
        self._free = []
        self._sets = []
        self.closed = False
        self._lock = PyThread_allocate_lock()
        if self._lock == NULL:
            raise MemoryError()
        self._wake = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._stop = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._exclusive = EPOLLEXCLUSIVE != 0
        first = self._new_set()  # its first add says whether EPOLLEXCLUSIVE works
        if not self._exclusive:
            self._epfd = first
            return
        self._sets.append(first)
        while len(self._sets) < _LEADER_SETS:
            self._sets.append(self._new_set())
        self._free = list(self._sets)
        # The shared set last: the kernel offers a connection to the exclusive waiters in the
        # order their sets were added to the listener, so a worker on a set of its own takes
        # it, and the lock's leader (and its hand-off to a follower) only when none waits.
        self._epfd = self._new_set()

    cdef int _new_set(self) except -1:
        """A new epoll set: the listener and the wakeup pipe (exclusive where supported), the
        stop pipe (never exclusive: a stop wakes every waiting worker)."""
        cdef int epfd = epoll_create1(EPOLL_CLOEXEC)
        cdef epoll_event ev
        if epfd < 0:
            PyErr_SetFromErrno(OSError)
        try:
            for fd in (self._listen_fd, self._wake[0]):
                ev.events = EPOLLIN | (EPOLLEXCLUSIVE if self._exclusive else 0)
                ev.data.fd = fd
                if epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0:
                    if not (self._exclusive and errno == EINVAL):
                        PyErr_SetFromErrno(OSError)
                    # Before Linux 4.5: no EPOLLEXCLUSIVE; one shared set and the lock.
                    self._exclusive = False
                    ev.events = EPOLLIN
                    if epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0:
                        PyErr_SetFromErrno(OSError)
            _epoll_add(epfd, self._stop[0], EPOLLIN)
        except BaseException:
            c_close(epfd)
            raise
        return epfd

    def lead(self):
        cdef int fd = -1, err = 0, n, i, epfd, listen_fd = self._listen_fd
        cdef int wake_r = self._wake[0], wake_w = self._wake[1]
        cdef bint woken = False, listener, shared
        cdef epoll_event events[3]
        cdef char byte = 0
        if self.closed:
            return None
        self._users += 1
        shared = not self._free
        epfd = self._epfd if shared else self._free.pop()
        try:
            with nogil:
                if shared:
                    PyThread_acquire_lock(self._lock, WAIT_LOCK)
                while not self.closed:
                    n = epoll_wait(epfd, events, 3, -1)
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
                        elif events[i].data.fd == listen_fd:
                            listener = True
                    if woken:
                        if listener and not self.closed and self._exclusive:
                            # The kernel offered this connection to this set alone (exclusive
                            # wake-ups): taken here, and the wakeup passed on to the next
                            # waiter (or the next lead()), or both would wait.
                            fd = flupfast_accept_cloexec(listen_fd)
                            if fd >= 0:
                                c_write(wake_w, &byte, 1)
                        break
                    if not listener or self.closed:
                        continue  # another worker's wakeup, or the stop (the loop ends)
                    fd = flupfast_accept_cloexec(listen_fd)
                    if fd >= 0:
                        break
                    if errno == EAGAIN or errno == EWOULDBLOCK or errno == EINTR \
                            or errno == ECONNABORTED:
                        continue  # another thread took it
                    err = errno
                    break
                if shared:
                    PyThread_release_lock(self._lock)  # the next leader (a follower) goes on
            if err:
                import os
                raise OSError(err, os.strerror(err))
            if fd < 0:
                return None
            # None (the peer reset before its address was read) sends the worker round again.
            return _accepted(fd, self._socket_class, self._build_socket, self._family,
                             self._type, self._proto, self._unix)
        finally:
            if not shared:
                self._free.append(epfd)
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
        import os
        if self.closed:
            return
        self.closed = True
        try:
            os.write(self._stop[1], b"\0")
        except OSError:
            pass
        if not self._users:
            self._release()

    cdef _release(self):
        import os
        if self._epfd < 0:
            return
        c_close(self._epfd)
        self._epfd = -1
        for epfd in self._sets:
            c_close(epfd)
        self._sets = []
        self._free = []
        for fd in self._wake + self._stop:
            try:
                os.close(fd)
            except OSError:
                pass

    def __dealloc__(self):
        if self._lock != NULL:
            PyThread_free_lock(self._lock)
