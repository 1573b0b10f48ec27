# The compiled twins of flupfast/output.py's PartsWriter and send_buffers.
#
# PartsWriter: the response streams' base, whose send_head builds the CGI-style head (or
# uwsgi's HTTP head) and the small first body chunk behind it in one allocation; the format
# is output.build_cgi_head's, which it calls for any part that is not bytes.
#
# send_buffers: the same contract (every buffer sent
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
    cdef flupfast_socket_state *state
    if count == 0:
        return
    state = _socket_state_of(sock)  # sockio.pxi: Python's socket read in place
    fd = state.sock_fd if state != NULL else sock.fileno()
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


from flupfast import output as _output
from flupfast.output import CGI_STATUS_PREFIX

cdef object _build_cgi_head = _output.build_cgi_head
cdef Py_ssize_t _JOIN_HEAD_LIMIT = _output.JOIN_HEAD_LIMIT


cdef inline char *_put(char *out, bytes part) noexcept:
    cdef Py_ssize_t n = PyBytes_GET_SIZE(part)
    memcpy(out, PyBytes_AS_STRING(part), n)
    return out + n


cdef inline object _header_at(headers, bint is_list, Py_ssize_t i):
    return (<list>headers)[i] if is_list else (<tuple>headers)[i]


cdef object _head_with(prefix, status, headers, data):
    """``build_cgi_head(status, headers, prefix) + data`` in one allocation, or None when a
    part is not bytes or a header not a (name, value) tuple (the caller then builds it the
    pure way)."""
    cdef Py_ssize_t size, i, count
    cdef bint is_list = type(headers) is list
    cdef tuple pair
    cdef bytes result
    cdef char *out
    if type(prefix) is not bytes or type(status) is not bytes or type(data) is not bytes:
        return None
    if not is_list and type(headers) is not tuple:
        return None
    count = len(headers)
    size = PyBytes_GET_SIZE(prefix) + PyBytes_GET_SIZE(status) + 4 + PyBytes_GET_SIZE(data)
    for i in range(count):
        item = _header_at(headers, is_list, i)
        if type(item) is not tuple or len(<tuple>item) != 2:
            return None
        pair = <tuple>item
        if type(pair[0]) is not bytes or type(pair[1]) is not bytes:
            return None
        size += PyBytes_GET_SIZE(pair[0]) + PyBytes_GET_SIZE(pair[1]) + 4
    result = PyBytes_FromStringAndSize(NULL, size)
    out = PyBytes_AS_STRING(result)
    out = _put(out, prefix)
    out = _put(out, status)
    memcpy(out, b'\r\n', 2)
    out += 2
    for i in range(count):  # no Python code ran since the sizes: the same pairs
        pair = <tuple>_header_at(headers, is_list, i)
        out = _put(out, pair[0])
        memcpy(out, b': ', 2)
        out += 2
        out = _put(out, pair[1])
        memcpy(out, b'\r\n', 2)
        out += 2
    memcpy(out, b'\r\n', 2)
    out += 2
    _put(out, data)
    return result


cdef class PartsWriter:
    """The response streams' base over their ``write_parts(parts, hold=False)`` (see the pure
    twin): the file-like ``write``/``writelines`` and the gateway's responder."""

    STR_ENCODING = 'latin-1'
    status_prefix = CGI_STATUS_PREFIX

    # Set where a compiled stream is built as its own class (not a subclass): its
    # write_parts is then _write_parts, and the gateway calls that without the method calls
    # of send_head and write_parts (gateway.pxi's Response).
    cdef bint _direct

    def write(self, data):
        if isinstance(data, str):
            data = data.encode(self.STR_ENCODING)
        self.write_parts((data,))

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def send_head(self, status, headers, data, more):
        self.write_parts(self._head_parts(status, headers, data), more)

    cdef tuple _head_parts(self, status, headers, data):
        prefix = self.status_prefix
        # One part, so one record: joining a small body costs less than framing it apart.
        joined = len(data) <= _JOIN_HEAD_LIMIT
        head = _head_with(prefix, status, headers, data if joined else b'')
        if head is None:
            head = _build_cgi_head(status, headers, prefix)
            if joined:
                head += data
        return (head,) if joined else (head, data)

    cdef int _write_parts(self, parts, bint hold) except -1:
        self.write_parts(parts, hold)
        return 0

    def send_body(self, data, more):
        self.write_parts((data,), more)

    def can_send_file(self, filelike):
        """True when ``send_file`` can hand ``filelike`` to the kernel (SCGI's raw socket)."""
        return False
