# wsgi.input, compiled: the twin of flupfast.body.InputStream (same name, signature and file
# API). It knows no protocol and pulls only when the app reads; it must never hold a pointer
# across a call to pull() (which runs arbitrary Python). Included by flupfast/_speedups.pyx.

from io import UnsupportedOperation as _io_UnsupportedOperation
from flupfast.body import _copy_into


cdef bytes _buffer_to_bytes(object chunk):
    cdef Py_buffer view
    PyObject_GetBuffer(chunk, &view, PyBUF_SIMPLE)
    try:
        return PyBytes_FromStringAndSize(<char *>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)


@cython.no_gc_clear  # _start/_end index _chunk: it must never be cleared under them
@cython.freelist(8)
cdef class InputStream:
    """A file-like, read-only request body that pulls data on demand.

    The unread bytes are ``_chunk[_start:_end]``, a slice of one ``bytes`` object kept by
    reference: the last pulled chunk (a bytearray or memoryview, maybe a reused receive buffer,
    is copied to bytes first). A read that ends inside that chunk copies just what it returns;
    one that needs more gathers the next chunks in a list, searching each new byte once for
    ``readline`` (memchr), and copies the parts into its result once, keeping the rest of the
    last chunk by reference. A read of exactly one whole pulled chunk returns that chunk itself.
    Every method is linear in the bytes it returns and there is no buffer to grow or compact.
    ``readline(size)`` returns at most ``size`` bytes and ``read(None)`` reads everything.
    """

    cdef object _pull
    cdef bytes _chunk           # holds the unread bytes; None when there are none
    cdef Py_ssize_t _start
    cdef Py_ssize_t _end
    cdef bint _eof
    cdef public Py_ssize_t bytes_read  # handed to the app so far
    cdef object __weakref__            # weak references, as to the pure twin

    def __init__(self, pull):
        self._pull = pull
        self._chunk = None
        self._start = 0
        self._end = 0
        self._eof = False
        self.bytes_read = 0

    # -- internals --------------------------------------------------------------------------

    @cython.final
    cdef object _next_chunk(self):
        """Pull one more chunk: a non-empty one, or None at the end of the body."""
        cdef object chunk
        if self._eof:
            return None
        chunk = self._pull()
        if not chunk:
            self._eof = True
            return None
        return chunk

    @cython.final
    cdef bytes _take(self, Py_ssize_t n):
        """Hand out the next ``n`` unread bytes (0 <= n <= unread)."""
        cdef bytes data
        if n <= 0:
            return b''
        if self._start == 0 and n == PyBytes_GET_SIZE(self._chunk):
            data = self._chunk  # exactly the pulled chunk: no copy
        else:
            data = PyBytes_FromStringAndSize(PyBytes_AS_STRING(self._chunk) + self._start, n)
        self._start += n
        self.bytes_read += n
        if self._start >= self._end:
            self._chunk = None
            self._start = self._end = 0
        return data

    @cython.final
    cdef int _keep(self, list pieces) except -1:
        """After a failed pull: make the pieces gathered so far unread again, behind what was
        unread (the pure twin has appended them to its buffer by then)."""
        if not pieces:
            return 0
        if self._chunk is not None:
            pieces.insert(0, self._chunk[self._start:self._end])
        self._chunk = b''.join(pieces)
        self._start = 0
        self._end = PyBytes_GET_SIZE(self._chunk)
        return 0

    @cython.final
    cdef bytes _gather(self, Py_ssize_t n, bint line):
        """Read past the unread bytes: pull chunks until ``n`` bytes in all or, for a line,
        through the first newline in the new chunks (the unread ones have none), or the end.
        The parts are copied once into the result; the rest of the last chunk stays unread.
        """
        cdef list pieces = []
        cdef Py_ssize_t got = 0     # bytes in the pieces wholly taken
        cdef Py_ssize_t cut = -1    # how much of the last piece the result takes (-1: all)
        cdef Py_ssize_t avail, budget, size, total, at
        cdef const char *base
        cdef const char *found
        cdef bytes piece, data
        cdef object chunk
        while True:
            try:
                chunk = self._next_chunk()
                if chunk is None:
                    break
                piece = chunk if PyBytes_CheckExact(chunk) else _buffer_to_bytes(chunk)
            except BaseException:
                self._keep(pieces)
                raise
            size = PyBytes_GET_SIZE(piece)
            pieces.append(piece)
            # Re-read the unread count: pull() runs arbitrary code, even reads of this stream.
            budget = n - (self._end - self._start) - got
            if budget <= 0:
                cut = 0
                break
            if line:
                base = PyBytes_AS_STRING(piece)
                found = <const char *>memchr(base, b'\n', size if size < budget else budget)
                if found != NULL:
                    cut = found - base + 1
                    break
            if size >= budget:
                cut = budget
                break
            got += size
        avail = self._end - self._start
        if not pieces:
            return self._take(avail if avail < n else n)
        piece = pieces[len(pieces) - 1]
        size = PyBytes_GET_SIZE(piece)
        if cut < 0:  # the end of the body: the last piece was counted in `got`
            got -= size
            cut = size
        total = avail + got + cut
        if total == size and cut == size:
            data = piece  # one whole chunk and nothing before it: no copy
        else:
            data = PyBytes_FromStringAndSize(NULL, total)
            at = 0
            if avail:
                memcpy(PyBytes_AS_STRING(data), PyBytes_AS_STRING(self._chunk) + self._start,
                       avail)
                at = avail
            for piece in pieces:
                size = PyBytes_GET_SIZE(piece)
                if at + size > total:
                    size = total - at  # the last piece: only its first `cut` bytes
                memcpy(PyBytes_AS_STRING(data) + at, PyBytes_AS_STRING(piece), size)
                at += size
            piece = pieces[len(pieces) - 1]
            size = PyBytes_GET_SIZE(piece)
        self.bytes_read += total
        if cut < size:
            self._chunk = piece
            self._start = cut
            self._end = size
        else:
            self._chunk = None
            self._start = self._end = 0
        return data

    @cython.final
    cdef bytes _readline(self, Py_ssize_t size):
        cdef Py_ssize_t avail = self._end - self._start
        cdef Py_ssize_t limit = avail if size < 0 or size > avail else size
        cdef const char *base
        cdef const char *found
        if size == 0:
            return b''
        if limit > 0:
            base = PyBytes_AS_STRING(self._chunk) + self._start
            found = <const char *>memchr(base, b'\n', limit)
            if found != NULL:
                return self._take(found - base + 1)
            if limit == size:
                return self._take(limit)
        return self._gather(size if size >= 0 else PY_SSIZE_T_MAX, True)

    # -- the file API -----------------------------------------------------------------------

    def read(self, size=-1):
        cdef Py_ssize_t n
        if size is None:
            return self._gather(PY_SSIZE_T_MAX, False)
        n = PyNumber_AsSsize_t(size, NULL)  # a huge int saturates: read everything
        if n < 0:
            return self._gather(PY_SSIZE_T_MAX, False)
        if self._end - self._start >= n:
            return self._take(n)
        return self._gather(n, False)

    def readline(self, size=-1):
        if size is None:
            return self._readline(-1)
        return self._readline(PyNumber_AsSsize_t(size, NULL))

    def readlines(self, hint=-1):
        if hint is None or hint <= 0:
            return list(self)
        cdef list lines = []
        cdef bytes line
        cdef object total = 0
        while total < hint:
            line = self._readline(-1)
            if not line:
                break
            lines.append(line)
            total += len(line)
        return lines

    def __iter__(self):
        return self

    def __next__(self):
        cdef bytes line = self._readline(-1)
        if not line:
            raise StopIteration
        return line

    # The rest of io.BufferedReader's reading surface (see the pure twin).

    @cython.final
    cdef bint _has_unread(self) except -1:
        """Whether bytes are unread, the next chunk pulled in when none are (read1, peek:
        the pure twin's ``_next_chunk``); False at the end of the body."""
        cdef object chunk
        if self._end - self._start > 0:
            return True
        chunk = self._next_chunk()
        if chunk is None:
            return False
        self._chunk = chunk if PyBytes_CheckExact(chunk) else _buffer_to_bytes(chunk)
        self._start = 0
        self._end = PyBytes_GET_SIZE(self._chunk)
        return True

    def read1(self, size=-1):
        """At most ``size`` bytes (all of them if negative) with at most one pull."""
        cdef Py_ssize_t n = -1 if size is None else PyNumber_AsSsize_t(size, NULL)
        if n == 0 or not self._has_unread():
            return b''
        if n < 0 or n > self._end - self._start:
            n = self._end - self._start
        return self._take(n)

    def peek(self, size=0):
        """The unread bytes of the current chunk, without taking them (one pull if there
        are none); b'' at the end of the body."""
        if not self._has_unread():
            return b''
        if self._start == 0:
            return self._chunk
        return self._chunk[self._start:self._end]

    def readinto(self, buffer):
        return _copy_into(buffer, self.read)

    def readinto1(self, buffer):
        return _copy_into(buffer, self.read1)

    def readable(self):
        return True

    def writable(self):
        return False

    def seekable(self):
        return False

    def fileno(self):
        raise _io_UnsupportedOperation('wsgi.input has no file descriptor')

    def flush(self):
        pass

    @property
    def closed(self):
        return False  # close() leaves the body to the server, which drains it

    def close(self):
        """WSGI allows the app to close wsgi.input; the server still drains the rest."""

    def drain(self):
        """Discard the rest of the body (before a connection is reused); returns its size."""
        cdef object chunk
        cdef object drained = self._end - self._start
        self._chunk = None
        self._start = self._end = 0
        while not self._eof:
            chunk = self._pull()
            if not chunk:
                self._eof = True
            else:
                drained += len(chunk)
        return drained

    @property
    def at_eof(self):
        """True once the end of the body has been pulled."""
        return self._eof
